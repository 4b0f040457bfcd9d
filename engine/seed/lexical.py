"""Lexical evidence at the candidates: each candidate's BM25 score for its query, for graph
modes that add it to the embedding relevance (:mod:`spectrag.rescore.relevance`). Seeding uses
BM25 only to choose the seeds; with this the words a question shares with a passage also reach
the ranking (bench/results/quality.md measures it)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.index.lexical import BM25Index
from spectrag.kernels.compiled.topk import product_at


def lexical_scores(bm25: BM25Index, terms: sp.csr_matrix, candidates: torch.Tensor, *,
                   compiled: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``bm25(q, c)`` at each candidate (0 where the query shares no term with it, and on
    padding) and each query's best BM25 score over the whole corpus (0 when it matches nothing).
    Shapes: ``terms [B, vocab]`` (query term counts), ``candidates [B, P]`` (-1 padded) ->
    ``[B, P]`` and ``[B]`` float64 on the candidates' device. ``compiled``: one query at a time
    by :func:`~spectrag.kernels.compiled.topk.product_at` (the same sums; this scipy product and
    lookup is its reference)."""
    if compiled:
        q, m = terms.tocsr(), bm25.matrix
        value, peak = product_at(q.indptr, q.indices, q.data, m.indptr, m.indices, m.data, m.shape[1],
                                 candidates.cpu().numpy())
        dev = candidates.device
        return (torch.from_numpy(value.astype(np.float64)).to(dev),
                torch.from_numpy(peak.astype(np.float64)).to(dev))
    scores = (terms @ bm25.matrix).tocsr()  # [B, n]: only the chunks sharing a term are stored
    scores.sum_duplicates()
    scores.sort_indices()
    batch, width = candidates.shape
    n = scores.shape[1]
    peak = np.zeros(batch, dtype=np.float64)
    if scores.nnz:
        peak = scores.max(axis=1).toarray().ravel().astype(np.float64)
    rows = np.repeat(np.arange(batch, dtype=np.int64), np.diff(scores.indptr))
    keys = rows * n + scores.indices.astype(np.int64)  # sorted: CSR rows in order, columns sorted
    cand = candidates.cpu().numpy().astype(np.int64)
    want = (np.arange(batch, dtype=np.int64)[:, None] * n + np.maximum(cand, 0)).ravel()
    at = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
    hit = (keys[at] == want) if len(keys) else np.zeros(want.shape, dtype=bool)
    hit &= (cand >= 0).ravel()
    value = np.where(hit, scores.data[at] if len(keys) else 0.0, 0.0).reshape(batch, width).astype(np.float64)
    dev = candidates.device
    return torch.from_numpy(value).to(dev), torch.from_numpy(peak).to(dev)


def lexical_relevance(bm25: BM25Index, terms: sp.csr_matrix, candidates: torch.Tensor) -> torch.Tensor:
    """``bm25(q, c) / max_c' bm25(q, c')`` in [0, 1] (0 where the query matches no chunk, and on
    padding). Shapes: ``terms [B, vocab]``, ``candidates [B, P]`` -> ``[B, P]`` float32."""
    value, peak = lexical_scores(bm25, terms, candidates)
    out = torch.where(peak[:, None] > 0, value / peak[:, None].clamp(min=1e-300), torch.zeros_like(value))
    return out.to(torch.float32)
