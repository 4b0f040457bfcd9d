"""Each named document's first bridge (:mod:`spectrag.rescore.cover`, the reference), compiled,
one query at a time, in two kernels: which named documents reach each candidate (read once per
batch from the CSR rows of the pool's named chunks; no induced subgraph is built), then the
walk down an order of the scores (run for the ranking and for the selection). Only the queries
that name two or more documents are read."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.order import U32, top_by_value_then_id
from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _reach_rows(lo, hi, candidates, bits, several, indptr_a, indices_a, indptr_b, indices_b, use_b, max_named, reach):
    n = indptr_a.shape[0] - 1
    width = candidates.shape[1]
    slot_of = np.full(n, -1, np.int64)
    for b in range(lo, hi):
        for i in range(width):
            reach[b, i] = 0
        if not several[b]:
            continue
        for i in range(width):
            if candidates[b, i] >= 0:
                slot_of[candidates[b, i]] = i
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
                        reach[b, j] |= np.uint64(1) << np.uint64(bit)
        for i in range(width):
            if candidates[b, i] >= 0:
                slot_of[candidates[b, i]] = -1


def _walk_rows(lo, hi, candidates, bits, several, scores, reach, depth, n, marked):
    width = candidates.shape[1]
    values = np.empty(width, np.float32)
    ids = np.empty(width, np.int64)
    keys = np.empty(width, np.uint64)
    slot_of = np.full(n, -1, np.int64)  # chunk -> its pool slot, for the chunks the walk may meet
    for b in range(lo, hi):
        for i in range(width):
            marked[b, i] = False
        if not several[b]:
            continue
        # the best ``depth`` candidates of no named document, score down, id up
        count = 0
        for i in range(width):
            if candidates[b, i] >= 0 and bits[b, i] < 0:
                values[count] = scores[b, i]
                ids[count] = candidates[b, i]
                slot_of[candidates[b, i]] = i
                count += 1
        order = top_by_value_then_id(values, ids, count, depth, keys)
        covered = np.uint64(0)
        for r in range(order.shape[0]):
            i = slot_of[np.int64(order[r] & U32)]  # a chunk is in a pool at most once
            if reach[b, i] & ~covered:
                marked[b, i] = True
                covered |= reach[b, i]
        for c in range(count):
            slot_of[ids[c]] = -1


_reach_rows = jit(_reach_rows)
_walk_rows = jit(_walk_rows)


def cover_reach_compiled(candidates: np.ndarray, bits: np.ndarray, several: np.ndarray,
                         graphs: list[tuple[np.ndarray, np.ndarray]], max_named: int, *,
                         threads: int | None = None) -> np.ndarray:
    """Which named documents reach each candidate, as bits (:func:`spectrag.rescore.cover.cover_anchors`
    packed), from the whole graphs' CSR ``(indptr, indices)`` (one or two, over the same nodes).
    Shapes: ``candidates / bits [B, P]`` (int64; ``bits`` the named-document number or -1),
    ``several [B]`` bool -> uint64 ``[B, P]``."""
    if not 1 <= len(graphs) <= 2:
        raise ValueError(f"one or two graphs, got {len(graphs)}")
    reach = np.empty(candidates.shape, np.uint64)
    (indptr_a, indices_a), (indptr_b, indices_b) = graphs[0], graphs[-1]
    parallel_rows(_reach_rows, candidates.shape[0], candidates, bits, several, indptr_a, indices_a, indptr_b, indices_b,
                  len(graphs) == 2, int(max_named), reach, threads=threads)
    return reach


def first_bridges_compiled(candidates: np.ndarray, bits: np.ndarray, several: np.ndarray, scores: np.ndarray,
                           reach: np.ndarray, depth: int, *, threads: int | None = None) -> np.ndarray:
    """The candidates the walk down ``scores`` marks (:func:`spectrag.rescore.cover.first_bridges`)
    given :func:`cover_reach_compiled`'s ``reach``. Shapes: ``[B, P]`` (``scores`` float32) -> bool ``[B, P]``."""
    marked = np.empty(candidates.shape, np.bool_)
    n = int(candidates.max(initial=-1)) + 1
    parallel_rows(_walk_rows, candidates.shape[0], candidates, bits, several, np.ascontiguousarray(scores, np.float32),
                  reach, int(depth), n, marked, threads=threads)
    return marked
