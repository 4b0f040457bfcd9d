"""Online step 2a: two-hop expansion of each query's seeds over the fused graph, for all queries
at once, capped at ``P`` candidates per query (the induced subgraphs: :mod:`spectrag.expand.blocks`).

The walk mass pushed ``hops`` times from the seeds, ``F_{h+1} = W^T F_h`` (float64), gives the
candidate priority::

    seeds:      2 + seed weight                    (always kept, in seed order)
    the rest:   (F1 + 0.5 F2) / max over the row   in [0, 1],  F1 = S W, F2 = F1 W

rounded to float32 (the reach, then a float32 reciprocal of its row maximum), so a chunk reached
by strong edges from many seeds ranks first; ties go to the smaller chunk id; a chunk the walk
never reaches is not a candidate.

Two implementations of the same rules, one per kind of device, and neither depends on the batch:
on the CPU the compiled kernel (:func:`spectrag.kernels.compiled.expand.expand_compiled`), one
query at a time over the frontier's CSR rows; elsewhere (and as its reference) torch tensors
(:func:`expand_torch`): keys ``b * n + node`` stand for the sparse ``[B, n]`` rows, a hop gathers
every CSR entry of the frontier's nodes and sums the contributions per key. Both add each sum's
terms in ascending source order in float64, so they agree bit for bit on the CPU (a GPU's
scattered additions may order them otherwise: ~1e-16, below float32's rounding).
"""

from __future__ import annotations

import scipy.sparse as sp
import torch

from spectrag.kernels.compiled.expand import SEED_BONUS, expand_compiled
from spectrag.kernels.csr import TorchCSR, csr_entries
from spectrag.kernels.topk import topk_by_row


def expand(
    seed_ids: torch.Tensor, seed_weights: torch.Tensor, graph: sp.csr_matrix | TorchCSR, *, max_candidates: int = 200,
    hops: int = 2, allowed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate pools of every query: seeds plus their ``hops``-hop neighbourhood, capped.

    Args:
        seed_ids: padded seed chunk ids, -1 for none (``[B, S]``).
        seed_weights: seed strengths in (0, 1] (``[B, S]``).
        graph: the fused graph ``[n, n]``: scipy CSR (the compiled CPU kernel) or a
            :class:`TorchCSR` (torch, on its device).
        max_candidates: ``P``, pool size per query (default: 200).
        hops: expansion radius (default: 2).
        allowed: bool ``[B, n]``, each query's metadata filter (default: all chunks). The walk
            runs on the subgraph of the allowed chunks: a filtered-out chunk is never a
            candidate and no mass passes through it (so the pool is that of the allowed
            sub-index's graph). The seeds must be allowed.

    Shapes:
        -> candidate ids ``[B, P']`` (int64, -1 padded, ``P' = min(P, n)``) and priorities
        ``[B, P']`` (float32), on the seeds' device.
    """
    if isinstance(graph, TorchCSR):
        return expand_torch(seed_ids, seed_weights, graph, max_candidates=max_candidates, hops=hops, allowed=allowed)
    mask = None if allowed is None else allowed.cpu().numpy()
    ids, pri = expand_compiled(seed_ids.cpu().numpy(), seed_weights.cpu().numpy(), graph.indptr, graph.indices,
                               graph.data, max_candidates=max_candidates, hops=hops, allowed=mask)
    return torch.from_numpy(ids).to(seed_ids.device), torch.from_numpy(pri).to(seed_ids.device)


def _sum_by_key(keys: torch.Tensor, vals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted unique keys and the sum of the values of each. ``[M]`` -> ``[U]``, ``[U]``."""
    uniq, inverse = torch.unique(keys, return_inverse=True)
    return uniq, torch.zeros(uniq.numel(), dtype=vals.dtype, device=vals.device).index_add_(0, inverse, vals)


def expand_torch(
    seed_ids: torch.Tensor, seed_weights: torch.Tensor, graph: TorchCSR, *, max_candidates: int = 200, hops: int = 2,
    allowed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`expand` on ``graph``'s device (the reference of the compiled kernel).

    Shapes: ``[B, S]`` seeds (-1 padded) -> candidate ids ``[B, P']`` (int64, -1 padded,
    ``P' = min(P, n)``) and priorities ``[B, P']`` float32.
    """
    n, dev = graph.n, graph.values.device
    batch, width = seed_ids.shape
    allowed = None if allowed is None else allowed.to(dev)
    query = torch.arange(batch, device=dev).repeat_interleave(width)
    flat = seed_ids.to(dev).reshape(-1)
    weight = seed_weights.to(dev, torch.float64).reshape(-1)
    ok = flat >= 0
    seed_keys, seed_vals = _sum_by_key(query[ok] * n + flat[ok], weight[ok])
    keys, vals = seed_keys, seed_vals
    values = graph.values.to(torch.float64)
    reach_keys, reach_vals = [], []
    for hop in range(hops):
        owner, pos = csr_entries(graph.indptr, keys % n)  # sorted keys: sources in ascending order
        if allowed is not None:  # the walk stays on each query's allowed chunks
            ok = allowed[(keys // n)[owner], graph.indices[pos]]
            owner, pos = owner[ok], pos[ok]
        keys, vals = _sum_by_key((keys // n)[owner] * n + graph.indices[pos], values[pos] * vals[owner])
        reach_keys.append(keys)
        reach_vals.append(vals * 0.5**hop)
    if reach_keys:
        keys, vals = _sum_by_key(torch.cat(reach_keys), torch.cat(reach_vals))
    else:
        keys, vals = seed_keys[:0], seed_vals[:0]
    row = keys // n
    reach = vals.to(torch.float32)
    peak = torch.zeros(batch, dtype=torch.float32, device=dev).scatter_reduce_(0, row, reach, "amax", include_self=True)
    # the reciprocal of the float32 peak in float64, rounded to float32
    inv = (1.0 / torch.where(peak > 0, peak, torch.ones_like(peak)).double()).float()
    vals = reach * inv[row]
    # seed entries: 2 + weight replaces their walk mass; zero priorities are dropped (never reached)
    is_seed = torch.isin(keys, seed_keys)
    keys = torch.cat([keys[~is_seed], seed_keys])
    vals = torch.cat([vals[~is_seed], seed_vals.to(torch.float32) + float(SEED_BONUS)])
    keep = vals != 0
    keys, vals = keys[keep], vals[keep]
    order = torch.argsort(keys)
    keys, vals = keys[order], vals[order]
    priorities, ids = topk_by_row(keys // n, keys % n, vals, batch, min(max_candidates, n))
    return ids, priorities
