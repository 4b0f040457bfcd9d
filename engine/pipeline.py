"""The online pipeline for a batch of B queries (SpectRAG Algorithm 1): one function on tensors,
:func:`run`, which every caller (the :class:`~spectrag.retriever.Retriever`, the evaluation,
the benchmarks, the GPU check) goes through.

    seed       dense top-K + BM25 top-K, fused by RRF            [B, K]      spectrag.seed
    expand     two hops over W from the top seeds, capped at P  [B, P]      spectrag.expand.pool
    blocks     induced candidate subgraphs                       [B, P, P]   spectrag.expand.blocks
    relevance  r = dense + BM25, z-scored over the pool          [B, P]      spectrag.rescore.relevance, seed.lexical
               (and r' of the question without its named titles, for bridged chunks)
    propagate  p = heat | PPR | spectral                         [B, P]      spectrag.propagate
    rescore    x = r + what named / cited documents vouch for    [B, P]      spectrag.rescore.bridge
               + what a document's second chunk says for it      [B, P]      spectrag.rescore.pages (ranking only)
               s2 = (1 - alpha) x + alpha p                      (Algorithm 1, line 7)
    select     token-budgeted greedy selection                   [B, K_sel]  spectrag.select

Modes: ``dense``, ``bm25``, ``hybrid`` (baselines: rank by that list's score, select with
``baseline_select``), ``heat``, ``ppr`` (one proximity), ``spectral`` (the full pipeline: PPR and
spectral proximity averaged); with a knowledge graph (:mod:`spectrag.propagate.activation`):
``activation`` (spreading activation alone, SA-RAG) and ``combined`` (``spectral`` with the chunk
activation as a third proximity and the activation pool added to the candidates). No stage loops
over queries.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.config import BASELINE_MODES, GRAPH_MODES, KG_MODES, RetrieverConfig, check_setting
from spectrag.errors import SpectragError
from spectrag.index.lexical import DeviceTerms
from spectrag.expand.blocks import candidate_blocks
from spectrag.expand.pool import expand
from spectrag.kernels import compiled as compiled_kernels
from spectrag.kernels.compiled.documents import named_in_compiled
from spectrag.kernels.compiled.gather import gathered_dot_compiled
from spectrag.kernels.gather import gathered_dot
from spectrag.propagate.activation import ActivationBatch, activate
from spectrag.propagate.proximity import pool_proximity
from spectrag.rescore.bridge import graph_evidence, named_best_chunks, protect_named
from spectrag.rescore.cover import named_cover
from spectrag.rescore.pages import page_support
from spectrag.rescore.relevance import calibrated_relevance
from spectrag.seed.lexical import lexical_scores
from spectrag.seed.seed import restrict_named, seed
from spectrag.seed.titles import NamedChunks
from spectrag.select.select import select_context
from spectrag.state import QueryState
from spectrag.util.where import restrict_ids

PROPAGATION_MODES = GRAPH_MODES + ("combined",)  # expand over W and re-score with proximity


@dataclass
class QueryBatch:
    """What the pipeline knows of B queries: their embeddings; for BM25 seeding, their term
    counts over the index vocabulary (None: dense seeds only); the chunks of the documents each
    names (:mod:`spectrag.seed.titles`; None: none); the chunks each may return (``allowed``, a
    metadata filter: :meth:`spectrag.util.where.MetadataColumns.batch_mask`; None: all); the term
    counts of the titles each names (``name_terms``; None: bridged chunks bring their own relevance).
    Shapes: ``vectors [B, d]``, ``terms`` and ``name_terms`` scipy CSR ``[B, vocab]``, ``named``
    scipy CSR ``[B, n]``, ``allowed [B, n]`` bool; on the device path (the torch backend) they are laid out on the
    device once (:meth:`on_device`: :class:`DeviceTerms`, :class:`NamedChunks`), and no stage
    reads them back."""

    vectors: torch.Tensor
    terms: sp.csr_matrix | DeviceTerms | None = None
    named: sp.csr_matrix | NamedChunks | None = None
    texts: list[str] | None = None  # the query texts, for the knowledge graph's name linking
    allowed: torch.Tensor | None = None  # [B, n] bool: the chunks each query's metadata filter allows (None: all)
    # [B, vocab] term counts of the titles each query names (TitleIndex.read): the rest of its terms
    # are the lexical evidence of the chunks bridging reaches (None: their own relevance)
    name_terms: sp.csr_matrix | DeviceTerms | None = None

    def __len__(self) -> int:
        return self.vectors.shape[0]

    def on_device(self, state: QueryState) -> "QueryBatch":
        """This batch with its vectors, term counts and named chunks on the state's device (host
        work on the query batch; nothing here waits for the device)."""
        dev = state.device
        terms, named, name_terms = self.terms, self.named, self.name_terms
        if isinstance(terms, sp.spmatrix) and state.bm25 is not None:
            terms = state.bm25.device_terms(terms, dev)
        if isinstance(name_terms, sp.spmatrix) and state.bm25 is not None:
            name_terms = state.bm25.device_terms(name_terms, dev)
        if isinstance(named, sp.spmatrix):  # a filter's left-out chunks are dropped while the list is on the host
            named = NamedChunks.from_csr(restrict_named(named, self.allowed), dev)
        allowed = None if self.allowed is None else self.allowed.to(dev)
        return QueryBatch(self.vectors.to(dev, torch.float32), terms, named, self.texts, allowed, name_terms)


@dataclass
class BatchResult:
    """Tensor output of one batch. Shapes: ``[B, P]`` pools and scores, ``[B, K]`` selections."""

    mode: str
    candidates: torch.Tensor  # chunk ids, -1 padded
    scores: torch.Tensor  # the ranking's final score (the selection's is the same without page support)
    relevance: torch.Tensor
    proximity: torch.Tensor
    selected: torch.Tensor  # positions into candidates, in selection order, -1 padded
    phase: torch.Tensor
    used_tokens: torch.Tensor
    budget: torch.Tensor
    seconds: dict[str, float]
    activation: ActivationBatch | None = None  # modes activation and combined: SA pairs and relations used
    seeds: torch.Tensor | None = None  # [B, S] the chunks expansion started from (graph modes) or the seed list, -1 padded

    def ranking_order(self) -> torch.Tensor:
        """Positions into ``candidates`` by descending score (ties: smaller id), padding last. ``[B, P]``."""
        key = torch.where(self.candidates >= 0, self.scores, torch.full_like(self.scores, float("-inf")))
        order = torch.argsort(self.candidates.clamp(min=0), dim=1, stable=True)
        return order.gather(1, torch.argsort(key.gather(1, order), dim=1, descending=True, stable=True))

    def ranking(self) -> torch.Tensor:
        """Candidate chunk ids by descending score (ties: smaller id), -1 padded. ``[B, P]``."""
        return self.candidates.gather(1, self.ranking_order())

    def selected_ids(self) -> torch.Tensor:
        """Chunk ids of the selection, in selection order, -1 padded. ``[B, K]``."""
        pos = self.selected
        return torch.where(pos >= 0, self.candidates.gather(1, pos.clamp(min=0)), torch.full_like(pos, -1))


def named_in(named: sp.csr_matrix | NamedChunks, candidates: torch.Tensor, *,
             compiled: bool = False) -> torch.Tensor:
    """Which candidates are chunks of a document their query names (``compiled``, for a CSR
    ``named``: by the compiled CPU kernel, the same answer). ``[B, n]``, ``[B, P]`` -> bool ``[B, P]``."""
    n = named.shape[1]
    if compiled and not isinstance(named, NamedChunks):
        return torch.from_numpy(named_in_compiled(named.indptr, named.indices, n, candidates.numpy()))
    if isinstance(named, NamedChunks):
        keys = named.keys.to(candidates.device)
    else:
        rows = np.repeat(np.arange(named.shape[0], dtype=np.int64), np.diff(named.indptr))
        keys = torch.from_numpy(np.sort(rows * n + named.indices)).to(candidates.device)
    query = torch.arange(candidates.shape[0], device=candidates.device).unsqueeze(1)
    want = query * n + candidates.clamp(min=0)
    at = torch.searchsorted(keys, want).clamp(max=max(keys.numel() - 1, 0))
    return (keys[at] == want) & (candidates >= 0) if keys.numel() else torch.zeros_like(candidates, dtype=torch.bool)


def uses_compiled(backend: str, device: torch.device) -> bool:
    """Whether a batch on ``device`` runs the compiled CPU kernels (``backend`` of
    :class:`~spectrag.config.RetrieverConfig`); ``compiled`` off the CPU is an error."""
    if backend == "compiled" and device.type != "cpu":
        raise SpectragError(f"backend 'compiled' runs on the CPU only, the device is {device}; use 'auto' or 'torch'")
    if backend == "torch":
        return False
    if backend == "compiled":
        compiled_kernels.require()
        return True
    return device.type == "cpu" and compiled_kernels.available()


class _Timer:
    """Seconds per stage, the device synchronized at each mark so GPU work is counted where it runs."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.seconds, self.tick = device, {}, time.perf_counter()

    def __call__(self, name: str) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.tick
        self.tick = now


def _integer(value):
    """A numpy or torch integer as a Python int (anything else as given, for the range check to name)."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def _lexical(state: QueryState, terms, candidates: torch.Tensor, compiled: bool) -> torch.Tensor:
    """BM25 scores of each query's ``terms`` at its candidates. ``[B, P]``."""
    if isinstance(terms, DeviceTerms):
        return state.bm25.scores_at(terms, candidates).to(torch.float64)
    return lexical_scores(state.bm25, terms, candidates, compiled=compiled)[0]


def run(state: QueryState, queries: QueryBatch | torch.Tensor, config: RetrieverConfig,
        *, budget: int | None = None) -> BatchResult:
    """Every stage of ``config.mode`` for one batch of queries (see the module docstring).

    ``queries``: a :class:`QueryBatch`, or the query vectors ``[B, d]`` alone (dense seeds).
    ``budget``: tokens per context (default: ``config.budget``).

    A metadata filter (``queries.allowed``) is a mask honoured where candidates are made: every
    seed list (dense, BM25, named documents, utility questions) is the top of the allowed chunks,
    the expansion walks only the allowed chunks' subgraph, and the pool (the knowledge graph's
    too) keeps allowed chunks only, so the induced blocks, propagation, bridging and selection
    never see a filtered-out chunk. Global quantities stay those of the whole index (the spectral
    coordinates, the BM25 row maximum that calibrates lexical relevance, a ``graph``-scope PPR).
    """
    batch = queries if isinstance(queries, QueryBatch) else QueryBatch(queries)
    mode = config.mode
    # a per-call budget gets the config file's range (retriever.budget)
    budget = config.budget if budget is None else check_setting(RetrieverConfig, "budget", _integer(budget), label="budget")
    if len(batch) == 0:
        raise SpectragError("no queries given")
    if mode in PROPAGATION_MODES:
        state.require_graph(mode)
    kg = state.require_kg(mode) if mode in KG_MODES else None
    stage = _Timer(state.device)
    compiled = uses_compiled(config.backend, state.device)
    allowed = batch.allowed
    if allowed is not None and (tuple(allowed.shape) != (len(batch), state.n) or allowed.dtype != torch.bool):
        raise SpectragError(f"allowed must be a bool [B, n] = {[len(batch), state.n]} mask, "
                            f"got {allowed.dtype} {list(allowed.shape)}")
    if not compiled:  # the device path: the batch's tensors on the device once, never read back
        batch = batch.on_device(state)
    q = batch.vectors.to(state.device, torch.float32)
    allowed = None if batch.allowed is None else batch.allowed.to(state.device)
    # a named document's filtered-out chunks are not named (NamedChunks: done by on_device)
    named_all = batch.named if isinstance(batch.named, NamedChunks) else restrict_named(batch.named, allowed)
    stage("embed")
    sc = config.seed
    dense_ids = None
    if mode == "activation":  # the pool comes from the knowledge graph, and the dense top
        if config.activation.k_dense > 0:
            _, dense_ids = state.dense.search_tensors(q, config.activation.k_dense, allowed=allowed)
    else:
        named = named_all if mode in PROPAGATION_MODES else None  # baselines stay baselines
        seeds, seed_scores = seed(mode, q, batch.terms, state.dense, state.bm25, named=named,
                                  embeddings=state.embeddings, k_dense=sc.k_dense, k_bm25=sc.k_bm25,
                                  rrf_k=sc.rrf_k, k_named=sc.k_named, questions=state.questions,
                                  k_utility=sc.k_utility, allowed=allowed, compiled=compiled)
        if seeds.shape[1] == 0:  # filters that match nothing (BM25 or fused lists of no entry): one empty slot
            seeds = torch.full((len(batch), 1), -1, dtype=torch.int64, device=seeds.device)
            seed_scores = torch.zeros((len(batch), 1), dtype=torch.float32, device=seeds.device)
        stage("seed")
    sa = None
    if kg is not None:
        sa = activate(kg, q, state.embeddings, config.activation, max_candidates=config.expand.max_candidates,
                      texts=batch.texts, dense_ids=dense_ids, compiled=compiled)
        stage("activate")
    ec = config.expand

    def graph(name: str):  # the graph as the backend's kernels read it
        return getattr(state, name) if compiled else state.torch_graph(name)

    if mode in PROPAGATION_MODES:
        top = seeds[:, : ec.n_seeds]
        weight = seed_scores[:, : ec.n_seeds]
        weight = weight / weight[:, :1].clamp(min=1e-30)
        candidates, _ = expand(top, weight, graph("weights"), max_candidates=ec.max_candidates, hops=ec.hops,
                               allowed=allowed)
        if sa is not None:  # combined: the activation pool joins the expanded candidates
            candidates = sa.merge(candidates)
        stage("expand")
    elif mode == "activation":
        candidates = sa.candidates
    else:
        candidates = seeds[:, : ec.max_candidates]
    candidates = restrict_ids(candidates, allowed)  # the pool keeps allowed chunks only (the KG's pool too)
    empty = None
    if allowed is not None:  # a filter that allows no match leaves a pool empty: a stand-in keeps every
        if candidates.shape[1] == 0:  # kernel's input well formed, and is dropped before scoring
            candidates = torch.full((len(batch), 1), -1, dtype=torch.int64, device=candidates.device)
        empty = ~(candidates >= 0).any(dim=1)
        candidates = candidates.clone()
        candidates[empty, 0] = 0
    mask = candidates >= 0
    if compiled:  # r = cos(q, c), (B, P); 0 on padding
        relevance = torch.from_numpy(gathered_dot_compiled(state.embeddings.numpy(), candidates.numpy(), q.numpy()))
    else:
        relevance = gathered_dot(state.embeddings, candidates, q)
    cosine, lexical = relevance, None
    if mode in PROPAGATION_MODES and sc.lexical_weight > 0 and batch.terms is not None and state.bm25 is not None:
        # r: dense and BM25 evidence together, each standardized over the query's pool (rescore.relevance)
        lexical = _lexical(state, batch.terms, candidates, compiled)
        relevance = calibrated_relevance(relevance, lexical, mask, weight=sc.lexical_weight,
                                         compiled=compiled)
    proximity = torch.zeros_like(relevance)
    keep = None  # [B, P] bool: candidates past the evidence cut whatever their score
    if mode in PROPAGATION_MODES:
        pc, bc = config.propagate, config.bridge
        bridging = bc.rounds > 0 and state.relations is not None
        names = ["weights", "relations"] if bridging else ["weights"]
        graphs = [graph(g) for g in names]
        if bridging and bc.cited and (cited := state.citation_graph(sc.named_specificity, on_device=not compiled)) is not None:
            graphs.append(cited)  # citations between documents of specific titles (rescore.bridge.graph_evidence)
        blocks, *relation_blocks = candidate_blocks(candidates, graphs)
        stage("blocks")
        dense = pc.blocks == "dense" or (pc.blocks == "auto" and state.device.type != "cpu")
        walk = state.ppr_solver(pc.damping) if pc.scope == "graph" and mode != "heat" else None
        proximity = pool_proximity(mode, blocks, candidates, top, weight, relevance, mask, state.coords,
                                   t=pc.t, damping=pc.damping, tol=pc.tol, dense=dense, walk=walk,
                                   ppr_method=pc.ppr_method)
        activation = sa.proximity(candidates) if sa is not None else None  # combined: the chunk activation
        if activation is not None:  # (ppr + spectral + activation) / 3
            proximity = (2 * proximity + activation) / 3
        stage("propagate")
        protect = bc.protect_named and named_all is not None and named_all.nnz > 0
        named_mask = named_in(named_all, candidates, compiled=compiled) if protect else None
        named_chunks = named_mask  # every candidate chunk of a named document (the cover's)
        docs = state.doc_codes[candidates.clamp(min=0)].masked_fill(~mask, -1)
        if protect and bc.named_best_chunk:  # a named document is represented by its best chunk
            named_mask = named_best_chunks(named_mask, relevance, docs, candidates, compiled=compiled)
        bridged = ranked_bridged = relevance  # the selection's and the ranking's evidence
        if bridging:
            target = None  # what a chunk reached from a named document brings: the question beyond the names
            if bc.target_lexical_weight > 0 and batch.name_terms is not None and lexical is not None:
                beyond = lexical - _lexical(state, batch.name_terms, candidates, compiled)  # BM25 is linear in the terms
                target = calibrated_relevance(cosine, beyond, mask, weight=bc.target_lexical_weight,
                                              compiled=compiled)
            bridged = ranked_bridged = graph_evidence(
                relation_blocks[0], relation_blocks[1] if len(relation_blocks) > 1 else None, relevance, candidates,
                named_mask, docs, bc, target=target)
            if bc.others_beyond_names and target is not None and named_mask is not None:
                bridged = torch.maximum(ranked_bridged, relevance)  # the selection keeps each chunk's own relevance
            if bc.past_cut:  # what bridging raised is evidence the selection's cut must not drop
                keep = bridged > relevance
        support = page_support(relevance, docs, mask, bc.page_support, compiled=compiled) if bc.page_support > 0 else None
        stage("bridge")

        # each named document's first bridge, found once for the selection's walk and the ranking's
        cover = named_cover(relation_blocks, named_chunks, docs, candidates, depth=bc.cover_depth) \
            if bc.cover_named and protect and bridging else None

        def final(x: torch.Tensor) -> torch.Tensor:  # s2 = (1 - alpha) x + alpha p, named documents on top
            s = (1 - pc.alpha) * x + pc.alpha * proximity
            if activation is not None and config.activation.beta > 0:  # combined: the activation as its own term
                s = s + config.activation.beta * activation
            if cover is not None:  # each named document's first bridge right under the named chunks
                s = cover.lift(s)
            if not protect:
                return s
            return protect_named(s, relevance, named_mask, candidates, floor=bc.named_floor, compiled=compiled)

        # the named documents' first bridges in the selection too (2Wiki at 500 tokens: every gold
        # passage in the context for 75.5% of the questions instead of 66.8%, quality_context_2wiki.md)
        scores = final(bridged)
        # page support orders the ranking only: the selection's evidence cut is relative to the
        # best chunk, which the support lifts with its whole page, and it dropped second pages
        # from the context (bench/results/quality.md)
        if support is not None:
            ranked_bridged = ranked_bridged + support.to(ranked_bridged.dtype)
        ranked = scores if ranked_bridged is bridged else final(ranked_bridged)
    elif mode == "activation":
        proximity = sa.proximity(candidates)
        alpha = config.activation.alpha
        scores = (1 - alpha) * relevance + alpha * proximity
    elif mode in ("dense", "hyde"):
        scores = relevance
    else:  # bm25 / hybrid rank by their own list order: a decreasing score over positions
        scores = torch.where(mask, seed_scores[:, : candidates.shape[1]], torch.zeros_like(relevance))
    if mode not in PROPAGATION_MODES:
        ranked = scores
    if empty is not None:  # the stand-ins go: an empty pool ranks and selects nothing
        candidates = candidates.masked_fill(empty[:, None], -1)
        mask = candidates >= 0
    scores = scores.masked_fill(~mask, float("-inf"))
    ranked = ranked.masked_fill(~mask, float("-inf"))
    stage("score")
    select = config.baseline_select if mode in BASELINE_MODES else config.select
    sel = select_context(scores, proximity, candidates, state.embeddings, state.tokens, state.clusters,
                         state.doc_codes, select, budget=budget, stubs=state.stubs, keep=keep, compiled=compiled)
    stage("select")
    seed_ids = None if mode == "activation" else top if mode in PROPAGATION_MODES else seeds[:, : ec.max_candidates]
    return BatchResult(mode, candidates, ranked, relevance, proximity, sel.order, sel.phase, sel.used_tokens,
                       torch.full((len(batch),), budget), stage.seconds, sa, seed_ids)
