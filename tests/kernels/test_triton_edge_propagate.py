"""The Triton edge_propagate kernels (spectrag.kernels.triton.edge_propagate) against the torch
reference on the CPU: on CPU tensors in Triton's interpreter (``TRITON_INTERPRET=1``), on CUDA
tensors (the ``device`` fixture's cuda run) as compiled kernels. Skipped when Triton is not
installed (``pip install -e '.[gpu]'``). (Here, not in a tests/kernels/triton/ folder: with
tests/kernels on sys.path such a folder is a namespace package ``triton``, and
``spectrag.kernels.triton.available()`` would find it where Triton is not installed.)"""

from __future__ import annotations

import pytest
import torch

from spectrag.kernels import triton as ktriton
from spectrag.kernels.edge_propagate import edge_propagate

pytestmark = pytest.mark.skipif(
    not ktriton.available(), reason="triton is not installed (pip install -e '.[gpu]'); the torch backend is tested instead"
)


@pytest.fixture
def on(device, monkeypatch):
    """Put tensors on ``device``: CPU tensors run in the interpreter, CUDA ones compiled (the
    variable is read when the JIT functions are first built: ``..triton.edge_propagate._kernels``)."""
    if device.type == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    return lambda *tensors: tuple(t.to(device) for t in tensors)


def problem(E, n_src, n_out, B, seed, *, sort_dst, weight_shape="EB", dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n_src, (E,), generator=g)
    dst = torch.randint(0, n_out, (E,), generator=g)
    if sort_dst:
        dst = dst.sort().values
    shape = {"EB": (E, B), "E": (E,), "E1": (E, 1)}[weight_shape]
    return src, dst, torch.rand(shape, generator=g), torch.randn(n_src, B, generator=g).to(dtype)


@pytest.mark.parametrize("sort_dst", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("B", [1, 3, 70])  # 70 spans two column tiles of 64
@pytest.mark.parametrize("weight_shape", ["EB", "E"])
def test_matches_torch(sort_dst, B, weight_shape, on):
    src, dst, weight, x = problem(150, 20, 12, B, B, sort_dst=sort_dst, weight_shape=weight_shape)
    y = edge_propagate(*on(src, dst, weight, x), 12, backend="triton")
    ref = edge_propagate(src.clone(), dst.clone(), weight.double(), x.double(), 12, backend="torch")
    assert y.shape == (12, B) and y.dtype == torch.float32
    torch.testing.assert_close(y.double().cpu(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sort_dst", [True, False], ids=["sorted", "unsorted"])
def test_long_segments_and_rows_without_edges(sort_dst, on):
    # 100 edges into 3 of 8 rows: segments longer than BLOCK_E, and empty rows must be 0
    g = torch.Generator().manual_seed(7)
    src = torch.randint(0, 10, (100,), generator=g)
    dst = torch.tensor([1] * 40 + [4] * 45 + [6] * 15)
    if not sort_dst:
        dst = dst[torch.randperm(100, generator=g)]
    weight, x = torch.rand(100, 5, generator=g), torch.randn(10, 5, generator=g)
    y = edge_propagate(*on(src, dst, weight, x), 8, backend="triton").cpu()
    torch.testing.assert_close(y, edge_propagate(src, dst, weight, x, 8, backend="torch"), rtol=1e-5, atol=1e-5)
    assert not y[[0, 2, 3, 5, 7]].any()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sort_dst", [True, False], ids=["sorted", "unsorted"])
def test_half_precision_state_accumulates_in_float32(dtype, sort_dst, on):
    src, dst, weight, x = problem(200, 15, 10, 4, 11, sort_dst=sort_dst, dtype=dtype)
    y = edge_propagate(*on(src, dst, weight, x), 10, backend="triton").cpu()
    assert y.dtype == dtype
    ref = edge_propagate(src, dst, weight.double(), x.double(), 10, backend="torch")
    # float32 sums, one rounding to the output dtype: relative error ~ its eps
    eps = torch.finfo(dtype).eps
    assert float(((y.double() - ref).abs() / ref.abs().clamp(min=1.0)).max()) <= 2 * eps


def test_empty_inputs(on):
    x = torch.randn(4, 3)
    none = torch.zeros(0, dtype=torch.int64)
    y = edge_propagate(*on(none, none, torch.zeros(0, 3), x), 5, backend="triton")
    assert y.shape == (5, 3) and not y.any()


def test_auto_stays_on_torch_for_cpu_tensors(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    src, dst, weight, x = problem(50, 10, 10, 2, 3, sort_dst=False)
    # the interpreter is on, but auto only takes Triton for CUDA tensors: identical to torch
    assert torch.equal(edge_propagate(src, dst, weight, x, 10), edge_propagate(src, dst, weight, x, 10, backend="torch"))


@pytest.mark.parametrize("kernel", ["segments", "atomics"])
def test_each_kernel_directly(kernel, on):
    """Both JIT kernels by :func:`edge_propagate_triton` (``edge_propagate`` sorts unsorted edges
    for the segment kernel, so the atomic one is reached only here), float32 sums against the
    float64 torch reference: 1e-5."""
    from spectrag.kernels.triton.edge_propagate import edge_propagate_triton

    src, dst, weight, x = problem(300, 25, 14, 5, 13, sort_dst=kernel == "segments")
    y = edge_propagate_triton(*on(src, dst, weight, x), 14, dst_sorted=kernel == "segments").cpu()
    ref = edge_propagate(src, dst, weight.double(), x.double(), 14, backend="torch")
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_unsorted_edges_give_the_same_bits_every_run(on):
    """Unsorted ``dst``: the same bits on every run (on CUDA the atomic kernel's would vary)."""
    src, dst, weight, x = problem(5000, 300, 40, 8, 17, sort_dst=False)
    runs = [edge_propagate(*on(src, dst, weight, x), 40, backend="triton").cpu() for _ in range(3)]
    assert all(torch.equal(r, runs[0]) for r in runs[1:])
