"""The per-query answer: an ordered, token-budgeted context with scores and provenance."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import torch

PHASES = {0: "core", 1: "tail", 2: "backfill"}


class Hit(NamedTuple):
    """One entry of a query's top-k: unpacks as ``doc_id, chunk_id, score`` (the final score)."""

    doc_id: str
    chunk_id: int
    score: float


@dataclass(frozen=True, slots=True)
class ContextChunk:
    chunk_id: int
    doc_id: str
    title: str
    section: tuple[str, ...]
    url: str
    text: str
    n_tokens: int
    phase: str  # core | tail | backfill
    scores: dict[str, float] = field(default_factory=dict)  # relevance, proximity, final


@dataclass(frozen=True, slots=True)
class Context:
    """Chunks in selection order, the ranking of the whole candidate pool, the budget used, and
    (when ``k`` was asked for) the top-k of the ranking with scores."""

    query: str
    mode: str
    budget: int
    used_tokens: int
    chunks: list[ContextChunk]
    ranking: list[int]  # candidate chunk ids by final score (for ranking metrics)
    # knowledge-graph relations used by spreading activation (modes activation, combined), best
    # first: {"subject", "relation", "object", "text", "weight"}
    relations: list[dict[str, Any]] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)  # the top-k by final score (``k`` given), best first

    def render(self) -> str:
        """The context grouped by source document (in order of first selection), for a prompt."""
        groups: dict[str, list[ContextChunk]] = {}
        for c in self.chunks:
            groups.setdefault(c.doc_id, []).append(c)
        parts = []
        for doc_id, chunks in groups.items():
            head = f"## {chunks[0].title or doc_id}" + (f" ({chunks[0].url})" if chunks[0].url else "")
            body = []
            for c in sorted(chunks, key=lambda c: c.chunk_id):
                where = " > ".join(c.section)
                body.append((f"[{where}]\n" if where else "") + c.text)
            parts.append(head + "\n" + "\n\n".join(body))
        if self.relations:  # SA-RAG 3.6: relation texts join the documents (a sentence shared by several once)
            parts.append("## Relations\n" + "\n".join(f"- {t}" for t in dict.fromkeys(r["text"] for r in self.relations)))
        return "\n\n".join(parts)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for c in data["chunks"]:
            c["section"] = list(c["section"])
        data["hits"] = [h._asdict() for h in self.hits]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Context":
        """The inverse of :meth:`to_json` (equal fields, floats exact): how contexts travel between
        processes as plain data (``spectrag.distributed``) instead of pickles."""
        chunks = [ContextChunk(**{**c, "section": tuple(c["section"])}) for c in data["chunks"]]
        hits = [Hit(**h) for h in data.get("hits", [])]
        return cls(data["query"], data["mode"], data["budget"], data["used_tokens"], chunks, list(data["ranking"]),
                   list(data.get("relations", [])), hits)


def ranked_scores(result, k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``k`` (default: all) of :meth:`BatchResult.ranking` and their final scores.
    Shapes: ``[B, k']`` chunk ids (-1 padded) and float32 scores (-inf on padding), ``k' = min(k, P)``."""
    order = result.ranking_order()[:, :k]  # (B, k') positions into the candidates
    ids = result.candidates.gather(1, order)
    scores = result.scores.gather(1, order).masked_fill(ids < 0, float("-inf"))
    return ids, scores


def build_contexts(index, queries: list[str], result, k: int | None = None) -> list[Context]:
    """Python objects from a :class:`spectrag.pipeline.BatchResult`, with the top ``k`` as
    :class:`Hit` when ``k`` is given (the only per-query loop: it formats output, it does not score)."""
    cand = result.candidates.cpu().tolist()
    order = result.selected.cpu().tolist()
    phase = result.phase.cpu().tolist()
    rel, prox, fin = (t.cpu().tolist() for t in (result.relevance, result.proximity, result.scores))
    ranking = result.ranking().cpu().tolist()
    used, budget = result.used_tokens.cpu().tolist(), result.budget.cpu().tolist()
    sa = getattr(result, "activation", None)
    relations = sa.relations(index.kg) if sa is not None else [[] for _ in queries]
    hits: list[list[Hit]] = [[] for _ in queries]
    if k is not None:
        top_ids, top_scores = (t.cpu().tolist() for t in ranked_scores(result, k))
        hits = [[Hit(index.chunks[c].doc_id, c, s) for c, s in zip(row, srow) if c >= 0]
                for row, srow in zip(top_ids, top_scores)]
    out = []
    for b, query in enumerate(queries):
        chunks = []
        for pos, ph in zip(order[b], phase[b]):
            if pos < 0:
                continue
            cid = cand[b][pos]
            c = index.chunks[cid]
            chunks.append(ContextChunk(
                cid, c.doc_id, c.title, c.section, c.url, c.text, c.n_tokens, PHASES.get(ph, "?"),
                {"relevance": round(rel[b][pos], 6), "proximity": round(prox[b][pos], 6), "final": round(fin[b][pos], 6)},
            ))
        out.append(Context(query, result.mode, int(budget[b]), int(used[b]), chunks, [i for i in ranking[b] if i >= 0],
                           relations[b], hits[b]))
    return out
