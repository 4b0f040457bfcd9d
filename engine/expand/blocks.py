"""Online step 2b: the induced candidate subgraphs ``W[c_b, c_b]`` of every query's pool, for
several graphs over the same chunks at once, as sparse block-diagonal graphs
(:class:`spectrag.kernels.blocks.BlockGraph`): only the blocks' edges, never ``B P^2`` entries.
numpy on the CPU, torch tensors on a device (:func:`spectrag.kernels.blocks.induced_blocks`).
"""

from __future__ import annotations

import scipy.sparse as sp
import torch

from spectrag.kernels.blocks import BlockGraph, induced_blocks
from spectrag.kernels.csr import TorchCSR


def candidate_blocks(candidates: torch.Tensor, graphs: list[sp.csr_matrix | TorchCSR]) -> list[BlockGraph]:
    """The induced subgraph of every pool in each graph (scipy CSR for a CPU batch, or
    :class:`TorchCSR` on the candidates' device). Shapes: ``candidates [B, P]`` (-1 padded) ->
    one :class:`BlockGraph` of ``B`` blocks ``P x P`` per graph."""
    if not graphs:
        return []
    arrays = [(g.indptr, g.indices, g.values) if isinstance(g, TorchCSR) else (g.indptr, g.indices, g.data)
              for g in graphs]
    n = len(arrays[0][0]) - 1
    return induced_blocks(candidates, arrays, n)
