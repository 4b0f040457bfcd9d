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

import numpy as np

from spectrag.extract.titles import TitleMatcher, title_key
from spectrag.types import Chunk

LINK, FOOTNOTE, URL, TITLE = 0, 1, 2, 3
KIND_NAMES = ("link", "footnote", "url", "title")

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


def document_titles(chunks: Sequence[Chunk]) -> list[str]:
    """Each document's title, documents in order of their first chunk (the title list
    :func:`citation_edges` matches)."""
    first: dict[str, str] = {}
    for c in chunks:
        first.setdefault(c.doc_id, c.title)
    return list(first.values())


def citation_edges(chunks: Sequence[Chunk], *, max_targets_per_doc: int = 4, title_mentions: bool = True,
                   sources: np.ndarray | None = None, matcher: TitleMatcher | None = None) -> CitationEdges:
    """Link / footnote / url / title-mention edges between chunks (see the module docstring).

    Chunks of one document are recognised by their ``doc_id``; a document's "first" chunks are
    its first ones in the order given. ``sources``: only the edges from these chunks (indices;
    an index update recomputes the chunks an edit touches), every chunk still a target;
    ``matcher``: a :class:`TitleMatcher` of :func:`document_titles` of ``chunks`` (built once by
    a caller that needs it again). Shapes: ``[n]`` chunks -> edge arrays ``[E]``.
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
    scan = np.ones(n, dtype=bool)
    if sources is not None:
        scan[:] = False
        scan[np.asarray(sources, dtype=np.int64)] = True
    src: list[int] = []
    dst: list[int] = []
    kinds: list[int] = []
    fn_src: list[int] = []
    fn_dst: list[int] = []
    for d, member in enumerate(members):
        if sources is not None and not scan[member].any():
            continue
        folder = posixpath.dirname(doc_ids[d])
        fn_defs: dict[str, list[int]] = {}
        fn_refs: list[tuple[int, str]] = []
        for i in member:
            text = chunks[i].text
            if "[^" in text:  # footnote definitions of every chunk; references of the scanned ones
                for label in _FOOTNOTE_DEF.findall(text):
                    holders = fn_defs.setdefault(label, [])
                    if not holders or holders[-1] != i:
                        holders.append(i)
                if scan[i]:
                    fn_refs.extend((i, label) for label in set(_FOOTNOTE_REF.findall(text)))
            if not scan[i]:
                continue
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
        for i, label in fn_refs:
            for j in fn_defs.get(label, ()):
                if j != i:
                    fn_src.append(i)
                    fn_dst.append(j)

    if title_mentions and n:
        own_keys = [title_key(t) for t in titles]
        matcher = matcher if matcher is not None else TitleMatcher(titles)
        scanned = np.flatnonzero(scan)
        for i, found in zip(scanned.tolist(), matcher.find([chunks[i].text for i in scanned.tolist()])):
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
