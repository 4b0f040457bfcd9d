"""What the page draws: nodes (chunks), edges (fused graph, coloured by their dominant signal),
clusters named by their main documents and, for a query, its seeds, expanded candidates and
selected context (the context listed with titles, sections and scores).

Beyond ``max_nodes`` chunks the graph is sampled: the query's chunks are always kept, the rest is
a seeded uniform sample, and the edges are those among the kept chunks (degrees stay those of the
whole graph). The dominant signal of an edge is the one contributing most to its fused weight,
``argmax_r alpha_r W_r(i, j)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spectrag.config import RetrieverConfig
from spectrag.contexts import build_contexts
from spectrag.interop.pyg import fused_edges
from spectrag.retriever import Retriever
from spectrag.view.layout import force_layout, spectral_start


@dataclass
class QueryRoles:
    """A query's chunk ids by role: ``seeds`` (what expansion starts from), ``candidates`` (the
    scored pool), ``selected`` (the budgeted context, in selection order)."""

    query: str
    mode: str
    seeds: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    selected: list[int] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)  # final score of each candidate
    budget: int | None = None
    used_tokens: int = 0


def query_roles(retriever: Retriever, query: str, *, budget: int | None = None) -> QueryRoles:
    """Run ``query`` through the pipeline (:meth:`Retriever.score_batch`) and name its chunks'
    roles (the seeds are the pipeline's own, ``BatchResult.seeds``), with the final scores."""
    result = retriever.score_batch([query], budget=budget)
    ctx = build_contexts(retriever.index, [query], result)[0]
    roles = QueryRoles(query, result.mode, candidates=[c for c in result.candidates[0].tolist() if c >= 0],
                       selected=[c.chunk_id for c in ctx.chunks], scores=dict(zip(ctx.ranking, ctx.ranking_scores)),
                       budget=ctx.budget, used_tokens=ctx.used_tokens)
    if result.seeds is not None:  # activation seeds entities, not chunks
        roles.seeds = [c for c in result.seeds[0].tolist() if c >= 0]
    return roles


def cluster_names(titles: list[str], clusters: np.ndarray, top: int = 2) -> list[dict[str, Any]]:
    """Each cluster named by its ``top`` most frequent document titles (ties: first seen), with
    its size: ``[{"id", "name", "size"}]`` by cluster id."""
    out = []
    for cid in np.unique(clusters).tolist():
        counts: dict[str, int] = {}
        for i in np.flatnonzero(clusters == cid).tolist():
            counts[titles[i]] = counts.get(titles[i], 0) + 1
        names = sorted(counts, key=lambda t: -counts[t])[:top]  # stable: ties keep their first-seen order
        out.append({"id": int(cid), "name": " · ".join(names), "size": int(sum(counts.values()))})
    return out


def _sample(n: int, keep: list[int], max_nodes: int, seed_: int) -> np.ndarray:
    """Sorted node ids: all of ``keep`` and a seeded uniform sample of the rest, ``max_nodes`` in all."""
    if n <= max_nodes:
        return np.arange(n)
    forced = np.unique(np.asarray(keep, dtype=np.int64))[:max_nodes]
    rest = np.setdiff1d(np.arange(n), forced)
    extra = np.random.default_rng(seed_).choice(rest, size=max(0, max_nodes - len(forced)), replace=False)
    return np.sort(np.concatenate([forced, extra]))


def view_data(index, *, roles: QueryRoles | None = None, max_nodes: int = 3000, seed_: int = 0,
              iterations: int = 120) -> dict[str, Any]:
    """The page's JSON: ``nodes`` (id, x, y, size, cluster, title, section, doc, degree, wdeg,
    role, and for a query's candidates their final ``score`` and, in the context, ``rank``),
    ``edges`` as ``[source, target, signal index, weight]``, ``signals``, ``cluster_names``
    (the drawn chunks' clusters by their main documents), ``query`` (with its ``context``: the
    selected chunks in order with title, section, score, phase and tokens), counts."""
    src, dst, weight, attr, names = fused_edges(index)
    n = len(index.chunks)
    alpha = index.config.graph.signal_weights()
    contrib = attr * np.array([alpha.get(s, 0.0) for s in names], dtype=np.float32)  # (E, S)
    dominant = contrib.argmax(axis=1) if names else np.zeros(len(src), np.int64)
    wdeg = np.bincount(src, weights=weight, minlength=n)
    deg = np.bincount(src, minlength=n)
    role: dict[int, str] = {}  # chunk -> its roles, e.g. "candidate seed selected"
    if roles is not None:
        for name, ids in (("candidate", roles.candidates), ("seed", roles.seeds), ("selected", roles.selected)):
            for c in ids:
                role[c] = (role.get(c, "") + " " + name).strip()
    kept = _sample(n, list(role), max_nodes, seed_)
    local = np.full(n, -1, np.int64)
    local[kept] = np.arange(len(kept))
    one_way = (src < dst) & (local[src] >= 0) & (local[dst] >= 0)  # each undirected edge once, both ends kept
    es, ed, ew, esig = src[one_way], dst[one_way], weight[one_way], dominant[one_way]
    coords = np.asarray(index.graph["coordinates"])[kept]
    clusters = np.asarray(index.graph["clusters"])
    pos = force_layout(spectral_start(coords, seed_), local[es], local[ed], ew, groups=clusters[kept], iterations=iterations)
    top = float(wdeg.max()) if n else 1.0
    rank = {c: i + 1 for i, c in enumerate(roles.selected)} if roles is not None else {}
    scores = roles.scores if roles is not None else {}
    nodes = []
    for j, cid in enumerate(kept.tolist()):
        c = index.chunks[cid]
        node = {"id": cid, "x": round(float(pos[j, 0]), 5), "y": round(float(pos[j, 1]), 5),
                "size": round(1 + 7 * float(wdeg[cid]) / max(top, 1e-12), 3), "cluster": int(clusters[cid]),
                "title": c.title, "section": " > ".join(c.section), "doc": c.doc_id, "degree": int(deg[cid]),
                "wdeg": round(float(wdeg[cid]), 4), "role": role.get(cid, "")}
        if cid in scores:
            node["score"] = round(float(scores[cid]), 4)
        if cid in rank:
            node["rank"] = rank[cid]
        nodes.append(node)
    context = []
    if roles is not None:
        for cid in roles.selected:
            c = index.chunks[cid]
            context.append({"id": cid, "title": c.title or c.doc_id, "section": " > ".join(c.section[1:] or c.section),
                            "score": round(float(scores.get(cid, 0.0)), 4), "tokens": c.n_tokens})
    signal_counts = np.bincount(esig, minlength=len(names)).tolist()
    return {
        "nodes": nodes,
        "edges": [[int(a), int(b), int(s), round(float(w), 4)] for a, b, s, w in zip(es, ed, esig, ew)],
        "signals": [{"name": s, "edges": cnt} for s, cnt in zip(names, signal_counts)],
        "clusters": int(clusters.max()) + 1 if n else 0,
        "cluster_names": cluster_names([index.chunks[c].title or index.chunks[c].doc_id for c in kept.tolist()],
                                       clusters[kept]),
        "total_nodes": n,
        "total_edges": int((src < dst).sum()),
        "sampled": len(kept) < n,
        "index": str(index.path),
        "query": None if roles is None else {
            "text": roles.query, "mode": roles.mode, "seeds": len(roles.seeds), "candidates": len(roles.candidates),
            "selected": len(roles.selected), "budget": roles.budget, "used_tokens": roles.used_tokens,
            "context": context},
    }


def view_of(index, *, query: str | None = None, config: RetrieverConfig | None = None, budget: int | None = None,
            max_nodes: int = 3000, seed_: int = 0) -> dict[str, Any]:
    """:func:`view_data`, with ``query``'s roles when one is given."""
    roles = query_roles(Retriever(index, config), query, budget=budget) if query else None
    return view_data(index, roles=roles, max_nodes=max_nodes, seed_=seed_)
