"""Citation edges of the chunk graph (SpectRAG paper 3.2.1): "explicit references, hyperlinks,
footnotes, or dependency relations between chunks".

Every edge is directed, from the chunk that holds the reference to a chunk of the referenced
document, with weight 1. Four kinds are found, in one pass over the chunks (linear in the size
of the corpus; no loop over pairs of chunks):

=========== ==== ============================================================================
kind        code edge
=========== ==== ============================================================================
link        0    a Markdown link ``[text](target)`` (not an image ``![..](..)``) whose target,
                 resolved relative to the folder of the source ``doc_id`` (``#fragment`` and
                 ``?query`` stripped, ``%xx`` decoded, a leading ``/`` meaning the corpus
                 root), is another document's ``doc_id`` -- also when the target omits the
                 extension (``ilse_marrow`` for ``ilse_marrow.md``) -- or whose target equals
                 another document's ``url``
footnote    1    a chunk holding a footnote reference ``[^x]`` -> the other chunk(s) of the
                 same document that hold the definition line ``[^x]:``
url         2    a bare ``http(s)://`` URL in the text equal to another document's ``url``
                 (compared without ``#fragment`` and trailing ``/``)
title       3    the text mentions the title of another document (:class:`TitleMatcher`:
                 whole words, case-insensitive); titles equal to the source document's own
                 title are skipped (the chunk names its own subject, it cites nothing)
=========== ==== ============================================================================

Link, url and title edges go to the first ``max_targets_per_doc`` chunks of the target
document (its opening chunks, which introduce it). Duplicate ``(source, target)`` pairs are
collapsed keeping the smallest kind code; self-loops are dropped. The edge arrays come out
sorted by ``(source, target)``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import ahocorasick
import numpy as np

from spectrag.index.chunk import Chunk

LINK, FOOTNOTE, URL, TITLE = 0, 1, 2, 3
KIND_NAMES = ("link", "footnote", "url", "title")

# Common English words: a title that is one of these alone (``Time``, ``Water``, ``Evening``)
# would match nearly every text, so TitleMatcher ignores it. Also used by the entity extractor
# to reject capitalized common words. Lower case; compared after casefolding.
COMMON_WORDS = frozenset(
    """
    a about above across act action actually add after again against age ago air all almost
    alone along already also although always am among an and animal another answer any anyone
    anything are area areas around art as ask at away back bad base be became because become
    been before began begin being below best better between big bill black blue body book both
    bring brought build building built business but by call called came can car care case
    cause center central century certain change child children city class clear close cold
    come common company country course cover current cut dark data day days dead deal death
    decision deep did different do does doing done door down draw during each early earth east
    easy economic education effect eight either else end enough entire even evening event ever
    every example eye face fact fall family far father feel few field fight figure final find
    fire first five follow food for force form former found four free friend from front full
    game gave general get give go going gold good got government great green ground group grow
    growth had half hand happy hard has have he head health hear heart heavy help her here high
    him his history hold home hope hot hour house how however human hundred i idea if image
    important in include including increase information inside instead interest into is issue
    it its itself just keep kind king knew know land language large last late later law lead
    learn least leave left less let letter level life light like line list little live local
    long look lost lot love low made main major make man many market matter may me mean measure
    member men might mind miss money month more morning most mother move movement much music
    must my name national nature near need never new news next night nine no none north not note
    nothing now number occupied of off office often oil old on once one only open or order other
    our out outside over own page paper part party pass past pay peace people per perhaps period
    person picture place plan plant play point police political poor popular position possible
    power present president press problem process program public put question quite race rather
    read ready real reason record red report rest result right river road rock role room round
    rule run said same saw say school science sea second see seem seen self sense service set
    seven several shall she short should show side since single six size small so social some
    someone something song sound south space special stand star start state states still stop
    story street strong study such summer sun support sure system table take taken talk team
    tell ten than that the their them then there these they thing think third this those though
    thought three through time to today together told too took top toward town trade tree true
    try turn two type under until up upon us use used very voice want war was watch water way we
    week well went were west what when where whether which while white who whole why will win
    winter with within without woman women word words work world would write year years yes yet
    you young your
    """.split()
)

_WORD_CHARS = re.compile(r"\w")


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def title_key(title: str) -> str:
    """The matching key of a title: casefolded, whitespace collapsed."""
    return " ".join(title.casefold().split())


class TitleMatcher:
    """Which of a fixed list of titles each text mentions (Aho-Corasick, pyahocorasick).

    * Titles and texts are compared casefolded with whitespace runs collapsed to one space, so
      matching is case-insensitive and survives line breaks inside a title.
    * Whole words only: a match must not be preceded or followed by a letter, digit or ``_``
      (checked on the side where the title itself starts / ends with such a character), so
      ``Skarholt`` matches in ``Skarholt's`` and ``Skarholt-based`` but not in ``Skarholters``.
    * Ignored titles: shorter than ``min_chars`` (default 4) characters, or a common English word
      alone (:data:`COMMON_WORDS`), or with no letter or digit at all.
    * A match lying inside a longer match (``Skarholt`` inside ``University of Skarholt``) is
      dropped unless ``keep_nested``: the text names the longer title.
    * Equal titles (after casefolding) all match together; each title index is reported at most
      once per text, in increasing order.

    Cost: building is linear in the total title length; ``find`` is linear in the text length
    plus the number of matches.
    """

    def __init__(self, titles: Sequence[str], *, min_chars: int = 4, keep_nested: bool = False) -> None:
        self.titles = list(titles)
        self.keep_nested = keep_nested
        groups: dict[str, list[int]] = {}
        for i, title in enumerate(self.titles):
            key = title_key(title)
            if len(key) < min_chars or key in COMMON_WORDS or not _WORD_CHARS.search(key):
                continue
            groups.setdefault(key, []).append(i)
        self.n_patterns = len(groups)
        self._automaton = ahocorasick.Automaton()
        for key, ids in groups.items():
            self._automaton.add_word(key, (len(key), _is_word(key[0]), _is_word(key[-1]), tuple(ids)))
        if groups:
            self._automaton.make_automaton()

    def find(self, texts: Sequence[str]) -> list[list[int]]:
        """Sorted indices of the titles mentioned in each text. Shapes: ``[T]`` -> ``[T][*]``."""
        if not self.n_patterns:
            return [[] for _ in texts]
        return [self._find_one(text) for text in texts]

    def _find_one(self, text: str) -> list[int]:
        t = " ".join(text.casefold().split())
        last = len(t) - 1
        hits = []
        for end, (n, check_left, check_right, ids) in self._automaton.iter(t):
            start = end - n + 1
            if check_left and start > 0 and _is_word(t[start - 1]):
                continue
            if check_right and end < last and _is_word(t[end + 1]):
                continue
            hits.append((start, -end, ids))
        if not hits:
            return []
        found: set[int] = set()
        if self.keep_nested:
            for _, _, ids in hits:
                found.update(ids)
        else:
            hits.sort()
            reach = -1
            for _, neg_end, ids in hits:
                if -neg_end > reach:  # not inside an earlier-starting (or same-start longer) match
                    reach = -neg_end
                    found.update(ids)
        return sorted(found)


@dataclass(frozen=True)
class CitationEdges:
    """Directed citation edges ``rows[e] -> cols[e]`` between chunk indices, sorted by
    ``(row, col)``. Shapes: ``rows``, ``cols`` int64 ``[E]``; ``weights`` float32 ``[E]``;
    ``kind`` int8 ``[E]`` (0 link, 1 footnote, 2 url, 3 title mention)."""

    rows: np.ndarray
    cols: np.ndarray
    weights: np.ndarray
    kind: np.ndarray
    n_chunks: int
    n_link: int
    n_footnote: int
    n_url: int
    n_title: int

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    @property
    def counts(self) -> dict[str, int]:
        """Edges per kind: ``{"link": .., "footnote": .., "url": .., "title": ..}``."""
        return {"link": self.n_link, "footnote": self.n_footnote, "url": self.n_url, "title": self.n_title}


_MD_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_BARE_URL = re.compile(r"https?://[^\s<>\"'\[\]{}|\\^`]+")
_URL_TRAIL = ".,;:!?*_~'\""
_FOOTNOTE_REF = re.compile(r"\[\^([^\]\s]+)\](?!:)")
_FOOTNOTE_DEF = re.compile(r"^[ \t]*\[\^([^\]\s]+)\]:", re.M)


def _url_key(url: str) -> str:
    return url.strip().split("#", 1)[0].rstrip("/")


def _trim_url(url: str) -> str:
    url = url.rstrip(_URL_TRAIL)
    while url.endswith(")") and url.count(")") > url.count("("):
        url = url[:-1].rstrip(_URL_TRAIL)
    return url


class _Resolver:
    """Link targets -> document numbers (cached per source folder and target)."""

    def __init__(self, doc_ids: list[str], urls: list[str]) -> None:
        self.by_id: dict[str, int] = {}
        self.by_stem: dict[str, int] = {}
        self.by_url: dict[str, int] = {}
        for d, doc_id in enumerate(doc_ids):
            self.by_id.setdefault(doc_id, d)
            stem, ext = posixpath.splitext(doc_id)
            if ext:
                self.by_stem.setdefault(stem, d)  # the first document wins on a clash
        for d, url in enumerate(urls):
            key = _url_key(url) if url else ""
            if key:
                self.by_url.setdefault(key, d)
        self._cache: dict[tuple[str, str], int] = {}

    def link(self, folder: str, target: str) -> int:
        key = (folder, target)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._resolve(folder, target)
            if len(self._cache) < 1_000_000:
                self._cache[key] = hit
        return hit

    def _resolve(self, folder: str, target: str) -> int:
        if _SCHEME.match(target) or target.startswith("//"):
            return self.by_url.get(_url_key(target), -1)
        path = unquote(target.split("#", 1)[0].split("?", 1)[0])
        if not path:
            return -1  # an in-page anchor
        if path.startswith("/"):
            path = posixpath.normpath(path.lstrip("/"))
        else:
            path = posixpath.normpath(posixpath.join(folder, path))
        d = self.by_id.get(path)
        if d is None:
            d = self.by_stem.get(path)
        if d is None:
            d = self.by_url.get(_url_key(target), -1)
        return d


def _expand(src: list[int], dst_doc: list[int], kinds: list[int], ptr: np.ndarray, targets: np.ndarray):
    """(source chunk, target document) pairs -> (source chunk, target chunk) over the target
    document's first chunks, vectorized. Shapes: ``[P]`` -> ``[E]``."""
    src_a = np.asarray(src, dtype=np.int64)
    doc_a = np.asarray(dst_doc, dtype=np.int64)
    kind_a = np.asarray(kinds, dtype=np.int8)
    counts = ptr[doc_a + 1] - ptr[doc_a]
    total = int(counts.sum())
    first = np.repeat(ptr[doc_a], counts)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(src_a, counts), targets[first + offsets], np.repeat(kind_a, counts)


def citation_edges(chunks: Sequence[Chunk], *, max_targets_per_doc: int = 4, title_mentions: bool = True) -> CitationEdges:
    """Link / footnote / url / title-mention edges between chunks (see the module docstring).

    Chunks of one document are recognised by their ``doc_id``; a document's "first" chunks are
    its first ones in the order given. Shapes: ``[n]`` chunks -> edge arrays ``[E]``.
    """
    if max_targets_per_doc < 1:
        raise ValueError(f"max_targets_per_doc must be >= 1, got {max_targets_per_doc}")
    n = len(chunks)
    doc_of: dict[str, int] = {}
    doc_ids: list[str] = []
    titles: list[str] = []
    urls: list[str] = []
    members: list[list[int]] = []
    chunk_doc = np.empty(n, dtype=np.int64)
    for i, chunk in enumerate(chunks):
        d = doc_of.get(chunk.doc_id)
        if d is None:
            d = doc_of[chunk.doc_id] = len(doc_ids)
            doc_ids.append(chunk.doc_id)
            titles.append(chunk.title)
            urls.append(chunk.url)
            members.append([])
        members[d].append(i)
        chunk_doc[i] = d
    n_docs = len(doc_ids)
    # the first max_targets_per_doc chunks of every document, CSR-style
    lengths = np.fromiter((min(len(m), max_targets_per_doc) for m in members), dtype=np.int64, count=n_docs)
    ptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    targets = np.fromiter(
        (i for m in members for i in m[:max_targets_per_doc]), dtype=np.int64, count=int(ptr[-1])
    )

    resolver = _Resolver(doc_ids, urls)
    any_url = bool(resolver.by_url)
    src: list[int] = []
    dst: list[int] = []
    kinds: list[int] = []
    fn_src: list[int] = []
    fn_dst: list[int] = []
    for d, member in enumerate(members):
        folder = posixpath.dirname(doc_ids[d])
        fn_defs: dict[str, list[int]] = {}
        fn_refs: list[tuple[int, str]] = []
        for i in member:
            text = chunks[i].text
            if "](" in text:
                for m in _MD_LINK.finditer(text):
                    t = resolver.link(folder, m.group(1))
                    if t >= 0 and t != d:
                        src.append(i)
                        dst.append(t)
                        kinds.append(LINK)
            if any_url and "://" in text:
                for m in _BARE_URL.finditer(text):
                    t = resolver.by_url.get(_url_key(_trim_url(m.group(0))), -1)
                    if t >= 0 and t != d:
                        src.append(i)
                        dst.append(t)
                        kinds.append(URL)
            if "[^" in text:
                for label in _FOOTNOTE_DEF.findall(text):
                    holders = fn_defs.setdefault(label, [])
                    if not holders or holders[-1] != i:
                        holders.append(i)
                fn_refs.extend((i, label) for label in set(_FOOTNOTE_REF.findall(text)))
        for i, label in fn_refs:
            for j in fn_defs.get(label, ()):
                if j != i:
                    fn_src.append(i)
                    fn_dst.append(j)

    if title_mentions and n:
        own_keys = [title_key(t) for t in titles]
        matcher = TitleMatcher(titles)
        for i, found in enumerate(matcher.find([c.text for c in chunks])):
            if not found:
                continue
            d = int(chunk_doc[i])
            for t in found:
                if t != d and own_keys[t] != own_keys[d]:
                    src.append(i)
                    dst.append(t)
                    kinds.append(TITLE)

    rows_d, cols_d, kind_d = _expand(src, dst, kinds, ptr, targets)
    rows = np.concatenate([rows_d, np.asarray(fn_src, dtype=np.int64)])
    cols = np.concatenate([cols_d, np.asarray(fn_dst, dtype=np.int64)])
    kind = np.concatenate([kind_d, np.full(len(fn_src), FOOTNOTE, dtype=np.int8)])
    keep = rows != cols
    rows, cols, kind = rows[keep], cols[keep], kind[keep]
    # collapse duplicates, keeping the smallest kind code; sorted by (row, col)
    key = rows * max(n, 1) + cols
    order = np.lexsort((kind, key))
    key, rows, cols, kind = key[order], rows[order], cols[order], kind[order]
    first = np.ones(key.shape[0], dtype=bool)
    first[1:] = key[1:] != key[:-1]
    rows, cols, kind = rows[first], cols[first], kind[first]
    per_kind = np.bincount(kind, minlength=4) if kind.size else np.zeros(4, dtype=np.int64)
    return CitationEdges(
        rows=np.ascontiguousarray(rows, dtype=np.int64),
        cols=np.ascontiguousarray(cols, dtype=np.int64),
        weights=np.ones(rows.shape[0], dtype=np.float32),
        kind=np.ascontiguousarray(kind, dtype=np.int8),
        n_chunks=n,
        n_link=int(per_kind[LINK]),
        n_footnote=int(per_kind[FOOTNOTE]),
        n_url=int(per_kind[URL]),
        n_title=int(per_kind[TITLE]),
    )
