"""Online step 2b: the induced candidate subgraphs ``W[c_b, c_b]`` of every query's pool, for
several graphs over the same chunks at once, as sparse block-diagonal graphs
(:class:`spectrag.kernels.blocks.BlockGraph`): only the blocks' edges, never ``B P^2`` entries.
A compiled kernel on the CPU (:mod:`spectrag.kernels.compiled.blocks`), torch tensors on a
device (:func:`spectrag.kernels.blocks.induced_blocks`, its reference): the same arrays.
"""

from __future__ import annotations

import scipy.sparse as sp
import torch

from spectrag.kernels.blocks import BlockGraph, induced_blocks
from spectrag.kernels.compiled.blocks import induced_blocks_compiled
from spectrag.kernels.csr import TorchCSR


def candidate_blocks(candidates: torch.Tensor, graphs: list[sp.csr_matrix | TorchCSR]) -> list[BlockGraph]:
    """The induced subgraph of every pool in each graph: scipy CSR graphs (a CPU batch, the
    compiled kernel) or :class:`TorchCSR` ones (torch, on the candidates' device). Shapes:
    ``candidates [B, P]`` (-1 padded) -> one :class:`BlockGraph` of ``B`` blocks ``P x P`` per graph."""
    if not graphs:
        return []
    if not isinstance(graphs[0], TorchCSR):
        n = graphs[0].shape[0]
        for g in graphs:
            if g.shape != (n, n):
                raise ValueError(f"graphs must all be over the same {n} nodes, got shape {g.shape}")
        return induced_blocks_compiled(candidates.cpu().numpy(), [(g.indptr, g.indices, g.data) for g in graphs])
    arrays = [(g.indptr, g.indices, g.values) for g in graphs]
    return induced_blocks(candidates, arrays, len(arrays[0][0]) - 1)
