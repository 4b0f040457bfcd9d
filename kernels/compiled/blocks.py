"""Induced subgraphs of every query's candidate pool on the CPU.

:class:`PoolGraphs` is what the compiled kernels take: the pools and the whole graph's CSR,
nothing built; each kernel reads a pool's edges from the CSR rows of its members through a
node -> slot table, one query at a time, in the graph's column order (so its sums add their
terms in the order of the torch kernels' block CSR). :meth:`PoolGraphs.materialize` builds the
same :class:`~spectrag.kernels.blocks.BlockGraph` as :func:`spectrag.kernels.blocks.induced_blocks`
(entries grouped by flat slot ``b P + i``) for the torch kernels, in two passes (count, fill)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.compiled.runtime import jit, parallel_rows


def _count_rows(lo, hi, candidates, indptr, indices, counts):
    n = indptr.shape[0] - 1
    width = candidates.shape[1]
    slot_of = np.full(n, -1, np.int64)
    for b in range(lo, hi):
        for i in range(width):
            v = candidates[b, i]
            if v >= 0:
                slot_of[v] = i
        for i in range(width):
            v = candidates[b, i]
            c = 0
            if v >= 0:
                for e in range(indptr[v], indptr[v + 1]):
                    if slot_of[indices[e]] >= 0:
                        c += 1
            counts[b * width + i] = c
        for i in range(width):
            v = candidates[b, i]
            if v >= 0:
                slot_of[v] = -1


def _fill_rows(lo, hi, candidates, indptr, indices, data, crow, col, val, src):
    n = indptr.shape[0] - 1
    width = candidates.shape[1]
    slot_of = np.full(n, -1, np.int64)
    for b in range(lo, hi):
        for i in range(width):
            v = candidates[b, i]
            if v >= 0:
                slot_of[v] = i
        for i in range(width):
            v = candidates[b, i]
            if v < 0:
                continue
            at = crow[b * width + i]
            for e in range(indptr[v], indptr[v + 1]):
                j = slot_of[indices[e]]
                if j >= 0:
                    col[at] = b * width + j
                    val[at] = data[e]
                    src[at] = b * width + i
                    at += 1
        for i in range(width):
            v = candidates[b, i]
            if v >= 0:
                slot_of[v] = -1


_count_rows = jit(_count_rows)
_fill_rows = jit(_fill_rows)


@dataclass(frozen=True)
class PoolGraphs:
    """The induced subgraphs of ``B`` pools of ``P`` candidates, unbuilt. Shapes:
    ``candidates [B, P]`` (int64, -1 padded, a node at most once per row), CSR ``[n, n]``."""

    candidates: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    @property
    def batch(self) -> int:
        return int(self.candidates.shape[0])

    @property
    def width(self) -> int:
        return int(self.candidates.shape[1])

    def materialize(self, threads: int | None = None) -> BlockGraph:
        """The pools as a :class:`BlockGraph` (for the torch kernels, e.g. the heat kernel)."""
        batch, width = self.candidates.shape
        counts = np.empty(batch * width, np.int64)
        parallel_rows(_count_rows, batch, self.candidates, self.indptr, self.indices, counts, threads=threads)
        crow = np.zeros(batch * width + 1, np.int64)
        np.cumsum(counts, out=crow[1:])
        nnz = int(crow[-1])
        col, src = np.empty(nnz, np.int64), np.empty(nnz, np.int64)
        val = np.empty(nnz, np.float32)
        parallel_rows(_fill_rows, batch, self.candidates, self.indptr, self.indices, self.data, crow, col, val, src,
                      threads=threads)
        return BlockGraph(batch, width, torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val),
                          torch.from_numpy(src))


def pool_graphs(candidates: np.ndarray, graphs: list[tuple]) -> list[PoolGraphs]:
    """One :class:`PoolGraphs` per graph: ``(indptr, indices, values)`` numpy CSR arrays over the same nodes."""
    candidates = np.ascontiguousarray(candidates, np.int64)
    n = int(candidates.max(initial=-1)) + 1
    out = []
    for indptr, indices, values in graphs:
        if n > len(indptr) - 1:
            raise ValueError(f"candidate id {n - 1} is outside the graph's {len(indptr) - 1} nodes")
        out.append(PoolGraphs(candidates, indptr, indices, values))
    return out
