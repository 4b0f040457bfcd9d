"""The exact top-``k`` inner products of each query with the rows of a table, from a cheap
approximate product: every row whose approximate score could still reach the top ``k`` is
scored again exactly (float64, the dense index's re-scoring, :mod:`spectrag.kernels.compiled.gather`)
and the best ``k`` by exact score, then smaller id, are kept.

Why a screen: linking a batch's queries to a knowledge graph's entities (spreading activation's
seeds, k = 3 of 18,160 on MuSiQue) spent 45 ms a batch of 256 in a float32 product and a
tiled top-k; a bfloat16 product on a CPU with AMX takes 5 ms and one compiled pass finds the few
rows to score exactly.

Why exact: if every approximate score is within ``bound`` of the exact one, the ``k``-th largest
approximate score ``T`` has ``k`` rows of exact score at least ``T - bound``, so a row of the
exact top ``k`` scores at least ``T - 2 bound`` approximately. The pass keeps every row at or
above the running ``k``-th best less ``2 bound`` (the running value only rises, so no such row
is missed), and the exact scores decide. The answer does not depend on the approximate
product's rounding, its blocking, the batch or the thread count.
"""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.gather import _dot64
from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _push(heap, k, value):
    """Replace the smallest of the ``k`` values of the min-heap ``heap`` with ``value``."""
    heap[0] = value
    i = 0
    while True:
        left = 2 * i + 1
        if left >= k:
            break
        child = left + 1 if left + 1 < k and heap[left + 1] < heap[left] else left
        if heap[child] >= heap[i]:
            break
        heap[i], heap[child] = heap[child], heap[i]
        i = child


_push = jit(_push, inline=True)


def _screen_rows(lo, hi, approx16, approx32, bf16, margin, table, q, k, out_scores, out_ids):
    n = table.shape[0]
    bits = np.empty(n, np.uint32)
    row = bits.view(np.float32)
    heap = np.empty(k, np.float32)
    kept = np.empty(n, np.int64)
    exact = np.empty(n, np.float64)
    for b in range(lo, hi):
        if bf16:  # bfloat16 is the upper half of a float32
            for j in range(n):
                bits[j] = np.uint32(approx16[b, j]) << np.uint32(16)
        else:
            for j in range(n):
                row[j] = approx32[b, j]
        heap[:] = -np.inf
        floor = -np.inf  # the running k-th best less twice the bound
        count = 0
        for j in range(n):
            v = row[j]
            if v >= floor:
                kept[count] = j
                count += 1
                if v > heap[0]:
                    _push(heap, k, v)
                    floor = np.float64(heap[0]) - margin[b]
        last = 0
        for i in range(count):  # in id order, as found
            j = kept[i]
            if row[j] >= floor:
                kept[last] = j
                exact[last] = _dot64(table, j, q, b)
                last += 1
        order = np.argsort(-exact[:last], kind="mergesort")  # stable: ties keep the smaller id first
        for i in range(k):
            out_scores[b, i] = exact[order[i]]
            out_ids[b, i] = kept[order[i]]


_screen_rows = jit(_screen_rows)


def screened_topk(approx: np.ndarray, bound: np.ndarray, table: np.ndarray, q: np.ndarray, k: int, *,
                  threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-``k`` of ``q [B, d] @ table[n, d].T`` by float64 score, then smaller id,
    given ``approx [B, n]`` (float32, or bfloat16 bits as uint16) within ``bound [B]`` (float64)
    of the exact scores. Shapes: -> float64 scores, int64 ids ``[B, min(k, n)]``."""
    n = table.shape[0]
    k = min(k, n)
    batch = q.shape[0]
    if approx.shape != (batch, n) or bound.shape != (batch,):
        raise ValueError(f"approx must be [{batch}, {n}] and bound [{batch}], got {approx.shape} and {bound.shape}")
    scores, ids = np.empty((batch, k), np.float64), np.empty((batch, k), np.int64)
    if k == 0 or batch == 0:
        return scores, ids
    bf16 = approx.dtype == np.uint16
    none16, none32 = np.zeros((1, 1), np.uint16), np.zeros((1, 1), np.float32)
    parallel_rows(_screen_rows, batch, approx if bf16 else none16,
                  none32 if bf16 else np.ascontiguousarray(approx, np.float32), bf16,
                  2.0 * np.ascontiguousarray(bound, np.float64), table, np.ascontiguousarray(q, np.float32), k,
                  scores, ids, threads=threads)
    return scores, ids
