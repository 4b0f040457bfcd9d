"""What both adapters hand their framework for one query: ``(text, metadata, score)`` records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spectrag.contexts import RANKED, Context
from spectrag.errors import SpectragError
from spectrag.types import Chunk

OUTPUTS = ("top_k", "context")


def check_output(output: str) -> str:
    if output not in OUTPUTS:
        raise SpectragError(f"output must be one of {', '.join(OUTPUTS)}, got {output!r}")
    return output


def records(ctx: Context, table: Sequence[Chunk], *, output: str = "top_k") -> list[tuple[str, dict[str, Any], float]]:
    """``output="top_k"``: ``ctx.hits`` (the results, best first); ``"context"``: the context's
    chunks in context order. Metadata (flat, so any framework or vector store keeps it):
    ``doc_id``, ``chunk_id``, ``title``, ``section`` (" > "-joined), ``url``, ``rank`` (1-based),
    ``score`` (the final score), ``phase`` (``core`` / ``tail`` / ``backfill`` in a budgeted
    context, ``ranked`` in a top-k context or outside the context), ``relevance`` and
    ``proximity`` (None outside the context), ``n_tokens``, ``mode``; and the chunk's own
    metadata (its document's record ``metadata`` or front matter) beside them, where a key
    of the same name as one of those gives way."""
    chosen = {c.chunk_id: c for c in ctx.chunks}
    if output == "context":
        rows = [(c.chunk_id, c.text, c.scores["final"]) for c in ctx.chunks]
    else:
        rows = [(h.chunk_id, h.text, h.score) for h in ctx.hits]
    out = []
    for rank, (cid, text, score) in enumerate(rows, start=1):
        c, sel = table[cid], chosen.get(cid)
        meta = {**c.metadata, "doc_id": c.doc_id, "chunk_id": cid, "title": c.title, "section": " > ".join(c.section),
                "url": c.url,
                "rank": rank, "score": float(score), "phase": sel.phase if sel else RANKED,
                "relevance": sel.scores["relevance"] if sel else None,
                "proximity": sel.scores["proximity"] if sel else None, "n_tokens": c.n_tokens, "mode": ctx.mode}
        out.append((text, meta, float(score)))
    return out


def search(engine, queries: Sequence[str], *, output: str = "top_k", k: int | None = None, mode: str | None = None,
           budget: int | None = None, where=None) -> list[list[tuple[str, dict[str, Any], float]]]:
    """:func:`records` for every query, all scored by one :meth:`Retriever.retrieve` call
    (``engine``: a :class:`spectrag.retriever.Retriever`; ``k``, ``budget`` and ``where`` as its own)."""
    contexts = engine.retrieve(list(queries), k, mode=mode, budget=budget, where=where)
    return [records(c, engine.index.chunks, output=output) for c in contexts]
