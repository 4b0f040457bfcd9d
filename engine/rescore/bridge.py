"""Online step 3a: query-aware bridging, relevance carried along relational edges (max-plus).

A multi-hop question names the first passage's topic; the second passage is about what the
first one mentions (its bridge entity), so it matches the query only weakly by itself. Its
evidence is the *path*: a strongly relevant passage that links to it. Each round, the ``m``
best-scored candidates pass their score to their relational neighbours in the pool:

.. math::
    x'_c = \\max\\Big(x_c,\\ \\max_{s \\in \\mathrm{top}_m(x),\\, w_{sc} > 0}
           (1 - \\lambda)\\, x_s + \\lambda\\, r_c - \\gamma\\, (1 - w_{sc})\\Big)

with ``r`` the candidate's own relevance, ``x_0 = r`` and ``w`` the relational graph (entity,
title mention / citation, section, adjacency, utility; not semantic kNN) in [0, 1]. After one
round a chunk scores at most the weighted mean of its best linked seed and itself, so a chunk
the query does not match at all (small ``r_c``) is not lifted above its seed, and ``gamma``
makes weak links count less. ``rounds`` > 1 follows longer paths (three- and four-hop
questions). It is a max-plus product over the edges of the sparse relational blocks: no
per-query loop, and scores never decrease, so the dense top stays where it was unless a
bridged chunk overtakes it.
"""

from __future__ import annotations

import torch

from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.compiled.blocks import PoolGraphs
from spectrag.kernels.compiled.bridge import bridge_compiled
from spectrag.kernels.csr import csr_entries
from spectrag.kernels.topk import positions_by_score_then_id


def bridge_relevance(
    relations: BlockGraph | PoolGraphs,
    relevance: torch.Tensor,
    candidates: torch.Tensor,
    *,
    sources: int = 5,
    lam: float = 0.3,
    gamma: float = 0.05,
    rounds: int = 1,
    start: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bridged relevance ``x [B, P]`` (see the module docstring).

    Args:
        relations: the relational graph of each pool's induced subgraph, weights in [0, 1]
            (:class:`spectrag.kernels.blocks.BlockGraph`, ``B`` blocks of ``P x P``; or, for a
            CPU batch, :class:`~spectrag.kernels.compiled.blocks.PoolGraphs`: then the compiled
            kernel, :func:`spectrag.kernels.compiled.bridge.bridge_compiled`, runs, with the same
            float32 arithmetic; this torch version is its reference).
        relevance: the candidates' own relevance ``r`` (``[B, P]``).
        candidates: chunk ids, -1 on padding (``[B, P]``); ties in the top-``m`` go to the
            smaller id.
        sources: ``m``, the best-scored candidates that pass score on per round (default: 5).
        lam: ``lambda``, the target's share of a bridged score (default: 0.3).
        gamma: penalty per unit of missing link weight (default: 0.05).
        rounds: hops of bridging (default: 1).
        start: the scores ``x_0`` bridging starts from (default: ``relevance``), e.g. with the
            chunks the question names lifted to the top so that they are the sources.

    Per round only the edges leaving the ``m`` source rows are read (a CSR slice) and each
    target keeps its best bridged score (``scatter_reduce`` amax): no ``[B, P, P]`` work.
    Shapes: -> ``[B, P]`` in relevance's dtype; padding keeps its input value.
    """
    mask = candidates >= 0
    x = relevance if start is None else start
    batch, p = relevance.shape
    if rounds < 1 or sources < 1 or p == 0:
        return x
    if isinstance(relations, PoolGraphs):
        return torch.from_numpy(bridge_compiled(relations, relevance.numpy(), sources=sources, lam=lam, gamma=gamma,
                                                rounds=rounds, start=x.numpy()))
    target = (lam * relevance).masked_fill(~mask, float("-inf")).reshape(-1)  # (B P,)
    m = min(sources, p)
    rows = torch.arange(batch, device=relevance.device)[:, None] * p
    weight = relations.val.to(relevance.dtype)
    for _ in range(rounds):
        key = x.masked_fill(~mask, float("-inf"))
        order = positions_by_score_then_id(key, candidates, m)  # (B, m)
        source = (rows + order)[mask.gather(1, order)]  # flat slots of the real sources
        owner, pos = csr_entries(relations.crow, source)  # their edges, in CSR order
        w, col = weight[pos], relations.col[pos]
        via = (1.0 - lam) * x.reshape(-1)[source][owner] + target[col] - gamma * (1.0 - w)
        via = via.masked_fill(~(w > 0), float("-inf"))
        best = torch.full((batch * p,), float("-inf"), dtype=x.dtype, device=x.device)
        best = best.scatter_reduce(0, col, via, reduce="amax", include_self=True).reshape(batch, p)
        x = torch.where(mask, torch.maximum(x, best), x)
    return x


def protect_named(scores: torch.Tensor, relevance: torch.Tensor, named: torch.Tensor, candidates: torch.Tensor, *,
                  floor: float = 0.5, eps: float = 1e-3) -> torch.Tensor:
    """Chunks of documents the question names stay on top: a named candidate whose relevance is
    at least ``floor`` times its query's best gets ``max(s, o) + eps (1 + s)``, ``o`` the best
    score of the other candidates, so it ranks above every one of them and the named chunks keep
    their own order (the map is increasing in ``s``). Bridging can then add second-hop chunks
    but cannot push down the passages the question asks about by name.

    Shapes: ``scores/relevance/candidates [B, P]`` (-inf / -1 on padding), ``named [B, P]`` bool.
    """
    mask = candidates >= 0
    r_top = relevance.masked_fill(~mask, float("-inf")).amax(dim=1, keepdim=True)
    keep = named & mask & (relevance >= floor * r_top)
    if not bool(keep.any()):
        return scores
    others = scores.masked_fill(~mask | keep, float("-inf")).amax(dim=1, keepdim=True)
    lifted = torch.maximum(scores, others) + eps * (1.0 + scores)
    return torch.where(keep, lifted, scores)
