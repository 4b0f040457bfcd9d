"""Online step 2: two-hop expansion of each query's seeds over the fused graph, for all queries
at once, capped at ``P`` candidates per query; and the induced candidate subgraphs.

Expansion is two sparse products of the ``[B, n]`` seed matrix with ``W``; the candidate
priority is::

    seeds:      2 + seed weight                    (always kept, in seed order)
    the rest:   (F1 + 0.5 F2) / max over the row   in [0, 1],  F1 = S W, F2 = F1 W

so a chunk reached by strong edges from many seeds ranks first; ties go to the smaller chunk id.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.kernels.topk import topk_sparse_rows

SEED_BONUS = 2.0


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


def candidate_blocks_of(candidates: torch.Tensor, graphs: list[sp.csr_matrix]) -> list[torch.Tensor]:
    """Induced subgraphs ``W[c_b, c_b]`` of every pool as dense blocks, all queries at once, for
    several graphs over the same ``n`` chunks, locating the pools once.

    Rows of all ``B * P`` candidates are sliced from each CSR in one go; each edge's target is
    found in its query's pool by one binary search over the sorted keys ``query * n + chunk``.

    Shapes: candidates ``[B, P]`` (-1 padded) -> one ``[B, P, P]`` float32 block per graph.
    """
    batch, p = candidates.shape
    cand = candidates.cpu().numpy()
    flat = cand.ravel()
    valid = flat >= 0
    slot = np.flatnonzero(valid)  # flat (query, position) of each real candidate
    n = graphs[0].shape[0]
    if any(g.shape != (n, n) for g in graphs):
        raise ValueError(f"graphs must all be [n, n] over the same chunks, got {[g.shape for g in graphs]}")
    pool_key = (slot // p) * n + flat[valid]
    order = np.argsort(pool_key, kind="stable")
    sorted_key, sorted_slot = pool_key[order], slot[order]
    out = []
    for weights in graphs:
        rows = weights[flat[valid]]  # (V, n): the graph rows of every real candidate
        src = np.repeat(slot, np.diff(rows.indptr))
        query = src // p
        edge_key = query * n + rows.indices.astype(np.int64)
        at = np.minimum(np.searchsorted(sorted_key, edge_key), max(len(sorted_key) - 1, 0))
        hit = sorted_key[at] == edge_key if len(sorted_key) else np.zeros(0, bool)
        block = np.zeros((batch, p, p), dtype=np.float32)
        block[query[hit], src[hit] % p, sorted_slot[at[hit]] % p] = rows.data[hit]
        out.append(torch.from_numpy(block).to(candidates.device))
    return out
