"""Induced subgraphs of every query's candidate pool, compiled: the same
:class:`~spectrag.kernels.blocks.BlockGraph` as :func:`spectrag.kernels.blocks.induced_blocks`
(entries grouped by flat slot ``b P + i``, each row in the graph's column order), built per
query from a node -> slot table of that query's pool, in two passes (count, then fill)."""

from __future__ import annotations

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


def induced_blocks_compiled(candidates: np.ndarray, graphs: list[tuple], *, threads: int | None = None) -> list[BlockGraph]:
    """:func:`spectrag.kernels.blocks.induced_blocks` on the CPU, compiled. ``candidates [B, P]``
    (int64, -1 padded, a node at most once per row); ``graphs``: ``(indptr, indices, values)``
    numpy CSR arrays over the same ``n`` nodes -> one BlockGraph per graph."""
    candidates = np.ascontiguousarray(candidates, np.int64)
    batch, width = candidates.shape
    out = []
    for indptr, indices, values in graphs:
        counts = np.empty(batch * width, np.int64)
        parallel_rows(_count_rows, batch, candidates, indptr, indices, counts, threads=threads)
        crow = np.zeros(batch * width + 1, np.int64)
        np.cumsum(counts, out=crow[1:])
        nnz = int(crow[-1])
        col, src = np.empty(nnz, np.int64), np.empty(nnz, np.int64)
        val = np.empty(nnz, np.float32)
        parallel_rows(_fill_rows, batch, candidates, indptr, indices, values, crow, col, val, src, threads=threads)
        out.append(BlockGraph(batch, width, torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val),
                              torch.from_numpy(src)))
    return out
