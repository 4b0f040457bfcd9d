"""Reciprocal rank fusion compiled, one query at a time: :func:`spectrag.seed.rrf.reciprocal_rank_fusion`
(the reference and the device path) without its batch-wide sort of ``B x L`` keys. A query's
entries are sorted by id (ties in list order), so each id's float64 contributions are added in
the order the reference's ``index_add_`` adds them (the same bits), then ordered by fused score
descending, ties to the smaller id."""

from __future__ import annotations

import numpy as np
import torch

from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _rrf_rows(lo, hi, ids, ranks, k, out_scores, out_ids, counts):
    length = ids.shape[1]
    keys = np.empty(length, np.int64)
    uid = np.empty(length, np.int64)
    fused = np.empty(length, np.float64)
    for b in range(lo, hi):
        n = 0
        for j in range(length):
            if ids[b, j] >= 0:
                keys[n] = ids[b, j] * length + j  # by id, then by position (list order)
                n += 1
        order = np.sort(keys[:n])
        u = -1
        for i in range(n):
            v = order[i] // length
            contrib = 1.0 / (k + np.float64(ranks[order[i] % length]))
            if u < 0 or uid[u] != v:
                u += 1
                uid[u] = v
                fused[u] = 0.0
            fused[u] += contrib
        m = u + 1
        counts[b] = m
        best = np.argsort(-fused[:m], kind="mergesort")  # stable: ids ascend, so ties go to the smaller
        width = min(m, out_ids.shape[1])
        for i in range(width):
            out_scores[b, i] = np.float32(fused[best[i]])
            out_ids[b, i] = uid[best[i]]
        for i in range(width, out_ids.shape[1]):
            out_scores[b, i] = 0.0
            out_ids[b, i] = -1


_rrf_rows = jit(_rrf_rows)


def reciprocal_rank_fusion_compiled(ranked_ids: list[torch.Tensor], *, k: int = 60, top: int | None = None,
                                    threads: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`spectrag.seed.rrf.reciprocal_rank_fusion` on CPU tensors, the same output (scores
    bitwise, ids, width). Shapes: ``S`` tensors ``[B, K_s]`` -> float32 scores, int64 ids ``[B, T]``."""
    if not ranked_ids:
        raise ValueError("ranked_ids must hold at least one [B, K] tensor")
    ids = np.ascontiguousarray(torch.cat([r.to(torch.int64) for r in ranked_ids], dim=1).numpy())
    ranks = np.concatenate([np.arange(1, r.shape[1] + 1, dtype=np.int64) for r in ranked_ids])
    batch, length = ids.shape
    cap = length if top is None else min(top, length)
    scores = np.empty((batch, cap), np.float32)
    out = np.empty((batch, cap), np.int64)
    counts = np.zeros(batch, np.int64)
    parallel_rows(_rrf_rows, batch, ids, ranks, float(k), scores, out, counts, threads=threads)
    width = min(cap, int(counts.max(initial=0)))
    return torch.from_numpy(scores[:, :width].copy()), torch.from_numpy(out[:, :width].copy())
