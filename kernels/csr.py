"""CSR helpers shared by the kernels and the stages: torch CSR from CSR arrays (the one place that
picks the index width), CSR entries of a set of nodes (any device), dtype checks, block-diagonal
CSR of dense blocks, and :class:`TorchCSR` (a graph as plain index/value tensors)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch


def csr_entries(indptr: torch.Tensor, nodes: torch.Tensor, *,
                total: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Every CSR entry of every node in ``nodes``, all at once. ``total``: the sum of the
    nodes' degrees when the caller knows it (then the device is not asked for it: no host sync).

    Shapes: ``indptr [N + 1]``, ``nodes [M]`` (int64) -> owner (index into ``nodes``) and CSR
    position, both ``[sum of the nodes' degrees]``, grouped by owner in order.
    """
    # index_select: several times faster than advanced indexing on the CPU
    start = indptr.index_select(0, nodes)
    deg = indptr.index_select(0, nodes + 1) - start
    owner = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), deg, output_size=total)
    first = torch.cumsum(deg, 0) - deg
    pos = (start - first).index_select(0, owner) + torch.arange(owner.numel(), device=nodes.device)
    return owner, pos


def check_sparse_dtype(M: torch.Tensor, name: str) -> None:
    """Raise a clear TypeError where torch has no sparse product for ``M``'s dtype."""
    if M.device.type == "cpu" and M.dtype in (torch.float16, torch.bfloat16):
        raise TypeError(
            f"{name} as sparse CSR in {M.dtype} on the CPU: torch's CPU sparse product (MKL) "
            f"supports float32/float64 only; use a float32 X on the CPU ({M.dtype} works on CUDA, "
            f"and in the dense-block kernels)"
        )


def torch_csr(indptr, indices, values, shape: tuple[int, int], *, dtype: torch.dtype | None = None,
              device: str | torch.device = "cpu") -> torch.Tensor:
    """A torch sparse CSR ``[rows, cols]`` from CSR arrays (numpy, e.g. a scipy matrix's, or
    tensors; copied, so read-only memory maps are fine), on ``device``, with int32 indices on
    the CPU when they fit (see :func:`csr_int32`) and int64 elsewhere."""
    device = torch.device(device)
    values = torch.as_tensor(np.asarray(values) if not torch.is_tensor(values) else values)
    fits = max(shape[0], shape[1], values.numel()) < 2**31
    index = torch.int32 if device.type == "cpu" and fits else torch.int64

    def ints(a) -> torch.Tensor:
        return torch.as_tensor(np.array(a) if not torch.is_tensor(a) else a).to(index)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(ints(indptr), ints(indices), values.clone().to(dtype or values.dtype),
                                       size=tuple(shape), check_invariants=False).to(device)


def csr_int32(M: torch.Tensor) -> torch.Tensor:
    """``M`` (sparse CSR) with int32 indices on the CPU when they fit; else ``M`` unchanged.

    torch's CPU CSR product (MKL) was as fast or faster with int32 indices than with int64 in
    most cases of the SpMM benchmark (``bench/bench_spmm.py``, bench/results/roofline_cpu.md),
    and the indices take half the bytes.
    An operator built with int32 indices once skips this conversion (one pass over them).
    """
    if M.device.type != "cpu" or M.crow_indices().dtype == torch.int32:
        return M
    if max(M.shape[0], M.shape[1], M.values().numel()) >= 2**31:
        return M
    return torch.sparse_csr_tensor(
        M.crow_indices().to(torch.int32), M.col_indices().to(torch.int32), M.values(), size=M.shape,
        check_invariants=False,  # same structure as M, which is valid
    )


BLOCK_SPMM = ("auto", "dense", "sparse")


def use_sparse_blocks(blocks: torch.Tensor, spmm: str, max_density: float = 0.25) -> bool:
    """Whether to apply ``[B, P, P]`` blocks as one block-diagonal CSR instead of ``bmm``.

    ``auto``: on the CPU, in float32/float64, when at most ``max_density`` of the entries are
    nonzero (at P = 200 and ~20 nonzeros per row the CSR product was 10-20x faster than ``bmm``
    on a 2-core CPU, ``bench/results/roofline_cpu.md``); on CUDA ``bmm`` until measured there.
    """
    if spmm not in BLOCK_SPMM:
        raise ValueError(f"spmm must be one of {', '.join(BLOCK_SPMM)}, got {spmm!r}")
    if spmm != "auto":
        return spmm == "sparse"
    if blocks.device.type != "cpu" or blocks.dtype not in (torch.float32, torch.float64):
        return False
    return int(torch.count_nonzero(blocks)) <= max_density * blocks.numel()


def block_diagonal_csr(blocks: torch.Tensor) -> torch.Tensor:
    """``[B, P, P]`` dense blocks -> one ``[B P, B P]`` CSR with the blocks on its diagonal
    (int32 indices on the CPU), so that ``csr @ x.reshape(B P, C)`` equals ``bmm(blocks, x)``."""
    Bn, P = blocks.shape[0], blocks.shape[1]
    b, i, j = blocks.nonzero(as_tuple=True)  # row-major: rows ascend, columns ascend per row
    rows = b * P + i
    crow = torch.zeros(Bn * P + 1, dtype=torch.int64, device=blocks.device)
    torch.cumsum(torch.bincount(rows, minlength=Bn * P), 0, out=crow[1:])
    M = torch.sparse_csr_tensor(crow, b * P + j, blocks[b, i, j], size=(Bn * P, Bn * P), check_invariants=False)
    return csr_int32(M)


@dataclass(frozen=True)
class TorchCSR:
    """A square CSR graph as tensors on one device. Shapes: ``indptr [n + 1]``, ``indices [nnz]``
    (int64), ``values [nnz]`` float32."""

    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor

    @property
    def n(self) -> int:
        return self.indptr.numel() - 1

    @classmethod
    def from_scipy(cls, m, device: torch.device) -> "TorchCSR":
        """From a scipy CSR matrix (copied off any memory map onto ``device``)."""
        m = m.tocsr()
        return cls(torch.as_tensor(m.indptr, dtype=torch.int64).to(device),
                   torch.as_tensor(m.indices, dtype=torch.int64).to(device),
                   torch.as_tensor(m.data, dtype=torch.float32).to(device))
