"""Gather-multiply-scatter over an edge list with one weight per (edge, query).

.. math::
    Y[j, b] = \\sum_{e : dst_e = j} W[e, b] \\, X[src_e, b]

This is a sparse-matrix times dense-block product where every query column has its own edge
weights (spreading activation weighs each relation by its similarity to the query), so it
cannot be one shared CSR SpMM. Shapes: ``src, dst [E]`` (int64), ``weight [E, B]``,
``x [N_src, B]`` -> ``[n_out, B]``. ``weight`` may also be ``[E]`` (shared by all queries) or
``[E, 1]``.

Backends: ``torch`` is the reference (``index_select``, multiply, ``index_add_``: the ``[E, B]``
messages are materialised); ``triton`` is one fused kernel (``kernels/triton/edge_propagate.py``)
summing in float32 over each target's edges in a fixed order: edges not sorted by ``dst`` are
sorted once (stable) by :func:`propagator`, so the result has the same bits on every run and for
a query alone or in a batch (the atomic kernel, whose order varies from run to run on a GPU, is
not used here). ``auto`` takes Triton only for CUDA tensors of a dtype below float64 when Triton is
installed, else torch: a float64 ``x`` asks for float64 sums, which the Triton kernels do not do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from spectrag.kernels import triton as _triton

__all__ = ["BACKENDS", "auto_backend", "edge_propagate", "propagator"]

BACKENDS = ("auto", "torch", "triton")


def _check(src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor, x: torch.Tensor, n_out: int) -> torch.Tensor:
    for name, t in (("src", src), ("dst", dst), ("weight", weight), ("x", x)):
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            raise TypeError(f"{name} must be a dense torch.Tensor, got {type(t).__name__}")
    if src.ndim != 1 or dst.ndim != 1 or src.shape != dst.shape:
        raise ValueError(f"src and dst must be 1-D of equal length, got {tuple(src.shape)} and {tuple(dst.shape)}")
    if src.dtype != torch.int64 or dst.dtype != torch.int64:
        raise ValueError(f"src and dst must be int64, got {src.dtype} and {dst.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be [N, B], got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"x must have a floating dtype, got {x.dtype}")
    if not weight.is_floating_point():
        raise TypeError(f"weight must have a floating dtype, got {weight.dtype}")
    if weight.ndim == 1:
        weight = weight[:, None]
    if weight.ndim != 2 or weight.shape[0] != src.shape[0] or weight.shape[1] not in (1, x.shape[1]):
        raise ValueError(f"weight must be [E] or [E, B] with E={src.shape[0]}, B={x.shape[1]}; got {tuple(weight.shape)}")
    if isinstance(n_out, bool) or not isinstance(n_out, int) or n_out < 0:
        raise ValueError(f"n_out must be an int >= 0, got {n_out!r}")
    devices = {t.device for t in (src, dst, weight, x)}
    if len(devices) > 1:
        raise ValueError(f"src, dst, weight and x must share one device, got {sorted(map(str, devices))}")
    if src.numel():  # O(E) next to the O(E B) product; the Triton kernels do not bounds-check
        for name, idx, hi, what in (("src", src, x.shape[0], "rows of x"), ("dst", dst, n_out, "n_out")):
            lo_v, hi_v = int(idx.min()), int(idx.max())
            if lo_v < 0 or hi_v >= hi:
                bad = lo_v if lo_v < 0 else hi_v
                raise ValueError(f"{name} must index [0, {hi}) ({what}), found {bad}")
    return weight


def auto_backend(device_type: str, dtype: torch.dtype) -> str:
    """What ``backend="auto"`` runs for ``x`` of this device type and dtype: Triton (float32
    sums) on CUDA for dtypes below float64 when it is installed, torch otherwise."""
    return "triton" if device_type == "cuda" and dtype != torch.float64 and _triton.available() else "torch"


def _resolve(backend: str, x: torch.Tensor) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return auto_backend(x.device.type, x.dtype)
    if backend == "triton":
        _triton.require("edge_propagate(backend='triton')")
        if x.device.type != "cuda" and not _triton.interpreting():
            raise ValueError(
                f"backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 for Triton's CPU "
                f"interpreter), got x on {x.device}"
            )
    return backend


def edge_propagate(
    src: torch.Tensor,
    dst: torch.Tensor,
    weight: torch.Tensor,
    x: torch.Tensor,
    n_out: int,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """``Y[dst_e, b] += weight[e, b] * x[src_e, b]`` for every edge ``e``; returns ``Y [n_out, B]``.

    Args:
        src, dst: edge endpoints, int64 ``[E]``; ``src`` indexes rows of ``x``, ``dst`` rows of
            the output (both range-checked).
        weight: per-edge, per-query weights ``[E, B]`` (or ``[E]`` / ``[E, 1]`` shared by all
            queries), any floating dtype.
        x: values on the source nodes ``[N_src, B]``, floating.
        n_out: number of output rows.
        backend: ``auto`` | ``torch`` | ``triton`` (default: auto). ``triton`` raises
            ImportError when Triton is not installed and ValueError for non-CUDA tensors unless
            ``TRITON_INTERPRET=1``.

    Returns:
        ``[n_out, B]`` in ``x``'s dtype (the torch path accumulates in it; Triton in float32).
        Rows no edge points to are 0.

    Shapes: src, dst ``[E]``; weight ``[E, B]``; x ``[N_src, B]`` -> ``[n_out, B]``.
    """
    return propagator(src, dst, weight, x, n_out, backend=backend)(x)


def propagator(
    src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor, x: torch.Tensor, n_out: int, *, backend: str = "auto"
) -> Callable[[torch.Tensor], torch.Tensor]:
    """:func:`edge_propagate` with the edges, weights and ``x``'s shape, dtype and device checked
    once: the returned function applies it to any ``x`` like the one given (rounds of
    spreading reuse one set of edges; the checks read index bounds back from the device)."""
    weight = _check(src, dst, weight, x, n_out)
    if _resolve(backend, x) == "triton":
        from spectrag.kernels.triton.edge_propagate import edge_propagate_triton

        if dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
            # the atomic kernel's float32 sums land in another order on every GPU run: sort the
            # edges by target once (stable: each row keeps its edges' order) for the segment
            # kernel, whose fixed order gives the same bits every run (E B copied once, reused
            # by every call of the returned function)
            order = torch.argsort(dst, stable=True)
            src, dst, weight = src.index_select(0, order), dst.index_select(0, order), weight.index_select(0, order)
        return lambda x: edge_propagate_triton(src, dst, weight, x, n_out, dst_sorted=True)
    return lambda x: _propagate_torch(src, dst, weight, x, n_out)


def _propagate_torch(src, dst, weight, x, n_out) -> torch.Tensor:
    out = torch.zeros((n_out, x.shape[1]), dtype=x.dtype, device=x.device)
    if src.numel() == 0:
        return out
    # (E, B): one gathered row per edge, scaled in place by that edge's weight for each query
    msg = x.index_select(0, src)
    msg.mul_(weight)
    return out.index_add_(0, dst, msg)
