"""Spectral coordinates (spectrag.graph.spectrum) against dense references: several components
(every trivial vector dropped), permutation equivariance, determinism; and the large-corpus paths
held to the plain ones: the scipy Laplacian against the torch kernel (on the ``device`` fixture's
devices), the spectrum solved in RCM order or float32 against the plain float64 solve, and warm
starts given in the original node order."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import require_modules
from scipy.sparse.csgraph import laplacian

from spectrag.graph import spectrum as spec
from spectrag.graph.spectrum import spectral_coordinates
from spectrag.kernels.laplacian import normalized_laplacian

FAISS = {"faiss": "faiss-cpu"}  # spectral_coordinates clusters the coordinates by FAISS k-means


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
    require_modules(FAISS, "the spectrum's k-means")
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
    require_modules(FAISS, "the spectrum's k-means")
    w = _random_graph(150, 3, blocks=2)
    perm = np.random.default_rng(4).permutation(150)
    a = spectral_coordinates(w, 6, tol=1e-10)
    b = spectral_coordinates(w[perm][:, perm].tocsr(), 6, tol=1e-10)
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, rtol=1e-7)
    # same subspace after undoing the permutation (robust to sign and rotation in eigenspaces)
    ua, ub = a.coordinates.astype(np.float64), b.coordinates.astype(np.float64)[np.argsort(perm)]
    assert np.linalg.norm(ua @ ua.T - ub @ ub.T) < 1e-4


def test_spectrum_is_deterministic_and_caps_dimension():
    require_modules(FAISS, "the spectrum's k-means")
    w = _random_graph(40, 5, blocks=1)
    a, b = spectral_coordinates(w, 8, seed=0), spectral_coordinates(w, 8, seed=0)
    np.testing.assert_array_equal(a.coordinates, b.coordinates)
    np.testing.assert_array_equal(a.clusters, b.clusters)
    tiny = spectral_coordinates(_random_graph(6, 1, blocks=1), 32)
    assert tiny.coordinates.shape[1] <= 5


# --- large-corpus paths ----------------------------------------------------------------------------


def _graph(n: int, seed: int, blocks: int = 2) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    size = n // blocks
    parts = []
    for _ in range(blocks):
        m = sp.random(size, size, density=0.06, random_state=int(rng.integers(1 << 30)), format="csr")
        parts.append(m.maximum(m.T))
    w = sp.block_diag(parts).tocsr()
    w = w + sp.random(w.shape[0], w.shape[0], density=0.002, random_state=seed, format="csr")  # a few bridges
    w = w.maximum(w.T).tocsr()
    w.setdiag(0)
    w.eliminate_zeros()
    return w


def test_laplacian_csr_equals_the_torch_kernel(device):
    w = sp.random(60, 60, density=0.1, random_state=0, format="csr")
    w = (w + w.T).tolil()
    w[3, 3] = 0.7  # a self-loop
    w[10, :] = 0  # an isolated node
    w[:, 10] = 0
    w = w.tocsr()
    coo = w.tocoo()
    t = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, w.shape, check_invariants=True)
    kernel = normalized_laplacian(t.to(device)).to_dense().cpu().numpy()
    np.testing.assert_allclose(spec.laplacian_csr(w).toarray(), kernel, atol=1e-14)
    bad = w.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="finite and non-negative"):
        spec.laplacian_csr(bad)


def _same_subspace(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a @ a.T - b @ b.T))


def test_rcm_reordered_spectrum_equals_the_plain_one():
    require_modules(FAISS, "the spectrum's k-means")
    w = _graph(400, 0)
    plain = spec.spectral_coordinates(w, 8, tol=1e-9)
    rcm = spec.spectral_coordinates(w, 8, tol=1e-9, reorder=True)
    assert rcm.report["reordered"] and sorted(rcm.order.tolist()) == list(range(400))
    np.testing.assert_allclose(rcm.eigenvalues, plain.eigenvalues, rtol=1e-8)
    assert _same_subspace(rcm.coordinates, plain.coordinates) < 1e-4  # up to sign / rotation
    # each eigenvector up to sign where the eigenvalue is simple
    gaps = np.diff(plain.eigenvalues)
    for j in range(8):
        if (j == 0 or gaps[j - 1] > 1e-6) and (j == 7 or gaps[j] > 1e-6):
            np.testing.assert_allclose(rcm.coordinates[:, j], plain.coordinates[:, j], atol=1e-5)


def test_float32_spectrum_matches_float64_and_reports_float64_residuals(monkeypatch):
    require_modules(FAISS, "the spectrum's k-means")
    w = _graph(400, 1)
    ref = spec.spectral_coordinates(w, 6, tol=1e-9)
    monkeypatch.setattr(spec, "FLOAT32_MIN_N", 300)  # "auto" -> float32 from 300 nodes on
    f32 = spec.spectral_coordinates(w, 6, tol=1e-6, dtype="auto", reorder=True)
    r = f32.report
    assert r["dtype"] == "float32" and r["tol"] == spec.FLOAT32_MIN_TOL and r["converged"]
    assert r["max_residual_float64"] < 1e-4
    np.testing.assert_allclose(f32.eigenvalues, ref.eigenvalues, atol=1e-5)
    assert _same_subspace(f32.coordinates, ref.coordinates) < 1e-3
    with pytest.raises(ValueError, match="dtype must be one of"):
        spec.spectral_coordinates(w, 6, dtype="half")


def test_warm_start_is_given_in_the_original_node_order():
    require_modules(FAISS, "the spectrum's k-means")
    w = _graph(400, 2)
    cold = spec.spectral_coordinates(w, 6, tol=1e-8, reorder=True)
    warm = spec.spectral_coordinates(w, 6, tol=1e-8, reorder=True, v0=cold.coordinates)
    np.testing.assert_allclose(warm.eigenvalues, cold.eigenvalues, rtol=1e-8)
    assert warm.report["n_matvec"] < cold.report["n_matvec"]


def _principal_angles(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The principal angles (radians) between the column spaces of ``a`` and ``b``."""
    qa, _ = np.linalg.qr(a.astype(np.float64))
    qb, _ = np.linalg.qr(b.astype(np.float64))
    return np.arccos(np.clip(np.linalg.svd(qa.T @ qb, compute_uv=False), -1.0, 1.0))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_spectrum_on_the_device_equals_scipy_eigsh(device, dtype, monkeypatch):
    """The build's spectrum on ``device`` (graph.device: the operator and the Lanczos basis
    there) against scipy's eigsh of the same deflated Laplacian: eigenvalues within the solver's
    tolerance (float64 1e-8 relative; float32, whose tolerance is raised to FLOAT32_MIN_TOL, 1e-5
    absolute) and the subspace within a small largest principal angle; on the CPU the same
    torch code runs (device="cpu")."""
    from scipy.sparse.linalg import eigsh

    w = _graph(500, 3, blocks=3)
    m = 8
    got = spec.spectral_coordinates(w, m, tol=1e-9, dtype=dtype, device=device)
    assert got.report["device"] == str(device) and got.report["converged"]
    lap, n_comp, _, _ = spec._deflation(sp.csr_matrix(w))
    # L_sym's m + n_comp smallest: the first n_comp (the trivial ones, value 0) are dropped
    values, vectors = eigsh(lap, k=m + n_comp, which="SA", tol=1e-12)
    order = np.argsort(values)
    values, vectors = values[order][n_comp:], vectors[:, order][:, n_comp:]
    if dtype == "float64":
        np.testing.assert_allclose(got.eigenvalues, values, rtol=1e-8)
        assert _principal_angles(got.coordinates, vectors).max() < 1e-3  # float32-stored coordinates
    else:
        np.testing.assert_allclose(got.eigenvalues, values, atol=1e-5)
        assert _principal_angles(got.coordinates, vectors).max() < 2e-2
    cpu = spec.spectral_coordinates(w, m, tol=1e-9, dtype=dtype)  # the CPU solve of the build
    np.testing.assert_allclose(got.eigenvalues, cpu.eigenvalues, rtol=1e-8 if dtype == "float64" else 1e-4)
