"""Edge signals on hand-made inputs with known edges, fusion invariants, and the spectrum
against dense references (including several components and permutation equivariance)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import laplacian

from spectrag.graph.fuse import fuse_signals
from spectrag.graph.signals import adjacency_edges, coo, entity_edges, section_edges, semantic_edges, top_k_per_row, utility_edges
from spectrag.graph.spectrum import spectral_coordinates


def _edges(m: sp.spmatrix) -> dict[tuple[int, int], float]:
    c = m.tocoo()
    return {(int(i), int(j)): round(float(w), 6) for i, j, w in zip(c.row, c.col, c.data)}


def test_semantic_knn_equals_brute_force():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((120, 12)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    got = semantic_edges(x, 4, tile=17)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    for i in range(120):
        expected = {int(j) for j in np.argsort(-sims[i])[:4] if sims[i, j] > 0}
        row = got.getrow(i)
        assert set(row.indices.tolist()) == expected
        np.testing.assert_allclose(row.data, sims[i, row.indices], atol=1e-5)


def test_semantic_min_cos_and_clip():
    x = np.array([[1, 0], [1, 0], [0.6, 0.8], [-1, 0]], dtype=np.float32)
    assert _edges(semantic_edges(x, 3, min_cos=0.7)) == {(0, 1): 1.0, (1, 0): 1.0}


def test_adjacency_links_consecutive_chunks_of_one_document():
    assert _edges(adjacency_edges(np.array([0, 0, 0, 1, 2, 2]))) == {(0, 1): 1.0, (1, 2): 1.0, (4, 5): 1.0}


def test_section_edges_weight_by_shared_depth_and_band():
    docs = ["a", "a", "a", "a", "b"]
    secs = [("T",), ("T", "S1"), ("T", "S1"), ("T", "S2"), ("T", "S1")]
    got = _edges(section_edges(docs, secs, band=8))
    assert got == {
        (0, 1): 0.5, (0, 2): 0.5, (0, 3): 0.5,  # share only the title: depth 1 of max 2
        (1, 2): 1.0,  # same full path
        (1, 3): 0.5, (2, 3): 0.5,
    }
    # band 1: each chunk links only to the next member of each group
    banded = _edges(section_edges(["a"] * 6, [("T",)] * 6, band=1))
    assert banded == {(i, i + 1): 1.0 for i in range(5)}


def test_entity_edges_are_idf_weighted_cosines():
    # chunks x entities: e0 rare, e1 common
    inc = sp.csr_matrix(np.array([[1, 1], [1, 1], [0, 1], [0, 0]], dtype=np.float32))
    idf = np.array([2.0, 0.5])
    got = _edges(entity_edges(inc, idf, top_k=5))
    c = 0.5 / np.sqrt(2.0**2 + 0.5**2)
    assert got == {(0, 1): 1.0, (1, 0): 1.0, (0, 2): round(c, 6), (2, 0): round(c, 6), (1, 2): round(c, 6), (2, 1): round(c, 6)}


def test_utility_edges_only_between_chunks_with_questions():
    vecs = np.array([[1, 0], [0, 0], [1, 0.1], [0, 1]], dtype=np.float32)
    got = utility_edges(vecs, np.array([True, False, True, True]), k=1)
    assert set(_edges(got)) == {(0, 2), (2, 0), (3, 2)}


def test_top_k_per_row_and_coo_dedup():
    m = coo(np.array([0, 0, 0, 0, 1]), np.array([1, 2, 3, 1, 0]), np.array([0.1, 0.5, 0.5, 0.9, 0.3]), 4)
    assert _edges(m) == {(0, 1): 0.9, (0, 2): 0.5, (0, 3): 0.5, (1, 0): 0.3}
    assert _edges(top_k_per_row(m, 2)) == {(0, 1): 0.9, (0, 2): 0.5, (1, 0): 0.3}


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
    rng = np.random.default_rng(1)
    dense = sp.random(60, 60, density=0.5, random_state=2, format="csr")
    capped = fuse_signals({"semantic": dense}, {"semantic": 1.0}, tau=0.0, max_degree=3).weights
    assert abs(capped - capped.T).max() == 0
    assert capped.nnz <= 2 * 3 * 60
    with pytest.raises(ValueError, match="no fusion weight"):
        fuse_signals({"mystery": a}, {"semantic": 1.0}, tau=0.0, max_degree=3)


def _random_graph(n: int, seed: int, blocks: int = 3, isolated: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    size = (n - isolated) // blocks
    parts = []
    for b in range(blocks):
        m = sp.random(size, size, density=0.08, random_state=rng.integers(1 << 30), format="csr")
        parts.append(m.maximum(m.T))
    w = sp.block_diag(parts + [sp.csr_matrix((n - blocks * size, n - blocks * size))]).tocsr()
    w.setdiag(0)
    w.eliminate_zeros()
    return w


def _dense_reference(w: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    lap = laplacian(w.astype(np.float64), normed=True).toarray()
    deg = np.asarray(w.sum(axis=1)).ravel()
    lap[deg == 0, deg == 0] = 1.0  # isolated node: identity row
    return np.linalg.eigh(lap)


def test_spectrum_drops_every_trivial_vector_with_several_components():
    w = _random_graph(183, 0, blocks=3, isolated=3)  # 3 components of 60 + 3 isolated nodes
    spec = spectral_coordinates(w, 10, tol=1e-9)
    values, vectors = _dense_reference(w)
    assert spec.components == 3 and spec.isolated == 3
    assert np.sum(np.abs(values) < 1e-9) == 3
    expected = values[3:13]
    np.testing.assert_allclose(spec.eigenvalues, expected, rtol=1e-5)
    u = spec.coordinates.astype(np.float64)
    assert np.abs(u.T @ u - np.eye(10)).max() < 1e-4
    lap = vectors @ np.diag(values) @ vectors.T
    assert np.linalg.norm(lap @ u - u * spec.eigenvalues, axis=0).max() < 1e-4
    assert spec.report["converged"] and spec.clusters.shape == (183,)


def test_spectrum_is_permutation_equivariant():
    w = _random_graph(150, 3, blocks=2)
    perm = np.random.default_rng(4).permutation(150)
    a = spectral_coordinates(w, 6, tol=1e-10)
    b = spectral_coordinates(w[perm][:, perm].tocsr(), 6, tol=1e-10)
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, rtol=1e-7)
    # same subspace after undoing the permutation (robust to sign and rotation in eigenspaces)
    ua, ub = a.coordinates.astype(np.float64), b.coordinates.astype(np.float64)[np.argsort(perm)]
    assert np.linalg.norm(ua @ ua.T - ub @ ub.T) < 1e-4


def test_spectrum_is_deterministic_and_caps_dimension():
    w = _random_graph(40, 5, blocks=1)
    a, b = spectral_coordinates(w, 8, seed=0), spectral_coordinates(w, 8, seed=0)
    np.testing.assert_array_equal(a.coordinates, b.coordinates)
    np.testing.assert_array_equal(a.clusters, b.clusters)
    tiny = spectral_coordinates(_random_graph(6, 1, blocks=1), 32)
    assert tiny.coordinates.shape[1] <= 5
