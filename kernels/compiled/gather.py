"""Inner products of each query with rows of a table, compiled: ``<q_b, X[ids[b, i]]>`` summed
in float64 and rounded to float32 (:func:`spectrag.kernels.gather.gathered_dot`), and the exact
re-scoring of a search's hits (:func:`spectrag.index.dense.rescore`): float64 scores sorted by
score, then smaller id. A float64 sum of float32 products is the same in any order to ~1e-16,
so the rounded or compared results do not depend on how the work is split.

Where a batch's pairs are many for the table (at least ``BY_ROW_SHARE n``: pools of 200 on dev
corpora), the pairs are visited grouped by row: each table row is read from memory once for
every query that holds it, instead of once per pair (MuSiQue / 2wiki-dev pools of 256 x 200:
4.7 -> 3.7 and 4.6 -> 3.1 ms); each pair's product is the same ``_dot64`` call, so the same bits."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _dot64(table, row, q, b):
    """``<table[row], q[b]>`` in float64 (the compiler may order the sum: see ``jit``)."""
    acc = 0.0
    for t in range(table.shape[1]):
        acc += np.float64(table[row, t]) * np.float64(q[b, t])
    return acc


# pairs per table row from which they are visited grouped by row: below, grouping them (a pass
# over every row of the table) costs more than the reads it saves
BY_ROW_SHARE = 0.125


def _pair_dots(lo, hi, table, ids, q, out, by_row):
    """``out[b, i] = <table[ids[b, i]], q[b]>`` in float64 for rows ``lo..hi`` of ``ids`` (-inf
    where the id is -1), visited grouped by table row when ``by_row``."""
    width = ids.shape[1]
    n = table.shape[0]
    if not by_row:
        for b in range(lo, hi):
            for i in range(width):
                c = ids[b, i]
                out[b, i] = _dot64(table, c, q, b) if c >= 0 else -np.inf
        return
    start = np.zeros(n + 1, np.int64)  # a counting sort of the pairs by table row
    for b in range(lo, hi):
        for i in range(width):
            c = ids[b, i]
            if c >= 0:
                start[c + 1] += 1
            else:
                out[b, i] = -np.inf
    for c in range(n):
        start[c + 1] += start[c]
    fill = start[:n].copy()
    pair = np.empty(start[n], np.int64)
    for b in range(lo, hi):
        for i in range(width):
            c = ids[b, i]
            if c >= 0:
                pair[fill[c]] = b * width + i
                fill[c] += 1
    for c in range(n):
        for j in range(start[c], start[c + 1]):
            b = pair[j] // width
            out[b, pair[j] - b * width] = _dot64(table, c, q, b)


def _gather_rows(lo, hi, table, ids, q, by_row, exact, out):
    _pair_dots(lo, hi, table, ids, q, exact, by_row)
    for b in range(lo, hi):
        for i in range(ids.shape[1]):
            out[b, i] = np.float32(exact[b, i]) if ids[b, i] >= 0 else np.float32(0.0)


def _rescore_rows(lo, hi, table, q, ids, k, by_row, scores, out_scores, out_ids):
    _pair_dots(lo, hi, table, ids, q, scores, by_row)
    for b in range(lo, hi):
        by_id = np.argsort(ids[b], kind="mergesort")  # ascending ids: the stable sort below keeps them among ties
        cand = ids[b][by_id]
        exact = scores[b][by_id]
        order = np.argsort(-exact, kind="mergesort")
        for j in range(k):
            out_scores[b, j] = exact[order[j]]
            out_ids[b, j] = cand[order[j]]


_dot64 = jit(_dot64, reassociate=True)
_pair_dots = jit(_pair_dots)
_gather_rows = jit(_gather_rows)
_rescore_rows = jit(_rescore_rows)


def by_table_row(pairs: int, rows: int) -> bool:
    """Whether ``pairs`` products with rows of a table of ``rows`` rows are visited grouped by row."""
    return pairs >= BY_ROW_SHARE * rows


def gathered_dot_compiled(table: np.ndarray, ids: np.ndarray, q: np.ndarray, *, threads: int | None = None,
                          by_row: bool | None = None) -> np.ndarray:
    """Shapes: ``table [n, d]``, ``ids [B, P]`` (-1 padded), ``q [B, d]`` -> float32 ``[B, P]``
    (0 on padding). ``by_row``: visit the pairs grouped by table row (default: :func:`by_table_row`;
    the same bits either way)."""
    ids = np.ascontiguousarray(ids, np.int64)
    by_row = by_table_row(ids.size, table.shape[0]) if by_row is None else by_row
    out = np.empty(ids.shape, np.float32)
    parallel_rows(_gather_rows, ids.shape[0], table, ids, np.ascontiguousarray(q, np.float32), by_row,
                  np.empty(ids.shape, np.float64), out, threads=threads)
    return out


def rescore_compiled(table: np.ndarray, q: np.ndarray, ids: np.ndarray, k: int, *,
                     threads: int | None = None, by_row: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact float64 scores of each query's hits ``ids [B, m]`` (-1: none, score -inf), sorted
    by score then smaller id, cut to ``k``. Shapes: -> float64 scores, int64 ids ``[B, min(k, m)]``.
    ``by_row``: as :func:`gathered_dot_compiled`'s."""
    ids = np.ascontiguousarray(ids, np.int64)
    by_row = by_table_row(ids.size, table.shape[0]) if by_row is None else by_row
    k = min(k, ids.shape[1])
    scores, top = np.empty((ids.shape[0], k), np.float64), np.empty((ids.shape[0], k), np.int64)
    parallel_rows(_rescore_rows, ids.shape[0], table, np.ascontiguousarray(q, np.float32), ids, k, by_row,
                  np.empty(ids.shape, np.float64), scores, top, threads=threads)
    return scores, top


def _max_cosine_rows(lo, hi, table, ids, seeds, out):
    m = table.shape[1]
    n_seeds = seeds.shape[1]
    zs = np.empty((n_seeds, m), np.float64)  # the query's seed rows, read as float64 once
    zc = np.empty(m, np.float64)
    for b in range(lo, hi):
        k = 0
        for j in range(n_seeds):
            s = seeds[b, j]
            if s >= 0:
                for t in range(m):
                    zs[k, t] = np.float64(table[s, t])
                k += 1
        for i in range(ids.shape[1]):
            c = ids[b, i]
            best = -np.inf
            if c >= 0:
                for t in range(m):
                    zc[t] = np.float64(table[c, t])
                for j in range(k):
                    v = np.float32(_dot64_rows(zc, zs, j))
                    if v > best:
                        best = v
            out[b, i] = np.float32(best) if best > 0 else np.float32(0.0)


def _dot64_rows(a, rows, j):
    """``<a, rows[j]>`` of float64 vectors (the compiler may order the sum: see ``jit``)."""
    acc = 0.0
    for t in range(a.shape[0]):
        acc += a[t] * rows[j, t]
    return acc


_dot64_rows = jit(_dot64_rows, reassociate=True)
_max_cosine_rows = jit(_max_cosine_rows)


def max_cosine_compiled(table: np.ndarray, ids: np.ndarray, seeds: np.ndarray, *, threads: int | None = None) -> np.ndarray:
    """The largest inner product of each candidate's row with any of its query's seeds' rows,
    in float64 rounded to float32, clamped at 0 (0 on padding and without seeds): spectral
    proximity (:func:`spectrag.propagate.proximity.spectral_proximity`). Shapes: ``table [n, m]``,
    ``ids [B, P]``, ``seeds [B, S]`` (-1 padded) -> float32 ``[B, P]``."""
    ids = np.ascontiguousarray(ids, np.int64)
    out = np.empty(ids.shape, np.float32)
    parallel_rows(_max_cosine_rows, ids.shape[0], table, ids, np.ascontiguousarray(seeds, np.int64), out,
                  threads=threads)
    return out
