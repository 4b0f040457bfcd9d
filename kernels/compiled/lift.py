"""Lifting chosen candidates above every other one (:func:`spectrag.rescore.bridge.lift_above`
and :func:`spectrag.rescore.bridge.protect_named`, their references and device path), compiled,
one query at a time: a maximum over the others and one pass, instead of half a dozen ``[B, P]``
tensor operations. The arithmetic is torch's: in the scores' own dtype, the Python constants
rounded to it, the same operations in the same order, so both paths give the same bits."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _lift_rows(lo, hi, scores, keep, candidates, one, eps, out):
    for b in range(lo, hi):
        others = -np.inf  # float64 here; max(s, others) + ... is exact in float64 and rounds once to the dtype
        for i in range(scores.shape[1]):
            if candidates[b, i] >= 0 and not keep[b, i] and scores[b, i] > others:
                others = scores[b, i]
        for i in range(scores.shape[1]):
            s = scores[b, i]
            out[b, i] = max(s, others) + eps * (one + s) if keep[b, i] else s


_lift_rows = jit(_lift_rows)


def _protected_rows(lo, hi, relevance, named, candidates, floor, lowest, keep):
    for b in range(lo, hi):
        top = lowest  # -inf in the relevance's dtype: floor * top is then that dtype's product, as torch's
        for i in range(relevance.shape[1]):
            if candidates[b, i] >= 0 and relevance[b, i] > top:
                top = relevance[b, i]
        bar = floor * top
        for i in range(relevance.shape[1]):
            keep[b, i] = named[b, i] and candidates[b, i] >= 0 and relevance[b, i] >= bar


_protected_rows = jit(_protected_rows)


def lift_above_compiled(scores: np.ndarray, keep: np.ndarray, candidates: np.ndarray, eps: float, *,
                        threads: int | None = None) -> np.ndarray:
    """``max(s, o) + eps (1 + s)`` where ``keep``, ``o`` the best score of the other real
    candidates, ``s`` elsewhere. Shapes: ``scores`` (float32 or float64), ``keep`` (bool),
    ``candidates`` (int64, -1 padded), all ``[B, P]`` -> ``[B, P]`` in ``scores``' dtype."""
    out = np.empty(scores.shape, scores.dtype)
    kind = scores.dtype.type
    parallel_rows(_lift_rows, scores.shape[0], np.ascontiguousarray(scores), np.ascontiguousarray(keep, np.bool_),
                  np.ascontiguousarray(candidates, np.int64), kind(1.0), kind(eps), out, threads=threads)
    return out


def protected_compiled(relevance: np.ndarray, named: np.ndarray, candidates: np.ndarray, floor: float, *,
                       threads: int | None = None) -> np.ndarray:
    """The named real candidates whose relevance is at least ``floor`` times their query's best
    (``floor`` rounded to the relevance's dtype, as torch does). Shapes: ``[B, P]`` -> bool ``[B, P]``."""
    keep = np.empty(relevance.shape, np.bool_)
    parallel_rows(_protected_rows, relevance.shape[0], np.ascontiguousarray(relevance), np.ascontiguousarray(named, np.bool_),
                  np.ascontiguousarray(candidates, np.int64), relevance.dtype.type(floor), relevance.dtype.type(-np.inf),
                  keep, threads=threads)
    return keep
