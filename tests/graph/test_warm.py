"""The warm-started spectrum of an edited graph (spectrag.graph.warm) against scipy's eigsh on
the edited graph's Laplacian: every eigen-residual within WARM_TOL (checked here, not read from
the report), the eigenvalues within WARM_TOL of eigsh's smallest non-trivial ones, the
coordinates' subspace close to eigsh's where the spectrum has a gap; warm k-means gives the
build's cluster count; a start too far away returns None (the caller then solves cold)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from spectrag.config import GraphConfig
from spectrag.graph.spectrum import laplacian_csr, spectral_coordinates
from spectrag.graph.warm import WARM_TOL, cluster_count, extend_rows, warm_kmeans, warm_spectrum

M = 9  # the 10 communities' non-trivial modes: a gap to the rest follows


def block_graph(n: int, blocks: int, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """A weighted stochastic block graph (``blocks`` communities): weights ``[n, n]``, labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, blocks, n)
    p = np.where(labels[:, None] == labels[None, :], 0.12, 0.003)
    upper = np.triu((rng.random((n, n)) < p) * rng.uniform(0.2, 1.0, (n, n)), 1)
    return sp.csr_matrix(upper + upper.T), labels


def reference(weights: sp.csr_matrix, m: int) -> tuple[np.ndarray, np.ndarray, float]:
    """eigsh's ``m`` smallest non-trivial eigenpairs of L_sym (the graphs here are connected)
    and the next eigenvalue."""
    values, vectors = sla.eigsh(laplacian_csr(weights), k=m + 2, which="SA", tol=1e-12)
    order = np.argsort(values)
    return values[order[1:-1]], vectors[:, order[1:-1]], float(values[order[-1]])


def edited(seed: int, remove: float, add: int):
    """A graph, its exact spectrum, and an edit: ``remove`` of the nodes gone, ``add`` new nodes
    joined to one community each. Returns the new weights and the kept rows' old spectrum."""
    w, labels = block_graph(500, 10, seed)
    config = GraphConfig(spectral_dim=M, seed=seed)
    old = spectral_coordinates(w, M, tol=1e-10, clusters=cluster_count(500, config), seed=seed)
    rng = np.random.default_rng(seed + 1)
    keep = rng.random(500) > remove
    w_keep = w[keep][:, keep]
    n_keep = int(keep.sum())
    new_labels = rng.integers(0, 10, add)
    links = (rng.random((add, n_keep)) < 0.12 * (labels[keep][None, :] == new_labels[:, None])) * 0.5
    grown = sp.bmat([[w_keep, sp.csr_matrix(links.T)], [sp.csr_matrix(links), None]]).tocsr()
    return grown, np.asarray(old.coordinates, np.float64)[keep], old.clusters[keep], config


@pytest.mark.parametrize(("remove", "add"), [(0.02, 0), (0.0, 10), (0.02, 10)])
def test_warm_pairs_are_within_the_stated_tolerance_of_eigsh(remove, add):
    weights, previous, labels, config = edited(0, remove, add)
    spectrum = warm_spectrum(weights, previous, labels, config)
    assert spectrum is not None and spectrum.report["method"] == "warm block Rayleigh-Ritz"
    x = spectrum.coordinates.astype(np.float64)
    theta = spectrum.eigenvalues
    residuals = np.linalg.norm(laplacian_csr(weights) @ x - x * theta, axis=0)
    assert residuals.max() <= WARM_TOL + 1e-5  # + float32 rounding of the stored coordinates
    assert spectrum.report["max_residual"] <= WARM_TOL
    values, vectors, next_value = reference(weights, M)
    np.testing.assert_allclose(theta, values, atol=WARM_TOL)
    # Davis-Kahan: the subspaces differ by at most ||R||_F / gap
    q = np.linalg.qr(x)[0]
    gap = next_value - theta.max()
    assert gap > 0.1
    assert np.linalg.norm(q @ q.T - vectors @ vectors.T, 2) <= np.linalg.norm(residuals) / gap + 1e-4
    assert abs(len(np.unique(spectrum.clusters)) - cluster_count(weights.shape[0], config)) <= 1
    assert spectrum.clusters.shape == (weights.shape[0],)


def test_a_start_that_spans_nothing_gives_none():
    weights, previous, labels, config = edited(2, 0.02, 0)
    rng = np.random.default_rng(3)
    assert warm_spectrum(weights, rng.standard_normal(previous.shape), labels, config) is None


def test_extend_rows_by_neighbour_means():
    w = sp.csr_matrix(np.array([[0, 1, 0, 1], [1, 0, 0, 3], [0, 0, 0, 0], [1, 3, 0, 0]], dtype=np.float32))
    prev = np.array([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    np.testing.assert_allclose(extend_rows(w, prev), [[1, 0], [0, 1], [5, 5], [0.25, 0.75]])


def test_warm_kmeans_keeps_the_clusters_it_is_given():
    rng = np.random.default_rng(4)
    centres = rng.standard_normal((4, 3)) * 5
    labels = np.repeat(np.arange(4), 50)
    points = centres[labels] + 0.1 * rng.standard_normal((200, 3))
    got, k = warm_kmeans(points, labels[:190], GraphConfig(clusters=4))
    assert k == 4
    # the same partition, up to renaming: four labels, each given to exactly one cluster
    pairs = set(zip(got.tolist(), labels.tolist()))
    assert len(pairs) == 4 and len(set(got.tolist())) == 4


def test_warm_kmeans_on_few_points_prints_no_faiss_warning(capfd):
    """120 points to 8 centroids: FAISS warns (from C++, on stderr) below 39 points per centroid
    unless told otherwise; an index update must print nothing of the kind."""
    rng = np.random.default_rng(5)
    points = rng.standard_normal((120, 3))
    labels = np.zeros(100, dtype=np.int64)  # 1 previous cluster, 8 wanted: Lloyd iterations run
    got, k = warm_kmeans(points, labels, GraphConfig(clusters=8))
    assert k == 8 and len(set(got.tolist())) > 1
    captured = capfd.readouterr()
    assert "WARNING clustering" not in captured.err + captured.out
