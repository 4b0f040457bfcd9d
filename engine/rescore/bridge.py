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
questions). It is a one-line semiring product over the ``[B, P, P]`` relational blocks: no
per-query loop, and scores never decrease, so the dense top stays where it was unless a
bridged chunk overtakes it.
"""

from __future__ import annotations

import torch

from spectrag.kernels.topk import positions_by_score_then_id


def bridge_relevance(
    blocks: torch.Tensor,
    relevance: torch.Tensor,
    candidates: torch.Tensor,
    *,
    sources: int = 5,
    lam: float = 0.3,
    gamma: float = 0.05,
    rounds: int = 1,
) -> torch.Tensor:
    """Bridged relevance ``x [B, P]`` (see the module docstring).

    Args:
        blocks: relational weights of each pool's induced subgraph in [0, 1] (``[B, P, P]``).
        relevance: the candidates' own relevance ``r`` (``[B, P]``).
        candidates: chunk ids, -1 on padding (``[B, P]``); ties in the top-``m`` go to the
            smaller id.
        sources: ``m``, the best-scored candidates that pass score on per round (default: 5).
        lam: ``lambda``, the target's share of a bridged score (default: 0.3).
        gamma: penalty per unit of missing link weight (default: 0.05).
        rounds: hops of bridging (default: 1).

    Shapes: -> ``[B, P]`` in relevance's dtype; padding keeps its input value.
    """
    mask = candidates >= 0
    x = relevance
    if rounds < 1 or sources < 1 or blocks.shape[1] == 0:
        return x
    target = (lam * relevance).masked_fill(~mask, float("-inf"))[:, None, :]  # (B, 1, P)
    p = blocks.shape[1]
    m = min(sources, p)
    for _ in range(rounds):
        key = x.masked_fill(~mask, float("-inf"))
        order = positions_by_score_then_id(key, candidates, m)  # (B, m)
        # only the m source rows: the other P - m rows of a [B, P, P] product would be masked out
        w = blocks.gather(1, order[:, :, None].expand(-1, -1, p)).to(relevance.dtype)  # (B, m, P)
        via = (1.0 - lam) * x.gather(1, order)[:, :, None] + target - gamma * (1.0 - w)  # (B, m_src, P_dst)
        via = via.masked_fill(~((w > 0) & mask.gather(1, order)[:, :, None]), float("-inf"))
        x = torch.where(mask, torch.maximum(x, via.amax(dim=1)), x)
    return x
