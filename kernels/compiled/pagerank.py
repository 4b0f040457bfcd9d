"""Personalized PageRank on every query's induced block, compiled, one block at a time: the
model, start, convergence test and arithmetic order of
:func:`spectrag.kernels.pagerank.personalized_pagerank_blocks` (networkx's model in float64;
a block stops when its L1 change falls below ``n_b * tol``, as it would alone)."""

from __future__ import annotations

import numpy as np
import torch

from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.compiled.runtime import jit, parallel_rows
from spectrag.kernels.pagerank import PageRankNotConverged, PageRankResult, check_params, check_restart


def _ppr_rows(lo, hi, crow, col, val, mask, restart, damping, tol, max_iter, scores, iters, residual, converged):
    width = mask.shape[1]
    x = np.empty(width, np.float64)
    xn = np.empty(width, np.float64)
    p = np.empty(width, np.float64)
    inv = np.empty(width, np.float64)
    dangling = np.empty(width, np.bool_)
    for b in range(lo, hi):
        base = b * width
        nb = 0
        total = 0.0
        for i in range(width):
            if mask[b, i]:
                nb += 1
                total += restart[b, i]
        # degrees over the edges between real nodes (padding carries no mass)
        for i in range(width):
            deg = 0.0
            if mask[b, i]:
                for e in range(crow[base + i], crow[base + i + 1]):
                    if mask[b, col[e] - base]:
                        deg += np.float64(val[e])
            dangling[i] = mask[b, i] and deg == 0.0
            inv[i] = 1.0 / deg if deg > 0.0 else 0.0
        start = 1.0 / max(nb, 1)
        for i in range(width):
            p[i] = restart[b, i] / total if mask[b, i] else 0.0
            x[i] = start if mask[b, i] else 0.0
        threshold = nb * tol
        done = False
        it = 0
        err = np.inf
        while it < max_iter and not done:
            it += 1
            lost = 0.0
            for i in range(width):
                if dangling[i]:
                    lost += x[i]
            scale = lost * damping + (1.0 - damping)
            err = 0.0
            for i in range(width):
                acc = 0.0
                if mask[b, i]:
                    for e in range(crow[base + i], crow[base + i + 1]):
                        j = col[e] - base
                        if mask[b, j]:
                            acc += (np.float64(val[e]) * inv[j]) * x[j]
                xn[i] = acc * damping + p[i] * scale
                err += abs(xn[i] - x[i])
            for i in range(width):
                x[i] = xn[i]
            done = err < threshold
        for i in range(width):
            scores[b, i] = x[i]
        iters[b] = it
        residual[b] = err
        converged[b] = done


_ppr_rows = jit(_ppr_rows)


def personalized_pagerank_blocks_compiled(blocks: BlockGraph, X: torch.Tensor, *, mask: torch.Tensor,
                                          damping: float = 0.85, tol: float = 1e-8, max_iter: int = 100,
                                          raise_on_failure: bool = True, threads: int | None = None) -> PageRankResult:
    """:func:`spectrag.kernels.pagerank.personalized_pagerank_blocks` on the CPU, compiled: ``B``
    symmetric blocks of ``P``, restart ``X [B, P]`` (float64, >= 0 with positive mass on a real
    node of every row), ``mask [B, P]`` -> :class:`PageRankResult` with ``scores [B, P]`` float64."""
    damping, tol, max_iter = check_params(damping, tol, max_iter)
    batch, width = blocks.batch, blocks.width
    if tuple(X.shape) != (batch, width) or tuple(mask.shape) != (batch, width):
        raise ValueError(f"X and mask must be [{batch}, {width}], got {tuple(X.shape)} and {tuple(mask.shape)}")
    if blocks.nnz and (not bool(torch.isfinite(blocks.val).all()) or bool((blocks.val < 0).any())):
        raise ValueError("blocks must have finite, non-negative edge weights")
    restart = torch.where(mask, X, torch.zeros((), dtype=X.dtype)).to(torch.float64)
    check_restart(restart, 1, "block")
    scores = np.empty((batch, width), np.float64)
    iters, residual = np.empty(batch, np.int64), np.empty(batch, np.float64)
    converged = np.empty(batch, np.bool_)
    parallel_rows(_ppr_rows, batch, blocks.crow.numpy(), blocks.col.numpy(), blocks.val.numpy(),
                  np.ascontiguousarray(mask.numpy(), np.bool_), np.ascontiguousarray(restart.numpy()), damping, tol,
                  max_iter, scores, iters, residual, converged, threads=threads)
    result = PageRankResult(scores=torch.from_numpy(scores), n_iter=int(iters.max(initial=0)),
                            converged=bool(converged.all()), residual=torch.from_numpy(residual),
                            column_converged=torch.from_numpy(converged), column_iters=torch.from_numpy(iters))
    if not result.converged and raise_on_failure:
        raise PageRankNotConverged(result, max_iter, tol)
    return result
