"""Tests for spectrag.kernels.lanczos against numpy.linalg.eigh, scipy eigsh and closed forms, on
the ``device`` fixture's devices (operators built on the CPU, moved there; results compared on
the CPU with the same tolerances: float64 is float64 on any device).

Tolerances: float64 runs use tol=1e-8 (or the default 1e-6 where stated) and must match the
reference eigenvalues to 1e-8 * max(1, |lambda|); float32 runs use tol=1e-5 and must match to
1e-4 * max(1, |lambda|). Eigenvectors are compared up to sign through |cos| >= 1 - 1e-6
(float64) for eigenvalues separated from their neighbours, and through projector distances
||U U^T - V V^T||_2 for repeated eigenvalues. Residual norms must satisfy the documented
criterion ||A v - lambda v|| <= tol * max(1, |lambda|). Warm starts (``v0``, as the incremental
build uses them) are checked against torch.linalg.eigh.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import torch
from conftest import to_cpu

from spectrag.kernels.lanczos import LanczosNotConverged, LanczosResult, lanczos_eigsh
from spectrag.kernels.laplacian import normalized_laplacian

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled")

EIG_RTOL = {torch.float64: 1e-8, torch.float32: 1e-4}
RUN_TOL = {torch.float64: 1e-8, torch.float32: 1e-5}



# ---------------------------------------------------------------------------------------
# problem builders
# ---------------------------------------------------------------------------------------


def to_torch(M, dtype=torch.float64, layout=torch.sparse_coo, device=torch.device("cpu")) -> torch.Tensor:
    M = sp.coo_matrix(M)
    idx = torch.from_numpy(np.vstack([M.row, M.col]).astype(np.int64))
    t = torch.sparse_coo_tensor(idx, torch.from_numpy(M.data), M.shape, dtype=dtype, check_invariants=True)
    t = t.coalesce().to(device)
    if layout == torch.sparse_csr:
        return t.to_sparse_csr()
    if layout == torch.sparse_csc:
        return t.to_sparse_csc()
    if layout == torch.strided:
        return t.to_dense()
    return t


def random_symmetric(n: int, nnz_per_row: int, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    M = sp.random(n, n, density=nnz_per_row / n, random_state=rng, data_rvs=rng.standard_normal)
    return (M + M.T).tocsr()


def random_components_adjacency(sizes, seed: int, degree: int = 6) -> sp.csr_matrix:
    """Block-diagonal random graph; each block is connected (it contains a path)."""
    rng = np.random.default_rng(seed)
    blocks = []
    for s in sizes:
        m = s * degree // 2
        r, c = rng.integers(0, s, m), rng.integers(0, s, m)
        keep = r != c
        B = sp.coo_matrix((rng.uniform(0.5, 1.5, keep.sum()), (r[keep], c[keep])), shape=(s, s))
        B = B + sp.diags([np.ones(s - 1)], [1], shape=(s, s))
        blocks.append(B + B.T)
    return sp.block_diag(blocks).tocsr()


def path_adjacency(n: int) -> sp.csr_matrix:
    P = sp.diags([np.ones(n - 1)], [1], shape=(n, n))
    return (P + P.T).tocsr()


def ring_adjacency(n: int) -> sp.csr_matrix:
    r = np.arange(n)
    P = sp.coo_matrix((np.ones(n), (r, (r + 1) % n)), shape=(n, n))
    return (P + P.T).tocsr()


# ---------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------


def reference(M, k: int, which: str):
    evals, evecs = np.linalg.eigh(np.asarray(M.todense() if sp.issparse(M) else M, dtype=np.float64))
    idx = np.arange(k) if which == "SA" else np.arange(len(evals) - 1, len(evals) - 1 - k, -1)
    return evals, evecs, idx


def check_result(res: LanczosResult, M, k: int, which: str, tol: float, dtype=torch.float64):
    n = M.shape[0]
    res = to_cpu(res)
    assert res.converged
    assert res.eigenvalues.shape == (k,) and res.eigenvectors.shape == (n, k)
    assert res.residual_norms.shape == (k,)
    assert res.eigenvalues.dtype == res.eigenvectors.dtype == res.residual_norms.dtype == dtype

    lam = res.eigenvalues.double().numpy()
    U = res.eigenvectors.double().numpy()
    order = np.diff(lam)
    assert np.all(order >= 0) if which == "SA" else np.all(order <= 0)

    # Eigenvalues vs numpy.linalg.eigh.
    evals, evecs, idx = reference(M, k, which)
    scale = np.maximum(1.0, np.abs(evals[idx]))
    np.testing.assert_array_less(np.abs(lam - evals[idx]) / scale, EIG_RTOL[dtype])

    # Orthonormal columns.
    ortho_tol = 1e-10 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(U.T @ U, np.eye(k), rtol=0, atol=ortho_tol)

    # Residuals: reported = recomputed, and within the documented criterion.
    Md = np.asarray(M.todense() if sp.issparse(M) else M, dtype=np.float64)
    recomputed = np.linalg.norm(Md @ U - U * lam, axis=0)
    thr = tol * np.maximum(1.0, np.abs(lam))
    np.testing.assert_array_less(res.residual_norms.double().numpy(), thr)
    np.testing.assert_array_less(recomputed, thr * 1.5)

    # Eigenvectors up to sign, for eigenvalues separated from their neighbours.
    cos_tol = 1e-6 if dtype == torch.float64 else 1e-3
    for col, i in enumerate(idx):
        gap = min(abs(evals[i] - evals[j]) for j in (i - 1, i + 1) if 0 <= j < n)
        if gap > 1e-2:
            cos = abs(float(evecs[:, i] @ U[:, col]))
            assert cos >= 1 - cos_tol, f"eigenvector {col}: |cos|={cos}"
    return evals, idx


def projector_distance(U: np.ndarray, V: np.ndarray) -> float:
    """Spectral norm of U U^T - V V^T for orthonormal bases U, V of the same dimension."""
    return float(np.linalg.norm(U @ U.T - V @ V.T, 2))


# ---------------------------------------------------------------------------------------
# accuracy against references
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["SA", "LA"])
@pytest.mark.parametrize("k", [1, 6])
def test_random_sparse_matches_numpy_and_scipy(which, k, device):
    M = random_symmetric(400, 8, seed=10 + k)
    res = to_cpu(lanczos_eigsh(to_torch(M, device=device), k, which=which, tol=1e-8))
    check_result(res, M, k, which, tol=1e-8)
    assert res.method == "lanczos"
    ref = sla.eigsh(M, k=k, which=which, v0=np.ones(400))[0]
    ref = np.sort(ref) if which == "SA" else np.sort(ref)[::-1]
    np.testing.assert_allclose(res.eigenvalues.numpy(), ref, rtol=1e-8, atol=1e-8)


def test_default_tolerance_meets_criterion(device):
    M = random_symmetric(600, 6, seed=3)
    res = lanczos_eigsh(to_torch(M, layout=torch.sparse_csr, device=device), 4)
    check_result(res, M, 4, "SA", tol=1e-6)


def test_larger_sparse_matches_scipy(device):
    M = random_symmetric(2000, 5, seed=4)
    res = to_cpu(lanczos_eigsh(to_torch(M, device=device), 5, which="LA", tol=1e-8))
    ref = np.sort(sla.eigsh(M, k=5, which="LA", v0=np.ones(2000))[0])[::-1]
    np.testing.assert_allclose(res.eigenvalues.numpy(), ref, rtol=1e-8, atol=1e-8)
    assert torch.all(res.residual_norms <= 1e-8 * res.eigenvalues.abs().clamp_min(1))


@pytest.mark.parametrize("which", ["SA", "LA"])
def test_k32(which, device):
    M = random_symmetric(300, 8, seed=5)
    res = lanczos_eigsh(to_torch(M, device=device), 32, which=which, tol=1e-8)
    check_result(res, M, 32, which, tol=1e-8)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("which", ["SA", "LA"])
def test_float32_and_float64(dtype, which, device):
    M = random_symmetric(500, 6, seed=6)
    res = lanczos_eigsh(to_torch(M, dtype, device=device), 6, which=which, tol=RUN_TOL[dtype])
    check_result(res, M, 6, which, tol=RUN_TOL[dtype], dtype=dtype)


# ---------------------------------------------------------------------------------------
# graph Laplacians: repeated eigenvalues and closed forms
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("k, seed", [(4, 0), (6, 1), (6, 2), (9, 3)])
def test_multi_component_laplacian_null_space(dtype, k, seed, device):
    sizes = [70, 90, 60, 80]
    W = random_components_adjacency(sizes, seed=seed)
    L = normalized_laplacian(to_torch(W, dtype, device=device))
    res = to_cpu(lanczos_eigsh(L, k, tol=RUN_TOL[dtype]))
    assert res.converged
    lam = res.eigenvalues.double().numpy()
    U = res.eigenvectors.double().numpy()

    # Eigenvalue 0 with multiplicity = number of components.
    c = len(sizes)
    np.testing.assert_array_less(np.abs(lam[:c]), EIG_RTOL[dtype])
    evals = np.linalg.eigvalsh(normalized_laplacian(to_torch(W)).to_dense().numpy())  # float64
    assert np.abs(evals[:c]).max() < 1e-12 and evals[c] > 1e-2
    np.testing.assert_array_less(np.abs(lam - evals[:k]), EIG_RTOL[dtype])

    # Null space: span of D^{1/2} 1_C per component (closed form), compared via projectors.
    d = np.asarray(W.sum(axis=1)).ravel()
    Z = np.zeros((W.shape[0], c))
    start = 0
    for j, s in enumerate(sizes):
        Z[start : start + s, j] = np.sqrt(d[start : start + s])
        start += s
    Z /= np.linalg.norm(Z, axis=0)
    dist = projector_distance(U[:, :c], Z)
    assert dist <= (1e-6 if dtype == torch.float64 else 1e-3), dist


@pytest.mark.parametrize("which", ["SA", "LA"])
def test_path_graph_closed_form(which, device):
    n, k = 100, 6
    L = normalized_laplacian(to_torch(path_adjacency(n), device=device))
    # Normalized Laplacian of the path P_n: 1 - cos(pi j / (n - 1)), j = 0..n-1.
    exact = np.sort(1.0 - np.cos(np.pi * np.arange(n) / (n - 1)))
    exact = exact[:k] if which == "SA" else exact[::-1][:k]
    res = to_cpu(lanczos_eigsh(L, k, which=which, tol=1e-8))
    np.testing.assert_allclose(res.eigenvalues.numpy(), exact, rtol=0, atol=1e-8)
    assert torch.all(res.residual_norms <= 1e-8 * res.eigenvalues.abs().clamp_min(1))


def test_ring_graph_closed_form_and_degenerate_pairs(device):
    n, k = 120, 7  # eigenvalue 0, then three double eigenvalues
    L = normalized_laplacian(to_torch(ring_adjacency(n), device=device))
    # Normalized Laplacian of the cycle C_n: 1 - cos(2 pi j / n), j = 0..n-1.
    exact = np.sort(1.0 - np.cos(2 * np.pi * np.arange(n) / n))[:k]
    res = to_cpu(lanczos_eigsh(L, k, tol=1e-8))
    np.testing.assert_allclose(res.eigenvalues.numpy(), exact, rtol=0, atol=1e-8)
    U = res.eigenvectors.numpy()
    x = np.arange(n)
    # Each double eigenvalue 1 - cos(2 pi j / n) has the Fourier pair as eigenspace.
    for j, cols in ((1, [1, 2]), (2, [3, 4]), (3, [5, 6])):
        F = np.stack([np.cos(2 * np.pi * j * x / n), np.sin(2 * np.pi * j * x / n)], axis=1)
        F /= np.linalg.norm(F, axis=0)
        assert projector_distance(U[:, cols], F) <= 1e-6
    np.testing.assert_allclose(np.abs(U[:, 0]), 1 / np.sqrt(n), atol=1e-8)


def test_breakdown_few_distinct_eigenvalues(device):
    # Diagonal operator with 3 distinct values: every Krylov space breaks down after 3
    # steps, and the eigenvalue 1 has multiplicity 100.
    diag = np.repeat([1.0, 2.0, 3.0], 100)
    M = sp.diags(diag).tocsr()
    res = to_cpu(lanczos_eigsh(to_torch(M, device=device), 5, tol=1e-10))
    np.testing.assert_allclose(res.eigenvalues.numpy(), np.ones(5), atol=1e-10)
    U = res.eigenvectors.numpy()
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=1e-10)
    assert np.linalg.norm(U[100:]) <= 1e-9


def test_zero_operator(device):
    M = sp.csr_matrix((100, 100))
    res = to_cpu(lanczos_eigsh(to_torch(M, device=device), 3))
    assert res.converged and torch.all(res.eigenvalues == 0)
    U = res.eigenvectors
    torch.testing.assert_close(U.T @ U, torch.eye(3, dtype=torch.float64))


# ---------------------------------------------------------------------------------------
# inputs, fallbacks, determinism
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", [torch.strided, torch.sparse_coo, torch.sparse_csr, torch.sparse_csc])
def test_input_layouts_agree(layout, device):
    M = random_symmetric(200, 6, seed=7)
    res = to_cpu(lanczos_eigsh(to_torch(M, layout=layout, device=device), 3, tol=1e-8))
    evals = np.linalg.eigvalsh(M.toarray())[:3]
    np.testing.assert_allclose(res.eigenvalues.numpy(), evals, rtol=0, atol=1e-8)


def test_callable_operator_matches_tensor(device):
    M = random_symmetric(300, 6, seed=8)
    A = to_torch(M, layout=torch.sparse_csr, device=device)
    calls = []

    def matvec(X):
        calls.append(X.shape[1])
        return A @ X

    res_fn = lanczos_eigsh(matvec, 4, n=300, dtype=torch.float64, device=device, tol=1e-8)
    res_t = lanczos_eigsh(A, 4, tol=1e-8)
    torch.testing.assert_close(res_fn.eigenvalues, res_t.eigenvalues, rtol=0, atol=1e-10)
    assert res_fn.n_matvec == sum(calls)
    check_result(res_fn, M, 4, "SA", tol=1e-8)


def test_callable_float32_dense_fallback(device):
    M = random_symmetric(40, 6, seed=9)
    A = to_torch(M, torch.float32, layout=torch.strided, device=device)
    res = lanczos_eigsh(lambda X: A @ X, 3, n=40, dtype=torch.float32, device=device, tol=1e-5, which="LA")
    assert res.method == "dense" and res.n_matvec == 40 + 3
    check_result(res, M, 3, "LA", tol=1e-5, dtype=torch.float32)


@pytest.mark.parametrize("n, k, ncv", [(50, 5, None), (100, 60, None), (200, 3, 200)])
def test_dense_fallback(n, k, ncv, device):
    M = random_symmetric(n, 6, seed=n)
    res = lanczos_eigsh(to_torch(M, device=device), k, ncv=ncv, tol=1e-8)
    assert res.method == "dense" and res.n_iter == 0
    check_result(res, M, k, "SA", tol=1e-8)


def test_deterministic_given_seed(device):
    W = random_components_adjacency([80, 90, 100], seed=11)
    L = normalized_laplacian(to_torch(W, device=device))
    a = lanczos_eigsh(L, 5, seed=123)
    b = lanczos_eigsh(L, 5, seed=123)
    for field in ("eigenvalues", "eigenvectors", "residual_norms"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert (a.converged, a.n_iter, a.n_matvec) == (b.converged, b.n_iter, b.n_matvec)
    c = lanczos_eigsh(L, 5, seed=7)
    torch.testing.assert_close(c.eigenvalues, a.eigenvalues, rtol=0, atol=1e-8)


def test_probe_off_is_cheaper_and_still_verified(device):
    M = random_symmetric(400, 6, seed=16)
    A = to_torch(M, device=device)
    with_probe = lanczos_eigsh(A, 4, tol=1e-8)
    without = lanczos_eigsh(A, 4, tol=1e-8, probe=False)
    assert without.n_matvec < with_probe.n_matvec
    check_result(without, M, 4, "SA", tol=1e-8)


def test_result_is_frozen():
    res = lanczos_eigsh(to_torch(random_symmetric(100, 4, seed=12)), 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.converged = False  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# non-convergence and bad arguments
# ---------------------------------------------------------------------------------------


def test_not_converged_raises_with_partial_result(device):
    A = to_torch(random_symmetric(500, 6, seed=13), device=device)
    with pytest.raises(LanczosNotConverged, match=r"max_iter=1 Lanczos cycles") as info:
        lanczos_eigsh(A, 5, ncv=6, max_iter=1)
    assert isinstance(info.value, RuntimeError)
    partial = info.value.result
    assert isinstance(partial, LanczosResult)
    assert not partial.converged and partial.n_iter == 1
    assert partial.eigenvalues.shape == (5,) and partial.eigenvectors.shape == (500, 5)
    assert bool((partial.residual_norms > 1e-6).any())


def test_not_converged_returns_when_asked(device):
    A = to_torch(random_symmetric(500, 6, seed=13), device=device)
    res = lanczos_eigsh(A, 5, ncv=6, max_iter=1, raise_on_failure=False)
    assert res.converged is False and res.n_iter == 1 and res.n_matvec >= 6


def test_float32_tolerance_below_rounding_floor_is_reported(device):
    A = to_torch(random_symmetric(300, 6, seed=14), torch.float32, device=device)
    with pytest.raises(LanczosNotConverged, match=r"float32.*increase tol or use float64"):
        lanczos_eigsh(A, 3, tol=1e-12)
    res = lanczos_eigsh(A, 3, tol=1e-12, raise_on_failure=False)
    assert not res.converged and res.residual_norms.max() > 1e-12


_A = to_torch(random_symmetric(100, 4, seed=15))


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        ((_A, 0), {}, ValueError, r"k must satisfy 1 <= k < n \(n=100\), got k=0"),
        ((_A, 100), {}, ValueError, r"got k=100"),
        ((_A, 2.0), {}, ValueError, r"k must be an int, got k=2\.0"),
        ((_A, 2), {"which": "SM"}, ValueError, r"which must be \"SA\" or \"LA\", got which='SM'"),
        ((_A, 2), {"tol": 0.0}, ValueError, r"tol must be a positive finite float, got tol=0\.0"),
        ((_A, 2), {"tol": float("nan")}, ValueError, r"got tol=nan"),
        ((_A, 2), {"ncv": 2}, ValueError, r"ncv must be > k \(k=2\), got ncv=2"),
        ((_A, 2), {"max_iter": 0}, ValueError, r"max_iter must be >= 1 or None, got max_iter=0"),
        ((_A, 2), {"seed": "x"}, ValueError, r"seed must be an int, got seed='x'"),
        ((_A, 2), {"n": 100}, ValueError, r"only accepted when A is a callable"),
        ((_A.to_dense()[:, :50], 2), {}, ValueError, r"square 2-D.*\(100, 50\)"),
        ((torch.ones(3, 3, 3), 2), {}, ValueError, r"square 2-D.*\(3, 3, 3\)"),
        ((torch.eye(80, dtype=torch.int64), 2), {}, ValueError, r"float32 or float64.*torch\.int64"),
        ((np.eye(80), 2), {}, TypeError, r"torch\.Tensor or a callable.*ndarray"),
        ((lambda X: X, 2), {}, ValueError, r"n must be given when A is a callable"),
        ((lambda X: X, 2), {"n": 0}, ValueError, r"n must be a positive int, got n=0"),
        ((lambda X: X[:-1], 2), {"n": 100}, ValueError, r"must map a \[n, b\] block.*\(99, 1\)"),
        ((lambda X: X, 2), {"n": 100, "dtype": torch.int32}, ValueError, r"dtype must be"),
    ],
)
def test_bad_arguments(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        lanczos_eigsh(*args, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [1, 2, 7, 40])
def test_orthonormalize_against_returns_an_exact_decomposition(dtype, rows, device):
    """w = Q^T h + w_orth with w_orth orthogonal to Q, whether one full pass sufficed or not
    (a w almost inside span(Q) forces the repeat)."""
    from spectrag.kernels.lanczos import _orthonormalize_against

    g = torch.Generator().manual_seed(rows)
    Q = torch.linalg.qr(torch.randn(500, rows, generator=g, dtype=torch.float64))[0].T.to(dtype)  # orthonormal rows
    eps = torch.finfo(dtype).eps
    ws = (torch.randn(500, generator=g, dtype=dtype), Q.T @ torch.randn(rows, generator=g, dtype=dtype) + 1e-3 * torch.randn(500, generator=g, dtype=dtype))
    Q = Q.to(device)
    for w in (w.to(device) for w in ws):
        w_orth, h, before, after = _orthonormalize_against(Q, w.clone())
        assert before == pytest.approx(float(w.norm()), rel=1e-6)
        assert after == pytest.approx(float(w_orth.norm()), rel=1e-6)
        assert float((Q @ w_orth).abs().max()) <= 50 * eps * before
        assert float((Q.T @ h + w_orth - w).abs().max()) <= 50 * eps * before


# ---------------------------------------------------------------------------------------
# warm starts (v0), as the incremental build uses them
# ---------------------------------------------------------------------------------------


def _laplacian(n: int, seed: int) -> torch.Tensor:
    a = sp.random(n, n, density=0.03, random_state=seed)
    a = (a + a.T).toarray()
    return torch.from_numpy(np.diag(a.sum(1)) - a)


@pytest.mark.parametrize("noise", [0.0, 1e-3, 1.0])
def test_lanczos_warm_start_matches_eigh(noise, device):
    lap = _laplacian(300, 1)
    values, vectors = torch.linalg.eigh(lap)
    k = 8
    v0 = vectors[:, :k] + noise * torch.randn(300, k, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    res = to_cpu(lanczos_eigsh(lap.to(device), k, v0=v0.to(device)))
    torch.testing.assert_close(res.eigenvalues, values[:k], atol=1e-8, rtol=0)
    proj = res.eigenvectors @ res.eigenvectors.T - vectors[:, :k] @ vectors[:, :k].T
    assert torch.linalg.matrix_norm(proj, 2) <= 1e-5
    if noise == 0.0:  # the start spans the answer: one cycle, then the probe cycle
        assert res.n_iter == 2


def test_lanczos_bad_v0():
    lap = _laplacian(100, 2)
    with pytest.raises(ValueError, match=r"v0 must have shape \[n\] or \[n, p\] with n=100, got shape=\(99, 2\)"):
        lanczos_eigsh(lap, 3, v0=torch.ones(99, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="v0 has NaN"):
        lanczos_eigsh(lap, 3, v0=torch.full((100,), float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="v0 is zero"):
        lanczos_eigsh(lap, 3, v0=torch.zeros(100, 3, dtype=torch.float64))
