"""The online pipeline for a batch of B queries (SpectRAG Algorithm 1), as tensor stages:

    seed     dense top-K + BM25 top-K, fused by RRF               [B, K]
    expand   two hops over W from the top seeds, capped at P     [B, P]    (graph modes)
    blocks   induced candidate subgraphs                          [B, P, P]
    score    r = cos(q, c);  p = heat | PPR | spectral proximity  [B, P]
    bridge   x = r carried along relational edges (max-plus)      [B, P]    (spectrag.query.bridge)
             s2 = (1 - alpha) x + alpha p                         (Algorithm 1, line 7)
    select   token-budgeted greedy selection                      [B, K_sel]

Modes: ``dense``, ``bm25``, ``hybrid`` (baselines: rank by that score, fill the budget in score
order), ``heat``, ``ppr`` (one proximity), ``spectral`` (the full pipeline: PPR and spectral
proximity averaged); with a knowledge graph (``engine/query/activation.py``): ``activation``
(spreading activation alone, SA-RAG) and ``combined`` (``spectral`` with the chunk activation as
a third proximity and the activation pool added to the candidates). No stage loops over queries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from spectrag.errors import SpectragError
from spectrag.query.activation import KG_MODES, ActivationBatch, ActivationConfig, KGState, activate
from spectrag.query.bridge import bridge_relevance
from spectrag.query.context import Context, build_contexts
from spectrag.query.expand import candidate_blocks_of, expand
from spectrag.query.expand_torch import candidate_blocks_torch, expand_torch
from spectrag.query.fuse import reciprocal_rank_fusion
from spectrag.query.propagate import heat_proximity, ppr_proximity, spectral_proximity
from spectrag.query.state import QueryState
from spectrag.kernels.select import SelectConfig, budget_select

MODES = ("dense", "bm25", "hybrid", "heat", "ppr", "spectral")
GRAPH_MODES = ("heat", "ppr", "spectral")
PROPAGATION_MODES = GRAPH_MODES + ("combined",)  # expand over W and re-score with proximity


@dataclass(frozen=True)
class RetrieverConfig:
    """Online settings (names follow the paper where it has them).

    mode: default mode (default: spectral).
    k_dense, k_bm25: depth of each seed list, K (default: 50, 50).
    rrf_k: reciprocal-rank-fusion offset (default: 60).
    n_seeds: fused seeds the expansion starts from, S0 (default: 20).
    max_candidates: pool size per query after expansion, P (default: 200).
    hops: expansion radius (default: 2).
    alpha: weight of graph proximity in s2 = (1 - alpha) x + alpha p, x the bridged relevance
        (default: 0.01, chosen on MuSiQue: Recall@5 is 69.8 at 0 and 0.01, 67.3 at 0.05 and lower
        above; so proximity only breaks near-ties of x; see bench/results/eval_musique*.md).
    heat_t: diffusion time of the heat kernel (default: 1.0).
    damping: PPR damping (default: 0.85).
    bridge_rounds: rounds of query-aware bridging over relational edges, 0 = off (default: 1).
    bridge_sources, bridge_lambda, bridge_gamma: its ``m``, ``lambda`` and ``gamma``
        (default: 5, 0.3, 0.05); see :mod:`spectrag.query.bridge`.
    select: token-budget selection settings, including the budget (default: 12,000 tokens).
    activation: spreading-activation settings of modes activation and combined (default: the
        SA-RAG paper's values, :class:`spectrag.query.activation.ActivationConfig`).
    device: ``auto`` (CUDA when present) or a torch device string (default: auto).
    graph_backend: where expansion and the induced blocks run: ``scipy`` (CPU sparse products),
        ``torch`` (tensors on the device, :mod:`spectrag.query.expand_torch`) or ``auto``: torch
        when the device is not the CPU, so a GPU batch never leaves the GPU (default: auto).
    """

    mode: str = "spectral"
    k_dense: int = 50
    k_bm25: int = 50
    rrf_k: int = 60
    n_seeds: int = 20
    max_candidates: int = 200
    hops: int = 2
    alpha: float = 0.01
    heat_t: float = 1.0
    damping: float = 0.85
    bridge_rounds: int = 1
    bridge_sources: int = 5
    bridge_lambda: float = 0.3
    bridge_gamma: float = 0.05
    select: SelectConfig = field(default_factory=SelectConfig)
    activation: ActivationConfig = field(default_factory=ActivationConfig)
    device: str = "auto"
    graph_backend: str = "auto"

    def __post_init__(self) -> None:
        if self.graph_backend not in ("auto", "scipy", "torch"):
            raise SpectragError(f"graph_backend must be auto, scipy or torch, got {self.graph_backend!r}")
        if self.mode not in MODES + KG_MODES:
            raise SpectragError(f"mode must be one of {', '.join(MODES + KG_MODES)}, got {self.mode!r}")
        if not 0 <= self.alpha <= 1:
            raise SpectragError(f"alpha must be in [0, 1], got {self.alpha}")
        for name in ("k_dense", "k_bm25", "n_seeds", "max_candidates"):
            if getattr(self, name) < 1:
                raise SpectragError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class BatchResult:
    """Tensor output of one batch. Shapes: ``[B, P]`` pools and scores, ``[B, K]`` selections."""

    mode: str
    candidates: torch.Tensor  # chunk ids, -1 padded
    scores: torch.Tensor  # final score used for ranking and selection
    relevance: torch.Tensor
    proximity: torch.Tensor
    selected: torch.Tensor  # positions into candidates, in selection order, -1 padded
    phase: torch.Tensor
    used_tokens: torch.Tensor
    budget: torch.Tensor
    seconds: dict[str, float]
    activation: ActivationBatch | None = None  # modes activation and combined: SA pairs and relations used

    def ranking(self) -> torch.Tensor:
        """Candidate chunk ids by descending score (ties: smaller id), -1 padded. ``[B, P]``."""
        key = torch.where(self.candidates >= 0, self.scores, torch.full_like(self.scores, float("-inf")))
        order = torch.argsort(self.candidates.clamp(min=0), dim=1, stable=True)
        order = order.gather(1, torch.argsort(key.gather(1, order), dim=1, descending=True, stable=True))
        return self.candidates.gather(1, order)


class Retriever:
    """Batched retrieval over one index: ``Retriever(index).retrieve(queries) -> [Context]``."""

    def __init__(self, index, config: RetrieverConfig | None = None) -> None:
        self.index = index
        self.config = config or RetrieverConfig()
        device = self.config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.state = QueryState.from_index(index, device)
        self.kg: KGState | None = None  # the knowledge graph as tensors, on first use of an activation mode

    def retrieve(self, queries: list[str], budget: int | None = None, mode: str | None = None) -> list[Context]:
        """One context per query, in query order."""
        result = self.score_batch(queries, budget=budget, mode=mode)
        return build_contexts(self.index, list(queries), result)

    def embed(self, queries: list[str]) -> torch.Tensor:
        return torch.from_numpy(self.index.embed_queries(queries)).to(self.state.device)

    def score_batch(
        self, queries: list[str], *, budget: int | None = None, mode: str | None = None, qvecs: torch.Tensor | None = None
    ) -> BatchResult:
        """All stages for a batch; ``qvecs [B, d]`` skips embedding when given."""
        cfg = self.config if mode is None else replace(self.config, mode=mode)
        queries = list(queries)
        for i, q in enumerate(queries):
            if not isinstance(q, str) or not q.strip():
                raise SpectragError(f"query {i} is empty; every query needs some text")
        if not queries:
            raise SpectragError("no queries given")
        budget = cfg.select.budget if budget is None else int(budget)
        if budget < 1:
            raise SpectragError(f"budget must be >= 1 token, got {budget}")
        if cfg.mode in PROPAGATION_MODES:
            self.state.require_graph(cfg.mode)
        seconds: dict[str, float] = {}
        tick = time.perf_counter()

        def stage(name: str) -> None:
            nonlocal tick
            now = time.perf_counter()
            seconds[name] = seconds.get(name, 0.0) + now - tick
            tick = now

        st = self.state
        q = self.embed(queries) if qvecs is None else qvecs.to(st.device)
        stage("embed")
        if cfg.mode != "activation":  # activation draws its pool from the knowledge graph alone
            seeds, seed_scores = self._seed(queries, q, cfg)
            stage("seed")
        sa = None
        if cfg.mode in KG_MODES:
            sa = self._activate(q, cfg)
            stage("activate")
        if cfg.mode in PROPAGATION_MODES:
            top = seeds[:, : cfg.n_seeds]
            weight = seed_scores[:, : cfg.n_seeds]
            weight = weight / weight[:, :1].clamp(min=1e-30)
            if self._on_device(cfg):
                candidates, _ = expand_torch(top, weight, st.torch_graph("weights"), max_candidates=cfg.max_candidates,
                                             hops=cfg.hops)
            else:
                candidates, _ = expand(top, weight, st.weights, max_candidates=cfg.max_candidates, hops=cfg.hops)
            if sa is not None:  # combined: the activation pool joins the expanded candidates
                candidates = sa.merge(candidates)
            stage("expand")
        elif cfg.mode == "activation":
            candidates = sa.candidates
        else:
            candidates = seeds[:, : cfg.max_candidates]
        mask = candidates >= 0
        emb = st.embeddings[candidates.clamp(min=0)]  # (B, P, d)
        # a product and a sum over d, not bmm: bmm takes another kernel at B = 1 than at B > 1
        # (differences of 1e-5), and a query's result must not depend on its batch
        relevance = (emb * q[:, None, :]).sum(dim=2).masked_fill(~mask, 0.0)
        proximity = torch.zeros_like(relevance)
        if cfg.mode in PROPAGATION_MODES:
            bridging = cfg.bridge_rounds > 0 and st.relations is not None
            names = ["weights", "relations"] if bridging else ["weights"]
            if self._on_device(cfg):
                blocks, *relation_blocks = candidate_blocks_torch(candidates, [st.torch_graph(g) for g in names])
            else:
                blocks, *relation_blocks = candidate_blocks_of(candidates, [getattr(st, g) for g in names])
            stage("blocks")
            proximity = self._proximity(cfg, blocks, candidates, top, weight, relevance, mask)
            if sa is not None:  # combined: (ppr + spectral + activation) / 3
                proximity = (2 * proximity + sa.proximity(candidates)) / 3
            stage("propagate")
            bridged = relevance
            if bridging:
                bridged = bridge_relevance(relation_blocks[0], relevance, candidates,
                                           sources=cfg.bridge_sources, lam=cfg.bridge_lambda,
                                           gamma=cfg.bridge_gamma, rounds=cfg.bridge_rounds)
                stage("bridge")
            scores = (1 - cfg.alpha) * bridged + cfg.alpha * proximity
        elif cfg.mode == "activation":
            proximity = sa.proximity(candidates)
            scores = (1 - cfg.alpha) * relevance + cfg.alpha * proximity
        elif cfg.mode == "dense":
            scores = relevance
        else:  # bm25 / hybrid rank by their own list order: a decreasing score over positions
            scores = torch.where(mask, seed_scores[:, : candidates.shape[1]], torch.zeros_like(relevance))
        scores = scores.masked_fill(~mask, float("-inf"))
        stage("score")
        sel = self._select(cfg, budget, scores, proximity, candidates, mask, emb)
        stage("select")
        return BatchResult(cfg.mode, candidates, scores, relevance, proximity, sel.order, sel.phase,
                           sel.used_tokens, torch.full((len(queries),), budget), seconds, sa)

    def _seed(self, queries: list[str], q: torch.Tensor, cfg: RetrieverConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """Seed list per query by the mode's ranking. Shapes: -> ids, scores ``[B, K]``."""
        index, device = self.index, self.state.device
        dense_s, dense_i = index.dense.search(q.cpu().numpy(), cfg.k_dense)
        if cfg.mode == "dense":
            return torch.from_numpy(dense_i).to(device), torch.from_numpy(dense_s).to(device)
        bm_s, bm_i = index.bm25.search(queries, cfg.k_bm25, device=device)  # on a GPU: torch sparse products there
        if cfg.mode == "bm25":
            return torch.from_numpy(bm_i).to(device), torch.from_numpy(bm_s).to(device)
        fused_s, fused_i = reciprocal_rank_fusion(
            [torch.from_numpy(dense_i), torch.from_numpy(bm_i)], k=cfg.rrf_k, top=max(cfg.k_dense, cfg.k_bm25)
        )
        return fused_i.to(device), fused_s.to(device)

    def _on_device(self, cfg: RetrieverConfig) -> bool:
        """Whether expansion and blocks run as torch tensors (``graph_backend``)."""
        return cfg.graph_backend == "torch" or (cfg.graph_backend == "auto" and self.state.device.type != "cpu")

    def _activate(self, q: torch.Tensor, cfg: RetrieverConfig) -> ActivationBatch:
        """Spreading activation over the knowledge graph for ``q [B, d]``."""
        if self.kg is None:
            self.kg = KGState.from_index(self.index, self.state.device)
        return activate(self.kg, q, self.state.embeddings, cfg.activation, alpha=cfg.alpha,
                        max_candidates=cfg.max_candidates)

    def _proximity(self, cfg, blocks, candidates, seeds, seed_w, relevance, mask) -> torch.Tensor:
        # restart mass on the seeds, located in each pool (seeds come first in the pool)
        match = candidates[:, :, None] == seeds[:, None, :]  # (B, P, S)
        restart = (match.float() * seed_w[:, None, :].clamp(min=0)).sum(dim=2)
        if cfg.mode == "heat":
            return heat_proximity(blocks, relevance, mask, cfg.heat_t)
        ppr = ppr_proximity(blocks, restart, mask, damping=cfg.damping)
        if cfg.mode == "ppr":
            return ppr
        spec = spectral_proximity(self.state.coords, candidates, seeds, mask)
        return (0.5 * ppr + 0.5 * spec).clamp(0.0, 1.0)

    def _select(self, cfg, budget, scores, proximity, candidates, mask, emb):
        st = self.state
        ids = candidates.clamp(min=0)
        select = cfg.select
        if cfg.mode not in PROPAGATION_MODES + ("activation",):  # baselines: fill the budget in score order
            select = replace(select, core_size=0, a=1.0, b=0.0, c=0.0, d=0.0, lam=0.0, rho=0.0, precision_floor=0.0)
        finite = torch.where(mask, scores, torch.zeros_like(scores))
        return budget_select(finite, proximity, st.tokens[ids].masked_fill(~mask, 1), mask, emb,
                             st.clusters[ids], st.doc_codes[ids], select, budget=budget)
