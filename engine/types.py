"""The records that flow between the offline stages: documents (load) -> chunks (chunk) ->
extracted entities and triples (extract, for the entity signal and the knowledge graph)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Document:
    """One source document. ``markup`` is ``markdown``, ``rst`` or ``text``; ``kind`` is
    ``document`` or ``passage`` (a benchmark passage, kept as one chunk when it fits).
    ``headings``: section headings the loader found (``(offset, depth, title, end of the
    heading's lines)``, e.g. reStructuredText through docutils); empty: the chunker finds them."""

    doc_id: str
    title: str
    text: str
    url: str = ""
    markup: str = "text"
    kind: str = "document"
    metadata: dict[str, Any] = field(default_factory=dict)
    headings: tuple[tuple[int, int, str, int], ...] = ()


@dataclass(frozen=True)
class Chunk:
    """A contiguous slice ``[start, end)`` of one document's text; ``metadata`` is its document's
    (JSON values: from a record's ``metadata`` object or a Markdown file's front matter)."""

    doc_id: str
    title: str
    section: tuple[str, ...]
    url: str
    text: str
    n_tokens: int
    start: int
    end: int
    metadata: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    def to_row(self, chunk_id: int) -> dict[str, Any]:
        """The chunk-table record (``chunks.jsonl``); ``metadata`` only when there is some, so an
        index without metadata keeps the table of earlier versions byte for byte."""
        row = {"id": chunk_id, "doc_id": self.doc_id, "title": self.title, "section": list(self.section),
               "url": self.url, "text": self.text, "n_tokens": self.n_tokens, "start": self.start, "end": self.end}
        if self.metadata:
            row["metadata"] = self.metadata
        return row


@dataclass(frozen=True)
class Triple:
    """One extracted relation: surface forms of its ends, the predicate, the text to embed
    (``subject predicate object`` for OpenIE, the sentence for co-occurrence) and its chunk."""

    chunk: int
    subject: str
    predicate: str
    object: str
    text: str


@dataclass
class Extraction:
    """What an extraction source yields: entity surface forms per chunk, the triples, and facts
    for the manifest. Shapes: ``mentions [n_chunks][*]``."""

    mentions: list[list[str]]
    triples: list[Triple]
    facts: dict[str, Any] = field(default_factory=dict)
