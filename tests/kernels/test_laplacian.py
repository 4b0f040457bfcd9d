"""Tests for spectrag.kernels.laplacian against a NumPy formula and scipy.sparse.csgraph, on the
``device`` fixture's devices (results compared on the CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
import torch
from conftest import to_cpu

from spectrag.kernels.laplacian import degree_vector, normalized_laplacian

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled")

DTYPES = [torch.float32, torch.float64]

ATOL = {torch.float32: 2e-6, torch.float64: 1e-13}


def random_graph(n: int, n_edges: int, n_isolated: int, seed: int, self_loops: int = 0) -> sp.csr_matrix:
    """Symmetric weighted adjacency; the last ``n_isolated`` nodes have no edges."""
    rng = np.random.default_rng(seed)
    m = n - n_isolated
    r = rng.integers(0, m, n_edges)
    c = rng.integers(0, m, n_edges)
    off = r != c
    r, c = r[off], c[off]
    w = rng.uniform(0.1, 2.0, r.size)
    W = sp.coo_matrix((w, (r, c)), shape=(n, n)).tocsr()
    W = W + W.T
    if self_loops:
        loops = rng.choice(m, self_loops, replace=False)
        W = W + sp.coo_matrix((rng.uniform(0.1, 2.0, self_loops), (loops, loops)), shape=(n, n))
    return W.tocsr()


def to_torch(W: sp.spmatrix, dtype: torch.dtype, layout: torch.layout = torch.sparse_coo,
             device: torch.device = torch.device("cpu")) -> torch.Tensor:
    W = W.tocoo()
    idx = torch.from_numpy(np.vstack([W.row, W.col]).astype(np.int64))
    t = torch.sparse_coo_tensor(idx, torch.from_numpy(W.data), W.shape, dtype=dtype, check_invariants=True)
    t = t.coalesce().to(device)
    return t.to_sparse_csr() if layout == torch.sparse_csr else t


def reference_laplacian(W: np.ndarray) -> np.ndarray:
    """I - D^-1/2 W D^-1/2 with self-loops in the degree and identity rows for isolated nodes."""
    d = W.sum(axis=1)
    s = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return np.eye(W.shape[0]) - s[:, None] * W * s[None, :]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_matches_references(dtype, layout, device):
    W = random_graph(n=300, n_edges=900, n_isolated=7, seed=1)
    L = to_cpu(normalized_laplacian(to_torch(W, dtype, layout, device)))
    assert L.layout == torch.sparse_csr
    assert L.dtype == dtype and L.shape == (300, 300)
    dense = L.to_dense().double().numpy()

    np.testing.assert_allclose(dense, reference_laplacian(W.toarray()), rtol=0, atol=ATOL[dtype])
    # scipy agrees on every non-isolated node; it puts 0 (not 1) on isolated diagonals.
    ref = csgraph.laplacian(W.toarray(), normed=True)
    live = np.asarray(W.sum(axis=1)).ravel() > 0
    np.testing.assert_allclose(dense[np.ix_(live, live)], ref[np.ix_(live, live)], rtol=0, atol=ATOL[dtype])
    assert np.all(ref[~live][:, ~live] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_symmetric_spectrum_in_0_2_and_null_space(dtype, device):
    W = random_graph(n=200, n_edges=500, n_isolated=5, seed=2)
    L = normalized_laplacian(to_torch(W, dtype, device=device)).to_dense().double().cpu().numpy()
    np.testing.assert_array_equal(L, L.T)
    evals = np.linalg.eigvalsh(L)
    slack = 10 * ATOL[dtype]
    assert evals.min() >= -slack and evals.max() <= 2 + slack
    # D^{1/2} 1 spans the null space of each connected component.
    d = np.asarray(W.sum(axis=1)).ravel()
    np.testing.assert_allclose(L @ np.sqrt(d), 0, atol=100 * ATOL[dtype])


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_isolated_rows_are_identity_rows(layout, device):
    W = random_graph(n=120, n_edges=300, n_isolated=6, seed=3)
    Wt = to_torch(W, torch.float64, layout, device)
    L = to_cpu(normalized_laplacian(Wt))
    crow, col, val = L.crow_indices(), L.col_indices(), L.values()
    for i in range(114, 120):
        lo, hi = int(crow[i]), int(crow[i + 1])
        assert hi - lo == 1, f"isolated row {i} stores {hi - lo} entries"
        assert int(col[lo]) == i and float(val[lo]) == 1.0
    dense = L.to_dense()
    assert torch.all(dense[:, 114:] == torch.eye(120, dtype=torch.float64)[:, 114:])


def test_explicit_zero_weights_do_not_create_entries(device):
    idx = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]])
    vals = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    L = to_cpu(normalized_laplacian(torch.sparse_coo_tensor(idx, vals, (4, 4)).to(device)))
    expected = torch.tensor(
        [[1.0, -1.0, 0, 0], [-1.0, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]], dtype=torch.float64
    )
    assert torch.equal(L.to_dense(), expected)
    assert L.values().numel() == 6  # 2 off-diagonal + 4 diagonal


def test_empty_graph_is_identity(device):
    W = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long), torch.zeros(0), (5, 5)).to(device)
    L = to_cpu(normalized_laplacian(W))
    assert torch.equal(L.to_dense(), torch.eye(5))
    assert torch.equal(degree_vector(W).cpu(), torch.zeros(5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_self_loops_count_in_degree(dtype, device):
    W = random_graph(n=150, n_edges=400, n_isolated=3, seed=4, self_loops=10)
    assert W.diagonal().sum() > 0
    L = normalized_laplacian(to_torch(W, dtype, device=device)).to_dense().double().cpu().numpy()
    np.testing.assert_allclose(L, reference_laplacian(W.toarray()), rtol=0, atol=ATOL[dtype])
    evals = np.linalg.eigvalsh(L)
    assert evals.min() >= -10 * ATOL[dtype] and evals.max() <= 2 + 10 * ATOL[dtype]


def test_self_loop_only_node_has_zero_diagonal(device):
    idx = torch.tensor([[0, 1, 2], [0, 2, 1]])
    L = normalized_laplacian(torch.sparse_coo_tensor(idx, torch.tensor([3.0, 2.0, 2.0]), (3, 3)).to(device))
    dense = L.to_dense().cpu()
    assert dense[0, 0].item() == 0.0  # 1 - W_00 / d_0 with d_0 = W_00
    torch.testing.assert_close(dense, torch.tensor([[0.0, 0, 0], [0, 1.0, -1.0], [0, -1.0, 1.0]]))


def test_duplicate_coo_entries_are_summed(device):
    idx = torch.tensor([[0, 0, 1, 1, 2], [1, 1, 0, 0, 1]])
    vals = torch.tensor([1.0, 2.0, 1.5, 1.5, 0.0], dtype=torch.float64)
    W = torch.sparse_coo_tensor(idx, vals, (3, 3)).to(device)  # uncoalesced
    assert torch.equal(degree_vector(W).cpu(), torch.tensor([3.0, 3.0, 0.0], dtype=torch.float64))
    L = normalized_laplacian(W).to_dense()
    assert L[0, 1].item() == pytest.approx(-1.0) and L[2, 2].item() == 1.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_degree_vector(dtype, layout, device):
    W = random_graph(n=80, n_edges=200, n_isolated=4, seed=5, self_loops=3)
    d = degree_vector(to_torch(W, dtype, layout, device)).cpu()
    assert d.dtype == dtype and d.shape == (80,)
    np.testing.assert_allclose(d.double().numpy(), np.asarray(W.sum(axis=1)).ravel(), rtol=1e-6)
    assert torch.all(d[-4:] == 0)


def test_check_symmetry(device):
    W = random_graph(n=50, n_edges=100, n_isolated=0, seed=6)
    normalized_laplacian(to_torch(W, torch.float64, device=device), check_symmetry=True)
    idx = torch.tensor([[0, 1], [1, 0]])
    bad = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0]), (2, 2)).to(device)
    with pytest.raises(ValueError, match=r"symmetric.*1\.000e\+00"):
        normalized_laplacian(bad, check_symmetry=True)


def _coo(idx, vals, shape=(3, 3), dtype=torch.float32):
    return lambda: torch.sparse_coo_tensor(
        torch.tensor(idx), torch.tensor(vals, dtype=dtype), shape, check_invariants=False
    )


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: torch.eye(3), r"sparse COO or CSR.*layout=torch\.strided"),
        (_coo([[0, 1], [1, 0]], [1.0, 1.0], shape=(3, 4)), r"square.*\(3, 4\)"),
        (_coo([[0], [0], [0]], [1.0], shape=(2, 2, 2)), r"2-D.*\(2, 2, 2\)"),
        (_coo([[0, 1], [1, 0]], [1.0, -0.5]), r"non-negative.*weights\[1, 0\]=-0\.5"),
        (_coo([[0, 1], [1, 0]], [float("nan"), 1.0]), r"NaN.*weights\[0, 1\]=nan"),
        (_coo([[0, 1], [1, 0]], [float("inf"), 1.0]), r"finite.*weights\[0, 1\]=inf"),
        (_coo([[0, 1], [1, 0]], [1, 1], dtype=torch.int64), r"float32 or float64.*torch\.int64"),
        (lambda: torch.eye(3).to_sparse_csc(), r"layout=torch\.sparse_csc"),
    ],
)
@pytest.mark.filterwarnings("ignore:Sparse CSC tensor support is in beta")
def test_bad_inputs_raise_value_error(make, match):
    weights = make()
    with pytest.raises(ValueError, match=match):
        normalized_laplacian(weights)
    with pytest.raises(ValueError, match=match):
        degree_vector(weights)


def test_non_tensor_raises_type_error():
    with pytest.raises(TypeError, match="weights must be a torch sparse tensor, got ndarray"):
        normalized_laplacian(np.eye(3))
