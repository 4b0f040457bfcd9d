r"""Induced subgraphs of B candidate pools as one block-diagonal sparse graph.

Query ``b`` has a pool of ``P`` candidate nodes (``candidates [B, P]``, -1 padded). Its induced
subgraph ``W[c_b, c_b]`` is the ``P x P`` block ``b`` of a ``[B P, B P]`` block-diagonal matrix,
stored as CSR over the flat slots ``s = b P + i``: only the few thousand edges of each block
exist, never the ``B P^2`` dense entries.

Construction reads, for every real slot, its node's CSR row of ``W`` and keeps the entries
whose target lies in the same pool; the target's slot comes from a position table ``[B, n]``
when that is small (one gather per entry) or from a binary search over the sorted keys
``b n + node`` otherwise (torch, :func:`induced_blocks`; on the CPU a compiled kernel builds the
same arrays one pool at a time, :mod:`spectrag.kernels.compiled.blocks`). Rows keep ``W``'s column order inside each row: no sort of the
entries is needed, because the products used here (``torch.sparse.mm`` on CSR, gathers and
scatters) do not need sorted columns.

Symmetric ``W`` gives symmetric blocks, which the walk and Laplacian operators below use
(``P^T = A D^{-1}`` needs no transpose).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from spectrag.kernels.csr import csr_entries

# a position table [B, n] is used up to this many entries (int32: 4 bytes each)
POSITION_TABLE_MAX = 1 << 25


@dataclass(frozen=True)
class BlockGraph:
    """``B`` blocks of ``P x P`` as flat CSR. Shapes: ``crow [B P + 1]``, ``col [nnz]`` (flat
    slot of the target), ``val [nnz]`` float32; ``src [nnz]`` is each entry's flat row slot."""

    batch: int
    width: int
    crow: torch.Tensor
    col: torch.Tensor
    val: torch.Tensor
    src: torch.Tensor

    @property
    def nnz(self) -> int:
        return int(self.val.numel())

    @classmethod
    def from_dense(cls, blocks: torch.Tensor) -> "BlockGraph":
        """The nonzero entries of dense ``[B, P, P]`` blocks (row-major order, their dtype)."""
        batch, p = blocks.shape[0], blocks.shape[1]
        b, i, j = blocks.nonzero(as_tuple=True)
        src = b * p + i
        crow = torch.zeros(batch * p + 1, dtype=torch.int64, device=blocks.device)
        torch.cumsum(torch.bincount(src, minlength=batch * p), 0, out=crow[1:])
        return cls(batch, p, crow, b * p + j, blocks[b, i, j], src)

    def dense(self) -> torch.Tensor:
        """The blocks as a dense ``[B, P, P]`` tensor (for ``bmm`` where that is faster)."""
        out = torch.zeros(self.batch * self.width * self.width, dtype=self.val.dtype, device=self.val.device)
        p = self.width
        out[self.src * p + self.col % p] = self.val
        return out.reshape(self.batch, p, p)

    def operator(self, values: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The ``[B P, B P]`` sparse CSR with these entries (or ``values`` in their place)."""
        n = self.batch * self.width
        v = self.val if values is None else values
        index = torch.int32 if v.device.type == "cpu" and max(n, v.numel()) < 2**31 else torch.int64
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return torch.sparse_csr_tensor(self.crow.to(index), self.col.to(index), v.to(dtype or v.dtype),
                                           size=(n, n), check_invariants=False)


def induced_blocks(candidates: torch.Tensor, graphs: list[tuple], n: int) -> list[BlockGraph]:
    """The induced subgraph of every pool in each of several graphs over the same ``n`` nodes,
    locating the pools once, as torch tensors on the candidates' device (the reference of the
    compiled CPU kernels, :meth:`spectrag.kernels.compiled.blocks.PoolGraphs.materialize`).

    Args:
        candidates: ``[B, P]`` node ids, -1 padded (a node at most once per row).
        graphs: ``(indptr [n + 1], indices [nnz], values [nnz])`` CSR arrays (numpy or tensors).
        n: number of nodes.

    Shapes: -> one :class:`BlockGraph` per graph, ``batch = B``, ``width = P``.
    """
    for indptr, _, _ in graphs:
        if len(indptr) != n + 1:
            raise ValueError(f"graphs must all be over the same {n} nodes, got indptr of {len(indptr)} entries")
    return _induced_torch(candidates, graphs, n)


def _blocks_of(batch: int, p: int, src: torch.Tensor, dst: torch.Tensor, val: torch.Tensor) -> BlockGraph:
    crow = torch.zeros(batch * p + 1, dtype=torch.int64, device=src.device)
    torch.cumsum(torch.bincount(src, minlength=batch * p), 0, out=crow[1:])
    return BlockGraph(batch, p, crow, dst, val, src)


def _induced_torch(candidates: torch.Tensor, graphs: list[tuple], n: int) -> list[BlockGraph]:
    dev = candidates.device
    batch, p = candidates.shape
    flat = candidates.reshape(-1)
    slot = torch.nonzero(flat >= 0).squeeze(1)
    node = flat[slot]
    query = slot // p
    if batch * n <= POSITION_TABLE_MAX:
        table = torch.full((batch * n,), -1, dtype=torch.int64, device=dev)
        table[query * n + node] = slot

        def locate(keys: torch.Tensor) -> torch.Tensor:
            return table[keys]
    else:
        keys_sorted, order = torch.sort(query * n + node)
        slots_sorted = slot[order]

        def locate(keys: torch.Tensor) -> torch.Tensor:
            at = torch.searchsorted(keys_sorted, keys).clamp(max=max(keys_sorted.numel() - 1, 0))
            hit = keys_sorted[at] == keys if keys_sorted.numel() else torch.zeros_like(keys, dtype=torch.bool)
            return torch.where(hit, slots_sorted[at], torch.full_like(keys, -1))

    out = []
    for indptr, indices, values in graphs:
        indptr, indices, values = (torch.as_tensor(a, device=dev) for a in (indptr, indices, values))
        owner, pos = csr_entries(indptr.to(torch.int64), node)
        src = slot[owner]
        dst = locate(query[owner] * n + indices[pos].to(torch.int64))
        keep = torch.nonzero(dst >= 0).squeeze(1)  # one host read per graph, then gathers
        out.append(_blocks_of(batch, p, src.index_select(0, keep), dst.index_select(0, keep),
                              values.index_select(0, pos.index_select(0, keep)).to(torch.float32)))
    return out


def row_sums(blocks: BlockGraph, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Weighted degree of every slot inside its block. Shapes: -> ``[B, P]``."""
    deg = torch.zeros(blocks.batch * blocks.width, dtype=dtype, device=blocks.val.device)
    deg.index_add_(0, blocks.src, blocks.val.to(dtype))
    return deg.reshape(blocks.batch, blocks.width)


def block_laplacian_csr(blocks: BlockGraph, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    r"""``L = I - D^{-1/2} A D^{-1/2}`` of every (symmetric) block as one ``[B P, B P]`` CSR with
    the identity on its diagonal; a degree-0 slot (isolated or padding) keeps ``L_ii = 1``, as
    :func:`spectrag.kernels.laplacian.block_laplacian` does for dense blocks."""
    deg = row_sums(blocks, torch.float64).reshape(-1)
    inv = torch.where(deg > 0, deg.clamp(min=1e-300).rsqrt(), torch.zeros_like(deg))
    off = -(inv[blocks.src] * blocks.val.to(torch.float64) * inv[blocks.col])
    n = blocks.batch * blocks.width
    ar = torch.arange(n, device=blocks.val.device)
    # diagonal first in every row, then the row's edges (CSR rows need not be sorted)
    counts = blocks.crow[1:] - blocks.crow[:-1]
    crow = torch.zeros(n + 1, dtype=torch.int64, device=ar.device)
    torch.cumsum(counts + 1, 0, out=crow[1:])
    where = crow[:-1]  # start of each row: the diagonal
    edge_at = where[blocks.src] + 1 + (torch.arange(blocks.nnz, device=ar.device) - blocks.crow[blocks.src])
    col = torch.empty(n + blocks.nnz, dtype=torch.int64, device=ar.device)
    val = torch.empty(n + blocks.nnz, dtype=torch.float64, device=ar.device)
    col[where], val[where] = ar, 1.0
    col[edge_at], val[edge_at] = blocks.col, off
    index = torch.int32 if ar.device.type == "cpu" and col.numel() < 2**31 else torch.int64
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow.to(index), col.to(index), val.to(dtype), size=(n, n), check_invariants=False)
