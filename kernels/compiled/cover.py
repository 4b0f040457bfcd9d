"""Each named document's first bridge (:mod:`spectrag.rescore.cover`, the reference), compiled,
one query at a time: which named documents reach each candidate, read from the CSR rows of the
pool's named chunks (no induced subgraph is built), then the walk down the ranking. Only the
queries that name two or more documents are read."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.order import U32, top_by_value_then_id
from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _cover_rows(lo, hi, candidates, bits, several, scores, indptr_a, indices_a, indptr_b, indices_b, use_b,
                depth, max_named, marked):
    n = indptr_a.shape[0] - 1
    width = candidates.shape[1]
    slot_of = np.full(n, -1, np.int64)
    reach = np.zeros(width, np.uint64)
    values = np.empty(width, np.float32)
    ids = np.empty(width, np.int64)
    keys = np.empty(width, np.uint64)
    for b in range(lo, hi):
        for i in range(width):
            marked[b, i] = False
        if not several[b]:
            continue
        for i in range(width):
            v = candidates[b, i]
            reach[i] = 0
            if v >= 0:
                slot_of[v] = i
        # an entry from a named chunk (source row) to a candidate of no named document (target)
        for g in range(2):
            if g == 1 and not use_b:
                break
            indptr = indptr_a if g == 0 else indptr_b
            indices = indices_a if g == 0 else indices_b
            for i in range(width):
                bit = bits[b, i]
                if bit < 0 or bit >= max_named:
                    continue
                v = candidates[b, i]
                for e in range(indptr[v], indptr[v + 1]):
                    j = slot_of[indices[e]]
                    if j >= 0 and bits[b, j] < 0:
                        reach[j] |= np.uint64(1) << np.uint64(bit)
        # the walk: the best ``depth`` candidates of no named document, score down, id up
        count = 0
        for i in range(width):
            v = candidates[b, i]
            if v >= 0 and bits[b, i] < 0:
                values[count] = scores[b, i]
                ids[count] = v
                count += 1
        order = top_by_value_then_id(values, ids, count, depth, keys)
        covered = np.uint64(0)
        for r in range(order.shape[0]):
            i = slot_of[np.int64(order[r] & U32)]
            if reach[i] & ~covered:
                marked[b, i] = True
                covered |= reach[i]
        for i in range(width):
            if candidates[b, i] >= 0:
                slot_of[candidates[b, i]] = -1


_cover_rows = jit(_cover_rows)


def first_bridges_compiled(candidates: np.ndarray, bits: np.ndarray, several: np.ndarray, scores: np.ndarray,
                           graphs: list[tuple[np.ndarray, np.ndarray]], depth: int, max_named: int, *,
                           threads: int | None = None) -> np.ndarray:
    """The candidates the walk marks (:func:`spectrag.rescore.cover.first_bridges` on the anchors of
    :func:`spectrag.rescore.cover.cover_anchors`), from the whole graphs' CSR ``(indptr, indices)``
    (one or two, over the same nodes). Shapes: ``candidates / bits / scores [B, P]`` (int64, int64
    named-document number or -1, float32), ``several [B]`` bool -> bool ``[B, P]``."""
    if not 1 <= len(graphs) <= 2:
        raise ValueError(f"one or two graphs, got {len(graphs)}")
    batch, width = candidates.shape
    marked = np.empty((batch, width), np.bool_)
    (indptr_a, indices_a), (indptr_b, indices_b) = graphs[0], graphs[-1]
    parallel_rows(_cover_rows, batch, np.ascontiguousarray(candidates, np.int64), np.ascontiguousarray(bits, np.int64),
                  np.ascontiguousarray(several, np.bool_), np.ascontiguousarray(scores, np.float32),
                  indptr_a, indices_a, indptr_b, indices_b, len(graphs) == 2, int(depth), int(max_named), marked,
                  threads=threads)
    return marked
