"""Online step 2b: the induced candidate subgraphs ``W[c_b, c_b]`` of every query's pool, for
several graphs over the same chunks at once, as sparse block-diagonal graphs
(:class:`spectrag.kernels.blocks.BlockGraph`): only the blocks' edges, never ``B P^2`` entries.
Torch tensors on a device (:func:`spectrag.kernels.blocks.induced_blocks`); on the CPU the pools
over the whole graph's CSR (:class:`spectrag.kernels.compiled.blocks.PoolGraphs`), which the
compiled kernels read one pool at a time (``materialize()`` gives the same BlockGraph).
"""

from __future__ import annotations

import scipy.sparse as sp
import torch

from spectrag.kernels.blocks import BlockGraph, induced_blocks
from spectrag.kernels.compiled.blocks import PoolGraphs, pool_graphs
from spectrag.kernels.csr import TorchCSR


def candidate_blocks(candidates: torch.Tensor,
                     graphs: list[sp.csr_matrix | TorchCSR]) -> list[BlockGraph] | list[PoolGraphs]:
    """The induced subgraph of every pool in each graph: for scipy CSR graphs (a CPU batch)
    :class:`PoolGraphs` for the compiled kernels, for :class:`TorchCSR` ones (torch, on the
    candidates' device) a :class:`BlockGraph` each. Shapes: ``candidates [B, P]`` (-1 padded)
    -> one graph of ``B`` blocks ``P x P`` per graph."""
    if not graphs:
        return []
    if not isinstance(graphs[0], TorchCSR):
        n = graphs[0].shape[0]
        for g in graphs:
            if g.shape != (n, n):
                raise ValueError(f"graphs must all be over the same {n} nodes, got shape {g.shape}")
        return pool_graphs(candidates.cpu().numpy(), [(g.indptr, g.indices, g.data) for g in graphs])
    arrays = [(g.indptr, g.indices, g.values) for g in graphs]
    return induced_blocks(candidates, arrays, len(arrays[0][0]) - 1)
