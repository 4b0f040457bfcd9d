"""Online step 5: the token-budgeted context of every query (SpectRAG eq. 19-22), by the batched
greedy kernel :func:`spectrag.kernels.select.budget_select` with one stage config.

Graph modes select with :class:`spectrag.config.SelectConfig` (evidence cut, protected core, proximity,
coverage and redundancy terms, precision floor, backfill); the baselines with
:class:`spectrag.config.BaselineSelectConfig` (their own ranking filled in score order).
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from spectrag.config import SelectConfig
from spectrag.kernels.compiled.select import budget_select_compiled
from spectrag.kernels.select import SelectParams, SelectResult, budget_select


def stub_chunks(tokens: torch.Tensor, doc_codes: torch.Tensor, min_tokens: int) -> torch.Tensor:
    """Chunks no context should spend budget on: under ``min_tokens`` (the chunker's own bar for a
    chunk that stands alone) in a document that has other chunks, i.e. the rest the chunker
    could not merge (a heading with a line or two, a link target). A short document, or a
    passage, that is one chunk is content. Shapes: ``tokens/doc_codes [n]`` -> bool ``[n]``."""
    per_doc = torch.bincount(doc_codes, minlength=int(doc_codes.max()) + 1 if doc_codes.numel() else 0)
    return (tokens < min_tokens) & (per_doc[doc_codes] > 1)


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
    stubs: torch.Tensor | None = None,
    keep: torch.Tensor | None = None,
    compiled: bool = False,
) -> SelectResult:
    """Selection over each query's pool. Shapes: ``scores/proximity/candidates [B, P]`` (ids
    -1 padded, scores -inf there), ``chunk_embeddings [n, d]``, ``tokens/clusters/doc_codes
    [n]`` (every chunk's), ``stubs [n]`` bool (chunks never selected, :func:`stub_chunks`;
    they keep their place in the ranking), ``keep [B, P]`` bool (candidates past the evidence
    cut whatever their score) -> :class:`SelectResult` with positions into the pool.
    ``compiled``: a CPU batch by the compiled kernel, one query at a time (the torch kernel is
    its reference)."""
    mask = candidates >= 0
    ids = candidates.clamp(min=0)
    if stubs is not None:
        mask = mask & ~stubs[ids]
    finite = torch.where(mask, scores, torch.zeros_like(scores))
    args = (finite, proximity, tokens[ids].masked_fill(~mask, 1), mask, chunk_embeddings, ids, clusters[ids],
            doc_codes[ids])
    if compiled:
        return budget_select_compiled(*args, budget=budget, params=SelectParams(**asdict(config)), keep=keep)
    return budget_select(*args[:5], *args[6:], budget=budget, ids=ids, keep=keep, **asdict(config))
