"""Tests for spectrag.kernels.edge_propagate (torch backend) against a plain Python loop over edges,
on the ``device`` fixture's devices (the backend is named: ``auto`` takes Triton on CUDA below
float64, tested in tests/kernels/test_triton_edge_propagate.py). Tolerances per dtype: float64
sums against the float64 loop 1e-12, float32 ones 1e-5."""

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


def on(device, *tensors):
    return tuple(t.to(device) for t in tensors)


@pytest.mark.parametrize("weight_shape", ["EB", "E", "E1"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_loop(weight_shape, seed, device):
    src, dst, weight, x = random_edges(300, 40, 30, 5, seed, weight_shape)
    y = edge_propagate(*on(device, src, dst, weight, x), 30, backend="torch")
    assert y.shape == (30, 5) and y.dtype == x.dtype and y.device.type == device.type
    torch.testing.assert_close(y.double().cpu(), loop_reference(src, dst, weight, x, 30), rtol=1e-5, atol=1e-5)


def test_float64_exact_and_auto_is_torch_on_cpu(device):
    src, dst, weight, x = random_edges(200, 25, 25, 3, 2)
    x, weight = x.double(), weight.double()
    ref = loop_reference(src, dst, weight, x, 25)
    y = edge_propagate(*on(device, src, dst, weight, x), 25, backend="torch")
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-12, atol=1e-12)
    # float64: auto stays on torch on every device (Triton sums in float32), so float64 tolerances
    x, weight, src, dst = on(device, x, weight, src, dst)
    torch.testing.assert_close(edge_propagate(src, dst, weight, x, 25).cpu(), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(edge_propagate(src, dst, weight, x, 25, backend="auto").cpu(), ref, rtol=1e-12, atol=1e-12)


def test_auto_backend_choice():
    from spectrag.kernels.edge_propagate import auto_backend

    assert auto_backend("cpu", torch.float32) == "torch"
    assert auto_backend("cuda", torch.float64) == "torch"  # float64 sums: the Triton kernels sum in float32
    assert auto_backend("cuda", torch.float32) == ("triton" if ktriton.available() else "torch")
    assert auto_backend("cuda", torch.bfloat16) == ("triton" if ktriton.available() else "torch")


def test_triton_path_gets_edges_sorted_by_target(monkeypatch):
    """The Triton path never takes the atomic kernel (its float32 sums land in another order on
    every GPU run): :func:`propagator` sorts unsorted edges by target once, stably, and hands the
    segment kernel ``dst_sorted=True``. Checked on the CPU with the kernel replaced by the torch
    reference, which sums each row in the order it is given: the result must be bitwise the
    reference on the stably sorted edges (and close to the unsorted one)."""
    import spectrag.kernels.edge_propagate as ep
    import spectrag.kernels.triton.edge_propagate as tep

    calls = []

    def fake(src, dst, weight, x, n_out, *, dst_sorted=None):
        calls.append(dst_sorted)
        assert dst_sorted is True and bool((dst[1:] >= dst[:-1]).all()), "the segment kernel got unsorted edges"
        return ep._propagate_torch(src, dst, weight, x, n_out)

    monkeypatch.setattr(tep, "edge_propagate_triton", fake)
    monkeypatch.setattr(ep, "_resolve", lambda backend, x: "triton")
    for shape in ("EB", "E"):
        src, dst, weight, x = random_edges(400, 30, 20, 4, 9, shape)
        weight2 = weight.reshape(400, -1)  # [E] is one weight per edge for every column
        step = ep.propagator(src, dst, weight, x, 20, backend="triton")
        got = step(x)
        assert torch.equal(step(x), got)
        order = torch.argsort(dst, stable=True)
        want = ep._propagate_torch(src[order], dst[order], weight2[order], x, 20)
        assert torch.equal(got, want)
        torch.testing.assert_close(got, ep._propagate_torch(src, dst, weight2, x, 20), rtol=1e-5, atol=1e-5)
    assert calls and all(calls)


def test_batched_equals_columns_one_at_a_time(device):
    src, dst, weight, x = on(device, *random_edges(500, 50, 60, 7, 3))
    y = edge_propagate(src, dst, weight, x, 60, backend="torch")
    for b in range(7):
        yb = edge_propagate(src, dst, weight[:, b], x[:, b : b + 1], 60, backend="torch")
        torch.testing.assert_close(y[:, b : b + 1], yb, rtol=1e-6, atol=1e-6)


def test_mixed_dtypes_follow_x(device):
    src, dst, weight, x = random_edges(100, 20, 20, 4, 4)
    y = edge_propagate(*on(device, src, dst, weight.double(), x.bfloat16()), 20, backend="torch")
    assert y.dtype == torch.bfloat16
    ref = loop_reference(src, dst, weight, x.bfloat16().float(), 20)
    torch.testing.assert_close(y.double().cpu(), ref, rtol=0.05, atol=0.05)


def test_empty_edges_and_empty_output(device):
    x = torch.randn(5, 3).to(device)
    none = torch.zeros(0, dtype=torch.int64, device=device)
    y = edge_propagate(none, none, torch.zeros(0, 3, device=device), x, 7, backend="torch")
    assert y.shape == (7, 3) and not y.any()
    assert edge_propagate(none, none, torch.zeros(0, device=device), x, 0, backend="torch").shape == (0, 3)
    isolated = edge_propagate(*on(device, torch.tensor([0]), torch.tensor([2]), torch.tensor([2.0])), x, 4, backend="torch")
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
