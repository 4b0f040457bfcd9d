"""Tests for spectrag.kernels.edge_propagate (torch backend) against a plain Python loop over edges."""

from __future__ import annotations

import pytest
import torch

from spectrag.kernels import triton as ktriton
from spectrag.kernels.edge_propagate import edge_propagate

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")


def loop_reference(src, dst, weight, x, n_out):
    """``Y[dst_e, b] += w[e, b] x[src_e, b]`` one edge and one column at a time, in float64."""
    B = x.shape[1]
    w = weight.double().reshape(src.shape[0], -1)
    y = [[0.0] * B for _ in range(n_out)]
    for e, (s, d) in enumerate(zip(src.tolist(), dst.tolist())):
        for b in range(B):
            y[d][b] += float(w[e, b if w.shape[1] > 1 else 0]) * float(x[s, b])
    return torch.tensor(y, dtype=torch.float64).reshape(n_out, B)


def random_edges(E, n_src, n_out, B, seed, weight_shape="EB"):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n_src, (E,), generator=g)
    dst = torch.randint(0, n_out, (E,), generator=g)
    shape = {"EB": (E, B), "E": (E,), "E1": (E, 1)}[weight_shape]
    weight = torch.rand(shape, generator=g)
    x = torch.randn(n_src, B, generator=g)
    return src, dst, weight, x


@pytest.mark.parametrize("weight_shape", ["EB", "E", "E1"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_loop(weight_shape, seed):
    src, dst, weight, x = random_edges(300, 40, 30, 5, seed, weight_shape)
    y = edge_propagate(src, dst, weight, x, 30, backend="torch")
    assert y.shape == (30, 5) and y.dtype == x.dtype
    torch.testing.assert_close(y.double(), loop_reference(src, dst, weight, x, 30), rtol=1e-5, atol=1e-5)


def test_float64_exact_and_auto_is_torch_on_cpu():
    src, dst, weight, x = random_edges(200, 25, 25, 3, 2)
    x, weight = x.double(), weight.double()
    ref = loop_reference(src, dst, weight, x, 25)
    torch.testing.assert_close(edge_propagate(src, dst, weight, x, 25), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(edge_propagate(src, dst, weight, x, 25, backend="auto"), ref, rtol=1e-12, atol=1e-12)


def test_batched_equals_columns_one_at_a_time():
    src, dst, weight, x = random_edges(500, 50, 60, 7, 3)
    y = edge_propagate(src, dst, weight, x, 60)
    for b in range(7):
        yb = edge_propagate(src, dst, weight[:, b], x[:, b : b + 1], 60)
        torch.testing.assert_close(y[:, b : b + 1], yb, rtol=1e-6, atol=1e-6)


def test_mixed_dtypes_follow_x():
    src, dst, weight, x = random_edges(100, 20, 20, 4, 4)
    y = edge_propagate(src, dst, weight.double(), x.bfloat16(), 20)
    assert y.dtype == torch.bfloat16
    ref = loop_reference(src, dst, weight, x.bfloat16().float(), 20)
    torch.testing.assert_close(y.double(), ref, rtol=0.05, atol=0.05)


def test_empty_edges_and_empty_output():
    x = torch.randn(5, 3)
    none = torch.zeros(0, dtype=torch.int64)
    y = edge_propagate(none, none, torch.zeros(0, 3), x, 7)
    assert y.shape == (7, 3) and not y.any()
    assert edge_propagate(none, none, torch.zeros(0), x, 0).shape == (0, 3)
    isolated = edge_propagate(torch.tensor([0]), torch.tensor([2]), torch.tensor([2.0]), x, 4)
    assert not isolated[[0, 1, 3]].any() and torch.equal(isolated[2], 2 * x[0])


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(src=torch.zeros(3, dtype=torch.int32)), ValueError, "int64"),
        (dict(dst=torch.zeros(2, dtype=torch.int64)), ValueError, "equal length"),
        (dict(src=torch.zeros(3, 1, dtype=torch.int64)), ValueError, "1-D"),
        (dict(x=torch.randn(4)), ValueError, r"x must be \[N, B\]"),
        (dict(x=torch.ones(4, 2, dtype=torch.int64)), TypeError, "x must have a floating dtype"),
        (dict(weight=torch.ones(3, 2, dtype=torch.int64)), TypeError, "weight must have a floating"),
        (dict(weight=torch.ones(3, 5)), ValueError, r"weight must be \[E\] or \[E, B\]"),
        (dict(weight=torch.ones(4)), ValueError, "E=3"),
        (dict(n_out=-1), ValueError, "n_out"),
        (dict(n_out=2.0), ValueError, "n_out"),
        (dict(src=torch.tensor([0, 1, 4])), ValueError, r"src must index \[0, 4\).*found 4"),
        (dict(dst=torch.tensor([0, -1, 1])), ValueError, r"dst must index \[0, 3\).*found -1"),
        (dict(x=torch.randn(4, 2, device="meta")), ValueError, "share one device"),
        (dict(backend="cuda"), ValueError, "backend must be one of auto, torch, triton"),
        (dict(weight=[1.0, 2.0, 3.0]), TypeError, "weight must be a dense torch.Tensor"),
    ],
)
def test_bad_inputs_raise(change, error, match):
    args = dict(src=torch.tensor([0, 1, 3]), dst=torch.tensor([0, 2, 1]), weight=torch.ones(3, 2),
                x=torch.randn(4, 2), n_out=3, backend="torch")
    args.update(change)
    with pytest.raises(error, match=match):
        edge_propagate(**args)


def test_triton_backend_refuses_cpu_tensors_without_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    src, dst, weight, x = random_edges(10, 5, 5, 2, 5)
    if ktriton.available():
        with pytest.raises(ValueError, match="needs CUDA tensors.*TRITON_INTERPRET=1"):
            edge_propagate(src, dst, weight, x, 5, backend="triton")
    else:
        with pytest.raises(ImportError, match="pip install"):
            edge_propagate(src, dst, weight, x, 5, backend="triton")


# -- operator preparation of the SpMM kernels (kernels/heat.py, kernels/pagerank.py) ----------
# The roofline work (bench/bench_roofline.py) switched their CPU CSR operators to int32
# indices and made half-precision sparse operators on the CPU a clear error; held here.


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


def test_heat_and_ppr_same_result_with_int64_or_int32_operators():
    from spectrag.kernels.csr import csr_int32
    from spectrag.kernels.heat import chebyshev_heat
    from spectrag.kernels.pagerank import personalized_pagerank, random_walk_operator

    A = _csr(seed=1)
    n = A.shape[0]
    deg = A.to_dense().sum(1)
    s = deg.clamp(min=1e-12).rsqrt()
    L = (torch.eye(n) - s[:, None] * A.to_dense() * s[None, :]).to_sparse_csr()
    X = torch.rand(n, 3, dtype=torch.float64)
    torch.testing.assert_close(
        chebyshev_heat(L.double(), X, 1.0), chebyshev_heat(csr_int32(L.double()), X, 1.0), rtol=0, atol=0
    )
    op = random_walk_operator(A, dtype=torch.float64)
    assert op.PT.crow_indices().dtype == torch.int32
    r64 = personalized_pagerank(A.double(), X)
    torch.testing.assert_close(personalized_pagerank(op, X).scores, r64.scores, rtol=1e-12, atol=1e-14)


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
