"""Page support (:func:`spectrag.rescore.pages.page_support`, its reference and device path),
compiled, one query at a time: each document's two best candidate relevances from one pass over
the pool through a document -> slot table, instead of two sorts of every row. The pool's mean is
the caller's (the torch path's own float64 mean), and the gain is formed by the same float64
operations, so both paths give the same bits."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _support_rows(lo, hi, relevance, docs, mask, mean, n_docs, beta, out):
    width = relevance.shape[1]
    best = np.full(n_docs, -np.inf, np.float64)
    second = np.full(n_docs, -np.inf, np.float64)
    for b in range(lo, hi):
        for i in range(width):
            if mask[b, i]:
                d = docs[b, i]
                v = relevance[b, i]
                if v > best[d]:
                    second[d] = best[d]
                    best[d] = v
                elif v > second[d]:
                    second[d] = v
        for i in range(width):
            out[b, i] = 0.0
            if mask[b, i]:
                r2 = second[docs[b, i]]
                if r2 > -np.inf:
                    out[b, i] = beta * max(r2 - mean[b], 0.0)
        for i in range(width):  # the table is clean for the next query
            if mask[b, i]:
                best[docs[b, i]] = -np.inf
                second[docs[b, i]] = -np.inf


_support_rows = jit(_support_rows)


def page_support_compiled(relevance: np.ndarray, docs: np.ndarray, mask: np.ndarray, mean: np.ndarray, beta: float, *,
                          threads: int | None = None) -> np.ndarray:
    """Shapes: ``relevance`` float64, ``docs`` int64 (>= 0 where ``mask``), ``mask`` bool, all
    ``[B, P]``; ``mean`` float64 ``[B]`` -> float64 ``[B, P]``, 0 on padding."""
    out = np.empty(relevance.shape, np.float64)
    n_docs = int(docs[mask].max()) + 1 if mask.any() else 1
    parallel_rows(_support_rows, relevance.shape[0], np.ascontiguousarray(relevance, np.float64),
                  np.ascontiguousarray(docs, np.int64), np.ascontiguousarray(mask, np.bool_),
                  np.ascontiguousarray(mean, np.float64), n_docs, float(beta), out, threads=threads)
    return out
