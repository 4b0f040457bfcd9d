"""Plain per-query references for spreading activation (SA-RAG 3.5-3.6): Python dicts, loops
and numpy dot products, one query at a time. Used by the tests and by
``bench/bench_activation.py``.

* :func:`sync_reference` -- the engine's synchronous update, written out per query:
  ``a_t[j] = min(1, a_0[j] + sum over edges i -> j of w'[e] * a_{t-1}[i])`` on the query's own
  ``n``-hop subgraph.
* :func:`reached_reference` -- the same update spread only from nodes with positive activation
  over edges of positive weight (the kernel's default ``subgraph="reached"``): the same
  activation on every node it reaches, without the rest of the neighbourhood.
* :func:`bfs_reference` -- the paper's order: nodes leave a FIFO queue in BFS order (seeds
  first, in seed order), each fires once to all its neighbours with the activation it holds at
  that moment, ``a[j] = min(1, a[j] + a[i] * w'[e])``; nodes at depth ``n`` do not fire.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class CSRAdjacency:
    """``adj[u]`` -> ``[(neighbour, csr position, edge-embedding row)]`` in CSR order, read from
    the arrays when asked (a million-node graph needs no Python lists up front)."""

    def __init__(self, indptr, indices, edge_index) -> None:
        self.indptr, self.indices, self.edge_index = (np.asarray(a) for a in (indptr, indices, edge_index))

    def __len__(self) -> int:
        return self.indptr.shape[0] - 1

    def __getitem__(self, u: int) -> list[tuple[int, int, int]]:
        lo, hi = int(self.indptr[u]), int(self.indptr[u + 1])
        return list(zip(self.indices[lo:hi].tolist(), range(lo, hi), self.edge_index[lo:hi].tolist()))


def adjacency_lists(indptr, indices, edge_index) -> CSRAdjacency:
    return CSRAdjacency(indptr, indices, edge_index)


def top_k_seeds(q: np.ndarray, node_emb: np.ndarray, k: int) -> tuple[list[int], list[float]]:
    """The ``k`` nodes of highest cosine (float32 dot products), ties to the smaller id."""
    scores = node_emb @ q
    k = min(k, scores.size)
    kth = np.partition(scores, scores.size - k)[scores.size - k]
    cand = np.flatnonzero(scores >= kth)  # every node tied with the k-th too
    order = cand[np.lexsort((cand, -scores[cand]))][:k]
    return order.tolist(), scores[order].tolist()


def rescale(w: float, c: float) -> float:
    return max(0.0, (w - c) / (1.0 - c))


def neighbourhood(adj, seeds: list[int], hops: int) -> dict[int, int]:
    """BFS depth of every node within ``hops`` of the seeds."""
    depth = {s: 0 for s in seeds}
    frontier = list(dict.fromkeys(seeds))
    for h in range(1, hops + 1):
        nxt = []
        for u in frontier:
            for v, _, _ in adj[u]:
                if v not in depth:
                    depth[v] = h
                    nxt.append(v)
        frontier = nxt
    return depth


def sync_reference(q, node_emb, edge_emb, adj, *, k: int, hops: int, c: float, seeds: list[int] | None = None):
    """One query. Returns ``(seeds, depth {node: d}, activation {node: a}, cosines {csr position: w})``
    over the query's ``hops``-hop neighbourhood (activation in float64); ``seeds`` skips the
    top-``k`` search."""
    q = np.asarray(q, dtype=np.float32)
    if seeds is None:
        seeds, _ = top_k_seeds(q, node_emb, k)
    depth = neighbourhood(adj, seeds, hops)
    edges = [(u, v, p, t) for u in depth if depth[u] < hops for v, p, t in adj[u]]
    cos = {p: float(np.dot(q.astype(np.float64), edge_emb[t].astype(np.float64))) for _, _, p, t in edges}
    a0 = {u: 1.0 if depth[u] == 0 else 0.0 for u in depth}
    a = dict(a0)
    for _ in range(hops):
        new = dict(a0)
        for u, v, p, _ in edges:
            new[v] += rescale(cos[p], c) * a[u]
        a = {u: min(1.0, x) for u, x in new.items()}
    return seeds, depth, a, cos


def reached_reference(q, node_emb, edge_emb, adj, *, k: int, hops: int, c: float, seeds: list[int] | None = None):
    """One query over the reached subgraph. Returns ``(seeds, round first reached {node: t},
    activation {node: a} (every node with a > 0), cosines {csr position: w} of every edge with
    w' > 0 between two reached nodes)``."""
    q64 = np.asarray(q, dtype=np.float32).astype(np.float64)
    if seeds is None:
        seeds, _ = top_k_seeds(np.asarray(q, dtype=np.float32), node_emb, k)
    reached = {s: 0 for s in seeds}
    a0 = {s: 1.0 for s in seeds}
    a = dict(a0)
    edges, cos = [], {}
    frontier = list(reached)
    for t in range(1, hops + 1):
        for u in frontier:
            for v, p, row in adj[u]:
                w = float(np.dot(q64, edge_emb[row].astype(np.float64)))
                if rescale(w, c) > 0:
                    edges.append((u, v, p))
                    cos[p] = w
        new = {u: a0.get(u, 0.0) for u in a}
        for u, v, p in edges:
            new[v] = new.get(v, 0.0) + rescale(cos[p], c) * a[u]
        frontier = [v for v in new if v not in reached]
        reached.update((v, t) for v in frontier)
        a = {u: min(1.0, x) for u, x in new.items()}
    for u in frontier:  # reached in the last round: their edges between reached nodes
        for v, p, row in adj[u]:
            w = float(np.dot(q64, edge_emb[row].astype(np.float64)))
            if v in reached and rescale(w, c) > 0:
                cos[p] = w
    return seeds, reached, a, cos


def bfs_reference(adj_weights: list[list[tuple[int, float]]], seeds: list[int], hops: int) -> dict[int, float]:
    """The paper's sequential BFS spreading on ``adj_weights[i] = [(j, w'_ij)]``."""
    a = {s: 1.0 for s in seeds}
    depth = {s: 0 for s in seeds}
    queue = deque(dict.fromkeys(seeds))
    while queue:
        u = queue.popleft()
        if depth[u] >= hops:
            continue
        for v, w in adj_weights[u]:
            a[v] = min(1.0, a.get(v, 0.0) + a[u] * w)
            if v not in depth:
                depth[v] = depth[u] + 1
                queue.append(v)
    return a
