"""Stage 2 of the offline build: documents -> token-sized chunks (SpectRAG paper 3.3).

* **Structure-aware**: a Markdown document (or plain text with numbered section headings such
  as ``2.1 Datasets``) is split along its sections; each chunk keeps its section path, e.g.
  ``("History", "Early years")``. A heading with no body of its own joins the next section.
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
cover all of its non-whitespace text (tests check this).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from spectrag.config import ChunkConfig
from spectrag.types import Chunk, Document
from spectrag.util.pool import map_blocks, resolve_workers
from spectrag.util.tokens import count_tokens, get_encoding


@dataclass(frozen=True)
class _Unit:
    """An unbreakable span (sentence, line, table, code fence) inside one section."""

    start: int
    end: int
    n_tokens: int
    atomic: bool


_MD_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
_NUM_HEADING = re.compile(r"^((?:\d{1,2}\.)*\d{1,2})\.?[ \t]+([A-Z][^\n]{0,78}[^.\n:;,])[ \t]*$", re.M)
_FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
_TABLE = re.compile(r"(?:^[ \t]*\|[^\n]*\|[ \t]*(?:\n|$))+", re.M)
# A sentence ends at . ! ? (plus closing quotes/brackets) followed by whitespace and a capital,
# digit, quote or bracket; a line break is always a cut candidate.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[A-Z0-9\u00C0-\u024F])")
_LINE_END = re.compile(r"\n+")


def _protected_spans(text: str) -> list[tuple[int, int]]:
    # the substring tests skip scans that cannot match (the fence scan is the dearer part of
    # chunking a short document)
    spans = [m.span() for m in _FENCE.finditer(text)] if "```" in text or "~~~" in text else []
    if "|" in text:
        spans += [m.span() for m in _TABLE.finditer(text)]
    return sorted(spans)


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a < pos < b for a, b in spans)


def _headings(doc: Document, spans: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """(position, depth, heading) of each section heading outside tables and code."""
    if doc.markup == "markdown":
        found = [(m.start(), len(m.group(1)), m.group(2).strip()) for m in _MD_HEADING.finditer(doc.text)]
    else:
        found = [
            (m.start(), m.group(1).count(".") + 1, m.group(0).strip())
            for m in _NUM_HEADING.finditer(doc.text)
        ]
        if len(found) < 2:  # one numbered line is a list item, not a section structure
            found = []
    return [h for h in found if not _inside(h[0], spans) and not any(a == h[0] for a, _ in spans)]


def _sections(doc: Document, spans: list[tuple[int, int]], structure: bool) -> list[tuple[tuple[str, ...], int, int]]:
    """(section path, start, end) covering the document; heading-only sections join the next."""
    text = doc.text
    heads = _headings(doc, spans) if structure else []
    if not heads:
        return [((), 0, len(text))]
    sections: list[tuple[tuple[str, ...], int, int]] = []
    if text[: heads[0][0]].strip():
        sections.append(((), 0, heads[0][0]))
    stack: list[tuple[int, str]] = []
    pending_start: int | None = None
    for i, (pos, depth, name) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        stack.append((depth, name))
        start = pending_start if pending_start is not None else pos
        body = text[text.find("\n", pos) + 1 if "\n" in text[pos:end] else end : end]
        if not body.strip() and i + 1 < len(heads):
            pending_start = start  # heading with no body: carry it into the next section
            continue
        pending_start = None
        sections.append((tuple(n for _, n in stack), start, end))
    return sections


def _cuts(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> list[int]:
    """Sorted cut positions inside ``(start, end)`` that split no table, fence or sentence."""
    part = text[start:end]
    cuts = {start + m.end() for m in _SENTENCE_END.finditer(part)}
    cuts |= {start + m.end() for m in _LINE_END.finditer(part)}
    for a, b in spans:
        if start < b <= end:
            cuts.add(b)
        if start < a < end:
            cuts.add(a)
    return sorted(c for c in cuts if start < c < end and not _inside(c, spans))


def _units(text: str, start: int, end: int, spans: list[tuple[int, int]], max_tokens: int) -> list[_Unit]:
    bounds = [start, *_cuts(text, start, end, spans), end]
    pieces = [(a, b) for a, b in zip(bounds, bounds[1:]) if text[a:b].strip()]
    if not pieces:
        return []
    counts = count_tokens([text[a:b] for a, b in pieces])
    units: list[_Unit] = []
    for (a, b), n in zip(pieces, counts):
        atomic = any(sa <= a and b <= sb for sa, sb in spans)
        if n <= max_tokens or atomic:
            units.append(_Unit(a, b, n, atomic))
        else:
            units.extend(_split_long(text, a, b, max_tokens))
    return units


def _split_long(text: str, start: int, end: int, max_tokens: int) -> Iterator[_Unit]:
    """Cut an over-long sentence at token boundaries into pieces of at most ``max_tokens``."""
    enc = get_encoding()
    ids = enc.encode_ordinary(text[start:end])
    _, offsets = enc.decode_with_offsets(ids)
    pos = 0
    while pos < len(ids):
        nxt = min(pos + max_tokens, len(ids))
        # move the cut back to a token that starts a new character (multi-byte characters span tokens)
        while nxt < len(ids) and nxt > pos + 1 and offsets[nxt] == offsets[nxt - 1]:
            nxt -= 1
        a = start + offsets[pos]
        b = start + offsets[nxt] if nxt < len(ids) else end
        yield _Unit(a, b, nxt - pos, False)
        pos = nxt


def _windows(text: str, units: list[_Unit], config: ChunkConfig) -> Iterator[tuple[int, int, int]]:
    """Greedy packing of units into windows ``(first, last + 1, n_tokens)`` with sentence overlap."""
    i = 0
    while i < len(units):
        j, total = i, 0
        while j < len(units) and (j == i or total + units[j].n_tokens <= config.chunk_size):
            total += units[j].n_tokens
            j += 1
        n = count_tokens([text[units[i].start : units[j - 1].end].strip()])[0]
        # BPE merges across unit joins can shift the sum by a token: shrink until it fits
        while n > config.chunk_size and j - i > 1:
            j -= 1
            n = count_tokens([text[units[i].start : units[j - 1].end].strip()])[0]
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
    return Chunk(doc.doc_id, doc.title, section, doc.url, doc.text[start:end], n_tokens, start, end)


def _fits(doc: Document, a: Chunk, b: Chunk, limit: int) -> Chunk | None:
    start, end = min(a.start, b.start), max(a.end, b.end)
    n = count_tokens([doc.text[start:end].strip()])[0]
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
    if doc.kind == "passage":
        n = count_tokens([text.strip()])[0]
        if n <= config.chunk_size:
            return [_make(doc, (), 0, len(text), n)]
    spans = _protected_spans(text)
    chunks: list[Chunk] = []
    ascii_text = text.isascii()
    for section, start, end in _sections(doc, spans, config.structure):
        if _one_window(text, start, end, config.chunk_size - config.overlap, ascii_text):
            body = text[start:end].strip()
            if body:
                chunks.append(_make(doc, section, start, end, count_tokens([body])[0]))
            continue
        units = _units(text, start, end, spans, config.chunk_size - config.overlap)
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
