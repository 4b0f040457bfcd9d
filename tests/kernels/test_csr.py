"""Operator preparation of the SpMM kernels (spectrag.kernels.csr, used by kernels/heat.py and
kernels/pagerank.py): int32 CPU CSR operators give the int64 results, half-precision sparse
operators on the CPU are a clear error, and the sparse block-diagonal path equals the dense
``bmm`` blocks. These are the CPU code paths of the roofline work (bench/bench_roofline.py): on
other devices ``csr_int32`` and ``use_sparse_blocks`` leave the operators as they are, so these
tests take no ``device``."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")


def _csr(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    dense = torch.rand(n, n, generator=g) * (torch.rand(n, n, generator=g) < 0.1)
    dense = dense + dense.T
    return dense.to_sparse_csr()


def test_csr_int32_same_product():
    from spectrag.kernels.csr import csr_int32

    A = _csr()
    A32 = csr_int32(A)
    assert A.crow_indices().dtype == torch.int64 and A32.crow_indices().dtype == torch.int32
    assert A32.col_indices().dtype == torch.int32 and csr_int32(A32) is A32
    X = torch.randn(60, 4)
    torch.testing.assert_close(A32 @ X, A @ X, rtol=0, atol=0)


def test_heat_and_ppr_take_int64_or_int32_operators_and_match_dense_references():
    """An int64 CSR and its int32 copy give the same heat and PPR bits (the kernels run the
    int32 operator either way), and both match dense references computed without the kernels:
    scipy's expm for the heat kernel, a dense solve of the personalized PageRank system."""
    import numpy as np
    import scipy.linalg

    from spectrag.kernels.csr import csr_int32
    from spectrag.kernels.heat import chebyshev_heat
    from spectrag.kernels.pagerank import personalized_pagerank, random_walk_operator

    A = _csr(seed=1)
    n = A.shape[0]
    deg = A.to_dense().sum(1)
    s = deg.clamp(min=1e-12).rsqrt()
    L = (torch.eye(n) - s[:, None] * A.to_dense() * s[None, :]).to_sparse_csr()
    X = torch.rand(n, 3, dtype=torch.float64)
    heat = chebyshev_heat(L.double(), X, 1.0)
    torch.testing.assert_close(heat, chebyshev_heat(csr_int32(L.double()), X, 1.0), rtol=0, atol=0)
    expm = scipy.linalg.expm(-L.to_dense().double().numpy()) @ X.numpy()
    np.testing.assert_allclose(heat.numpy(), expm, rtol=0, atol=1e-6)  # within the kernel's default tol = 1e-6
    op = random_walk_operator(A, dtype=torch.float64)
    assert op.PT.crow_indices().dtype == torch.int32
    r64 = personalized_pagerank(A.double(), X)
    torch.testing.assert_close(personalized_pagerank(op, X).scores, r64.scores, rtol=1e-12, atol=1e-14)
    # the dense reference: x = d P^T x + (1 - d) p with P = D^-1 A (no dangling node here), per column
    a = A.to_dense().double().numpy()
    assert (a.sum(1) > 0).all()
    PT = (a / a.sum(1, keepdims=True)).T
    d = 0.85
    p = X.numpy() / X.numpy().sum(0, keepdims=True)
    exact = np.linalg.solve(np.eye(n) - d * PT, (1 - d) * p)
    np.testing.assert_allclose(r64.scores.numpy(), exact / exact.sum(0, keepdims=True), rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_sparse_operator_on_cpu_is_a_clear_error(dtype):
    from spectrag.kernels.heat import chebyshev_heat
    from spectrag.kernels.pagerank import personalized_pagerank

    A = _csr(seed=2)
    X = torch.rand(A.shape[0], 2).to(dtype)
    with pytest.raises(TypeError, match=f"sparse CSR in {dtype} on the CPU.*float32"):
        chebyshev_heat(A, X, 1.0, lambda_max=100.0)
    with pytest.raises(TypeError, match=f"sparse CSR in {dtype} on the CPU"):
        personalized_pagerank(A, X)


@pytest.mark.parametrize("density", [0.05, 0.6])
def test_dense_block_kernels_same_result_as_block_diagonal_csr(density):
    from spectrag.kernels.csr import block_diagonal_csr, use_sparse_blocks
    from spectrag.kernels.heat import chebyshev_heat_dense_batched
    from spectrag.kernels.pagerank import personalized_pagerank_dense_batched

    g = torch.Generator().manual_seed(3)
    B, P = 6, 30
    A = torch.rand(B, P, P, generator=g, dtype=torch.float64) * (torch.rand(B, P, P, generator=g) < density)
    A = A + A.transpose(1, 2)
    mask = torch.rand(B, P, generator=g) < 0.9
    x = torch.rand(B, P, 3, generator=g, dtype=torch.float64)
    csr = block_diagonal_csr(A)
    torch.testing.assert_close((csr @ x.reshape(B * P, 3)).reshape(B, P, 3), torch.bmm(A, x), rtol=1e-12, atol=1e-12)
    assert use_sparse_blocks(A, "auto") == (density < 0.25)
    assert use_sparse_blocks(A, "sparse") and not use_sparse_blocks(A, "dense")
    d = A.sum(2).clamp(min=1e-30).rsqrt()
    L = torch.eye(P, dtype=torch.float64) - d[:, :, None] * A * d[:, None, :]
    heat = {s: chebyshev_heat_dense_batched(L, x, 1.0, mask=mask, spmm=s) for s in ("dense", "sparse", "auto")}
    ppr = {s: personalized_pagerank_dense_batched(A, x, mask=mask, spmm=s).scores for s in ("dense", "sparse", "auto")}
    for s in ("sparse", "auto"):
        torch.testing.assert_close(heat[s], heat["dense"], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ppr[s], ppr["dense"], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="spmm must be one of auto, dense, sparse"):
        chebyshev_heat_dense_batched(L, x, 1.0, spmm="csr")
    with pytest.raises(TypeError, match="L_blocks as sparse CSR in torch.bfloat16 on the CPU"):
        chebyshev_heat_dense_batched(L.bfloat16(), x.bfloat16(), 1.0, spmm="sparse")
