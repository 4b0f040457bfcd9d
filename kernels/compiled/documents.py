"""Each document's best candidate in every query's pool
(:func:`spectrag.rescore.bridge.best_per_document`, its reference and device path), compiled,
one query at a time through a document -> slot table instead of a sort of every (query,
document) key: no arithmetic, so both paths give the same bits."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.runtime import jit, parallel_rows

NONE = np.iinfo(np.int64).max


def _best_rows(lo, hi, best, docs, candidates, n_docs, out):
    top = np.full(n_docs, -np.inf, np.float64)
    first = np.full(n_docs, NONE, np.int64)
    width = best.shape[1]
    for b in range(lo, hi):
        for i in range(width):
            v, c = best[b, i], candidates[b, i]
            if c >= 0 and np.isfinite(v):
                d = max(docs[b, i], 0)
                if v > top[d] or (v == top[d] and c < first[d]):
                    top[d] = v
                    first[d] = c
        for i in range(width):
            v, c = best[b, i], candidates[b, i]
            live = c >= 0 and np.isfinite(v)
            out[b, i] = v if live and c == first[max(docs[b, i], 0)] else -np.inf
        for i in range(width):  # the table is clean for the next query
            d = max(docs[b, i], 0)
            top[d] = -np.inf
            first[d] = NONE


_best_rows = jit(_best_rows)


def best_per_document_compiled(best: np.ndarray, docs: np.ndarray, candidates: np.ndarray, *,
                               threads: int | None = None) -> np.ndarray:
    """Shapes: ``best`` (float32 or float64; -inf where nothing), ``docs``, ``candidates`` (int64,
    -1 padded), all ``[B, P]`` -> ``[B, P]`` in ``best``'s dtype: each query's best entry per
    document (ties: the smaller chunk id) kept, -inf elsewhere."""
    out = np.empty(best.shape, best.dtype)
    n_docs = int(docs.max(initial=0)) + 1
    parallel_rows(_best_rows, best.shape[0], np.ascontiguousarray(best), np.ascontiguousarray(docs, np.int64),
                  np.ascontiguousarray(candidates, np.int64), n_docs, out, threads=threads)
    return out


def _named_rows(lo, hi, indptr, indices, candidates, n, out):
    mark = np.zeros(n, np.bool_)
    for b in range(lo, hi):
        for e in range(indptr[b], indptr[b + 1]):
            mark[indices[e]] = True
        for i in range(candidates.shape[1]):
            c = candidates[b, i]
            out[b, i] = c >= 0 and mark[c]
        for e in range(indptr[b], indptr[b + 1]):  # the table is clean for the next query
            mark[indices[e]] = False


_named_rows = jit(_named_rows)


def named_in_compiled(indptr: np.ndarray, indices: np.ndarray, n: int, candidates: np.ndarray, *,
                      threads: int | None = None) -> np.ndarray:
    """Which candidates are chunks their query names (:func:`spectrag.pipeline.named_in`, its
    reference): CSR ``named [B, n]`` (its stored entries), ``candidates [B, P]`` (int64, -1
    padded, ids < n) -> bool ``[B, P]``."""
    out = np.empty(candidates.shape, np.bool_)
    parallel_rows(_named_rows, candidates.shape[0], np.asarray(indptr, np.int64), np.asarray(indices, np.int64),
                  np.ascontiguousarray(candidates, np.int64), int(n), out, threads=threads)
    return out


def _bits_rows(lo, hi, named, docs, number, count):
    width = named.shape[1]
    codes = np.empty(width, np.int64)
    for b in range(lo, hi):
        k = 0
        for i in range(width):
            if named[b, i]:
                codes[k] = docs[b, i]
                k += 1
        distinct = np.unique(codes[:k])  # ascending document codes
        count[b] = distinct.shape[0]
        for i in range(width):
            number[b, i] = np.searchsorted(distinct, docs[b, i]) if named[b, i] else -1


_bits_rows = jit(_bits_rows)


def named_document_bits_compiled(named: np.ndarray, docs: np.ndarray, *,
                                 threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each named candidate's document numbered within its query in document-code order (-1
    elsewhere) and the number of named documents per query
    (:func:`spectrag.rescore.cover.named_document_bits`, its reference). Shapes: ``named [B, P]``
    bool, ``docs [B, P]`` int64 -> ``[B, P]`` int64, ``[B]`` int64."""
    number = np.empty(named.shape, np.int64)
    count = np.empty(named.shape[0], np.int64)
    parallel_rows(_bits_rows, named.shape[0], np.ascontiguousarray(named, np.bool_), np.ascontiguousarray(docs, np.int64),
                  number, count, threads=threads)
    return number, count
