"""Query-aware bridging (max-plus relevance along relational edges), compiled, one pool at a
time, reading only the sources' rows of the relational graph
(:class:`~spectrag.kernels.compiled.blocks.PoolGraphs`): the rules and float32 arithmetic of
:func:`spectrag.rescore.bridge.bridge_relevance` (the reference): each round the ``m``
best-scored candidates (ties: smaller chunk id) among the anchors pass
``(1 - lam) x_s + lam r_c - gamma (1 - w)`` to their relational neighbours in the pool, which
keep the max; with document codes a bridge leads to another document, and of each document
reached only its best-bridged chunk (ties: smaller chunk id) keeps the bridged score."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.blocks import PoolGraphs
from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _bridge_rows(lo, hi, indptr, indices, data, relevance, start, candidates, anchors, docs, n_docs, sources, lam,
                 gamma, rounds, out):
    n = indptr.shape[0] - 1
    by_doc = n_docs > 0  # docs [B, P] holds document codes (else a [1, 1] placeholder)
    doc_arg = np.full(max(n_docs, 1), -1, np.int64)  # document -> position of its best bridged chunk
    width = candidates.shape[1]
    one = np.float32(1.0)
    slot_of = np.full(n, -1, np.int64)
    share = np.float32(1.0 - lam)  # (1 - lam) as the reference's float32 scalar
    lam32, gamma32 = np.float32(lam), np.float32(gamma)
    neg = np.float32(-np.inf)
    x = np.empty(width, np.float32)
    best = np.empty(width, np.float32)
    target = np.empty(width, np.float32)
    order = np.empty(width, np.int64)
    for b in range(lo, hi):
        n_real = 0
        for i in range(width):
            x[i] = start[b, i]
            if candidates[b, i] >= 0:
                slot_of[candidates[b, i]] = i
                target[i] = lam32 * relevance[b, i]
                if anchors[b, i]:
                    order[n_real] = i
                    n_real += 1
            else:
                target[i] = neg
        m = min(sources, n_real)  # n_real: the real anchors (every real candidate without anchors)
        for _ in range(rounds):
            # the m best real positions by x descending, then chunk id ascending (selection sort:
            # m is a handful)
            for k in range(m):
                top = k
                for j in range(k + 1, n_real):
                    a, c = order[j], order[top]
                    if x[a] > x[c] or (x[a] == x[c] and candidates[b, a] < candidates[b, c]):
                        top = j
                order[k], order[top] = order[top], order[k]
            for i in range(width):
                best[i] = neg
            for k in range(m):
                s = order[k]
                passed = share * x[s]
                v = candidates[b, s]
                for e in range(indptr[v], indptr[v + 1]):
                    c = slot_of[indices[e]]
                    if c < 0 or (by_doc and docs[b, c] == docs[b, s]):
                        continue
                    w = np.float32(data[e])
                    via = passed + target[c] - gamma32 * (one - w)
                    if not w > 0:
                        via = neg
                    if via > best[c]:
                        best[c] = via
            if by_doc:  # one chunk per document reached: its best, ties to the smaller id
                for i in range(width):
                    if candidates[b, i] >= 0 and best[i] > neg:
                        j = doc_arg[docs[b, i]]
                        if j < 0 or best[i] > best[j] or (best[i] == best[j] and candidates[b, i] < candidates[b, j]):
                            doc_arg[docs[b, i]] = i
                for i in range(width):
                    if candidates[b, i] >= 0 and best[i] > neg and doc_arg[docs[b, i]] != i:
                        best[i] = neg
                for i in range(width):
                    if candidates[b, i] >= 0:
                        doc_arg[docs[b, i]] = -1
            for i in range(width):
                if candidates[b, i] >= 0 and best[i] > x[i]:
                    x[i] = best[i]
        for i in range(width):
            out[b, i] = x[i]
            if candidates[b, i] >= 0:
                slot_of[candidates[b, i]] = -1


_bridge_rows = jit(_bridge_rows)


def bridge_compiled(relations: PoolGraphs, relevance: np.ndarray, *, sources: int, lam: float, gamma: float,
                    rounds: int, start: np.ndarray | None = None, anchors: np.ndarray | None = None,
                    docs: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    """Bridged relevance. Shapes: ``B`` pools of ``P`` over the relational graph, ``relevance
    [B, P]`` (float32), ``start [B, P]`` (default: relevance), ``anchors [B, P]`` bool (the
    candidates that may be sources; default: every one), ``docs [B, P]`` document codes (-1 on
    padding; default: none) -> ``[B, P]`` float32; padding keeps its ``start`` value."""
    relevance = np.ascontiguousarray(relevance, np.float32)
    start = relevance if start is None else np.ascontiguousarray(start, np.float32)
    anchors = np.ones(relevance.shape, np.bool_) if anchors is None else np.ascontiguousarray(anchors, np.bool_)
    if docs is None:
        docs, n_docs = np.zeros((1, 1), np.int64), 0
    else:
        docs = np.ascontiguousarray(docs, np.int64)
        n_docs = int(docs.max()) + 1 if docs.size else 0
    out = np.empty_like(start)
    parallel_rows(_bridge_rows, relevance.shape[0], relations.indptr, relations.indices, relations.data, relevance,
                  start, relations.candidates, anchors, docs, n_docs, int(sources), float(lam), float(gamma),
                  int(rounds), out, threads=threads)
    return out
