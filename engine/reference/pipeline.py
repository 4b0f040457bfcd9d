"""A plain, per-query reference of the whole online pipeline (SpectRAG Algorithm 1), for tests
and for ``bench/bench_query.py``.

It computes, for ONE query, what :func:`spectrag.pipeline.run` computes
for a batch, with Python loops and standard libraries and without any of the batched code
paths (no ``spectrag.query.*`` function, no ``kernels.*`` kernel except the per-query selection
reference :func:`spectrag.kernels.select.budget_select_reference`):

============ ===================================================================================
stage        how the reference does it
============ ===================================================================================
dense        numpy brute force ``E @ q`` over all chunk embeddings, full sort (ties: smaller id)
bm25         the BM25 score row ``index.bm25.score([text])`` (the stored BM25 matrix), sorted here;
             chunks with score 0 are not in the list
fuse         reciprocal rank fusion with a dict: ``sum 1 / (k + rank)``, ranks from 1
expand       Python BFS over the CSR rows of ``index.graph["weights"]`` with dicts:
             ``F1 = s W``, ``F2 = F1 W``, priority ``2 + w`` for seeds, ``(F1 + 0.5 F2) / max``
             for the rest (``hops`` general: ``sum_h 0.5**h F_{h+1}``); top ``P`` by priority
             (ties: smaller id)
relevance    ``cos(q, c)`` in float64; with ``seed.lexical_weight`` ``w`` (graph modes), the
             cosines and the BM25 row's values over the pool standardized (``statistics.fmean``
             and ``pstdev``) and averaged, ``mu_d + sd_d (z_d + w z_b) / (1 + w)``
subgraph     a ``networkx.Graph`` on the pool with the ``W`` edges between pool members
ppr          ``networkx.pagerank(G, alpha=damping, personalization=seed weights, tol=1e-12)``: the
             fixed point, which the pipeline reaches to its ``propagate.tol`` by either solver
heat         ``scipy.linalg.expm(-t L) r+`` with ``L`` the normalized Laplacian of the subgraph
spectral     numpy loop over the seeds: max cosine of row-normalized spectral coordinates
bridge       dict of dicts of the relational signals (``graph["signals"]`` without semantic,
             ``sum alpha_r w_r / sum alpha_r``); per round, a loop over the top-``m`` candidates
             (with ``bridge.anchors = "named"``, the top-``m`` named ones) and their relational
             neighbours in the pool
score        ``s2 = (1 - alpha) x + alpha p`` (``x`` bridged relevance); ranking by ``s2`` with
             page support added to ``x`` (``bridge.page_support``; ties: smaller chunk id)
select       :func:`spectrag.kernels.select.budget_select_reference` on the pool in pool order,
             stub chunks (under ``chunk.min_tokens`` in a document of several chunks) masked
============ ===================================================================================

Conventions the batched pipeline documents and this reference follows (checked against
networkx where one exists):

* **PPR dangling / isolated nodes.** A node of the candidate subgraph without edges (a seed no
  other candidate touches, or a two-hop node whose one-hop link was cut by ``P``) is dangling.
  ``networkx.pagerank`` (``dangling=None``) hands a dangling node's mass back according to the
  personalization vector, starts from the uniform vector ``1/n`` and stops when the L1 change
  is below ``n * tol``; :func:`spectrag.kernels.pagerank.personalized_pagerank_dense_batched` documents
  exactly that model, so networkx is used unchanged (``max_iter=200`` as in the pipeline); its
  ``tol`` is tighter than the pipeline's, since the pipeline's default solver (Chebyshev) takes
  another path to the same fixed point, and only the fixed point is common to both.
* **Normalized Laplacian of an isolated node.** The pipeline's ``block_laplacian`` is
  ``I - D^-1/2 W D^-1/2`` with ``D^-1/2 = 0`` on degree-0 nodes, i.e. ``L[i, i] = 1`` for an
  isolated node, so its heat decays by ``exp(-t)``. ``networkx.normalized_laplacian_matrix``
  writes ``D^-1/2 (D - W) D^-1/2`` and gives ``L[i, i] = 0`` there (the heat stays). The two
  differ only on isolated nodes. The reference follows the pipeline's documented formula by
  default (``isolated_laplacian="identity"``); ``"networkx"`` gives networkx's convention.
* **Scaling.** Each proximity is divided by its maximum over the pool (0 when that is 0).
* **Precision.** The reference computes in float64 except where the pipeline *defines* a value
  in float32: seed weights (``rrf / rrf_top`` in float32) and the final scores, which are
  rounded to float32 before ranking and selection, as the pipeline's score tensor is float32.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import asdict

import numpy as np
import scipy.linalg
import torch

try:
    import networkx as nx
except ImportError:  # a test dependency, not the engine's
    raise ImportError("spectrag.reference.pipeline needs networkx: pip install -e '.[test]'") from None
from spectrag.reference.select import budget_select_reference

GRAPH_MODES = ("heat", "ppr", "spectral")
PPR_TOL = 1e-12  # networkx run to the fixed point (the pipeline reaches it to its own propagate.tol)
PPR_MAX_ITER = 200


class ReferenceIndex:
    """What the reference reads from an index, as plain numpy arrays and lists, prepared once.

    Nothing here is query dependent; it is the counterpart of the pipeline's ``QueryState``.
    """

    def __init__(self, index) -> None:
        self.index = index
        self.n = len(index.chunks)
        self.embeddings = np.ascontiguousarray(index.embeddings, dtype=np.float32)  # [n, d]
        self.tokens = [int(c.n_tokens) for c in index.chunks]
        docs: dict[str, int] = {}
        self.doc_codes = [docs.setdefault(c.doc_id, len(docs)) for c in index.chunks]
        per_doc = Counter(self.doc_codes)
        self.stub = [t < index.config.chunk.min_tokens and per_doc[d] > 1 for t, d in zip(self.tokens, self.doc_codes)]
        self.cache: dict = {}
        graph = index.graph
        self.has_graph = graph is not None
        if self.has_graph:
            w = graph["weights"]
            self.indptr = np.asarray(w.indptr).tolist()
            self.indices = np.asarray(w.indices).tolist()
            self.data = np.asarray(w.data, dtype=np.float64).tolist()
            z = np.asarray(graph["coordinates"], dtype=np.float64)
            norms = np.sqrt((z * z).sum(axis=1))
            self.coords = z / np.maximum(norms, 1e-12)[:, None]
            self.clusters = [int(c) for c in np.asarray(graph["clusters"])]
            self.relations = relational_dicts(graph.get("signals", {}), index.config.graph.signal_weights())
        else:
            self.clusters = [0] * self.n
        qs = graph.get("questions") if graph is not None else None
        self.questions = None  # (question vectors [Q, d], owner chunk per question)
        if qs is not None:
            self.questions = (np.asarray(qs.vectors, dtype=np.float32), [int(o) for o in np.asarray(qs.owners)])

    def row(self, i: int):
        """Neighbours ``j`` and weights ``W[i, j]`` of chunk ``i``."""
        lo, hi = self.indptr[i], self.indptr[i + 1]
        return zip(self.indices[lo:hi], self.data[lo:hi])


def relational_dicts(signals: dict, alpha: dict[str, float]) -> dict[int, dict[int, float]]:
    """``rel[i][j] = sum_r alpha_r w_r(i, j) / sum_r alpha_r`` over every stored signal except
    semantic and those without edges (both directions of each undirected edge)."""
    names = [name for name in signals if name != "semantic" and alpha.get(name, 0) > 0 and len(signals[name][0])]
    total = sum(alpha[name] for name in names)
    rel: dict[int, dict[int, float]] = {}
    for name in names:
        rows, cols, weights = (np.asarray(a).tolist() for a in signals[name])
        for i, j, w in zip(rows, cols, weights):
            for a, b in ((i, j), (j, i)):
                rel.setdefault(a, {})
                rel[a][b] = rel[a].get(b, 0.0) + alpha[name] / total * w
    return rel


_CACHE: dict[int, ReferenceIndex] = {}


def reference_state(index) -> ReferenceIndex:
    key = id(index)
    if key not in _CACHE or _CACHE[key].index is not index:
        _CACHE[key] = ReferenceIndex(index)
    return _CACHE[key]


# ---------------------------------------------------------------------------------------------
# stages
# ---------------------------------------------------------------------------------------------


def _all(c: int) -> bool:
    return True


def dense_list(ref: ReferenceIndex, q: np.ndarray, k: int, keep=_all) -> tuple[list[int], list[float]]:
    """Brute-force inner product top-``k`` of the chunks ``keep(id)`` allows (ties: smaller id)."""
    scores = ref.embeddings @ np.asarray(q, dtype=np.float32)  # [n] float32
    order = [int(i) for i in np.argsort(-scores, kind="stable") if keep(int(i))][: min(k, ref.n)]  # stable: ties by id
    return order, [float(scores[i]) for i in order]


def bm25_list(index, text: str, k: int, keep=_all) -> tuple[list[int], list[float]]:
    """BM25 top-``k`` of the chunks with a positive score that ``keep(id)`` allows (ties: smaller id)."""
    row = index.bm25.score([text]).tocsr()
    pairs = [(float(s), int(i)) for i, s in zip(row.indices, row.data) if s > 0 and keep(int(i))]
    pairs.sort(key=lambda p: (-p[0], p[1]))
    pairs = pairs[: min(k, index.bm25.n)]
    return [i for _, i in pairs], [s for s, _ in pairs]


def utility_list(ref: ReferenceIndex, q: np.ndarray, k: int, keep=_all) -> list[int]:
    """Chunks by their best question's inner product with ``q``, top ``k`` (ties: smaller id)."""
    vectors, owners = ref.questions
    scores = vectors.astype(np.float64) @ np.asarray(q, dtype=np.float64)
    best: dict[int, float] = {}
    for owner, s in zip(owners, scores):
        if keep(int(owner)):
            best[owner] = max(best.get(owner, -np.inf), float(s))
    return [c for c, _ in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def rrf(lists: list[list[int]], k: int, top: int) -> tuple[list[int], list[float]]:
    """Reciprocal rank fusion; returns ids and float64 scores, best first (ties: smaller id)."""
    fused: dict[int, float] = {}
    for ids in lists:
        for rank, cid in enumerate(ids, start=1):
            fused[cid] = fused.get(cid, 0.0) + 1.0 / (k + rank)
    items = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [cid for cid, _ in items], [s for _, s in items]


def expand_pool(ref: ReferenceIndex, seeds: list[int], weights: list[float], max_candidates: int, hops: int,
                keep=_all):
    """Candidate pool by priority (seeds first), stepping only onto chunks ``keep(id)`` allows.
    Returns ``(pool, priority dict)``."""
    seed_w = dict(zip(seeds, weights))
    reach: dict[int, float] = {}
    frontier = dict(seed_w)
    for hop in range(hops):
        nxt: dict[int, float] = {}
        for i, mass in frontier.items():
            for j, w in ref.row(i):
                if keep(j):
                    nxt[j] = nxt.get(j, 0.0) + mass * w
        for j, v in nxt.items():
            reach[j] = reach.get(j, 0.0) + (0.5**hop) * v
        frontier = nxt
    peak = max(reach.values(), default=0.0)
    priority: dict[int, float] = {}
    for j, v in reach.items():
        if j not in seed_w and v != 0.0:
            priority[j] = v / peak if peak > 0 else v
    for s, w in seed_w.items():
        priority[s] = 2.0 + w
    pool = sorted(priority, key=lambda c: (-priority[c], c))[: min(max_candidates, ref.n)]
    return pool, priority


def subgraph(ref: ReferenceIndex, pool: list[int]) -> nx.Graph:
    members = set(pool)
    G = nx.Graph()
    G.add_nodes_from(pool)
    for i in pool:
        for j, w in ref.row(i):
            if j in members and j != i:
                G.add_edge(i, j, weight=w)
    return G


def scale(values: dict[int, float]) -> dict[int, float]:
    peak = max(values.values(), default=0.0)
    return {c: (v / peak if peak > 0 else 0.0) for c, v in values.items()}


def ppr(G: nx.Graph, restart: dict[int, float], damping: float) -> dict[int, float]:
    personalization = {c: w for c, w in restart.items() if w > 0}
    if not personalization:  # no seed in the pool: uniform restart, as the pipeline does
        personalization = None
    pr = nx.pagerank(G, alpha=damping, personalization=personalization, tol=PPR_TOL,
                     max_iter=PPR_MAX_ITER, weight="weight")
    return scale(pr)


def normalized_laplacian(G: nx.Graph, pool: list[int], isolated: str = "identity") -> np.ndarray:
    """``I - D^-1/2 W D^-1/2`` on the pool order (see the module docstring for isolated nodes)."""
    L = nx.normalized_laplacian_matrix(G, nodelist=pool, weight="weight").toarray().astype(np.float64)
    if isolated == "identity":
        for k, c in enumerate(pool):
            if G.degree(c, weight="weight") == 0:
                L[k, k] = 1.0
    elif isolated != "networkx":
        raise ValueError(f"isolated_laplacian must be identity or networkx, got {isolated!r}")
    return L


def heat(G: nx.Graph, pool: list[int], relevance: dict[int, float], t: float, isolated: str) -> dict[int, float]:
    if not pool:  # a filter that allows no match
        return {}
    L = normalized_laplacian(G, pool, isolated)
    x = np.array([max(relevance[c], 0.0) for c in pool])
    y = scipy.linalg.expm(-t * L) @ x
    return scale({c: float(v) for c, v in zip(pool, y)})


def spectral(ref: ReferenceIndex, pool: list[int], seeds: list[int]) -> dict[int, float]:
    out = {}
    for c in pool:
        best = None
        for s in seeds:
            cos = float(np.dot(ref.coords[c], ref.coords[s]))
            best = cos if best is None else max(best, cos)
        out[c] = max(best, 0.0) if best is not None else 0.0
    return out


def specificity(index, name: str) -> float:
    """``max over the name's terms of log(N / df) / log(N)``, ``df`` the documents holding the
    term (the distinct documents of the chunks in its row of the BM25 matrix), ``N`` the
    documents; 0 without a term (spectrag.seed.titles)."""
    doc_of = [c.doc_id for c in index.chunks]
    n = len(set(doc_of))
    if n <= 1:
        return 1.0
    row = index.bm25.query_matrix([name]).tocsr()
    indptr, indices = np.asarray(index.bm25.matrix.indptr), np.asarray(index.bm25.matrix.indices)
    best = 0.0
    for term in row.indices.tolist():
        df = max(len({doc_of[c] for c in indices[indptr[term] : indptr[term + 1]].tolist()}), 1)
        best = max(best, min(max(math.log(n / df) / math.log(n), 0.0), 1.0))
    return best


def _named_spans(index, text: str, min_specificity: float):
    """The text casefolded with whitespace collapsed, and each kept title match in it (not inside
    a longer one) as ``(start, end, the titles it names at min_specificity)``."""
    import re

    from spectrag.extract.titles import COMMON_WORDS

    t = " ".join(text.casefold().split())
    forms: dict[str, set[str]] = {}
    spelled: dict[str, set[str]] = {}  # key -> the forms as written (each title's own specificity)
    for c in index.chunks:
        if c.title:
            for form in {c.title, re.sub(r"\s*\([^()]*\)\s*$", "", c.title)}:
                if form:
                    key = " ".join(form.casefold().split())
                    forms.setdefault(key, set()).add(c.title)
                    spelled.setdefault(key, set()).add(form)
    spans = []
    for key, titles in forms.items():
        if len(key) < 4 or key in COMMON_WORDS or not re.search(r"\w", key):
            continue
        left = r"(?<!\w)" if re.match(r"\w", key[0]) else ""
        right = r"(?!\w)" if re.match(r"\w", key[-1]) else ""
        for m in re.finditer(left + re.escape(key) + right, t):
            spans.append((m.start(), m.end(), titles))
    kept = []
    for s0, e0, titles in spans:
        if not any(s1 <= s0 and e0 <= e1 and (s1, e1) != (s0, e0) for s1, e1, _ in spans):
            key = " ".join(t[s0:e0].split())
            specific = {form for form in spelled[key] if specificity(index, form) >= min_specificity}
            kept.append((s0, e0, {title for title in titles if title in specific
                                  or re.sub(r"\s*\([^()]*\)\s*$", "", title) in specific}))
    return t, kept


def named_chunks(index, text: str, min_specificity: float = 0.0) -> set[int]:
    """The chunks of the documents ``text`` names: each title (and its base name without a
    trailing ``(qualifier)``), casefolded with whitespace collapsed, found as whole words by a
    regex; titles under 4 characters, one common word or without a letter or digit are skipped;
    a match inside a longer match is dropped; a matched name of specificity under
    ``min_specificity`` names nothing (spectrag.seed.titles, written out)."""
    kept = set().union(*(titles for _, _, titles in _named_spans(index, text, min_specificity)[1]))
    return {i for i, c in enumerate(index.chunks) if c.title in kept}


def without_names(index, text: str, min_specificity: float = 0.0) -> str:
    """``text`` casefolded, each match that names a document blanked out (spectrag.seed.titles.TitleIndex.without_names)."""
    t, spans = _named_spans(index, text, min_specificity)
    for s0, e0, titles in sorted(spans, reverse=True):
        if titles:
            t = t[:s0] + " " + t[e0:]
    return t


def calibrated(dense: dict[int, float], lexical: dict[int, float], w: float) -> dict[int, float]:
    """``mu_d + sd_d (z_d + w z_b) / (1 + w)`` over the pool, population deviations; a signal
    that does not vary has z = 0, and BM25 that does not vary has weight 0
    (spectrag.rescore.relevance)."""
    ids = list(dense)
    mu_d, sd_d = statistics.fmean(dense.values()), statistics.pstdev(dense.values())
    mu_b, sd_b = statistics.fmean(lexical.values()), statistics.pstdev(lexical.values())
    w = w if sd_b > 1e-9 else 0.0
    out = {}
    for c in ids:
        z_d = (dense[c] - mu_d) / sd_d if sd_d > 1e-9 else 0.0
        z_b = (lexical[c] - mu_b) / sd_b if sd_b > 1e-9 else 0.0
        out[c] = mu_d + sd_d * (z_d + w * z_b) / (1 + w)
    return out


def protect(scores: dict[int, float], relevance: dict[int, float], named: set[int], floor: float,
            eps: float = 1e-3) -> dict[int, float]:
    """Named chunks with relevance >= floor * the best above every other (spectrag.rescore.bridge.protect_named)."""
    top = max(relevance.values(), default=0.0)
    keep = {c for c in scores if c in named and relevance[c] >= floor * top}
    return lift(scores, keep, eps) if keep else dict(scores)


def lift(scores: dict[int, float], keep: set[int], eps: float = 1e-3) -> dict[int, float]:
    """``keep`` above every other candidate, in their own order (spectrag.rescore.bridge.lift_above)."""
    others = max((v for c, v in scores.items() if c not in keep), default=float("-inf"))
    return {c: (max(v, others) + eps * (1 + v) if c in keep else v) for c, v in scores.items()}


def bridge(ref: ReferenceIndex, pool: list[int], relevance: dict[int, float], cfg,
           start: dict[int, float] | None = None, anchors: set[int] | None = None,
           relations: dict[int, dict[int, float]] | None = None, lam: float | None = None,
           target: dict[int, float] | None = None) -> dict[int, float]:
    """Max-plus bridging over ``relations`` (default: the relational signals) inside the pool
    (spectrag.rescore.bridge), from ``start`` (default: the relevance); only ``anchors`` (default:
    any candidate) are sources; a reached chunk brings ``target`` (default: the relevance); with
    ``bridge.other_documents`` not into a source's own document and, of each document reached,
    only the best-bridged chunk (ties: the smaller id)."""
    x = dict(relevance if start is None else start)
    brings = relevance if target is None else target
    members = set(pool)
    rel = ref.relations if relations is None else relations
    lam = cfg.bridge.lam if lam is None else lam
    gamma, apart = cfg.bridge.gamma, cfg.bridge.other_documents
    doc = ref.doc_codes
    for _ in range(cfg.bridge.rounds):
        eligible = [c for c in pool if anchors is None or c in anchors]
        sources = sorted(eligible, key=lambda c: (-x[c], c))[: cfg.bridge.sources]
        best: dict[int, float] = {}
        for s in sources:
            for c, w in rel.get(s, {}).items():
                if c in members and w > 0 and not (apart and doc[s] == doc[c]):
                    best[c] = max(best.get(c, float("-inf")), (1 - lam) * x[s] + lam * brings[c] - gamma * (1 - w))
        if apart:  # one chunk per document reached
            winner: dict[int, int] = {}
            for c in sorted(best):
                d = doc[c]
                if d not in winner or best[c] > best[winner[d]]:
                    winner[d] = c
            best = {c: v for c, v in best.items() if winner[doc[c]] == c}
        x = {c: max(v, best.get(c, float("-inf"))) for c, v in x.items()}
    return x


def cover(scores: dict[int, float], pool: list[int], named_docs_chunks: set[int], graphs: list[dict[int, dict[int, float]]],
          doc_codes, depth: int, max_named: int = 8, eps: float = 1e-3) -> dict[int, float]:
    """Each named document's first bridge right under the named chunks (spectrag.rescore.cover):
    walking ``scores`` down (ties: the smaller id) past the named documents' chunks, ``depth``
    deep, a candidate reached (an edge from a named chunk to it in one of ``graphs``, inside the
    pool) from a named document not yet covered is lifted above every unlifted candidate. Only
    with two or more named documents; the first ``max_named`` of them (by code) are anchors."""
    members = set(pool)
    named_docs = sorted({doc_codes[c] for c in named_docs_chunks if c in members})
    if len(named_docs) < 2:
        return dict(scores)
    anchor_docs = set(named_docs[:max_named])
    reach: dict[int, set[int]] = {c: set() for c in pool}
    for g in graphs:
        for j in pool:
            if j in named_docs_chunks and doc_codes[j] in anchor_docs:
                for c in g.get(j, {}):
                    if c in members and c not in named_docs_chunks:
                        reach[c].add(doc_codes[j])
    walk = sorted((c for c in pool if c not in named_docs_chunks), key=lambda c: (-scores[c], c))[:depth]
    covered, marked = set(), set()
    for c in walk:
        if reach[c] - covered:
            marked.add(c)
            covered |= reach[c]
    return lift(scores, marked, eps) if marked else dict(scores)


def page_support(pool: list[int], relevance: dict[int, float], doc_codes, beta: float) -> dict[int, float]:
    """Each candidate's share of its document's second-best relevance above the pool's mean,
    times ``beta`` (0 for a document with one candidate) (spectrag.rescore.pages)."""
    if not pool:
        return {}
    mean = sum(relevance[c] for c in pool) / len(pool)
    by_doc: dict[int, list[float]] = {}
    for c in pool:
        by_doc.setdefault(int(doc_codes[c]), []).append(relevance[c])
    second = {d: sorted(v, reverse=True)[1] for d, v in by_doc.items() if len(v) > 1}
    return {c: beta * max(0.0, second[int(doc_codes[c])] - mean) if int(doc_codes[c]) in second else 0.0 for c in pool}


def citation_dicts(index, ref: ReferenceIndex, bar: float) -> dict[int, dict[int, float]]:
    """The citation signal's edges between chunks whose documents' titles both have specificity
    at least ``bar`` (spectrag.graph.relational.specific_citations), both directions."""
    key = ("citations", bar)
    if key not in ref.cache:
        spec: dict[str, float] = {}
        for c in index.chunks:
            if c.title and c.title not in spec:
                spec[c.title] = specificity(index, c.title)
        chunk_spec = [spec.get(c.title, 0.0) if c.title else 0.0 for c in index.chunks]
        out: dict[int, dict[int, float]] = {}
        edges = (index.graph or {}).get("signals", {}).get("citation")
        if edges is not None:
            for i, j, w in zip(*(np.asarray(a).tolist() for a in edges)):
                if min(chunk_spec[i], chunk_spec[j]) >= bar:
                    for a, b in ((i, j), (j, i)):
                        out.setdefault(a, {})[b] = out.get(a, {}).get(b, 0.0) + float(np.float32(w))
        ref.cache[key] = out
    return ref.cache[key]


# ---------------------------------------------------------------------------------------------
# the whole pipeline for one query
# ---------------------------------------------------------------------------------------------


def reference_retrieve(index, query_vector: np.ndarray, query_text: str, config, budget: int, *,
                       isolated_laplacian: str = "identity", bm25_ids: list[int] | None = None,
                       allowed: set[int] | None = None) -> dict:
    """One query through the whole pipeline in plain Python (mode ``config.mode``).

    ``isolated_laplacian``: ``identity`` (the pipeline's documented ``L[i, i] = 1``) or
    ``networkx`` (``L[i, i] = 0``) for isolated candidates in heat mode.
    ``bm25_ids``: use this BM25 list (best first) instead of sorting the BM25 row here (the
    benchmark uses it to check everything downstream of a BM25 list that differs from this
    one only by which chunks tied at the k-th score it keeps).
    ``allowed``: the chunk ids a metadata filter allows (None: all), applied plainly: every
    seed list sorts only allowed chunks, the expansion steps only onto allowed chunks.

    Returns a dict:
        ``mode``; ``seeds`` and ``seed_weights`` (the mode's seed list; for graph modes the
        ``n_seeds`` expansion seeds with weights ``rrf / rrf_top``); ``candidates`` (chunk ids in
        pool order); ``priority`` (expansion priority per candidate, graph modes);
        ``relevance``, ``proximity``, ``scores`` (dicts chunk id -> float; ``scores`` are the
        float32-rounded ``s2`` of the ranking; the selection's lacks page support); ``ranking`` (candidates by
        descending score, ties by smaller id); ``selected`` (chunk ids in selection order);
        ``phases`` (0 core, 1 tail, 2 backfill); ``used_tokens``.
    """
    ref = reference_state(index)
    cfg = config
    mode = cfg.mode
    q = np.asarray(query_vector, dtype=np.float32).reshape(-1)

    # seed lists
    keep = (lambda c: True) if allowed is None else allowed.__contains__  # noqa: E731
    dense_ids, dense_scores = dense_list(ref, q, cfg.seed.k_dense, keep)
    if mode in ("dense", "hyde"):
        seeds, seed_scores = dense_ids, [float(np.float32(s)) for s in dense_scores]
    else:
        bm_ids, bm_scores = bm25_list(index, query_text, cfg.seed.k_bm25, keep)
        if bm25_ids is not None:
            row = index.bm25.score([query_text]).toarray()[0]
            bm_ids = [int(c) for c in bm25_ids if c >= 0]
            bm_scores = [float(row[c]) for c in bm_ids]
        if mode == "bm25":
            seeds, seed_scores = bm_ids, bm_scores
        else:
            lists = [dense_ids, bm_ids]
            named = named_chunks(index, query_text, cfg.seed.named_specificity) if mode in GRAPH_MODES else set()
            named = {c for c in named if keep(c)}
            if named and cfg.seed.k_named > 0:  # the third list: named chunks by relevance
                rel = {c: float(np.dot(ref.embeddings[c].astype(np.float64), q.astype(np.float64))) for c in named}
                lists.append(sorted(named, key=lambda c: (-np.float32(rel[c]), c))[: cfg.seed.k_named])
            if ref.questions is not None and cfg.seed.k_utility > 0 and mode != "hybrid":
                lists.append(utility_list(ref, q, cfg.seed.k_utility, keep))
            seeds, fused = rrf(lists, cfg.seed.rrf_k, max(cfg.seed.k_dense, cfg.seed.k_bm25))
            seed_scores = [float(np.float32(s)) for s in fused]  # the pipeline keeps them in float32

    out = {"mode": mode}
    priority: dict[int, float] = {}
    past_cut: set[int] = set()  # bridge.past_cut: the chunks bridging raised pass the evidence cut
    if mode in GRAPH_MODES:
        if not ref.has_graph:
            raise ValueError(f"mode {mode!r} needs the chunk graph")
        top = seeds[: cfg.expand.n_seeds]
        first = np.float32(max(seed_scores[0], 1e-30)) if seed_scores else np.float32(1.0)
        weights = [float(np.float32(s) / first) for s in seed_scores[: cfg.expand.n_seeds]]
        pool, priority = expand_pool(ref, top, weights, cfg.expand.max_candidates, cfg.expand.hops, keep)
        out["seeds"], out["seed_weights"] = top, weights
    else:
        pool = seeds[: cfg.expand.max_candidates]
        out["seeds"], out["seed_weights"] = list(seeds), list(seed_scores)

    # relevance r = cos(q, c), float64 over the float32 vectors
    q64 = q.astype(np.float64)
    relevance = {c: float(np.dot(ref.embeddings[c].astype(np.float64), q64)) for c in pool}
    cosine = relevance
    if mode in GRAPH_MODES and cfg.seed.lexical_weight > 0 and index.bm25 is not None and pool:
        row = index.bm25.score([query_text]).toarray()[0].astype(np.float64)
        relevance = calibrated(relevance, {c: float(row[c]) for c in pool}, cfg.seed.lexical_weight)
    target = None  # what a chunk reached from a named document brings: the question beyond the names
    if mode in GRAPH_MODES and cfg.bridge.target_lexical_weight > 0 and cfg.seed.lexical_weight > 0 \
            and index.bm25 is not None and pool:
        beyond = without_names(index, query_text, cfg.seed.named_specificity)
        row = index.bm25.score([beyond]).toarray()[0].astype(np.float64)
        target = calibrated(cosine, {c: float(row[c]) for c in pool}, cfg.bridge.target_lexical_weight)
    proximity = {c: 0.0 for c in pool}
    if mode in GRAPH_MODES:
        G = subgraph(ref, pool)
        seed_weight = dict(zip(top, weights))
        if mode == "heat":
            proximity = heat(G, pool, relevance, cfg.propagate.t, isolated_laplacian)
        else:
            restart = {c: max(seed_weight.get(c, 0.0), 0.0) for c in pool}
            pr = ppr(G, restart, cfg.propagate.damping)
            if mode == "ppr":
                proximity = pr
            else:
                spec = spectral(ref, pool, top)
                proximity = {c: min(max(0.5 * pr[c] + 0.5 * spec[c], 0.0), 1.0) for c in pool}
        named_pool = named & set(pool) if cfg.bridge.protect_named else set()
        named_in_pool = set(named_pool)  # every candidate chunk of a named document (the cover's)
        if cfg.bridge.named_best_chunk:  # each named document's most relevant chunk (ties: the smaller id)
            best_of: dict[int, int] = {}
            for c in sorted(named_pool):
                d = ref.doc_codes[c]
                if d not in best_of or relevance[c] > relevance[best_of[d]]:
                    best_of[d] = c
            named_pool = set(best_of.values())
        start = protect(relevance, relevance, named_pool, cfg.bridge.named_floor) \
            if named_pool and cfg.bridge.named_sources and cfg.bridge.rounds > 0 else None
        others_beyond = cfg.bridge.others_beyond_names and target is not None and named_pool and cfg.bridge.rounds > 0
        if others_beyond:  # the other candidates start from the question beyond the names too
            base = relevance if start is None else start
            start = {c: base[c] if c in named_pool else min(target[c], relevance[c]) for c in pool}
        anchors = named_pool if cfg.bridge.anchors == "named" else None
        bridged = bridge(ref, pool, relevance, cfg, start, anchors, target=target)
        cover_graphs = [ref.relations]
        if cfg.bridge.cited and cfg.bridge.rounds > 0 and (index.graph or {}).get("signals", {}).get("citation") is not None:
            citations = citation_dicts(index, ref, cfg.seed.named_specificity)
            cited = bridge(ref, pool, relevance, cfg, start, None, citations, cfg.bridge.cited_lam)
            bridged = {c: max(bridged[c], cited[c]) for c in pool}
            cover_graphs.append(citations)
        if cfg.bridge.past_cut and cfg.bridge.rounds > 0 and ref.relations:  # past the selection's evidence cut
            past_cut = {c for c in pool if bridged[c] > relevance[c]}

        covering = cfg.bridge.cover_named and bool(named_pool) and cfg.bridge.rounds > 0 and bool(ref.relations)

        def final(x: dict[int, float], covered: bool = False) -> dict[int, float]:
            s = {c: (1 - cfg.propagate.alpha) * x[c] + cfg.propagate.alpha * proximity[c] for c in pool}
            if covered:  # float32, as the batched s2 the cover walks
                s = cover({c: float(np.float32(v)) for c, v in s.items()}, pool, named_in_pool, cover_graphs,
                          ref.doc_codes, cfg.bridge.cover_depth)
            return protect(s, relevance, named_pool, cfg.bridge.named_floor) if named_pool else s

        ranked_bridged = bridged
        if others_beyond:  # the selection keeps every chunk's own relevance as its evidence
            bridged = {c: max(bridged[c], relevance[c]) for c in pool}
        scores = final(bridged, covering)  # the selection's; page support orders the ranking only
        ranked = final(ranked_bridged, covering)
        if cfg.bridge.page_support > 0:
            support = page_support(pool, relevance, ref.doc_codes, cfg.bridge.page_support)
            ranked = final({c: float(np.float32(ranked_bridged[c]) + np.float32(support[c])) for c in pool}, covering)
    elif mode in ("dense", "hyde"):
        scores = dict(relevance)
    else:  # bm25 / hybrid: the list's own scores
        scores = {c: s for c, s in zip(pool, seed_scores)}
    if mode not in GRAPH_MODES:
        ranked = scores
    scores = {c: float(np.float32(v)) for c, v in scores.items()}
    ranked = {c: float(np.float32(v)) for c, v in ranked.items()}
    ranking = sorted(pool, key=lambda c: (-ranked[c], c))

    # selection, on the pool in pool order
    select = cfg.select if mode in GRAPH_MODES else cfg.baseline_select  # baselines: score order
    if pool:
        sel = budget_select_reference(
            torch.tensor([[scores[c] for c in pool]], dtype=torch.float32),
            torch.tensor([[proximity[c] for c in pool]], dtype=torch.float32),
            torch.tensor([[ref.tokens[c] for c in pool]], dtype=torch.int64),
            torch.tensor([[not ref.stub[c] for c in pool]], dtype=torch.bool),
            torch.from_numpy(ref.embeddings[pool][None]),
            torch.tensor([[ref.clusters[c] for c in pool]], dtype=torch.int64),
            torch.tensor([[ref.doc_codes[c] for c in pool]], dtype=torch.int64),
            budget=int(budget),
            keep=torch.tensor([[c in past_cut for c in pool]], dtype=torch.bool),
            **asdict(select),
        )
        order = [p for p in sel.order[0].tolist() if p >= 0]
        phases = [p for p in sel.phase[0].tolist() if p >= 0]
        used = int(sel.used_tokens[0])
    else:
        order, phases, used = [], [], 0
    out.update(
        candidates=list(pool),
        priority={c: priority[c] for c in pool} if priority else {},
        relevance=relevance,
        proximity=proximity,
        scores=ranked,  # the ranking's (the selection's: without page support)
        ranking=ranking,
        selected=[pool[p] for p in order],
        phases=phases,
        used_tokens=used,
    )
    return out
