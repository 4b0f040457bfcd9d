r"""Fused gather-multiply-scatter in Triton: the ``backend="triton"`` path of
:func:`spectrag.kernels.edge_propagate.edge_propagate`.

.. math::
    Y[j, b] = \sum_{e : dst_e = j} W[e, b] \, X[src_e, b]

The torch path materialises the ``[E, B]`` messages (gather, multiply, then ``index_add_``),
reading and writing ``E * B`` values three times; here every weight and gathered ``X`` value is
read once, multiplied in registers and summed in float32, and ``Y`` is written once.

Two kernels:

* **segments** (``dst`` sorted ascending, e.g. edges stored by destination at index time): one
  program per (output row, column tile) walks the row's edges ``rowptr[j]..rowptr[j+1]`` in
  tiles of ``BLOCK_E`` and stores the sum. Deterministic (fixed summation order) and no
  atomics; rows without edges get 0.
* **atomics** (any ``dst`` order): one program per (edge tile, column tile) adds its messages
  into a float32 ``Y`` with ``atomic_add``; the summation order, and so the last bits, vary
  from run to run on a GPU.

The JIT functions are built on first use, honouring ``TRITON_INTERPRET`` at that moment, so a
test can switch the interpreter on with ``monkeypatch.setenv`` before the first call.

Shapes: ``src, dst [E]`` int64; ``weight [E, B]`` (stride 0 over ``B`` for a shared ``[E]``
weight); ``x [N_src, B]`` -> ``[n_out, B]`` in ``x``'s dtype.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from spectrag.kernels.triton import interpreting, require

__all__ = ["edge_propagate_triton"]


@functools.lru_cache(maxsize=2)
def _kernels(interpret: bool) -> SimpleNamespace:
    """The two JIT kernels (``interpret`` only keys the cache: ``triton.jit`` reads the env)."""
    import triton
    import triton.language as tl

    @triton.jit
    def segment_kernel(
        rowptr_ptr, src_ptr, w_ptr, x_ptr, y_ptr, B,
        stride_we, stride_wb, stride_x, stride_y,
        BLOCK_E: tl.constexpr, BLOCK_B: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)  # row * stride_y may exceed 2^31
        cols = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
        cmask = cols < B
        start = tl.load(rowptr_ptr + row)
        end = tl.load(rowptr_ptr + row + 1)
        acc = tl.zeros([BLOCK_B], dtype=tl.float32)
        for e0 in range(start, end, BLOCK_E):
            e = e0 + tl.arange(0, BLOCK_E)  # int64: E * B may exceed 2^31
            emask = e < end
            s = tl.load(src_ptr + e, mask=emask, other=0)
            m2 = emask[:, None] & cmask[None, :]
            w = tl.load(w_ptr + e[:, None] * stride_we + cols[None, :] * stride_wb, mask=m2, other=0.0)
            v = tl.load(x_ptr + s[:, None] * stride_x + cols[None, :], mask=m2, other=0.0)
            acc += tl.sum(w.to(tl.float32) * v.to(tl.float32), axis=0)  # (BLOCK_B,)
        tl.store(y_ptr + row * stride_y + cols, acc.to(y_ptr.dtype.element_ty), mask=cmask)

    @triton.jit
    def atomic_kernel(
        src_ptr, dst_ptr, w_ptr, x_ptr, y_ptr, E, B,
        stride_we, stride_wb, stride_x, stride_y,
        BLOCK_E: tl.constexpr, BLOCK_B: tl.constexpr,
    ):
        e = tl.program_id(0).to(tl.int64) * BLOCK_E + tl.arange(0, BLOCK_E)
        cols = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
        emask = e < E
        m2 = emask[:, None] & (cols < B)[None, :]
        s = tl.load(src_ptr + e, mask=emask, other=0)
        d = tl.load(dst_ptr + e, mask=emask, other=0)
        w = tl.load(w_ptr + e[:, None] * stride_we + cols[None, :] * stride_wb, mask=m2, other=0.0)
        v = tl.load(x_ptr + s[:, None] * stride_x + cols[None, :], mask=m2, other=0.0)
        msg = w.to(tl.float32) * v.to(tl.float32)  # (BLOCK_E, BLOCK_B)
        tl.atomic_add(y_ptr + d[:, None] * stride_y + cols[None, :], msg, mask=m2)

    return SimpleNamespace(segment=segment_kernel, atomic=atomic_kernel, cdiv=triton.cdiv)


def _block_b(B: int) -> int:
    """Column tile: a power of two covering ``B`` up to 64 (wider tiles spill registers)."""
    return min(64, max(16, 1 << (max(B, 1) - 1).bit_length()))


def edge_propagate_triton(
    src: torch.Tensor,
    dst: torch.Tensor,
    weight: torch.Tensor,
    x: torch.Tensor,
    n_out: int,
    *,
    dst_sorted: bool | None = None,
) -> torch.Tensor:
    """``Y[dst_e, b] += weight[e, b] * x[src_e, b]`` with one fused Triton kernel.

    Inputs are assumed validated by :func:`spectrag.kernels.edge_propagate.edge_propagate` (int64
    indices in range, ``weight`` ``[E, B]`` or ``[E, 1]``, one device). ``dst_sorted`` picks
    the segment kernel (``True``) or the atomic one (``False``); ``None`` checks ``dst``.

    Shapes: src, dst ``[E]``; weight ``[E, B]`` / ``[E, 1]``; x ``[N_src, B]`` -> ``[n_out, B]``.
    """
    require("edge_propagate(backend='triton')")
    if x.device.type != "cuda" and not interpreting():
        raise ValueError(
            f"backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for Triton's CPU "
            f"interpreter), got tensors on {x.device}"
        )
    k = _kernels(interpreting())
    E, B = src.shape[0], x.shape[1]
    x = x.contiguous()
    if weight.shape[1] == 1:
        weight = weight.expand(E, B)  # stride 0 over B: one weight per edge for every column
    elif weight.stride(1) != 1:
        weight = weight.contiguous()
    if E == 0 or B == 0 or n_out == 0:
        return torch.zeros((n_out, B), dtype=x.dtype, device=x.device)
    if dst_sorted is None:
        dst_sorted = bool((dst[1:] >= dst[:-1]).all()) if E > 1 else True
    BLOCK_B = _block_b(B)
    if dst_sorted:
        counts = torch.bincount(dst, minlength=n_out)
        rowptr = torch.zeros(n_out + 1, dtype=torch.int64, device=x.device)
        torch.cumsum(counts, 0, out=rowptr[1:])
        y = torch.empty((n_out, B), dtype=x.dtype, device=x.device)
        grid = (n_out, k.cdiv(B, BLOCK_B))
        k.segment[grid](
            rowptr, src, weight, x, y, B,
            weight.stride(0), weight.stride(1), x.stride(0), y.stride(0),
            BLOCK_E=32, BLOCK_B=BLOCK_B,
        )
        return y
    y = torch.zeros((n_out, B), dtype=torch.float32, device=x.device)
    BLOCK_E = 64
    grid = (k.cdiv(E, BLOCK_E), k.cdiv(B, BLOCK_B))
    k.atomic[grid](
        src, dst, weight, x, y, E, B,
        weight.stride(0), weight.stride(1), x.stride(0), y.stride(0),
        BLOCK_E=BLOCK_E, BLOCK_B=BLOCK_B,
    )
    return y if x.dtype == torch.float32 else y.to(x.dtype)
