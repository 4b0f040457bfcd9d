"""Online step 3: proximity of every candidate to its query's seeds, on the induced candidate
subgraphs (:class:`spectrag.kernels.blocks.BlockGraph`: sparse, or as dense ``[B, P, P]`` blocks
with ``dense=True`` where ``bmm`` is faster), by three operators:

* ``heat``: :math:`\\exp(-t L_{sub})\\, r^+` with :math:`L_{sub}` the normalized Laplacian of the
  block and :math:`r^+` the clipped dense relevance (SpectRAG eq. 17);
* ``ppr``: personalized PageRank on the block restarting at the seeds (Algorithm 1, line 6);
* ``spectral``: max cosine between the candidate's spectral coordinates and the seeds' (eq. 13).

Each is scaled to [0, 1] per query (divided by its maximum over the pool). Mode ``spectral``
averages PPR and spectral proximity (:func:`pool_proximity`). A CPU batch (the pools as
:class:`~spectrag.kernels.compiled.blocks.PoolGraphs`, ``compiled=True``) runs PPR and the
spectral cosines by compiled kernels, one query at a time (:mod:`spectrag.kernels.compiled`),
equal to the torch versions here (their references) to float64 rounding.
"""

from __future__ import annotations

import torch

from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.compiled.blocks import PoolGraphs
from spectrag.kernels.compiled.gather import max_cosine_compiled
from spectrag.kernels.compiled.pagerank import personalized_pagerank_pools, seed_restart_compiled
from spectrag.kernels.heat import chebyshev_heat_blocks, chebyshev_heat_dense_batched
from spectrag.kernels.laplacian import block_laplacian
from spectrag.kernels.pagerank import (
    PageRankMatrix,
    RandomWalkOperator,
    personalized_pagerank,
    personalized_pagerank_blocks,
    personalized_pagerank_dense_batched,
)


def _scale(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    x = torch.where(mask, x, torch.zeros_like(x))
    peak = x.amax(dim=1, keepdim=True)
    return torch.where(peak > 0, x / peak.clamp(min=1e-30), torch.zeros_like(x))


def heat_proximity(blocks: BlockGraph | PoolGraphs, relevance: torch.Tensor, mask: torch.Tensor, t: float, *,
                   dense: bool = False) -> torch.Tensor:
    """Shapes: ``B`` blocks, relevance/mask ``[B, P]`` -> ``[B, P]`` in [0, 1]."""
    if isinstance(blocks, PoolGraphs):
        blocks = blocks.materialize()
    x = torch.where(mask, relevance.clamp(min=0), torch.zeros_like(relevance))
    if dense:
        return _scale(chebyshev_heat_dense_batched(block_laplacian(blocks.dense()), x, t, mask=mask), mask)
    return _scale(chebyshev_heat_blocks(blocks, x, t, mask=mask), mask)


def ppr_proximity(blocks: BlockGraph | PoolGraphs, restart: torch.Tensor, mask: torch.Tensor, *,
                  damping: float = 0.85, tol: float = 1e-8, dense: bool = False,
                  method: str = "chebyshev") -> torch.Tensor:
    """Shapes: ``B`` blocks, restart/mask ``[B, P]`` (restart > 0 on seeds) -> ``[B, P]``.
    ``method``: ``power`` or ``chebyshev`` (:func:`spectrag.kernels.pagerank.personalized_pagerank_blocks`).

    Iterated in float64: ``tol = 1e-8`` is the L1 change per node (networkx's test, which the
    reference uses), below float32's rounding of a unit-mass vector of a few hundred nodes.
    """
    restart = torch.where(mask, restart, torch.zeros_like(restart))
    empty = restart.sum(dim=1) <= 0
    restart = torch.where(empty[:, None] & mask, torch.ones_like(restart), restart)  # no seed: uniform
    restart = torch.where(mask, restart, torch.zeros_like(restart)).double()
    if isinstance(blocks, PoolGraphs):
        scores = personalized_pagerank_pools(blocks, restart, damping=damping, tol=tol, max_iter=200,
                                             method=method).scores
    elif dense:
        scores = personalized_pagerank_dense_batched(blocks.dense().double(), restart, mask=mask, damping=damping,
                                                     tol=tol, max_iter=200, method=method).scores
    else:
        scores = personalized_pagerank_blocks(blocks, restart, mask=mask, damping=damping, tol=tol, max_iter=200,
                                              method=method).scores
    return _scale(scores.to(torch.float32), mask)


def graph_ppr_proximity(walk: RandomWalkOperator | PageRankMatrix, candidates: torch.Tensor, seeds: torch.Tensor,
                        seed_weights: torch.Tensor, mask: torch.Tensor, *, damping: float = 0.85,
                        tol: float = 1e-8) -> torch.Tensor:
    """PPR over the whole chunk graph for all queries at once, restarting at each query's
    seeds, read at its candidates: by power iteration with B columns on ``walk`` (the transposed
    random-walk matrix, built once per state), or, for a small graph, exactly from its
    :class:`~spectrag.kernels.pagerank.PageRankMatrix` (a gather per query).
    Shapes: ``candidates [B, P]``, ``seeds / seed_weights [B, S]`` -> ``[B, P]``."""
    if isinstance(walk, PageRankMatrix):
        w = seed_weights.clamp(min=0)
        w = torch.where((w.sum(dim=1, keepdim=True) > 0) | (seeds < 0), w, torch.ones_like(w))  # no seed weight: uniform
        return _scale(walk.scores(seeds, w, at=candidates).to(torch.float32), mask)
    batch, n = candidates.shape[0], walk.n
    restart = torch.zeros(n, batch, dtype=torch.float64, device=candidates.device)
    ok = seeds >= 0
    cols = torch.arange(batch, device=seeds.device).unsqueeze(1).expand_as(seeds)
    restart.index_put_((seeds[ok], cols[ok]), seed_weights[ok].clamp(min=0).to(torch.float64), accumulate=True)
    empty = restart.sum(dim=0) <= 0
    restart[:, empty] = 1.0  # no seed: uniform
    scores = personalized_pagerank(walk, restart, damping=damping, tol=tol, max_iter=200).scores  # (n, B)
    at = scores.T.gather(1, candidates.clamp(min=0))
    return _scale(at.to(torch.float32), mask)


def spectral_proximity(coords: torch.Tensor, candidates: torch.Tensor, seeds: torch.Tensor, mask: torch.Tensor, *,
                       compiled: bool = False) -> torch.Tensor:
    """Max cosine of each candidate's coordinates to any seed's (float64, rounded to float32).
    Coordinates are row-normalized.

    Shapes: coords ``[n, m]``, candidates ``[B, P]``, seeds ``[B, S]`` (-1 padded) -> ``[B, P]``.
    """
    if compiled:
        ids = torch.where(mask, candidates, torch.full_like(candidates, -1))
        return torch.from_numpy(max_cosine_compiled(coords.numpy(), ids.numpy(), seeds.numpy()))
    zc = coords[candidates.clamp(min=0)].double()  # (B, P, m)
    zs = coords[seeds.clamp(min=0)].double()  # (B, S, m)
    cos = torch.bmm(zc, zs.transpose(1, 2)).to(coords.dtype)  # (B, P, S)
    cos = cos.masked_fill((seeds < 0)[:, None, :], float("-inf")).amax(dim=2)
    cos = torch.where(torch.isfinite(cos), cos, torch.zeros_like(cos)).clamp(min=0)
    return torch.where(mask, cos, torch.zeros_like(cos))


def seed_restart(candidates: torch.Tensor, seeds: torch.Tensor, seed_weights: torch.Tensor, *,
                 compiled: bool = False) -> torch.Tensor:
    """PPR restart mass on the seeds, located in each pool (seeds come first in the pool).
    Shapes: candidates ``[B, P]``, seeds / weights ``[B, S]`` -> ``[B, P]``. ``compiled``: by
    the compiled CPU kernel (this is its reference), without the ``[B, P, S]`` match tensor."""
    if compiled:
        return torch.from_numpy(seed_restart_compiled(candidates.numpy(), seeds.numpy(), seed_weights.numpy()))
    match = candidates[:, :, None] == seeds[:, None, :]  # (B, P, S)
    return (match.float() * seed_weights[:, None, :].clamp(min=0)).sum(dim=2)


def pool_proximity(
    mode: str,
    blocks: BlockGraph | PoolGraphs,
    candidates: torch.Tensor,
    seeds: torch.Tensor,
    seed_weights: torch.Tensor,
    relevance: torch.Tensor,
    mask: torch.Tensor,
    coords: torch.Tensor | None,
    *,
    t: float = 1.0,
    damping: float = 0.85,
    tol: float = 1e-8,
    dense: bool = False,
    walk: RandomWalkOperator | PageRankMatrix | None = None,
    ppr_method: str = "chebyshev",
) -> torch.Tensor:
    """The proximity of a graph mode: ``heat``, ``ppr``, or ``spectral`` / ``combined`` (the
    mean of PPR and spectral proximity). Shapes: ``[B, P, P]`` blocks, ``[B, P]`` pools,
    ``[B, S]`` seeds -> ``[B, P]`` in [0, 1]. With ``walk`` (the whole graph's walk operator),
    PPR runs over the whole graph (:func:`graph_ppr_proximity`) instead of the blocks;
    ``ppr_method``: how PPR on the blocks is solved (:func:`ppr_proximity`)."""
    if mode == "heat":
        return heat_proximity(blocks, relevance, mask, t, dense=dense)
    if walk is not None:
        ppr = graph_ppr_proximity(walk, candidates, seeds, seed_weights, mask, damping=damping, tol=tol)
    else:
        restart = seed_restart(candidates, seeds, seed_weights, compiled=isinstance(blocks, PoolGraphs))
        ppr = ppr_proximity(blocks, restart, mask, damping=damping, tol=tol, dense=dense, method=ppr_method)
    if mode == "ppr":
        return ppr
    spec = spectral_proximity(coords, candidates, seeds, mask, compiled=isinstance(blocks, PoolGraphs))
    return (0.5 * ppr + 0.5 * spec).clamp(0.0, 1.0)
