"""Stage 2 of the offline build: documents -> token-sized chunks (SpectRAG paper 3.3).

* **Structure-aware**: a Markdown document (or plain text with numbered section headings such
  as ``2.1 Datasets``) is split along its sections; each chunk keeps its section path, e.g.
  ``("History", "Early years")``. A heading with no body of its own joins the next section.
  Markdown headings are ATX (``## Title``) or setext (a line over ``===`` / ``---``); nothing
  inside an HTML comment is a heading; section names are plain text (links, emphasis, code and
  entities rendered by markdown-it-py, :func:`spectrag.util.markdown.plain_title`), at most
  200 characters.
* **Sentence-respecting windows**: inside a section, whole sentences (and whole paragraphs,
  list items, tables, code fences) are packed into windows of at most ``chunk_size`` tokens;
  the next window starts with the last whole sentences of the previous one, at most
  ``overlap`` tokens of them. A single sentence longer than a window is cut at token
  boundaries.
* **Tables and code fences are never split.** A table longer than ``chunk_size`` becomes one
  oversized chunk of its own.
* **Small chunks merge**: a chunk under ``min_tokens`` merges into the previous chunk of its
  document (into the next one for the first chunk) when the result fits in ``chunk_size``.
* **Passages stay whole**: a ``kind="passage"`` document (benchmark corpora) that fits in
  ``chunk_size`` tokens is one chunk.

Every chunk's text is the slice ``document.text[start:end]``, so the chunks of a document
cover all of its non-whitespace text (tests check this). No chunk is blank, and none has more
than ``chunk_size`` tokens unless it is one table or code fence.

Chunking takes time linear in the text, whatever the text: a 1 MB line of ``# `` or 1 MB of
unclosed code fences included (``bench/bench_chunk_adversarial.py``).
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from spectrag.config import ChunkConfig
from spectrag.types import Chunk, Document
from spectrag.util.pool import map_blocks, resolve_workers
from spectrag.util.markdown import comment_spans, plain_title
from spectrag.util.tokens import count_tokens, get_encoding


@dataclass(frozen=True)
class _Unit:
    """An unbreakable span (sentence, line, table, code fence) inside one section."""

    start: int
    end: int
    n_tokens: int
    atomic: bool


# Every pattern here runs in time linear in the text: a heading's trailing ``#``s are stripped
# in Python, not by a lazy group before ``[ \t#]*$`` (quadratic on a long line of "# "), and code
# fences are paired by a scan over fence lines (:func:`_fence_spans`), not by ``.*?`` up to a
# closing line (quadratic over unclosed fences). bench/bench_chunk_adversarial.py measures it.
_MD_HEADING = re.compile(r"^(#{1,6})[ \t]+([^\n]+)$", re.M)
_NUM_HEADING = re.compile(r"^((?:\d{1,2}\.)*\d{1,2})\.?[ \t]+([A-Z][^\n]{0,78}[^.\n:;,])[ \t]*$", re.M)
_FENCE_OPEN = re.compile(r"^(```|~~~)[^\n]*", re.M)
_FENCE_CLOSE = {mark: re.compile(rf"^{mark}[ \t]*$", re.M) for mark in ("```", "~~~")}
_TABLE = re.compile(r"(?:^[ \t]*\|[^\n]*\|[ \t]*(?:\n|$))+", re.M)
_SETEXT = re.compile(r"^ {0,3}(={3,}|-{3,})[ \t]*$", re.M)
_NOT_SETEXT_TITLE = re.compile(r" {0,3}(?:[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|#{1,6}(?:[ \t]|$)|>|```|~~~|\|)| {4}|\t")
# A sentence ends at . ! ? (plus closing quotes/brackets) followed by whitespace and a capital,
# digit, quote or bracket; a line break is always a cut candidate.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[A-Z0-9\u00C0-\u024F])")
_LINE_END = re.compile(r"\n+")
# a heading in reStructuredText or setext style: optional overline, a title line, an underline of
# one repeated punctuation character (linear: each part is a run of one character class)
_ADORNED_TITLE = re.compile(r"^(?:([!-/:-@\[-`{-~])\1{2,}[ \t]*\n)?[ \t]*[^\s][^\n]*\n([!-/:-@\[-`{-~])\2{2,}[ \t]*$", re.M)


def _fence_spans(text: str) -> list[tuple[int, int]]:
    """Code fences: a line opening with ````` or ``~~~`` up to the next line that is only the
    same marker (and blanks); an opener without a closer protects nothing. Fences do not nest:
    the scan resumes after each closer. Linear: every closer is found by bisection in the sorted
    closer lines of its marker."""
    closers = {mark: [(m.start(), m.end()) for m in pat.finditer(text)] for mark, pat in _FENCE_CLOSE.items()}
    starts = {mark: [a for a, _ in c] for mark, c in closers.items()}
    spans, pos = [], 0
    for m in _FENCE_OPEN.finditer(text):
        if m.start() < pos or m.end() >= len(text):  # inside the previous fence, or no line after it
            continue
        mark = m.group(1)
        k = bisect.bisect_left(starts[mark], m.end() + 1)
        if k < len(starts[mark]):
            spans.append((m.start(), closers[mark][k][1]))
            pos = closers[mark][k][1]
    return spans


def _protected_spans(text: str, markup: str = "markdown") -> "_Spans":
    # the substring tests skip scans that cannot match; reStructuredText has no fences (a line of
    # ``~~~`` there is a heading's underline, and pairing two of them swallowed whole sections)
    fenced = markup != "rst" and ("```" in text or "~~~" in text)
    spans = _fence_spans(text) if fenced else []
    if "|" in text:
        spans += [m.span() for m in _TABLE.finditer(text)]
    return _Spans(sorted(spans))


class _Spans(list):
    """Sorted protected spans ``(start, end)`` (they may overlap: a table inside a fence) with
    logarithmic-time membership queries, so that checking every cut and heading stays linear."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        super().__init__(spans)
        self.starts = [a for a, _ in spans]
        self.ends = sorted(b for _, b in spans)
        self.start_set = set(self.starts)
        self._reach = list(itertools.accumulate((b for _, b in spans), max))  # max end among spans[:i + 1]

    def inside(self, pos: int) -> bool:
        """Whether ``a < pos < b`` for some span."""
        i = bisect.bisect_left(self.starts, pos)  # spans with a < pos
        return i > 0 and self._reach[i - 1] > pos

    def covers(self, a: int, b: int) -> bool:
        """Whether ``sa <= a`` and ``b <= sb`` for some span ``(sa, sb)``."""
        i = bisect.bisect_right(self.starts, a)  # spans with sa <= a
        return i > 0 and self._reach[i - 1] >= b

    def bounds_in(self, start: int, end: int) -> list[int]:
        """Span starts in ``(start, end)`` and span ends in ``(start, end]``."""
        lo, hi = bisect.bisect_right(self.starts, start), bisect.bisect_left(self.starts, end)
        elo, ehi = bisect.bisect_right(self.ends, start), bisect.bisect_right(self.ends, end)
        return self.starts[lo:hi] + self.ends[elo:ehi]


def _md_heading(m: re.Match) -> tuple[int, int, str, int]:
    # the heading text without a closing sequence of '#'s (and blanks); at least one character
    content = m.group(2)
    return m.start(), len(m.group(1)), plain_title((content.rstrip(" \t#") or content[:1]).strip()), m.end()


def _setext_headings(text: str) -> list[tuple[int, int, str, int]]:
    """Setext headings: a line of text over a line of ``===`` (depth 1) or ``---`` (depth 2),
    at least three characters. Only a one-line paragraph (a blank line or the start above it)
    counts, and not a list item, quote, heading, fence, table row or indented code above the
    rule (there ``---`` is a thematic break or part of that block)."""
    found = []
    for m in _SETEXT.finditer(text):
        if m.start() == 0:
            continue
        line_start = text.rfind("\n", 0, m.start() - 1) + 1
        line = text[line_start : m.start() - 1]
        if not line.strip() or _NOT_SETEXT_TITLE.match(line):
            continue
        above = text.rfind("\n", 0, max(line_start - 1, 0)) + 1
        if line_start and text[above : line_start - 1].strip():
            continue
        found.append((line_start, 1 if m.group(1)[0] == "=" else 2, plain_title(line.strip()), m.end()))
    return found


def _headings(doc: Document, spans: _Spans) -> list[tuple[int, int, str, int]]:
    """(position, depth, heading, end of the heading's lines) of each section heading outside
    tables, code and HTML comments; Markdown headings are ATX (``#``) or setext."""
    if doc.headings:
        found = sorted(doc.headings)
    elif doc.markup == "markdown":
        found = [_md_heading(m) for m in _MD_HEADING.finditer(doc.text)]
        if "\n" in doc.text and ("===" in doc.text or "---" in doc.text):
            found = sorted(found + _setext_headings(doc.text))
        comments = comment_spans(doc.text) if "<!--" in doc.text else []
        if comments:
            starts = [a for a, _ in comments]
            hidden = lambda pos: (i := bisect.bisect_right(starts, pos)) > 0 and pos < comments[i - 1][1]  # noqa: E731
            found = [h for h in found if not hidden(h[0])]
    else:
        found = [
            (m.start(), m.group(1).count(".") + 1, m.group(0).strip(), m.end())
            for m in _NUM_HEADING.finditer(doc.text)
        ]
        if len(found) < 2:  # one numbered line is a list item, not a section structure
            found = []
    return [h for h in found if not spans.inside(h[0]) and h[0] not in spans.start_set]


_RST_TARGET = re.compile(r"^\.\. [^\n]*$|^:[a-z-]+:[^\n]*$", re.M)


def _no_prose(text: str) -> bool:
    """Whether a reStructuredText span holds only explicit-markup lines without content (link
    targets such as ``.. _label:``, which label the next heading, ``.. highlight:: rst``) and
    document fields (``:orphan:``): as a section body it is no body (a directive's content is
    indented, so it stays)."""
    return not _RST_TARGET.sub("", text).strip()


def _sections(doc: Document, spans: _Spans, structure: bool) -> list[tuple[tuple[str, ...], int, int]]:
    """(section path, start, end) covering the document; heading-only sections join the next."""
    text = doc.text
    heads = _headings(doc, spans) if structure else []
    if not heads:
        return [((), 0, len(text))]
    sections: list[tuple[tuple[str, ...], int, int]] = []
    blank = _no_prose if doc.markup == "rst" else str.isspace
    pending_start: int | None = None
    if text[: heads[0][0]].strip():
        if blank(text[: heads[0][0]]):
            pending_start = 0  # only link targets before the first heading: they open its section
        else:
            sections.append(((), 0, heads[0][0]))
    stack: list[tuple[int, str]] = []
    for i, (pos, depth, name, head_end) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        stack.append((depth, name))
        start = pending_start if pending_start is not None else pos
        newline = text.find("\n", head_end, end)
        body = text[newline + 1 if newline >= 0 else end : end]
        if (not body.strip() or blank(body)) and i + 1 < len(heads):
            pending_start = start  # heading with no body: carry it into the next section
            continue
        pending_start = None
        sections.append((tuple(n for _, n in stack), start, end))
    return sections


def _cuts(text: str, start: int, end: int, spans: _Spans) -> list[int]:
    """Sorted cut positions inside ``(start, end)`` that split no table, fence, sentence or
    underlined heading (a title line with its adornment lines stays one unit, so it opens the
    window it is in, never ends one without its text)."""
    part = text[start:end]
    cuts = {start + m.end() for m in _SENTENCE_END.finditer(part)}
    cuts |= {start + m.end() for m in _LINE_END.finditer(part)}
    cuts.update(spans.bounds_in(start, end))
    ordered = sorted(c for c in cuts if start < c < end and not spans.inside(c))
    for m in _ADORNED_TITLE.finditer(part) if "\n" in part else ():
        lo, hi = bisect.bisect_right(ordered, start + m.start()), bisect.bisect_left(ordered, start + m.end())
        ordered[lo:hi] = []  # the heading's own line breaks (a handful per heading: a cheap splice)
    return ordered


def _units(text: str, start: int, end: int, spans: _Spans, max_tokens: int, limit: int | None = None) -> list[_Unit]:
    bounds = [start, *_cuts(text, start, end, spans), end]
    pieces = [(a, b) for a, b in zip(bounds, bounds[1:]) if text[a:b].strip()]
    if not pieces:
        return []
    counts = count_tokens([text[a:b] for a, b in pieces])
    units: list[_Unit] = []
    for (a, b), n in zip(pieces, counts):
        atomic = spans.covers(a, b)
        if n <= max_tokens or atomic:
            units.append(_Unit(a, b, n, atomic))
        else:
            units.extend(_split_long(text, a, b, max_tokens, limit))
    return units


_ENCODE_BLOCK = 1 << 16  # characters; BPE on one long pre-token (a run of dots) grows faster than its length


def _encode_with_offsets(enc, text: str) -> tuple[list[int], list[int]]:
    """Token ids of ``text`` and each token's character offset, encoding blocks of
    ``_ENCODE_BLOCK`` characters (the same tokens as one call wherever a block boundary falls
    between pre-tokens; the counts of the resulting chunks are exact in any case)."""
    ids: list[int] = []
    offsets: list[int] = []
    for lo in range(0, len(text), _ENCODE_BLOCK):
        block = text[lo : lo + _ENCODE_BLOCK]
        block_ids = enc.encode_ordinary(block)
        ids += block_ids
        offsets += (lo + _char_offsets(enc, block, block_ids)).tolist()
    return ids, offsets


def _char_offsets(enc, text: str, ids: list[int]) -> np.ndarray:
    """Each token's character offset in ``text``, as tiktoken's ``decode_with_offsets`` gives it
    (a token that starts inside a multi-byte character belongs to that character), computed on
    arrays: that function's per-byte Python loop cost seconds on a 1 MB sentence."""
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    starts = np.zeros(len(ids), dtype=np.int64)  # each token's first byte
    np.cumsum(np.fromiter(map(len, enc.decode_tokens_bytes(ids[:-1])), dtype=np.int64, count=max(len(ids) - 1, 0)),
              out=starts[1:])
    char_start = (raw & 0xC0) != 0x80  # the bytes that begin a character
    before = np.concatenate([[0], np.cumsum(char_start)])  # characters begun before each byte
    inside = ~char_start[np.minimum(starts, max(len(raw) - 1, 0))] if len(raw) else np.zeros(len(ids), bool)
    return np.maximum(before[starts] - inside, 0)


def _split_long(text: str, start: int, end: int, max_tokens: int, limit: int | None = None) -> Iterator[_Unit]:
    """Cut an over-long sentence at token boundaries into pieces of at most ``max_tokens``
    (counted inside the sentence) whose text alone has at most ``limit`` tokens (default:
    ``max_tokens``), so no piece becomes a chunk over the chunk size."""
    limit = max_tokens if limit is None else limit
    enc = get_encoding()
    ids, offsets = _encode_with_offsets(enc, text[start:end])
    pos = 0
    while pos < len(ids):
        nxt = min(pos + max_tokens, len(ids))
        # move the cut back to a token that starts a new character (multi-byte characters span tokens)
        while nxt < len(ids) and nxt > pos + 1 and offsets[nxt] == offsets[nxt - 1]:
            nxt -= 1
        a = start + offsets[pos]
        b = start + offsets[nxt] if nxt < len(ids) else end
        # alone, a piece can take a token more than inside the sentence (BPE across the cut)
        while nxt > pos + 1 and count_tokens([text[a:b].strip()])[0] > limit:
            nxt -= 1
            b = start + offsets[nxt]
        if text[a:b].strip():  # a piece of blanks alone is no unit
            yield _Unit(a, b, nxt - pos, False)
        pos = nxt


def _shrink(text: str, units: list[_Unit], i: int, j: int, limit: int, steps: int = 2) -> tuple[int, int]:
    """The window ``units[i:j']`` with the largest ``j' <= j`` whose exact token count fits in
    ``limit`` (or ``j' = i + 1``), and that count. BPE merges across unit joins can shift the sum
    of the units' counts by a token, so a window is counted once and shrunk by one unit at a time
    for ``steps`` steps; beyond that (joins that each add a token, as in a run of code fences)
    the search starts where the counts say the window fits (in proportion) and gallops, then
    bisects: a few counts per window, however far the units' sum was off."""
    counts: dict[int, int] = {}

    def count(j_: int) -> int:
        if j_ not in counts:
            counts[j_] = count_tokens([text[units[i].start : units[j_ - 1].end].strip()])[0]
        return counts[j_]

    n = count(j)
    while n > limit and j - i > 1 and steps > 0:
        j, steps = j - 1, steps - 1
        n = count(j)
    if n <= limit or j - i <= 1:
        return j, n
    lo, hi = i + 1, j - 1  # the answer is in [lo, hi]: units[i:lo] always stands, units[i:j] does not fit
    guess = min(max(i + (j - i) * limit // n, lo), hi)
    step = 1
    if count(guess) <= limit:
        lo = guess
        while lo < hi:  # gallop up
            probe = min(lo + step, hi)
            if count(probe) > limit:
                hi = probe - 1
                break
            lo, step = probe, 2 * step
    else:
        hi = guess - 1
        while lo < hi:  # gallop down
            probe = max(hi - step, lo)
            if count(probe) <= limit:
                lo = probe
                break
            hi, step = probe - 1, 2 * step
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(mid) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo, count(lo)


def _windows(text: str, units: list[_Unit], config: ChunkConfig) -> Iterator[tuple[int, int, int]]:
    """Greedy packing of units into windows ``(first, last + 1, n_tokens)`` with sentence overlap."""
    i = 0
    while i < len(units):
        j, total = i, 0
        while j < len(units) and (j == i or total + units[j].n_tokens <= config.chunk_size):
            total += units[j].n_tokens
            j += 1
        j, n = _shrink(text, units, i, j, config.chunk_size)
        yield i, j, n
        if j >= len(units):
            return
        k, back = j, 0
        while k - 1 > i and back + units[k - 1].n_tokens <= config.overlap:
            back += units[k - 1].n_tokens
            k -= 1
        i = k


def _make(doc: Document, section: tuple[str, ...], start: int, end: int, n_tokens: int) -> Chunk:
    # trim surrounding whitespace so the text is exactly text[start:end]
    while start < end and doc.text[start].isspace():
        start += 1
    while end > start and doc.text[end - 1].isspace():
        end -= 1
    return Chunk(doc.doc_id, doc.title, section, doc.url, doc.text[start:end], n_tokens, start, end, doc.metadata)


def _merged_tokens(text: str, a: Chunk, b: Chunk) -> int:
    """Exact token count of ``text[a.start:max(a.end, b.end)]``, for ``b`` starting at or after
    ``a``, recounting only from ``a``'s last line on. cl100k_base never joins what precedes a
    newline with a line that starts with non-newline whitespace or with text (its pre-tokens
    end at the newline; checked on random strings in tests/index/test_chunk.py), so the count
    up to just after ``a``'s last newline, ``q``, is ``a.n_tokens`` less the count of
    ``text[q:a.end]``. Merging many small sections into one chunk thus costs linear time, not
    one recount of the growing chunk per section."""
    end = max(a.end, b.end)
    q = text.rfind("\n", a.start, a.end) + 1
    if q == 0 or b.start < a.start:
        return count_tokens([text[a.start : end]])[0]
    tail, merged_tail = count_tokens([text[q : a.end], text[q:end]])
    return a.n_tokens - tail + merged_tail


def _fits(doc: Document, a: Chunk, b: Chunk, limit: int) -> Chunk | None:
    start, end = min(a.start, b.start), max(a.end, b.end)
    n = _merged_tokens(doc.text, a, b)
    return _make(doc, a.section, start, end, n) if n <= limit else None


def _merge_small(doc: Document, chunks: list[Chunk], config: ChunkConfig) -> list[Chunk]:
    out: list[Chunk] = []
    for chunk in chunks:
        if out and (chunk.n_tokens < config.min_tokens or out[-1].n_tokens < config.min_tokens):
            merged = _fits(doc, out[-1], chunk, config.chunk_size)
            if merged is not None:
                # the first chunk of a document merges forward, keeping the later section path
                out[-1] = merged if out[-1].n_tokens >= config.min_tokens else _make(
                    doc, chunk.section, merged.start, merged.end, merged.n_tokens
                )
                continue
        out.append(chunk)
    return out


def _one_window(text: str, start: int, end: int, max_unit: int, ascii_text: bool) -> bool:
    """Whether the section ``[start, end)`` is certain to be one window: a token spans at least
    one UTF-8 byte, so a section of at most ``max_unit`` bytes has units of at most
    ``max_unit`` tokens (none is cut) summing to at most ``max_unit < chunk_size`` (the greedy
    packing takes them all). Its window is then the trimmed section, counted once, instead of
    once per sentence and again per window: the same chunk, about half the tokenizer work."""
    if end - start > max_unit:  # at least as many bytes as characters
        return False
    return ascii_text or len(text[start:end].encode("utf-8")) <= max_unit


def chunk_document(doc: Document, config: ChunkConfig) -> list[Chunk]:
    """The chunks of one document, in reading order. Shapes: none (Python records)."""
    text = doc.text
    if not text.strip():
        return []
    if doc.kind == "passage":
        n = count_tokens([text.strip()])[0]
        if n <= config.chunk_size:
            return [_make(doc, (), 0, len(text), n)]
    spans = _protected_spans(text, doc.markup)
    chunks: list[Chunk] = []
    ascii_text = text.isascii()
    for section, start, end in _sections(doc, spans, config.structure):
        if _one_window(text, start, end, config.chunk_size - config.overlap, ascii_text):
            body = text[start:end].strip()
            if body:
                chunks.append(_make(doc, section, start, end, count_tokens([body])[0]))
            continue
        units = _units(text, start, end, spans, config.chunk_size - config.overlap, config.chunk_size)
        for i, j, n in _windows(text, units, config):
            chunks.append(_make(doc, section, units[i].start, units[j - 1].end, n))
    return _merge_small(doc, chunks, config)


def chunk_documents(docs: Iterable[Document], config: ChunkConfig) -> Iterator[Chunk]:
    """Chunks of all documents in corpus order (streams: documents are read lazily)."""
    for doc in docs:
        yield from chunk_document(doc, config)


def chunk_corpus(
    docs: Sequence[Document], config: ChunkConfig, *, workers: int = 0, progress: bool = False
) -> list[Chunk]:
    """The chunks of all documents in corpus order, identical to chunking them one by one.

    ``workers``: processes (0: the usable CPUs, at most 8, for corpora of at least 20,000
    documents, else 1). Forked workers chunk contiguous blocks of documents, which they inherit
    rather than receive pickled, and the blocks are concatenated in order
    (:func:`spectrag.util.pool.map_blocks`), so the result does not depend on ``workers``.
    """

    def block(lo: int, hi: int) -> list[Chunk]:
        return [c for doc in docs[lo:hi] for c in chunk_document(doc, config)]

    workers = resolve_workers(workers, len(docs))
    return map_blocks(block, len(docs), workers=workers, block=2_048, progress="chunk" if progress else None)
