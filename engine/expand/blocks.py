"""The induced candidate subgraphs ``W[c_b, c_b]`` of every query's pool as dense ``[B, P, P]``
blocks, for several graphs over the same chunks at once: numpy on the CPU, torch on a device.

Rows of all ``B * P`` candidates are sliced from each CSR in one go; each edge's target is
found in its query's pool by one binary search over the sorted keys ``query * n + chunk``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.kernels.csr import TorchCSR, csr_entries


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


def candidate_blocks_torch(candidates: torch.Tensor, graphs: list[TorchCSR]) -> list[torch.Tensor]:
    """:func:`spectrag.expand.pool.candidate_blocks_of` on the graphs' device: the induced
    subgraph ``W[c_b, c_b]`` of every pool as a dense block, per graph, locating the pools once.
    (On the CPU the numpy version stays: it was faster there for the same blocks.)

    Shapes: candidates ``[B, P]`` (-1 padded) -> one ``[B, P, P]`` float32 block per graph.
    """
    n = graphs[0].n
    if any(g.n != n for g in graphs):
        raise ValueError(f"graphs must all be over the same {n} chunks, got {[g.n for g in graphs]}")
    dev = graphs[0].values.device
    cand = candidates.to(dev)
    batch, p = cand.shape
    flat = cand.reshape(-1)
    slot = torch.nonzero(flat >= 0).squeeze(1)  # flat (query, position) of each real candidate
    pool_key, order = torch.sort((slot // p) * n + flat[slot])
    pool_slot = slot[order]
    out = []
    for g in graphs:
        owner, pos = csr_entries(g.indptr, flat[slot])
        src = slot[owner]
        edge_key = (src // p) * n + g.indices[pos]
        at = torch.searchsorted(pool_key, edge_key).clamp(max=max(pool_key.numel() - 1, 0))
        hit = pool_key[at] == edge_key if pool_key.numel() else torch.zeros_like(edge_key, dtype=torch.bool)
        block = torch.zeros(batch, p, p, dtype=torch.float32, device=dev)
        block[src[hit] // p, src[hit] % p, pool_slot[at[hit]] % p] = g.values[pos][hit]
        out.append(block)
    return out
