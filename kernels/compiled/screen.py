"""The exact top-``k`` inner products of each query with the rows of a table, from a cheap
approximate product: every row whose approximate score could still reach the top ``k`` is
scored again exactly (float64, the dense index's re-scoring, :mod:`spectrag.kernels.compiled.gather`)
and the best ``k`` by exact score, then smaller id, are kept.

Why a screen: linking a batch's queries to a knowledge graph's entities (spreading activation's
seeds, k = 3 of 18,160 on MuSiQue) spent 45 ms a batch of 256 in a float32 product and a
tiled top-k; a bfloat16 product on a CPU with AMX takes 5 ms and one compiled pass finds the few
rows to score exactly (the dense search of 256 questions over 6,834 chunks: 17.0 -> 10.8 ms).

Why exact: if every approximate score is within ``bound`` of the exact one, the ``k``-th largest
approximate score ``T`` has ``k`` rows of exact score at least ``T - bound``, so a row of the
exact top ``k`` scores at least ``T - 2 bound`` approximately. A first pass bounds ``T`` from
below by the ``k``-th largest maximum of groups of values and keeps the rows at or above that
less ``2 bound``; among them ``T`` itself is found, the rows below ``T - 2 bound`` are dropped, and
the exact scores of the rest decide. The answer does not depend on the approximate
product's rounding, its blocking, the batch or the thread count.
"""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.gather import _dot64
from spectrag.kernels.compiled.runtime import jit, parallel_rows


GROUP = 16  # values per group whose maxima give a first floor
SIGN = np.uint32(0x80000000)


def _key(u):
    """The float32 with bits ``u`` as an unsigned key in the same order (negatives inverted)."""
    return u ^ ((u >> np.uint32(31)) * np.uint32(0x7FFFFFFF) | SIGN)


def _floor_key(value, cell):
    """The key of the largest float32 at or below the float64 ``value``, a zero floor at -0.0
    (whose key is one below +0.0's, and which equals it) (``cell``: a uint32 array of one entry
    with a float32 view, for the bits)."""
    f = np.float32(value)
    if np.float64(f) > value:
        f = np.nextafter(f, np.float32(-np.inf))
    if f == 0:
        f = np.float32(-0.0)
    cell.view(np.float32)[0] = f
    return _key(cell[0])


def _value(key, cell):
    """The float32 value of a key (:func:`_key` inverted)."""
    cell[0] = key ^ SIGN if key & SIGN else ~key
    return np.float64(cell.view(np.float32)[0])


_key = jit(_key, inline=True)
_floor_key = jit(_floor_key, inline=True)
_value = jit(_value, inline=True)


def _row_keys(approx16, approx32, bf16, b, keys):
    """Row ``b`` of the screen as :func:`_key` keys, into ``keys``."""
    if bf16:  # bfloat16 is the upper half of a float32
        for j in range(keys.shape[0]):
            keys[j] = _key(np.uint32(approx16[b, j]) << np.uint32(16))
    else:
        bits = approx32[b].view(np.uint32)
        for j in range(keys.shape[0]):
            keys[j] = _key(bits[j])


_row_keys = jit(_row_keys, inline=True)


def _group_floor(keys, groups, k, maxima, margin, cell):
    """A first floor for a row of keys: ``k`` groups of :data:`GROUP` reach the ``k``-th largest
    of their maxima, so the row's ``k``-th largest value does too; nothing below it less
    ``margin`` (twice the bound) can be in the top ``k``. 0 (no floor) with fewer than ``k`` groups."""
    if groups < k:
        return np.uint32(0)
    for g in range(groups):
        m = keys[g * GROUP]
        for t in range(1, GROUP):
            m = max(m, keys[g * GROUP + t])
        maxima[g] = m
    top = np.partition(maxima[:groups], groups - k)[groups - k]
    return _floor_key(_value(top, cell) - margin, cell)


_group_floor = jit(_group_floor, inline=True)


def _exact_best(ids, keys, count, k, margin, table, q, b, exact, cell, out_scores, out_ids):
    """The exact top ``k`` of query ``b``'s ``count`` candidates (``ids`` in id order, their
    screened ``keys``): the rows within ``margin`` (twice the bound) of the ``k``-th largest
    screened value, re-scored in float64, best first, ties to the smaller id. ``ids`` is
    compacted in place; ``exact``: scratch of at least ``count``."""
    top = np.partition(keys[:count], count - k)[count - k]
    floor = _floor_key(_value(top, cell) - margin, cell)
    last = 0
    for i in range(count):  # in id order, as found
        if keys[i] >= floor:
            ids[last] = ids[i]
            exact[last] = _dot64(table, ids[i], q, b)
            last += 1
    order = np.argsort(-exact[:last], kind="mergesort")  # stable: ties keep the smaller id first
    for i in range(k):
        out_scores[i] = exact[order[i]]
        out_ids[i] = ids[order[i]]


_exact_best = jit(_exact_best, inline=True)


def _screen_rows(lo, hi, approx16, approx32, bf16, margin, table, q, k, out_scores, out_ids):
    n = table.shape[0]
    keys = np.empty(n, np.uint32)
    groups = n // GROUP
    maxima = np.empty(max(groups, 1), np.uint32)
    kept = np.empty(n, np.int64)
    kept_keys = np.empty(n, np.uint32)
    exact = np.empty(n, np.float64)
    cell = np.empty(1, np.uint32)
    for b in range(lo, hi):
        _row_keys(approx16, approx32, bf16, b, keys)
        floor = _group_floor(keys, groups, k, maxima, margin[b], cell)
        count = 0
        for j in range(n):  # branchless: written always, kept (the count moves on) at or above the floor
            kept[count] = j
            kept_keys[count] = keys[j]
            count += keys[j] >= floor
        _exact_best(kept, kept_keys, count, k, margin[b], table, q, b, exact, cell, out_scores[b], out_ids[b])


_screen_rows = jit(_screen_rows)


def _block_rows(lo, hi, approx16, approx32, bf16, start, margin, k, floor, cand_ids, cand_keys, count, overflow):
    """One block of table rows (``start`` onwards) for queries ``lo..hi``: the floor rises to
    the block's group-maxima floor, and the block's values at or above it join the query's
    candidates (compacted first when they would not fit; a query whose candidates still do not
    fit is marked ``overflow``)."""
    width = approx16.shape[1] if bf16 else approx32.shape[1]
    cap = cand_ids.shape[1]
    groups = width // GROUP
    maxima = np.empty(max(groups, 1), np.uint32)
    keys = np.empty(width, np.uint32)
    cell = np.empty(1, np.uint32)
    for b in range(lo, hi):
        if overflow[b]:
            continue
        _row_keys(approx16, approx32, bf16, b, keys)
        floor[b] = max(floor[b], _group_floor(keys, groups, k, maxima, margin[b], cell))
        c = count[b]
        if c + width > cap:  # the k-th largest candidate so far raises the floor; drop what falls below
            if c >= k:
                top = np.partition(cand_keys[b, :c], c - k)[c - k]
                floor[b] = max(floor[b], _floor_key(_value(top, cell) - margin[b], cell))
            kept = 0
            for i in range(c):
                if cand_keys[b, i] >= floor[b]:
                    cand_keys[b, kept] = cand_keys[b, i]
                    cand_ids[b, kept] = cand_ids[b, i]
                    kept += 1
            c = kept
            if c + width > cap:
                overflow[b] = True
                continue
        fl = floor[b]
        for j in range(width):  # branchless, as in _screen_rows
            cand_ids[b, c] = start + j
            cand_keys[b, c] = keys[j]
            c += keys[j] >= fl
        count[b] = c


def _finish_rows(lo, hi, cand_ids, cand_keys, count, overflow, margin, table, q, k, out_scores, out_ids):
    """The exact top ``k`` of each query's candidates (in id order) within twice the bound of
    their ``k``-th largest screened value."""
    cell = np.empty(1, np.uint32)
    exact = np.empty(cand_ids.shape[1], np.float64)
    for b in range(lo, hi):
        if not overflow[b]:
            _exact_best(cand_ids[b], cand_keys[b], count[b], k, margin[b], table, q, b, exact, cell, out_scores[b],
                        out_ids[b])


_block_rows = jit(_block_rows)
_finish_rows = jit(_finish_rows)


class BlockedScreen:
    """:func:`screened_topk` fed one block of table rows at a time (``add``, in row order), for
    tables too large for one ``[B, n]`` screen: each query keeps the rows that may still reach
    its top ``k`` (at most ``cap``; beyond, the query is marked and :meth:`finish` leaves it to
    the caller). Shapes: ``q [B, d]``, ``bound [B]``; ``add(approx [B, w])``."""

    def __init__(self, table: np.ndarray, q: np.ndarray, bound: np.ndarray, k: int, cap: int, *,
                 threads: int | None = None) -> None:
        self.table, self.q, self.threads = table, np.ascontiguousarray(q, np.float32), threads
        self.k = min(k, table.shape[0])
        if self.k < 1:
            raise ValueError(f"BlockedScreen needs k >= 1 and a table with rows, got k = {k}, {table.shape[0]} rows")
        batch = q.shape[0]
        self.margin = 2.0 * np.ascontiguousarray(bound, np.float64)
        self.floor = np.zeros(batch, np.uint32)
        self.ids, self.keys = np.empty((batch, cap), np.int64), np.empty((batch, cap), np.uint32)
        self.count, self.overflow = np.zeros(batch, np.int64), np.zeros(batch, np.bool_)
        self.start = 0

    def add(self, approx: np.ndarray) -> None:
        bf16 = approx.dtype == np.uint16
        none16, none32 = np.zeros((1, 1), np.uint16), np.zeros((1, 1), np.float32)
        parallel_rows(_block_rows, self.q.shape[0], approx if bf16 else none16,
                      none32 if bf16 else np.ascontiguousarray(approx, np.float32), bf16, self.start, self.margin,
                      self.k, self.floor, self.ids, self.keys, self.count, self.overflow, threads=self.threads)
        self.start += approx.shape[1]

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> float64 scores, int64 ids ``[B, k]`` and the queries marked overflow (their rows unset)."""
        if self.start != self.table.shape[0]:
            raise ValueError(f"the blocks covered {self.start} of {self.table.shape[0]} rows")
        batch = self.q.shape[0]
        scores, ids = np.empty((batch, self.k), np.float64), np.empty((batch, self.k), np.int64)
        if self.k and batch:
            parallel_rows(_finish_rows, batch, self.ids, self.keys, self.count, self.overflow, self.margin, self.table,
                          self.q, self.k, scores, ids, threads=self.threads)
        return scores, ids, self.overflow.copy()


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
