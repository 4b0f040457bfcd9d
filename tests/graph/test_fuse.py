"""Signal fusion (spectrag.graph.fuse): a weighted sum, symmetric, thresholded and degree-capped."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spectrag.graph.fuse import fuse_signals
from spectrag.graph.signals import coo


def _edges(m: sp.spmatrix) -> dict[tuple[int, int], float]:
    c = m.tocoo()
    return {(int(i), int(j)): round(float(w), 6) for i, j, w in zip(c.row, c.col, c.data)}


def test_fusion_is_weighted_sum_symmetric_thresholded_and_degree_capped():
    n = 5
    a = coo(np.array([0, 1]), np.array([1, 2]), np.array([1.0, 1.0]), n)  # adjacency-like
    s = coo(np.array([0, 3]), np.array([1, 4]), np.array([0.5, 0.1]), n)  # directed, one weak
    fused = fuse_signals({"adjacency": a, "semantic": s}, {"adjacency": 0.1, "semantic": 0.3}, tau=0.05, max_degree=10)
    w = fused.weights
    assert abs(w - w.T).max() == 0 and w.diagonal().sum() == 0
    got = _edges(w)
    assert got[(0, 1)] == pytest.approx(0.1 + 0.15) and got[(1, 2)] == pytest.approx(0.1)
    assert (3, 4) not in got  # 0.3 * 0.1 = 0.03 < tau
    assert fused.signal_edges == {"adjacency": 2, "semantic": 2}
    dense = sp.random(60, 60, density=0.5, random_state=2, format="csr")
    capped = fuse_signals({"semantic": dense}, {"semantic": 1.0}, tau=0.0, max_degree=3).weights
    assert abs(capped - capped.T).max() == 0
    assert capped.nnz <= 2 * 3 * 60
    with pytest.raises(ValueError, match="no fusion weight"):
        fuse_signals({"mystery": a}, {"semantic": 1.0}, tau=0.0, max_degree=3)
