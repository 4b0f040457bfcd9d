"""Online step 2a: two-hop expansion of each query's seeds over the fused graph, for all queries
at once, capped at ``P`` candidates per query (the induced subgraphs: :mod:`spectrag.expand.blocks`).

Expansion is two sparse products of the ``[B, n]`` seed matrix with ``W``; the candidate
priority is::

    seeds:      2 + seed weight                    (always kept, in seed order)
    the rest:   (F1 + 0.5 F2) / max over the row   in [0, 1],  F1 = S W, F2 = F1 W

so a chunk reached by strong edges from many seeds ranks first; ties go to the smaller chunk id.

On a device (a GPU) the same rules run as torch tensors (:func:`expand_torch`): keys
``b * n + node`` stand for the sparse ``[B, n]`` rows, a hop gathers every CSR entry of the
frontier's nodes and sums the contributions per key (``torch.unique`` + ``index_add_``), so the
work is proportional to the touched entries. Priorities are summed in another order than
scipy's products, so they can differ from the CPU path in the last float32 bit; pools then
differ only where two priorities at the cut are that close (tests/expand/test_expand_pool.py).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.kernels.csr import TorchCSR, csr_entries, torch_csr
from spectrag.kernels.topk import topk_by_row, topk_sparse_rows

SEED_BONUS = 2.0
DENSE_MAX = 1 << 24  # B * n up to which the walk mass is a dense block (128 MB of float64)


def seed_matrix(seed_ids: torch.Tensor, seed_weights: torch.Tensor, n: int) -> sp.csr_matrix:
    """Sparse ``[B, n]`` from padded seeds (ids -1 ignored). Shapes: ``[B, S]`` each."""
    ids, w = seed_ids.cpu().numpy(), seed_weights.cpu().numpy().astype(np.float32)
    rows = np.repeat(np.arange(ids.shape[0]), ids.shape[1])
    keep = ids.ravel() >= 0
    return sp.csr_matrix((w.ravel()[keep], (rows[keep], ids.ravel()[keep])), shape=(ids.shape[0], n))


def _top_per_row(priority: sp.csr_matrix, p: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``p`` highest entries per row (ties: smaller column) as padded ids/values ``[B, p]``."""
    priority.sum_duplicates()  # one entry per (row, column)
    vals, ids = topk_sparse_rows(torch.from_numpy(priority.indptr), torch.from_numpy(priority.indices),
                                 torch.from_numpy(priority.data), p)
    return ids.numpy(), vals.numpy()


def expand(
    seed_ids: torch.Tensor, seed_weights: torch.Tensor, weights: sp.csr_matrix, *, max_candidates: int = 200, hops: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate pools of every query: seeds plus their ``hops``-hop neighbourhood, capped.

    Args:
        seed_ids: padded seed chunk ids, -1 for none (``[B, S]``).
        seed_weights: seed strengths in (0, 1] (``[B, S]``).
        weights: the fused graph, scipy CSR ``[n, n]``.
        max_candidates: ``P``, pool size per query (default: 200).
        hops: expansion radius (default: 2).

    Shapes:
        -> candidate ids ``[B, P']`` (int64, -1 padded, ``P' = min(P, n)``) and priorities ``[B, P']``.
    """
    n = weights.shape[0]
    if seed_ids.shape[0] * n <= DENSE_MAX:
        return _expand_dense(seed_ids, seed_weights, weights, max_candidates=max_candidates, hops=hops)
    seeds = seed_matrix(seed_ids, seed_weights, n)
    reach = sp.csr_matrix(seeds.shape, dtype=np.float32)
    frontier = seeds
    for hop in range(hops):
        frontier = frontier @ weights
        reach = reach + (0.5**hop) * frontier
    reach = reach.tocsr()
    peak = np.asarray(reach.max(axis=1).todense()).ravel()
    reach = sp.diags(1.0 / np.where(peak > 0, peak, 1.0)).astype(np.float32) @ reach
    bonus = seeds.copy()
    bonus.data = bonus.data + SEED_BONUS
    # seed entries: priority 2 + weight, replacing their walk mass
    is_seed = seeds.copy()
    is_seed.data[:] = 1.0
    priority = (reach - reach.multiply(is_seed) + bonus).tocsr()
    priority.eliminate_zeros()
    ids, vals = _top_per_row(priority, min(max_candidates, n))
    return torch.from_numpy(ids).to(seed_ids.device), torch.from_numpy(vals).to(seed_ids.device)


def _expand_dense(seed_ids: torch.Tensor, seed_weights: torch.Tensor, weights: sp.csr_matrix, *,
                  max_candidates: int, hops: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`expand` with the walk mass as a dense ``[n, B]`` block, for corpora where ``B n`` is
    small: two SpMMs with ``W^T`` (``F W = (W^T F^T)^T``) summed in float64, and one sort per
    row; no sparse-matrix algebra, whose canonical-format sorts cost more than the products
    there."""
    n, batch = weights.shape[0], seed_ids.shape[0]
    # W's CSC arrays are W^T's CSR (W need not be symmetric); converting costs less than one SpMM
    wt = weights.tocsc()
    w = torch_csr(wt.indptr, wt.indices, wt.data, (n, n), dtype=torch.float64)
    ok = seed_ids >= 0
    cols = torch.arange(batch).unsqueeze(1).expand_as(seed_ids)
    front = torch.zeros(n, batch, dtype=torch.float64)
    front.index_put_((seed_ids[ok].cpu(), cols[ok]), seed_weights.cpu()[ok].to(torch.float64), accumulate=True)
    is_seed = torch.zeros(n, batch, dtype=torch.bool)
    is_seed[seed_ids[ok].cpu(), cols[ok]] = True
    seeds = front.clone()
    reach = torch.zeros(n, batch, dtype=torch.float64)
    for hop in range(hops):
        front = torch.sparse.mm(w, front)
        reach += (0.5**hop) * front
    # float32 priorities as the sparse path makes them (reach rounded to float32, times the
    # float32 reciprocal of the row peak), so both paths cut at the same chunks
    reach = reach.to(torch.float32)
    peak = reach.amax(dim=0, keepdim=True).to(torch.float64)
    inv = (1.0 / torch.where(peak > 0, peak, torch.ones_like(peak))).to(torch.float32)
    priority = torch.where(is_seed, (seeds.to(torch.float32) + SEED_BONUS), reach * inv).T  # (B, n)
    p = min(max_candidates, n)
    # a zero priority is a chunk the walk never reached (the sparse path stores no entry for it);
    # negative ones (seeds of negative weight) are reached and rank last
    priority = priority.masked_fill(priority == 0, float("-inf"))
    vals, ids = torch.sort(priority, dim=1, descending=True, stable=True)  # ties: the smaller id
    vals, ids = vals[:, :p], ids[:, :p]
    unreached = torch.isinf(vals)
    return ids.masked_fill(unreached, -1).to(seed_ids.device), vals.masked_fill(unreached, 0.0).to(seed_ids.device)


def _sum_by_key(keys: torch.Tensor, vals: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted unique keys and the sum of the values of each. ``[M]`` -> ``[U]``, ``[U]``."""
    uniq, inverse = torch.unique(keys, return_inverse=True)
    return uniq, torch.zeros(uniq.numel(), dtype=vals.dtype, device=vals.device).index_add_(0, inverse, vals)


def expand_torch(
    seed_ids: torch.Tensor, seed_weights: torch.Tensor, graph: TorchCSR, *, max_candidates: int = 200, hops: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`expand` on ``graph``'s device: seeds first (priority 2 +
    weight), then the walk mass ``sum_h 0.5^h F_h`` (``F_h`` the seeds pushed ``h + 1`` hops),
    divided by its row maximum; top ``max_candidates`` per query, ties to the smaller id.

    Shapes: ``[B, S]`` seeds (-1 padded) -> candidate ids ``[B, P']`` (int64, -1 padded,
    ``P' = min(P, n)``) and priorities ``[B, P']`` float32.
    """
    n, dev = graph.n, graph.values.device
    batch, width = seed_ids.shape
    query = torch.arange(batch, device=dev).repeat_interleave(width)
    flat = seed_ids.to(dev).reshape(-1)
    weight = seed_weights.to(dev, torch.float32).reshape(-1)
    ok = flat >= 0
    seed_keys, seed_vals = _sum_by_key(query[ok] * n + flat[ok], weight[ok])
    keys, vals = seed_keys, seed_vals
    reach_keys, reach_vals = [], []
    for hop in range(hops):
        owner, pos = csr_entries(graph.indptr, keys % n)
        keys, vals = _sum_by_key((keys // n)[owner] * n + graph.indices[pos], vals[owner] * graph.values[pos])
        reach_keys.append(keys)
        reach_vals.append(vals * 0.5**hop)
    if reach_keys:
        keys, vals = _sum_by_key(torch.cat(reach_keys), torch.cat(reach_vals))
    else:
        keys, vals = seed_keys[:0], seed_vals[:0]
    row = keys // n
    peak = torch.zeros(batch, dtype=vals.dtype, device=dev).scatter_reduce_(0, row, vals, "amax", include_self=True)
    # the reciprocal in float64, then float32 (as the scipy path's diags(1 / peak).astype(float32))
    vals = vals * (1.0 / torch.where(peak > 0, peak, torch.ones_like(peak)).double()).float()[row]
    # seed entries: 2 + weight replaces their walk mass; zero priorities are dropped (as scipy's
    # eliminate_zeros)
    is_seed = torch.isin(keys, seed_keys)
    keys = torch.cat([keys[~is_seed], seed_keys])
    vals = torch.cat([vals[~is_seed], seed_vals + SEED_BONUS])
    keep = vals != 0
    keys, vals = keys[keep], vals[keep]
    order = torch.argsort(keys)
    keys, vals = keys[order], vals[order]
    priorities, ids = topk_by_row(keys // n, keys % n, vals, batch, min(max_candidates, n))
    return ids, priorities
