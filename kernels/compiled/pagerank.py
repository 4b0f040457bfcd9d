"""Personalized PageRank on every query's candidate pool, compiled, one pool at a time, its
induced subgraph read from the whole graph's CSR (:class:`~spectrag.kernels.compiled.blocks.PoolGraphs`):
the model, start, convergence test and arithmetic of
:func:`spectrag.kernels.pagerank.personalized_pagerank_blocks` (its reference; networkx's model in
float64; a pool stops when its L1 change falls below ``n_b * tol``, as it would alone)."""

from __future__ import annotations

import numpy as np
import torch

from spectrag.kernels.compiled.blocks import PoolGraphs
from spectrag.kernels.compiled.runtime import jit, parallel_rows
from spectrag.kernels.pagerank import (
    PageRankNotConverged,
    PageRankResult,
    chebyshev_weights,
    check_method,
    check_params,
    check_restart,
)


def _walk_row(r, start, local_col, local_w, x):
    """Row ``r`` of ``P^T x`` on a pool's local CSR, its terms added in the graph's column order."""
    acc = 0.0
    for e in range(start[r], start[r + 1]):
        acc += local_w[e] * x[local_col[e]]
    return acc


_walk_row = jit(_walk_row, inline=True)


def _ppr_pool_rows(lo, hi, candidates, restart, indptr, indices, data, damping, tol, max_iter, chebyshev, omegas,
                   scores, iters, residual, converged, status):
    n = indptr.shape[0] - 1
    width = candidates.shape[1]
    slot_of = np.full(n, -1, np.int64)  # node -> its compact index in the pool (real members only)
    real = np.empty(width, np.int64)  # compact index -> pool position
    x = np.empty(width, np.float64)
    xn = np.empty(width, np.float64)
    yp = np.empty(width, np.float64)  # Chebyshev: the iterate before x
    p = np.empty(width, np.float64)
    inv = np.empty(width, np.float64)
    dangling = np.empty(width, np.bool_)
    start = np.empty(width + 1, np.int64)  # the pool's walk matrix P^T = A D^-1 as local CSR
    local_col = np.empty(0, np.int32)
    local_w = np.empty(0, np.float64)
    for b in range(lo, hi):
        nb = 0
        need = 0
        for i in range(width):
            v = candidates[b, i]
            if v >= 0:
                slot_of[v] = nb
                real[nb] = i
                nb += 1
                need += indptr[v + 1] - indptr[v]
        if need > local_col.shape[0]:
            local_col = np.empty(2 * need, np.int32)
            local_w = np.empty(2 * need, np.float64)
        # the induced edges in the graph's column order, with their weights; then A D^-1
        nnz = 0
        total = 0.0
        for r in range(nb):
            start[r] = nnz
            deg = 0.0
            v = candidates[b, real[r]]
            total += restart[b, real[r]]
            for e in range(indptr[v], indptr[v + 1]):
                # written whatever j is, kept (the count moves on) only inside the pool: about
                # half of a row's entries are, so a branch on it would be mispredicted half the time
                j = slot_of[indices[e]]
                inside = j >= 0
                w = np.float64(np.float32(data[e]))
                if not (w >= 0.0 and w < np.inf) and inside:
                    status[b] = 1
                local_col[nnz] = j
                local_w[nnz] = w
                deg += w if inside else 0.0
                nnz += inside
            dangling[r] = deg == 0.0
            inv[r] = 1.0 / deg if deg > 0.0 else 0.0
        start[nb] = nnz
        for e in range(nnz):
            local_w[e] = local_w[e] * inv[local_col[e]]  # A[i, j] / d_j (A symmetric)
        threshold = nb * tol
        done = False
        it = 0
        err = np.inf
        for r in range(nb):
            p[r] = restart[b, real[r]] / total
        if chebyshev:  # y = d P^T y + p, x = y / sum(y) (kernels.pagerank._chebyshev_blocks)
            for r in range(nb):
                x[r] = p[r]  # y_k
                yp[r] = p[r]  # y_{k-1}
            while it < max_iter and not done:
                it += 1
                err = 0.0
                mass = 0.0
                for r in range(nb):
                    value = _walk_row(r, start, local_col, local_w, x) * damping + p[r]
                    err += abs(value - x[r])
                    mass += x[r]
                    xn[r] = value
                err = err / mass
                done = err < threshold
                if done or it == max_iter:  # the last power step, normalized, clipped at 0
                    total_g = 0.0
                    for r in range(nb):
                        xn[r] = max(xn[r], 0.0)
                        total_g += xn[r]
                    for r in range(nb):
                        x[r] = xn[r] / total_g
                    break
                omega = omegas[it - 1]
                for r in range(nb):  # y_{k+1} = omega (g - y_{k-1}) + y_{k-1}, written over y_{k-1}
                    yp[r] = xn[r] if it == 1 else (xn[r] - yp[r]) * omega + yp[r]
                x, yp = yp, x
        else:
            first = 1.0 / max(nb, 1)
            lost = 0.0  # the mass on dangling nodes, returned along the restart vector
            for r in range(nb):
                x[r] = first
                if dangling[r]:
                    lost += first
            while it < max_iter and not done:
                it += 1
                scale = lost * damping + (1.0 - damping)
                err = 0.0
                lost = 0.0
                for r in range(nb):
                    value = _walk_row(r, start, local_col, local_w, x) * damping + p[r] * scale
                    err += abs(value - x[r])
                    xn[r] = value
                    if dangling[r]:
                        lost += value
                x, xn = xn, x
                done = err < threshold
        for i in range(width):
            scores[b, i] = 0.0
        for r in range(nb):
            scores[b, real[r]] = x[r]
            slot_of[candidates[b, real[r]]] = -1
        iters[b] = it
        residual[b] = err
        converged[b] = done


_ppr_pool_rows = jit(_ppr_pool_rows)


def _restart_rows(lo, hi, candidates, seeds, weights, out):
    for b in range(lo, hi):
        for i in range(candidates.shape[1]):
            acc = np.float32(0.0)
            for j in range(seeds.shape[1]):
                if candidates[b, i] == seeds[b, j]:
                    acc += max(weights[b, j], np.float32(0.0))
            out[b, i] = acc


_restart_rows = jit(_restart_rows)


def seed_restart_compiled(candidates: np.ndarray, seeds: np.ndarray, weights: np.ndarray, *,
                          threads: int | None = None) -> np.ndarray:
    """:func:`spectrag.propagate.proximity.seed_restart` compiled: each candidate's restart
    mass, the clipped float32 weight of the seed it is (a sum over the seeds it equals, ids
    compared as given, padding included, as there; the seeds are distinct, so that is one
    term, exact in any order). Shapes: ``candidates [B, P]``, ``seeds / weights [B, S]`` ->
    float32 ``[B, P]``."""
    out = np.empty(candidates.shape, np.float32)
    parallel_rows(_restart_rows, candidates.shape[0], np.ascontiguousarray(candidates, np.int64),
                  np.ascontiguousarray(seeds, np.int64), np.ascontiguousarray(weights, np.float32), out,
                  threads=threads)
    return out


def personalized_pagerank_pools(pools: PoolGraphs, X: torch.Tensor, *, damping: float = 0.85, tol: float = 1e-8,
                                max_iter: int = 100, raise_on_failure: bool = True, method: str = "power",
                                threads: int | None = None) -> PageRankResult:
    """:func:`spectrag.kernels.pagerank.personalized_pagerank_blocks` of every pool's induced
    subgraph (a symmetric graph), compiled. Shapes: restart ``X [B, P]`` (>= 0, positive mass on
    a real node of every row; padding ignored) -> :class:`PageRankResult`, ``scores [B, P]`` float64.
    ``method``: ``power`` or ``chebyshev``, as there."""
    damping, tol, max_iter = check_params(damping, tol, max_iter)
    chebyshev = check_method(method) == "chebyshev"
    omegas = np.asarray(chebyshev_weights(damping, max_iter) if chebyshev else [0.0])
    batch, width = pools.batch, pools.width
    if tuple(X.shape) != (batch, width):
        raise ValueError(f"X must be [{batch}, {width}], got {tuple(X.shape)}")
    mask = torch.from_numpy(pools.candidates >= 0)
    restart = torch.where(mask, X.to(torch.float64), torch.zeros((), dtype=torch.float64))
    check_restart(restart, 1, "block")
    scores = np.empty((batch, width), np.float64)
    iters, residual = np.empty(batch, np.int64), np.empty(batch, np.float64)
    converged, status = np.empty(batch, np.bool_), np.zeros(batch, np.int8)
    parallel_rows(_ppr_pool_rows, batch, pools.candidates, np.ascontiguousarray(restart.numpy()), pools.indptr,
                  pools.indices, pools.data, damping, tol, max_iter, chebyshev, omegas, scores, iters, residual, converged, status,
                  threads=threads)
    if status.any():  # checked on the edges read, not the whole graph every batch
        raise ValueError("blocks must have finite, non-negative edge weights")
    result = PageRankResult(scores=torch.from_numpy(scores), n_iter=int(iters.max(initial=0)),
                            converged=bool(converged.all()), residual=torch.from_numpy(residual),
                            column_converged=torch.from_numpy(converged), column_iters=torch.from_numpy(iters))
    if not result.converged and raise_on_failure:
        raise PageRankNotConverged(result, max_iter, tol)
    return result
