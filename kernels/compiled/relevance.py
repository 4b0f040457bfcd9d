"""Calibrated relevance (:func:`spectrag.rescore.relevance.calibrated_relevance`, its reference
and device path) compiled, one query at a time: the z-scores and their combination in one pass
over the pool instead of a dozen ``[B, P]`` float64 tensor operations. The pool's moments are
the caller's (the torch path's own float64 sums), and every value is formed by the same float64
operations in the same order, so both paths give the same bits."""

from __future__ import annotations

import numpy as np

from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _calibrated_rows(lo, hi, dense, lexical, mask, mu_d, sd_d, mu_b, sd_b, weight, eps, out):
    for b in range(lo, hi):
        spread_d = sd_d[b] > eps
        varies = sd_b[b] > eps
        w = weight if varies else 0.0
        for i in range(dense.shape[1]):
            if mask[b, i]:
                z_d = (np.float64(dense[b, i]) - mu_d[b]) / max(sd_d[b], eps) if spread_d else 0.0
                z_b = (lexical[b, i] - mu_b[b]) / max(sd_b[b], eps) if varies else 0.0
                out[b, i] = mu_d[b] + sd_d[b] * (z_d + w * z_b) / (1.0 + w)
            else:
                out[b, i] = 0.0


_calibrated_rows = jit(_calibrated_rows)


def calibrated_compiled(dense: np.ndarray, lexical: np.ndarray, mask: np.ndarray, mu_d: np.ndarray, sd_d: np.ndarray,
                        mu_b: np.ndarray, sd_b: np.ndarray, weight: float, eps: float, *,
                        threads: int | None = None) -> np.ndarray:
    """Shapes: ``dense`` (float32 or float64), ``lexical`` (float64), ``mask`` (bool), all ``[B, P]``;
    the moments float64 ``[B]`` -> ``[B, P]`` in ``dense``'s dtype (each value rounded once), 0 on padding."""
    out = np.empty(dense.shape, dense.dtype)
    moments = (np.ascontiguousarray(x, np.float64) for x in (mu_d, sd_d, mu_b, sd_b))
    parallel_rows(_calibrated_rows, dense.shape[0], np.ascontiguousarray(dense), np.ascontiguousarray(lexical, np.float64),
                  np.ascontiguousarray(mask, np.bool_), *moments, float(weight), float(eps), out, threads=threads)
    return out
