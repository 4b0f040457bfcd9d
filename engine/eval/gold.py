"""Gold evidence -> retrieval units -> chunks.

A **unit** is what gold evidence names: a passage (MuSiQue, 2Wiki, HotpotQA: identical
``(title, text)`` passages are one unit) or a document (MultiHop-RAG article, BEIR document,
sample file). Every chunk belongs to exactly one unit (its document's), and a unit may have
several chunks when its document was split.

Gold items are mapped by their lookup keys (:mod:`spectrag.eval.datasets`), the first key that
names exactly one unit wins. A key naming no unit, or several (a title shared by two passages),
falls through to the next; an item none of whose keys resolves is **unmapped**: it keeps a
unit id of its own that no chunk has, so it stays in every recall denominator (a miss), and it
is counted and listed in the report. Nothing is dropped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from spectrag.errors import CorpusError
from spectrag.eval.datasets import Key, Question, passage_key
from spectrag.types import Document

PASSAGE_FORMATS = ("musique", "2wiki", "hotpotqa")
KEY_NAMES = {"passage": "title+text", "doc": "document id", "title_url": "title+url", "title": "title (unique)"}


@dataclass
class UnitTable:
    """Units of one corpus and the chunk -> unit map. ``chunk_unit [n_chunks]`` int64."""

    names: list[str]  # TREC docno of each unit (its first document id)
    chunk_unit: np.ndarray
    unit_chunks: list[list[int]]
    lookup: dict[Key, set[int]] = field(repr=False)

    @property
    def n_units(self) -> int:
        return len(self.names)

    def resolve(self, keys: Sequence[Key]) -> tuple[int | None, str]:
        """The unit the first unambiguous key names, and which kind of key it was (or why not)."""
        reason = "not found"
        for key in keys:
            hits = self.lookup.get(key, set())
            if len(hits) == 1:
                return next(iter(hits)), key[0]
            if len(hits) > 1:
                reason = f"ambiguous {KEY_NAMES[key[0]]}"
        return None, reason


def _docno(doc_id: str) -> str:
    return "".join("_" if ch.isspace() else ch for ch in doc_id) or "_"


def unit_table(docs: Sequence[Document], chunks: Sequence[Any], fmt: str) -> UnitTable:
    """Units from the corpus ``docs`` and the index ``chunks`` (checked to be slices of them)."""
    unit_of_doc: dict[str, int] = {}
    names: list[str] = []
    primary: dict[Key, int] = {}
    lookup: dict[Key, set[int]] = {}
    for doc in docs:
        pkey = passage_key(doc.title, doc.text)
        own = pkey if fmt in PASSAGE_FORMATS else ("doc", doc.doc_id)
        if own not in primary:
            primary[own] = len(names)
            names.append(_docno(doc.doc_id))
        u = primary[own]
        unit_of_doc[doc.doc_id] = u
        keys = [("doc", doc.doc_id), pkey]
        if doc.title:
            keys += [("title", doc.title.strip()), ("title_url", doc.title.strip(), doc.url.strip())]
        for key in keys:
            lookup.setdefault(key, set()).add(u)
    chunk_unit = np.empty(len(chunks), dtype=np.int64)
    unit_chunks: list[list[int]] = [[] for _ in names]
    texts = {d.doc_id: d.text for d in docs}
    for i, c in enumerate(chunks):
        if c.doc_id not in unit_of_doc:
            raise CorpusError(f"index chunk {i} belongs to document {c.doc_id!r}, which the dataset corpus lacks; "
                              "was the index built from another corpus?")
        if texts[c.doc_id][c.start:c.end] != c.text:
            raise CorpusError(f"index chunk {i} is not the text of document {c.doc_id!r} at [{c.start}:{c.end}]; "
                              "the index was built from another version of the corpus")
        chunk_unit[i] = unit_of_doc[c.doc_id]
        unit_chunks[chunk_unit[i]].append(i)
    return UnitTable(names, chunk_unit, unit_chunks, lookup)


@dataclass
class GoldSet:
    """Per question: gold unit ids (deduplicated; unmapped items get ids ``>= n_units``) and gains.

    ``units``/``gains`` are padded ``[Q, G]`` tensors (-1 / 0 padding); ``names`` extends the
    unit names with the unmapped placeholders (``unmapped:<qid>:<j>``) for the TREC qrels.
    """

    units: torch.Tensor
    gains: torch.Tensor
    n_gold: torch.Tensor  # [Q] int64
    names: list[str]
    report: dict[str, Any]


def map_gold(questions: Sequence[Question], table: UnitTable, max_examples: int = 10) -> GoldSet:
    rows: list[list[tuple[int, float]]] = []
    names = list(table.names)
    by_key: Counter[str] = Counter()
    unmapped: list[dict[str, str]] = []
    reasons: Counter[str] = Counter()
    duplicates = 0
    for q in questions:
        row: dict[int, float] = {}
        for j, item in enumerate(q.gold):
            unit, how = table.resolve(item.keys)
            if unit is None:
                unit = len(names)
                names.append(f"unmapped:{_docno(q.qid)}:{j}")
                reasons[how] += 1
                if len(unmapped) < max_examples:
                    unmapped.append({"question": q.qid, "item": item.label, "reason": how})
            else:
                by_key[KEY_NAMES[how]] += 1
            if unit in row:
                duplicates += 1  # two items naming one unit count once
            row[unit] = max(row.get(unit, 0.0), item.gain)
        rows.append(list(row.items()))
    units, gains = _padded(rows)
    n_gold = (units >= 0).sum(dim=1)
    gold_units = {u for r in rows for u, _ in r if u < table.n_units}
    items = sum(len(q.gold) for q in questions)
    report = {
        "gold_items": items,
        "mapped": items - sum(reasons.values()),
        "unmapped": sum(reasons.values()),
        "mapped_by": dict(by_key),
        "unmapped_reasons": dict(reasons),
        "unmapped_examples": unmapped,
        "duplicate_items": duplicates,
        "questions": len(questions),
        "questions_without_gold": int((n_gold == 0).sum()),
        "units": table.n_units,
        "units_split_into_chunks": sum(len(c) > 1 for c in table.unit_chunks),
        "gold_units_split_into_chunks": sum(len(table.unit_chunks[u]) > 1 for u in gold_units),
        "gold_units_without_chunks": sum(not table.unit_chunks[u] for u in gold_units),
    }
    return GoldSet(units, gains, n_gold, names, report)


def chunk_gold(gold: GoldSet, table: UnitTable, n_chunks: int) -> GoldSet:
    """Chunk-level gold: every chunk of a gold unit (gain of its unit); unmapped items keep
    placeholder ids ``>= n_chunks``. Used for the chunk-level metrics."""
    rows = []
    names = [str(i) for i in range(n_chunks)]
    for b in range(gold.units.shape[0]):
        row = []
        for u, g in zip(gold.units[b].tolist(), gold.gains[b].tolist()):
            if u < 0:
                continue
            if u < table.n_units and table.unit_chunks[u]:
                row += [(c, g) for c in table.unit_chunks[u]]
            else:  # unmapped, or a unit the index holds no chunk of: still a miss
                row.append((len(names), g))
                names.append(gold.names[u])
        rows.append(row)
    units, gains = _padded(rows)
    return GoldSet(units, gains, (units >= 0).sum(dim=1), names, gold.report)


def _padded(rows: list[list[tuple[int, float]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(unit, gain)`` lists per question as ``units [Q, W]`` (-1 padded) and ``gains [Q, W]``
    float64 (formatting the input once, not a hot path)."""
    width = max(1, max(len(r) for r in rows))
    units = torch.full((len(rows), width), -1, dtype=torch.int64)
    gains = torch.zeros((len(rows), width), dtype=torch.float64)
    for b, r in enumerate(rows):
        if r:
            units[b, : len(r)] = torch.tensor([u for u, _ in r])
            gains[b, : len(r)] = torch.tensor([g for _, g in r], dtype=torch.float64)
    return units, gains
