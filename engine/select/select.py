"""Online step 5: the token-budgeted context of every query (SpectRAG eq. 19-22), by the batched
greedy kernel :func:`spectrag.kernels.select.budget_select` with one stage config.

Graph modes select with :class:`spectrag.config.SelectConfig` (protected core, proximity,
coverage and redundancy terms, precision floor, backfill); the baselines with
:class:`spectrag.config.BaselineSelectConfig` (their own ranking filled in score order).
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from spectrag.config import SelectConfig
from spectrag.kernels.compiled.select import budget_select_compiled
from spectrag.kernels.select import SelectParams, SelectResult, budget_select


def select_context(
    scores: torch.Tensor,
    proximity: torch.Tensor,
    candidates: torch.Tensor,
    chunk_embeddings: torch.Tensor,
    tokens: torch.Tensor,
    clusters: torch.Tensor,
    doc_codes: torch.Tensor,
    config: SelectConfig,
    *,
    budget: int | torch.Tensor,
    compiled: bool = False,
) -> SelectResult:
    """Selection over each query's pool. Shapes: ``scores/proximity/candidates [B, P]`` (ids
    -1 padded, scores -inf there), ``chunk_embeddings [n, d]``, ``tokens/clusters/doc_codes
    [n]`` (every chunk's) -> :class:`SelectResult` with positions into the pool. ``compiled``:
    a CPU batch by the compiled kernel, one query at a time (the torch kernel is its reference)."""
    mask = candidates >= 0
    ids = candidates.clamp(min=0)
    finite = torch.where(mask, scores, torch.zeros_like(scores))
    args = (finite, proximity, tokens[ids].masked_fill(~mask, 1), mask, chunk_embeddings, ids, clusters[ids],
            doc_codes[ids])
    if compiled:
        return budget_select_compiled(*args, budget=budget, params=SelectParams(**asdict(config)))
    return budget_select(*args[:5], *args[6:], budget=budget, ids=ids, **asdict(config))
