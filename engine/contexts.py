"""The per-query answer: the top ``k`` results (:class:`Hit`, with their text) and a context for
a prompt (:class:`ContextChunk` list): the first ``k`` of the ranking, or a token-budgeted selection.

How ``k`` and ``budget`` decide what a :class:`Context` holds (:func:`build_contexts`):

=================  =============================================  ===========================================
asked              ``hits``                                       ``chunks`` (the context)
=================  =============================================  ===========================================
``k``              the top ``k`` of the ranking                   the same ``k`` chunks, in rank order
``budget``         the context's chunks, in rank order            the budgeted selection (SpectRAG eq. 19-22)
``k`` and budget   the top ``k`` of the ranking                   the budgeted selection
neither            as ``budget`` with the default budget          the budgeted selection
=================  =============================================  ===========================================

**A budget smaller than the best chunk** never gives an empty or off-target context: when the
best-ranked chunk has more tokens than the budget, the context is that chunk alone, cut to its
first ``budget`` tokens (at a token boundary), with ``ContextChunk.truncated`` (and
``Context.truncated``) true and ``used_tokens`` the cut's tokens; its hit (without ``k``) is that
chunk, with its full text. The selection's own choice (smaller chunks of other pages that fit)
is set aside, so ``budget=1`` gives one token of the best chunk, not "0 chunks". The command
line, Python and HTTP apply the same rule (they all build contexts here).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from spectrag.util.tokens import cut_to_tokens

PHASES = {0: "core", 1: "tail", 2: "backfill"}
RANKED = "ranked"  # the phase of a chunk in a top-k context (no budget: the ranking decides)


@dataclass(frozen=True, slots=True)
class Hit:
    """One result, best first: the chunk's ids, its final score and what a prompt needs of it.

    Unpacks as ``doc_id, chunk_id, score`` (how hits were tuples before they carried text)."""

    doc_id: str
    chunk_id: int
    score: float
    text: str = ""
    title: str = ""
    section: tuple[str, ...] = ()
    url: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)  # its document's (record metadata, front matter)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.doc_id, self.chunk_id, self.score))

    def to_json(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "chunk_id": self.chunk_id, "score": self.score, "text": self.text,
                "title": self.title, "section": list(self.section), "url": self.url, "metadata": self.metadata}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Hit":
        return cls(**{**data, "section": tuple(data.get("section", ()))})


@dataclass(frozen=True, slots=True)
class ContextChunk:
    chunk_id: int
    doc_id: str
    title: str
    section: tuple[str, ...]
    url: str
    text: str
    n_tokens: int
    phase: str  # core | tail | backfill (a budgeted context) or ranked (a top-k context)
    scores: dict[str, float] = field(default_factory=dict)  # relevance, proximity, final
    metadata: dict[str, Any] = field(default_factory=dict)  # its document's
    truncated: bool = False  # cut to the budget: the best chunk was longer than it (module docstring)


@dataclass(frozen=True, slots=True)
class Context:
    """A query's results: ``hits`` (the top ``k``, best first, with text), ``chunks`` (the context
    for a prompt, see the module docstring), the ranking of the whole candidate pool with its
    scores, and the tokens used. ``budget`` is None for a top-k context (no budget applied)."""

    query: str
    mode: str
    budget: int | None
    used_tokens: int
    chunks: list[ContextChunk]
    ranking: list[int]  # candidate chunk ids by final score (for ranking metrics and TREC runs)
    # knowledge-graph relations used by spreading activation (modes activation, combined), best
    # first: {"subject", "relation", "object", "text", "weight"}
    relations: list[dict[str, Any]] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    ranking_scores: list[float] = field(default_factory=list)  # the final score of each ``ranking`` entry

    @property
    def truncated(self) -> bool:
        """Whether the context is the best chunk cut to a budget smaller than it (module docstring)."""
        return any(c.truncated for c in self.chunks)

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
        data["hits"] = [h.to_json() for h in self.hits]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Context":
        """The inverse of :meth:`to_json` (equal fields, floats exact): how contexts travel between
        processes as plain data (``spectrag.distributed``) instead of pickles."""
        chunks = [ContextChunk(**{**c, "section": tuple(c["section"])}) for c in data["chunks"]]
        hits = [Hit.from_json(h) for h in data.get("hits", [])]
        return cls(data["query"], data["mode"], data["budget"], data["used_tokens"], chunks, list(data["ranking"]),
                   list(data.get("relations", [])), hits, list(data.get("ranking_scores", [])))


def ranked_scores(result, k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``k`` (default: all) of :meth:`BatchResult.ranking` and their final scores.
    Shapes: ``[B, k']`` chunk ids (-1 padded) and float32 scores (-inf on padding), ``k' = min(k, P)``."""
    order = result.ranking_order()[:, :k]  # (B, k') positions into the candidates
    ids = result.candidates.gather(1, order)
    scores = result.scores.gather(1, order).masked_fill(ids < 0, float("-inf"))
    return ids, scores


def cut_to_budget(c: ContextChunk, budget: int) -> ContextChunk:
    """``c`` with its text cut to its first ``budget`` tokens, marked ``truncated``."""
    text, n = cut_to_tokens(c.text, budget)
    return replace(c, text=text, n_tokens=n, truncated=True)


def _per_query(value: Any, n: int, name: str) -> list[Any]:
    """``value`` for each of ``n`` queries: a sequence of ``n``, or one value for all."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != n:
            raise ValueError(f"{name}: {len(value)} values for {n} queries")
        return list(value)
    return [value] * n


def build_contexts(index, queries: list[str], result, k: int | None | Sequence[int | None] = None, *,
                   budgeted: bool | Sequence[bool] | None = None) -> list[Context]:
    """Python objects from a :class:`spectrag.pipeline.BatchResult` (the only per-query loop: it
    formats output, it does not score).

    ``k`` (one value or one per query): the hits are the top ``k`` of the ranking; None: the
    context's chunks, in rank order. ``budgeted`` (one value or one per query; default: True
    where ``k`` is None): the context is the budgeted selection; False: the top ``k`` of the
    ranking (``k`` needed), with ``budget`` None. See the module docstring.
    """
    n = len(queries)
    ks = _per_query(k, n, "k")
    budgeted_ = [kk is None for kk in ks] if budgeted is None else _per_query(budgeted, n, "budgeted")
    for kk, bud in zip(ks, budgeted_):
        if not bud and kk is None:
            raise ValueError("a top-k context (budgeted=False) needs k")
    cand = result.candidates.cpu().tolist()
    order = result.selected.cpu().tolist()
    phase = result.phase.cpu().tolist()
    rel, prox, fin = (t.cpu().tolist() for t in (result.relevance, result.proximity, result.scores))
    rank_pos = result.ranking_order().cpu().tolist()  # (B, P) positions into the candidates, best first
    used, budget = result.used_tokens.cpu().tolist(), result.budget.cpu().tolist()
    sa = getattr(result, "activation", None)
    relations = sa.relations(index.kg) if sa is not None else [[] for _ in queries]
    out = []
    for b, query in enumerate(queries):
        ranked = [p for p in rank_pos[b] if cand[b][p] >= 0]  # positions, best first
        ranking = [cand[b][p] for p in ranked]
        ranking_scores = [fin[b][p] for p in ranked]

        def chunk(pos: int, ph: str) -> ContextChunk:
            cid = cand[b][pos]
            c = index.chunks[cid]
            return ContextChunk(cid, c.doc_id, c.title, c.section, c.url, c.text, c.n_tokens, ph,
                                {"relevance": round(rel[b][pos], 6), "proximity": round(prox[b][pos], 6),
                                 "final": round(fin[b][pos], 6)}, c.metadata)

        if budgeted_[b]:
            chunks = [chunk(pos, PHASES.get(ph, "?")) for pos, ph in zip(order[b], phase[b]) if pos >= 0]
            ctx_budget, ctx_used = int(budget[b]), int(used[b])
            if ranked and index.chunks[cand[b][ranked[0]]].n_tokens > ctx_budget:  # the best does not fit
                chunks = [cut_to_budget(chunk(ranked[0], PHASES[0]), ctx_budget)]
                ctx_used = chunks[0].n_tokens
        else:
            chunks = [chunk(pos, RANKED) for pos in ranked[: ks[b]]]
            ctx_budget, ctx_used = None, sum(c.n_tokens for c in chunks)
        if ks[b] is None:
            chosen = {c.chunk_id for c in chunks}
            hit_pos = [p for p in ranked if cand[b][p] in chosen]
        else:
            hit_pos = ranked[: ks[b]]
        hits = []
        for pos in hit_pos:
            c = index.chunks[cand[b][pos]]
            hits.append(Hit(c.doc_id, cand[b][pos], fin[b][pos], c.text, c.title, c.section, c.url, c.metadata))
        out.append(Context(query, result.mode, ctx_budget, ctx_used, chunks, ranking, relations[b], hits,
                           ranking_scores))
    return out
