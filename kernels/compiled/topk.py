"""The top-``k`` of each row of a sparse product ``Q M`` (BM25: query term counts times the
term x chunk score matrix), compiled, one query at a time: the row's scores accumulated as
scipy's CSR product does (float32, the query's terms in stored order, each term's postings in
order; so the same bits), then the ``k`` largest positive ones, ties to the smaller column
(:func:`product_topk`: seeding), or the row's entries at given columns (:func:`product_at`: BM25 at
each query's candidates)."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.order import U32, top_by_value_then_id
from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _accumulate_row(b, q_indptr, q_indices, q_data, m_indptr, m_indices, m_data, acc, seen, touched):
    """Row ``b`` of ``Q M`` into ``acc`` as scipy sums it (float32, terms in stored order, postings
    in order); the columns it touched in ``touched[:count]``; returns ``count``."""
    count = 0
    for t in range(q_indptr[b], q_indptr[b + 1]):
        term = q_indices[t]
        weight = np.float32(q_data[t])
        for e in range(m_indptr[term], m_indptr[term + 1]):
            c = m_indices[e]
            # written whatever seen[c] is, kept (the count moves on) only at c's first visit: a
            # branch on it would be mispredicted often (17% faster on 2wiki-dev's queries)
            touched[count] = c
            count += 1 - np.int64(seen[c])
            seen[c] = True
            acc[c] += weight * np.float32(m_data[e])
    return count


def _emit_top(order, row, empty, out_scores, out_ids):
    """One row's top-k keys (:func:`top_by_value_then_id`) as ids and their ``row`` values,
    ``-1`` and ``empty`` past the last."""
    for j in range(out_ids.shape[0]):
        if j < order.shape[0]:
            c = np.int64(order[j] & U32)
            out_ids[j] = c
            out_scores[j] = row[c]
        else:
            out_ids[j] = -1
            out_scores[j] = empty


def _clear_row(acc, seen, touched, count):
    for i in range(count):
        acc[touched[i]] = 0.0
        seen[touched[i]] = False


_accumulate_row = jit(_accumulate_row)
_emit_top = jit(_emit_top, inline=True)
_clear_row = jit(_clear_row)


def _product_topk_rows(lo, hi, q_indptr, q_indices, q_data, m_indptr, m_indices, m_data, n, allowed, masked,
                       out_scores, out_ids):
    k = out_ids.shape[1]
    acc = np.zeros(n, np.float32)
    seen = np.zeros(n, np.bool_)
    touched = np.empty(n + 1, np.int64)  # + 1: the write past the last first visit
    values = np.empty(n, np.float32)
    ids = np.empty(n, np.int64)
    keys = np.empty(n, np.uint64)
    for b in range(lo, hi):
        count = _accumulate_row(b, q_indptr, q_indices, q_data, m_indptr, m_indices, m_data, acc, seen, touched)
        kept = 0
        for i in range(count):
            c = touched[i]
            if acc[c] > 0 and (not masked or allowed[b, c]):  # a zero is no match
                values[kept] = acc[c]
                ids[kept] = c
                kept += 1
        _emit_top(top_by_value_then_id(values, ids, kept, k, keys), acc, np.float32(0.0), out_scores[b], out_ids[b])
        _clear_row(acc, seen, touched, count)


_product_topk_rows = jit(_product_topk_rows)


def product_topk(q_indptr: np.ndarray, q_indices: np.ndarray, q_data: np.ndarray, m_indptr: np.ndarray,
                 m_indices: np.ndarray, m_data: np.ndarray, n: int, k: int, *, allowed: np.ndarray | None = None,
                 threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` positive entries of each row of ``Q M`` (``allowed [B, n]`` bool: among the
    row's allowed columns only). Shapes: CSR ``Q [B, V]``, ``M [V, n]`` -> float32 scores
    ``[B, k]`` (0 where empty) and int64 ids ``[B, k]`` (-1 where empty)."""
    batch = len(q_indptr) - 1
    scores, ids = np.empty((batch, k), np.float32), np.empty((batch, k), np.int64)
    masked = allowed is not None
    if masked and allowed.shape != (batch, n):
        raise ValueError(f"allowed must be [B, n] = {(batch, n)}, got {allowed.shape}")
    allowed = np.ascontiguousarray(allowed, np.bool_) if masked else np.ones((1, 1), np.bool_)
    parallel_rows(_product_topk_rows, batch, q_indptr, q_indices, q_data, m_indptr, m_indices, m_data, int(n),
                  allowed, masked, scores, ids, threads=threads)
    return scores, ids


def _product_at_rows(lo, hi, q_indptr, q_indices, q_data, m_indptr, m_indices, m_data, n, candidates, out, peak):
    acc = np.zeros(n, np.float32)
    seen = np.zeros(n, np.bool_)
    touched = np.empty(n + 1, np.int64)  # + 1: the write past the last first visit
    for b in range(lo, hi):
        count = _accumulate_row(b, q_indptr, q_indices, q_data, m_indptr, m_indices, m_data, acc, seen, touched)
        best = np.float32(-np.inf) if count == n and n > 0 else np.float32(0.0)  # an unstored entry is a 0
        for i in range(count):
            if acc[touched[i]] > best:
                best = acc[touched[i]]
        peak[b] = best
        for j in range(candidates.shape[1]):
            c = candidates[b, j]
            out[b, j] = acc[c] if c >= 0 else 0.0
        _clear_row(acc, seen, touched, count)


_product_at_rows = jit(_product_at_rows)


def product_at(q_indptr: np.ndarray, q_indices: np.ndarray, q_data: np.ndarray, m_indptr: np.ndarray,
               m_indices: np.ndarray, m_data: np.ndarray, n: int, candidates: np.ndarray, *,
               threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Entries of ``Q M`` at each row's candidates and each row's maximum (over all ``n``
    columns, unstored ones being 0), summed as scipy's product does. Shapes: CSR ``Q [B, V]``,
    ``M [V, n]``, ``candidates [B, P]`` (-1 padded) -> float32 ``[B, P]`` (0 on padding), ``[B]``."""
    candidates = np.ascontiguousarray(candidates, np.int64)
    batch = len(q_indptr) - 1
    out, peak = np.empty(candidates.shape, np.float32), np.empty(batch, np.float32)
    parallel_rows(_product_at_rows, batch, q_indptr, q_indices, q_data, m_indptr, m_indices, m_data, int(n),
                  candidates, out, peak, threads=threads)
    return out, peak


def _allowed_top_rows(lo, hi, scores, allowed, m, out_scores, out_ids):
    n = scores.shape[1]
    values = np.empty(n, np.float32)
    ids = np.empty(n, np.int64)
    keys = np.empty(n, np.uint64)
    for b in range(lo, hi):
        count = 0
        for j in range(n):
            if allowed[b, j]:
                values[count] = scores[b, j]
                ids[count] = j
                count += 1
        _emit_top(top_by_value_then_id(values, ids, count, m, keys), scores[b], np.float32(-np.inf), out_scores[b],
                  out_ids[b])


_allowed_top_rows = jit(_allowed_top_rows)


def allowed_topk(scores: np.ndarray, allowed: np.ndarray, m: int, *, threads: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The ``m`` best allowed entries of each row, by score then smaller column, -1 / -inf past
    the last allowed one: a filtered scan's hits without a selection over the filtered-out
    entries (numpy's introselect over a row of mostly -inf was 40x slower). Shapes: ``scores
    [B, n]`` float32, ``allowed [B, n]`` bool -> float32 scores, int64 ids ``[B, m]``."""
    out_scores, out_ids = np.empty((scores.shape[0], m), np.float32), np.empty((scores.shape[0], m), np.int64)
    parallel_rows(_allowed_top_rows, scores.shape[0], np.ascontiguousarray(scores, np.float32),
                  np.ascontiguousarray(allowed, np.bool_), int(m), out_scores, out_ids, threads=threads)
    return out_scores, out_ids
