"""Tests for spectrag.kernels.heat (Chebyshev heat-kernel diffusion) against scipy's expm and
expm_multiply, on the ``device`` fixture's devices (results compared on the CPU, with the
tolerances of the certified bound: float64 is float64 on any device)."""

import math
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg
import torch
from scipy.sparse.csgraph import laplacian
from scipy.special import ive

from spectrag.kernels.heat import (
    chebyshev_heat,
    chebyshev_heat_dense_batched,
    heat_coefficients,
    heat_num_terms,
)

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")


TIMES = [0.1, 1.0, 5.0, 20.0]


def random_graph(n, density, seed, n_isolated=3):
    """Random symmetric weighted sparse graph (scipy CSR) whose last ``n_isolated`` nodes are isolated."""
    rng = np.random.default_rng(seed)
    W = sp.random(n, n, density=density, random_state=rng, data_rvs=lambda k: rng.uniform(0.1, 2.0, k))
    W = sp.triu(W, k=1)
    W = (W + W.T).tocsr()
    if n_isolated:
        keep = np.ones(n)
        keep[n - n_isolated:] = 0
        Dk = sp.diags(keep)
        W = (Dk @ W @ Dk).tocsr()
        W.eliminate_zeros()
    return W


def normalized_laplacian(W):
    return sp.csr_matrix(laplacian(sp.csr_matrix(W), normed=True))


def to_torch_csr(M, dtype=torch.float64, device=torch.device("cpu")):
    M = sp.csr_matrix(M)
    return torch.sparse_csr_tensor(
        torch.from_numpy(M.indptr.astype(np.int64)),
        torch.from_numpy(M.indices.astype(np.int64)),
        torch.from_numpy(M.data).to(dtype),
        size=M.shape,
        check_invariants=True,
    ).to(device)


def on(device, *arrays):
    return tuple(torch.from_numpy(a).to(device) for a in arrays)


@pytest.fixture(scope="module")
def graph():
    n = 120
    W = random_graph(n, density=0.04, seed=0, n_isolated=4)
    L = normalized_laplacian(W)
    X = np.random.default_rng(1).standard_normal((n, 6))
    return W, L, X


@pytest.fixture(scope="module")
def dense_expm(graph):
    _, L, _ = graph
    Ld = L.toarray()
    return {t: scipy.linalg.expm(-t * Ld) for t in TIMES}


def column_rel_err(Y, ref, X):
    return np.linalg.norm(np.asarray(Y, dtype=np.float64) - ref, axis=0) / np.linalg.norm(X, axis=0)


@pytest.mark.parametrize("t", TIMES)
@pytest.mark.parametrize("tol", [1e-6, 1e-10])
def test_float64_matches_expm_multiply_and_dense_expm(graph, dense_expm, t, tol, device):
    _, L, X = graph
    Y = chebyshev_heat(to_torch_csr(L, device=device), *on(device, X), t, tol=tol).cpu()
    assert Y.shape == X.shape and Y.dtype == torch.float64
    ref_sparse = scipy.sparse.linalg.expm_multiply(-t * sp.csc_matrix(L), X)
    ref_dense = dense_expm[t] @ X
    # certified bound: ||err_b||_2 <= tol * ||x_b||_2 (plus rounding); check with 10x slack
    assert column_rel_err(Y.numpy(), ref_dense, X).max() <= 10 * tol
    assert column_rel_err(Y.numpy(), ref_sparse, X).max() <= 10 * tol + 1e-12


@pytest.mark.parametrize("t", TIMES)
def test_float32_close_to_reference(graph, dense_expm, t, device):
    _, L, X = graph
    Y = chebyshev_heat(to_torch_csr(L, torch.float32, device), torch.from_numpy(X).float().to(device), t, tol=1e-6).cpu()
    assert Y.dtype == torch.float32
    assert column_rel_err(Y.double().numpy(), dense_expm[t] @ X, X).max() <= 1e-5


def test_batched_equals_loop_of_single_columns(graph, device):
    _, L, X = graph
    Lt = to_torch_csr(L, device=device)
    (Xt,) = on(device, X)
    Y = chebyshev_heat(Lt, Xt, 5.0)
    cols = [chebyshev_heat(Lt, Xt[:, b : b + 1], 5.0) for b in range(X.shape[1])]
    torch.testing.assert_close(Y, torch.cat(cols, dim=1), rtol=0, atol=1e-13)
    # 1-D input returns 1-D output
    y1 = chebyshev_heat(Lt, Xt[:, 2], 5.0)
    assert y1.shape == (X.shape[0],)
    torch.testing.assert_close(y1, Y[:, 2], rtol=0, atol=1e-13)


def test_layouts_coo_dense_csr_agree(graph, device):
    _, L, X = graph
    Xt, Ldense = on(device, X, L.toarray())
    Lcsr = to_torch_csr(L, device=device)
    Lcoo = Lcsr.to_sparse_coo()
    Y = chebyshev_heat(Lcsr, Xt, 1.0)
    torch.testing.assert_close(chebyshev_heat(Lcoo, Xt, 1.0), Y, rtol=0, atol=1e-13)
    torch.testing.assert_close(chebyshev_heat(Ldense, Xt, 1.0), Y, rtol=0, atol=1e-13)
    # L in float64, X in float32: computation in X's dtype
    Y32 = chebyshev_heat(Lcsr, Xt.float(), 1.0)
    assert Y32.dtype == torch.float32
    torch.testing.assert_close(Y32.double(), Y, rtol=0, atol=1e-5)


def test_t_zero_is_identity(graph, device):
    _, L, X = graph
    assert heat_num_terms(0.0) == 1
    Y = chebyshev_heat(to_torch_csr(L, device=device), *on(device, X), 0.0)
    torch.testing.assert_close(Y.cpu(), torch.from_numpy(X), rtol=0, atol=0)


def test_sqrt_degree_mass_is_preserved(graph, device):
    """Independent invariant: L_sym D^{1/2} 1 = 0, so 1^T D^{1/2} expm(-tL) x = 1^T D^{1/2} x."""
    W, L, X = graph
    Xp = np.abs(X)
    w = np.sqrt(np.asarray(W.sum(axis=1)).ravel())
    Lt = to_torch_csr(L, device=device)
    for t in TIMES:
        Y = chebyshev_heat(Lt, *on(device, Xp), t, tol=1e-10).cpu().numpy()
        mass_in = w @ Xp
        mass_out = w @ Y
        bound = 10 * 1e-10 * np.linalg.norm(w) * np.linalg.norm(Xp, axis=0)
        assert np.all(np.abs(mass_out - mass_in) <= bound + 1e-12 * np.abs(mass_in))


def test_term_count_monotone_and_bound_certified():
    ts = [0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0]
    counts = [heat_num_terms(t, 1e-6) for t in ts]
    assert counts == sorted(counts)
    assert counts[-1] > counts[3] > counts[0]
    tols = [1e-2, 1e-4, 1e-6, 1e-8, 1e-12]
    by_tol = [heat_num_terms(5.0, tol) for tol in tols]
    assert by_tol == sorted(by_tol) and by_tol[-1] > by_tol[0]
    # a larger spectral bound needs more terms
    assert heat_num_terms(5.0, 1e-6, lambda_max=4.0) >= heat_num_terms(5.0, 1e-6, lambda_max=2.0)

    for t in [0.1, 1.0, 5.0, 20.0]:
        for tol in [1e-4, 1e-8, 1e-12]:
            K1 = heat_num_terms(t, tol)
            tau = t  # lambda_max = 2
            # the true tail sum_{k >= K1} |c_k| (computed far out) is below tol
            ks = np.arange(K1, K1 + 400)
            true_tail = 2 * ive(ks, tau).sum()
            assert true_tail <= tol
            # minimality w.r.t. the documented bound 2 ive(K+1) / (1 - tau / (2(K+2)))
            if K1 >= 2:
                K = K1 - 2  # one term fewer
                q = tau / (2 * (K + 2))
                bound = math.inf if q >= 1 else 2 * ive(K + 1, tau) / (1 - q)
                assert bound > tol


def test_coefficients_reproduce_scalar_exponential():
    # sum_k c_k T_k(s) = exp(-t * a * (1 + s)) on [-1, 1] (a = lambda_max / 2)
    s = np.linspace(-1, 1, 41)
    for t in [0.1, 3.0, 20.0]:
        c = heat_coefficients(t, tol=1e-12)
        approx = np.polynomial.chebyshev.chebval(s, c)
        assert np.max(np.abs(approx - np.exp(-t * (1 + s)))) <= 1e-12
    c = heat_coefficients(1.0, num_terms=5)
    assert len(c) == 5


def test_num_terms_override(graph, dense_expm, device):
    _, L, X = graph
    Lt, (Xt,) = to_torch_csr(L, device=device), on(device, X)
    K1 = heat_num_terms(5.0, 1e-10)
    torch.testing.assert_close(
        chebyshev_heat(Lt, Xt, 5.0, num_terms=K1), chebyshev_heat(Lt, Xt, 5.0, tol=1e-10), rtol=0, atol=0
    )
    crude = chebyshev_heat(Lt, Xt, 5.0, num_terms=2).cpu().numpy()
    assert column_rel_err(crude, dense_expm[5.0] @ X, X).max() > 1e-3


def test_lambda_max_other_than_two(device):
    # combinatorial Laplacian with a spectral bound from Gershgorin (2 * max degree)
    W = random_graph(50, 0.1, seed=5, n_isolated=2)
    Lc = sp.csr_matrix(laplacian(sp.csr_matrix(W)))
    lam = 2 * Lc.diagonal().max()
    X = np.random.default_rng(2).standard_normal((50, 3))
    Y = chebyshev_heat(to_torch_csr(Lc, device=device), *on(device, X), 0.7, lambda_max=lam, tol=1e-9)
    ref = scipy.linalg.expm(-0.7 * Lc.toarray()) @ X
    assert column_rel_err(Y.cpu().numpy(), ref, X).max() <= 1e-8


def _padded_blocks(sizes, P, seed, garbage=True):
    rng = np.random.default_rng(seed)
    junk = np.random.default_rng(seed + 1000)
    B = len(sizes)
    L = junk.standard_normal((B, P, P)) * 5 if garbage else np.zeros((B, P, P))
    X = junk.standard_normal((B, P, 3)) if garbage else np.zeros((B, P, 3))
    mask = np.zeros((B, P), dtype=bool)
    blocks = []
    for b, nb in enumerate(sizes):
        W = random_graph(nb, 0.3, seed=seed + b, n_isolated=1)
        Lb = normalized_laplacian(W).toarray()
        xb = rng.standard_normal((nb, 3))
        L[b, :nb, :nb] = Lb
        X[b, :nb] = xb
        mask[b, :nb] = True
        blocks.append((Lb, xb))
    return L, X, mask, blocks


@pytest.mark.parametrize("t", TIMES)
def test_dense_batched_matches_per_block_expm(t, device):
    P = 24
    L, X, mask, blocks = _padded_blocks([24, 10, 17, 5], P, seed=10, garbage=True)
    Lt, Xt, mt = on(device, L, X, mask)
    Y = chebyshev_heat_dense_batched(Lt, Xt, t, mask=mt, tol=1e-10).cpu().numpy()
    assert Y.shape == X.shape
    for b, (Lb, xb) in enumerate(blocks):
        nb = Lb.shape[0]
        ref = scipy.linalg.expm(-t * Lb) @ xb
        assert column_rel_err(Y[b, :nb], ref, xb).max() <= 1e-9
        assert np.all(Y[b, nb:] == 0)
    # 2-D X ([B, P]) and a mask-free call with clean (isolated, zero) padding give the same
    L0, X0, mask0, _ = _padded_blocks([24, 10, 17, 5], P, seed=10, garbage=False)
    Y0 = chebyshev_heat_dense_batched(*on(device, L0, X0[:, :, 0].copy()), t, tol=1e-10)
    assert Y0.shape == (4, P)
    np.testing.assert_allclose(Y0.cpu().numpy(), Y[:, :, 0], atol=1e-12, rtol=0)


def test_dense_batched_equals_sparse_on_block(device):
    P = 20
    L, X, mask, blocks = _padded_blocks([20, 12], P, seed=3, garbage=False)
    Y = chebyshev_heat_dense_batched(*on(device, L, X), 2.0).cpu()
    for b, (Lb, xb) in enumerate(blocks):
        ys = chebyshev_heat(to_torch_csr(Lb, device=device), *on(device, xb), 2.0).cpu()
        np.testing.assert_allclose(Y[b, : Lb.shape[0]].numpy(), ys.numpy(), atol=1e-12, rtol=0)


def test_input_validation(graph):
    _, L, X = graph
    Lt, Xt = to_torch_csr(L), torch.from_numpy(X)
    with pytest.raises(ValueError, match="shape mismatch.*X has 5 rows"):
        chebyshev_heat(Lt, Xt[:5], 1.0)
    with pytest.raises(ValueError, match="square"):
        chebyshev_heat(torch.zeros(3, 4), torch.zeros(3, 1), 1.0)
    with pytest.raises(ValueError, match="t must be >= 0"):
        chebyshev_heat(Lt, Xt, -1.0)
    with pytest.raises(ValueError, match="t must be finite"):
        chebyshev_heat(Lt, Xt, float("nan"))
    with pytest.raises(ValueError, match="tol must be > 0"):
        chebyshev_heat(Lt, Xt, 1.0, tol=0.0)
    with pytest.raises(ValueError, match="lambda_max must be > 0"):
        chebyshev_heat(Lt, Xt, 1.0, lambda_max=-2.0)
    with pytest.raises(ValueError, match="num_terms"):
        chebyshev_heat(Lt, Xt, 1.0, num_terms=0)
    Xn = Xt.clone()
    Xn[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"X contains NaN.*X\[3, 1\] = nan"):
        chebyshev_heat(Lt, Xn, 1.0)
    Ld = torch.from_numpy(L.toarray())
    Ld[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"L contains NaN.*L\[0, 0\] = inf"):
        chebyshev_heat(Ld, Xt, 1.0)
    # sparse CSR / COO: the message names (row, col) of the bad stored value
    Lbad = L.copy().tocsr()
    r = int(np.flatnonzero(np.diff(Lbad.indptr) >= 2)[0])
    c = int(Lbad.indices[Lbad.indptr[r] + 1])
    Lbad.data[Lbad.indptr[r] + 1] = np.nan
    for M in (to_torch_csr(Lbad), to_torch_csr(Lbad).to_sparse_coo()):
        with pytest.raises(ValueError, match=rf"L contains NaN.*L\[{r}, {c}\] = nan"):
            chebyshev_heat(M, Xt, 1.0)
    with pytest.raises(TypeError, match="floating"):
        chebyshev_heat(Lt, Xt.long(), 1.0)
    with pytest.raises(ValueError, match="mask must be"):
        chebyshev_heat_dense_batched(torch.zeros(2, 4, 4), torch.zeros(2, 4), 1.0, mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="shape mismatch"):
        chebyshev_heat_dense_batched(torch.zeros(2, 4, 4), torch.zeros(3, 4), 1.0)
