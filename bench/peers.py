"""The peers' own ways of doing the engine's work, one query at a time, as their public code
does it (written here from their descriptions; none of their code is copied). Used by
``bench/bench_peers.py`` as the baselines a user would otherwise run.

* :class:`SpectragCodePeer` -- the SpectRAG paper's online Algorithm 1 as a per-query Python
  program: numpy dense top-``k`` seeds, a networkx two-hop BFS from them capped at 200 nodes,
  ``networkx.pagerank`` on the induced subgraph personalized to the seeds, max-cosine spectral
  proximity to the seeds, ``s2 = (1 - alpha) r + alpha p`` and the token-budget cut in ``s2``
  order: a protected head, then a tail above a precision floor, then backfill.
* :class:`HippoRagPeer` -- HippoRAG 2's graph search: igraph's personalized PageRank over the
  whole graph, one query at a time, damping 0.5, reset on the seed nodes.
* :func:`sa_rag_activation` -- SA-RAG's sequential activation: a BFS queue from the seed entities
  (``spectrag.reference.activation.bfs_reference``) on the query's rescaled edge weights.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class SpectragCodePeer:
    """Algorithm 1 per query, networkx for the graph work. Build once per index (the graph
    conversion is index-time work, not timed per query)."""

    def __init__(self, embeddings: np.ndarray, weights: sp.csr_matrix, coords: np.ndarray | None,
                 tokens: np.ndarray, *, k: int = 20, cap: int = 200, hops: int = 2, alpha: float = 0.01,
                 damping: float = 0.85, core: int = 3, floor: float = 0.5) -> None:
        import networkx as nx

        self.nx = nx
        self.E = np.asarray(embeddings, dtype=np.float32)
        w = sp.triu(weights, k=1).tocoo()
        self.G = nx.Graph()
        self.G.add_nodes_from(range(weights.shape[0]))
        self.G.add_weighted_edges_from(zip(w.row.tolist(), w.col.tolist(), w.data.tolist()))
        z = None if coords is None else np.asarray(coords, dtype=np.float32)
        self.Z = None if z is None else z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
        self.tokens = np.asarray(tokens)
        self.k, self.cap, self.hops, self.alpha, self.damping, self.core, self.floor = k, cap, hops, alpha, damping, core, floor

    def query(self, q: np.ndarray, budget: int) -> list[int]:
        """The selected chunk ids of one query vector ``[d]``, in selection order."""
        nx = self.nx
        scores = self.E @ q
        seeds = np.argsort(-scores, kind="stable")[: self.k].tolist()
        # two-hop BFS from the seeds, in BFS order, capped
        pool, frontier = list(seeds), list(seeds)
        seen = set(seeds)
        for _ in range(self.hops):
            nxt = []
            for u in frontier:
                for v in self.G.neighbors(u):
                    if v not in seen and len(pool) < self.cap:
                        seen.add(v)
                        pool.append(v)
                        nxt.append(v)
            frontier = nxt
        sub = self.G.subgraph(pool)
        ppr = nx.pagerank(sub, alpha=self.damping, personalization={s: 1.0 for s in seeds}, weight="weight")
        top = max(ppr.values()) or 1.0
        prox = {c: ppr[c] / top for c in pool}
        if self.Z is not None:
            spec = (self.Z[pool] @ self.Z[seeds].T).max(axis=1).clip(min=0)
            prox = {c: 0.5 * prox[c] + 0.5 * float(s) for c, s in zip(pool, spec)}
        s2 = {c: (1 - self.alpha) * float(scores[c]) + self.alpha * prox[c] for c in pool}
        order = sorted(pool, key=lambda c: -s2[c])
        chosen, used = [], 0
        best = s2[order[0]]
        for phase in ("head", "tail", "backfill"):
            for rank, c in enumerate(order):
                if c in chosen or used + self.tokens[c] > budget:
                    continue
                if phase == "head" and rank >= self.core:
                    break
                if phase == "tail" and s2[c] < self.floor * best:
                    continue
                chosen.append(c)
                used += int(self.tokens[c])
        return chosen


class HippoRagPeer:
    """igraph personalized PageRank over the whole graph, one query per call (HippoRAG 2)."""

    def __init__(self, weights: sp.csr_matrix, *, damping: float = 0.5) -> None:
        try:
            import igraph
        except ImportError:
            raise ImportError("HippoRagPeer needs python-igraph: pip install igraph") from None
        w = sp.triu(weights, k=1).tocoo()
        self.g = igraph.Graph(n=weights.shape[0], edges=list(zip(w.row.tolist(), w.col.tolist())), directed=False)
        self.g.es["weight"] = w.data.tolist()
        self.damping = damping

    def query(self, reset: np.ndarray) -> np.ndarray:
        """PPR scores of every node for one restart vector ``[n]`` (non-negative)."""
        return np.asarray(self.g.personalized_pagerank(vertices=None, directed=False, damping=self.damping,
                                                       weights="weight", reset=reset.tolist(),
                                                       implementation="prpack"))


def sa_rag_activation(q: np.ndarray, entity_emb: np.ndarray, text_emb: np.ndarray, indptr: np.ndarray,
                      indices: np.ndarray, edge_text: np.ndarray, *, k: int, hops: int, c: float) -> dict[int, float]:
    """SA-RAG's sequential spreading for one query: top-``k`` entities by cosine as seeds, each
    edge weighted ``max(0, (cos(q, relation) - c) / (1 - c))``, a BFS queue that fires each node
    once (``spectrag.reference.activation.bfs_reference``)."""
    from spectrag.reference.activation import bfs_reference

    sims = entity_emb @ q
    seeds = np.argsort(-sims, kind="stable")[:k].tolist()
    # the edges the BFS can reach within `hops`: weights computed per edge as the paper does
    adj: dict[int, list[tuple[int, float]]] = {}
    frontier, depth = list(seeds), {s: 0 for s in seeds}
    for d in range(hops):
        nxt = []
        for u in frontier:
            lo, hi = int(indptr[u]), int(indptr[u + 1])
            nbrs = indices[lo:hi]
            w = np.maximum(0.0, (text_emb[edge_text[lo:hi]] @ q - c) / (1 - c))
            adj[u] = list(zip(nbrs.tolist(), w.tolist()))
            for v in nbrs.tolist():
                if v not in depth:
                    depth[v] = d + 1
                    nxt.append(v)
        frontier = nxt

    class _Lazy(dict):
        def __missing__(self, key):
            return []

    return bfs_reference(_Lazy(adj), seeds, hops)
