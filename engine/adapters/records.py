"""What both adapters hand their framework for one query: ``(text, metadata, score)`` records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spectrag.contexts import Context
from spectrag.errors import SpectragError
from spectrag.types import Chunk

OUTPUTS = ("top_k", "context")


def check_output(output: str) -> str:
    if output not in OUTPUTS:
        raise SpectragError(f"output must be one of {', '.join(OUTPUTS)}, got {output!r}")
    return output


def records(ctx: Context, table: Sequence[Chunk], *, output: str = "top_k",
            k: int | None = None) -> list[tuple[str, dict[str, Any], float]]:
    """``output="top_k"``: the first ``k`` of ``ctx.hits`` (the ranking, best first);
    ``"context"``: the selected chunks in selection order (at most ``k``). Metadata (flat, so any
    framework or vector store keeps it): ``doc_id``, ``chunk_id``, ``title``, ``section``
    (" > "-joined), ``url``, ``rank`` (1-based), ``score`` (the final score), ``phase`` (``core`` /
    ``tail`` / ``backfill``; ``ranked`` for a top-k chunk outside the budgeted context),
    ``relevance`` and ``proximity`` (None outside the context), ``n_tokens``, ``mode``."""
    chosen = {c.chunk_id: c for c in ctx.chunks}
    if output == "context":
        rows = [(c.chunk_id, c.scores["final"]) for c in ctx.chunks[:k]]
    else:
        rows = [(h.chunk_id, h.score) for h in ctx.hits[:k]]
    out = []
    for rank, (cid, score) in enumerate(rows, start=1):
        c, sel = table[cid], chosen.get(cid)
        meta = {"doc_id": c.doc_id, "chunk_id": cid, "title": c.title, "section": " > ".join(c.section), "url": c.url,
                "rank": rank, "score": float(score), "phase": sel.phase if sel else "ranked",
                "relevance": sel.scores["relevance"] if sel else None,
                "proximity": sel.scores["proximity"] if sel else None, "n_tokens": c.n_tokens, "mode": ctx.mode}
        out.append((c.text, meta, float(score)))
    return out


def search(engine, queries: Sequence[str], *, output: str = "top_k", k: int | None = None, mode: str | None = None,
           budget: int | None = None) -> list[list[tuple[str, dict[str, Any], float]]]:
    """:func:`records` for every query, all scored by one :meth:`Retriever.retrieve` call
    (``engine``: a :class:`spectrag.retriever.Retriever`)."""
    contexts = engine.retrieve(list(queries), k=k if output == "top_k" else None, mode=mode, budget=budget)
    return [records(c, engine.index.chunks, output=output, k=k) for c in contexts]
