"""Online step 3 with the knowledge graph: spreading activation (SA-RAG 3.5-3.6) for a batch,
turned into chunk candidates, a proximity signal and the relations used.

    seeds, subgraphs, spreading    spectrag.kernels.spreading_activation            flat (query, entity) pairs
    active entities                activation >= tau_a
    chunks                         chunks describing an active entity       flat (query, chunk) pairs
                                   chunk activation = max over them         in [0, 1]
    activation-mode pool           those with cos(q, chunk) >= tau_d,       [B, P]
                                   best (1 - alpha) r + alpha a first
    relations                      both ends active and cos(q, relation) >= tau_r, best first

Modes (:mod:`spectrag.pipeline`): ``activation`` ranks that pool by ``(1 - alpha) r +
alpha a`` and fills the budget with the token-budget selector; ``combined`` adds the chunk
activation as a third proximity beside PPR and spectral proximity (``(ppr + spectral + a) / 3``)
and adds the activation pool to the expanded candidates. The relation weight compared with
``tau_r`` is the raw cosine (the paper: "its weight, determined based on cosine similarity at
the beginning"). All steps are flat tensor operations over the batch: no loop over queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from spectrag.config import KG_MODES, ActivationConfig
from spectrag.errors import SpectragError
from spectrag.extract.titles import TitleMatcher
from spectrag.kernels.activation import ActivationResult, spreading_activation
from spectrag.kernels.csr import csr_entries
from spectrag.kernels.screen import ScreenedSearch
from spectrag.kernels.topk import tiled_topk_ip, topk_by_row


@dataclass
class KGState:
    """The KG as tensors on one device. Shapes: ``entity_emb [n_ent, d]``, ``text_emb
    [n_text, d]``; adjacency CSR over entities (``adj_indptr [n_ent + 1]``, ``adj_indices``,
    ``adj_text`` (relation-text row), ``adj_relation [2 n_rel]``); entity -> chunk CSR
    (``chunk_indptr [n_ent + 1]``, ``chunk_ids [links]``)."""

    n_chunks: int
    n_relations: int
    entity_emb: torch.Tensor
    text_emb: torch.Tensor
    adj_indptr: torch.Tensor
    adj_indices: torch.Tensor
    adj_text: torch.Tensor
    adj_relation: torch.Tensor
    chunk_indptr: torch.Tensor
    chunk_ids: torch.Tensor
    names: TitleMatcher | None = None  # entity names, to link the entities a question names
    _search: ScreenedSearch | None = field(default=None, init=False, repr=False, compare=False)

    def entity_search(self) -> ScreenedSearch:
        """The exact search over the entity embeddings on the CPU (built at first use)."""
        if self._search is None:
            self._search = ScreenedSearch(self.entity_emb.numpy())
        return self._search

    @classmethod
    def from_index(cls, index, device: torch.device) -> "KGState":
        kg = index.kg
        if kg is None:
            raise SpectragError(
                f"{index.path}: modes {' and '.join(KG_MODES)} need the knowledge graph, but this index was built "
                "without it; rebuild it with `spectrag index ... --openie FILE` or kg.enabled = true"
            )
        if kg.n_entities == 0:
            raise SpectragError(f"{index.path}: the knowledge graph has no entities; spreading activation has no seeds")
        def t(a, dtype=np.int64) -> torch.Tensor:  # a copy off the memory map, on the device
            return torch.from_numpy(np.array(a, dtype=dtype)).to(device)

        rel_text = np.asarray(kg.rel_text)
        to_chunks = kg.incidence.T.tocsr()
        to_chunks.sort_indices()
        return cls(
            n_chunks=len(index.chunks),
            n_relations=kg.n_relations,
            entity_emb=t(kg.entity_emb, np.float32),
            text_emb=t(kg.text_emb, np.float32),
            adj_indptr=t(kg.adj_indptr),
            adj_indices=t(kg.adj_indices),
            adj_text=t(rel_text[np.asarray(kg.adj_relation)]),
            adj_relation=t(kg.adj_relation),
            chunk_indptr=t(to_chunks.indptr),
            chunk_ids=t(to_chunks.indices),
            names=TitleMatcher(kg.names),
        )

    def named_entities(self, texts: list[str], k: int) -> torch.Tensor:
        """The first ``k`` entities (in name order of the matches) each text names, -1 padded.
        Shapes: ``B`` texts -> ``[B, k]`` int64 on the KG's device."""
        hits = self.names.find(texts) if self.names is not None else [[] for _ in texts]
        out = torch.full((len(texts), k), -1, dtype=torch.int64)
        for b, h in enumerate(hits):  # formatting a ragged list into a tensor: text-side, not a hot loop
            out[b, : min(k, len(h))] = torch.tensor(h[:k], dtype=torch.int64)
        return out.to(self.entity_emb.device)


@dataclass
class ActivationBatch:
    """What spreading activation gives one batch. Shapes: ``candidates/scores [B, P]`` (chunk
    ids, -1 padded; ``P >= 1``); flat ``chunk_key [C]`` (sorted ``b * n_chunks + chunk``) with
    ``chunk_act [C]`` for every chunk describing an active entity; flat relations used
    ``rel_query/rel_id/rel_cos [R]`` (query ascending, cosine descending)."""

    result: ActivationResult
    n_chunks: int
    candidates: torch.Tensor
    chunk_key: torch.Tensor
    chunk_act: torch.Tensor
    rel_query: torch.Tensor
    rel_id: torch.Tensor
    rel_cos: torch.Tensor

    @staticmethod
    def lookup(chunk_key: torch.Tensor, chunk_act: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Activation of the (query, chunk) ``keys`` (``b * n_chunks + chunk``; 0 when absent)."""
        if chunk_key.numel() == 0:
            return torch.zeros(keys.shape, dtype=chunk_act.dtype, device=keys.device)
        at = torch.searchsorted(chunk_key, keys).clamp(max=chunk_key.numel() - 1)
        return torch.where(chunk_key[at] == keys, chunk_act[at], torch.zeros_like(chunk_act[at]))

    def proximity(self, candidates: torch.Tensor) -> torch.Tensor:
        """Chunk activation of each candidate (0 when it describes no active entity). ``[B, P]``."""
        b = torch.arange(candidates.shape[0], device=candidates.device)[:, None]
        keys = (b * self.n_chunks + candidates.clamp(min=0)).reshape(-1)
        act = self.lookup(self.chunk_key, self.chunk_act, keys)
        return act.masked_fill(candidates.reshape(-1) < 0, 0.0).reshape(candidates.shape)

    def merge(self, candidates: torch.Tensor) -> torch.Tensor:
        """``candidates [B, P]`` followed by this batch's pool members not already in them (in
        pool order), -1 padded. Shapes: -> ``[B, P + P_sa]`` trimmed to the longest row."""
        extra = self.candidates
        dup = (extra[:, :, None] == candidates[:, None, :]).any(dim=2) | (extra < 0)
        extra = extra.masked_fill(dup, -1)
        # stable compaction of the kept extras to the left
        order = torch.argsort(dup.to(torch.int8), dim=1, stable=True)
        merged = torch.cat([candidates, extra.gather(1, order)], dim=1)
        # real ids first in every row (candidates may be -1 padded before the extras)
        order = torch.argsort((merged < 0).to(torch.int8), dim=1, stable=True)
        merged = merged.gather(1, order)
        width = max(1, int((merged >= 0).sum(dim=1).max()))
        return merged[:, :width]

    def relations(self, kg) -> list[list[dict]]:
        """Per query: the relations used, best first, as ``{"subject", "relation", "object",
        "text", "weight"}`` (``text`` is what was embedded: ``subject relation object`` or the
        sentence)."""
        out: list[list[dict]] = [[] for _ in range(self.candidates.shape[0])]
        for b, r, w in zip(self.rel_query.tolist(), self.rel_id.tolist(), self.rel_cos.tolist()):
            out[b].append({
                "subject": kg.names[int(kg.rel_subject[r])],
                "relation": kg.predicates[int(kg.rel_predicate[r])],
                "object": kg.names[int(kg.rel_object[r])],
                "text": kg.texts[int(kg.rel_text[r])],
                "weight": round(w, 6),
            })
        return out


def activate(
    kg: KGState,
    q: torch.Tensor,
    chunk_emb: torch.Tensor,
    config: ActivationConfig,
    *,
    max_candidates: int,
    texts: list[str] | None = None,
    dense_ids: torch.Tensor | None = None,
    compiled: bool = False,
) -> ActivationBatch:
    """Spreading activation and its chunks and relations for ``q [B, d]`` (see the module
    docstring). ``chunk_emb [n_chunks, d]`` are the index's chunk embeddings on the KG's device;
    ``texts`` (the queries) give the name-linked seeds, ``dense_ids [B, K]`` the dense list whose
    top ``config.k_dense`` join the pool. ``compiled`` (a CPU batch): the seeds by cosine are
    the exact top ``k`` from a bfloat16 screen (:class:`~spectrag.kernels.screen.ScreenedSearch`),
    else a float32 tiled top-``k`` on the device (the same entities but where two cosines tie
    within float32 rounding)."""
    batch, n_chunks, alpha = q.shape[0], kg.n_chunks, config.alpha
    k = min(config.k, kg.entity_emb.shape[0])
    by_cosine = seeds = None
    if compiled:
        by_cosine = torch.from_numpy(kg.entity_search().topk(q, k)[1])
        seeds = by_cosine
    if config.link_names and texts is not None and config.k_named > 0:
        if by_cosine is None:
            _, by_cosine = tiled_topk_ip(q, kg.entity_emb, k)
        named = kg.named_entities(texts, config.k_named)
        both = torch.cat([by_cosine, named], dim=1)
        dup = (both[:, :, None] == both[:, None, :]).triu(1).any(dim=1) | (both < 0)  # later copies
        seeds = both.masked_fill(dup, -1)
    # the reached subgraph reports every relation a query can use (both ends active, cosine >=
    # tau_r > c; report_min: no edges of inactive last-round nodes); with tau_r <= c a relation
    # of weight 0 may qualify, so the full one is needed
    subgraph = "reached" if config.tau_r > config.c else "full"
    res = spreading_activation(q, kg.entity_emb, kg.text_emb, kg.adj_indptr, kg.adj_indices, kg.adj_text,
                               k=config.k, hops=config.hops, c=config.c, layout=config.layout, subgraph=subgraph,
                               report_min=config.tau_a, seeds=seeds)
    active = res.value >= config.tau_a
    a_query, a_node, a_val = res.query[active], res.node[active], res.value[active]

    # chunks describing active entities: (query, chunk) pairs, activation = max over its entities
    owner, pos = csr_entries(kg.chunk_indptr, a_node)
    keys = a_query[owner] * n_chunks + kg.chunk_ids[pos]
    chunk_key, inverse = torch.unique(keys, return_inverse=True)
    chunk_act = torch.zeros(chunk_key.numel(), dtype=q.dtype, device=q.device)
    chunk_act = chunk_act.scatter_reduce(0, inverse, a_val[owner], reduce="amax", include_self=False)

    # the activation-mode pool: cos(q, chunk) >= tau_d, best first, at most P per query
    c_query, c_id = chunk_key // n_chunks, chunk_key % n_chunks
    rel = (q[c_query] * chunk_emb[c_id]).sum(1)
    keep = rel >= config.tau_d
    c_query, c_id, score = c_query[keep], c_id[keep], ((1 - alpha) * rel + alpha * chunk_act)[keep]
    if dense_ids is not None and config.k_dense > 0:  # the dense top joins the pool (activation 0 unless active)
        top = dense_ids[:, : config.k_dense]
        ok = top >= 0
        d_query = torch.arange(batch, device=q.device)[:, None].expand_as(top)[ok]
        d_id = top[ok]
        d_act = ActivationBatch.lookup(chunk_key, chunk_act, d_query * n_chunks + d_id)
        d_rel = (q[d_query] * chunk_emb[d_id]).sum(1)
        keys_all = torch.cat([c_query * n_chunks + c_id, d_query * n_chunks + d_id])
        score_all = torch.cat([score, (1 - alpha) * d_rel + alpha * d_act])
        keys_all, first = _unique_first(keys_all)
        c_query, c_id, score = keys_all // n_chunks, keys_all % n_chunks, score_all[first]
    _, candidates = topk_by_row(c_query, c_id, score, batch, max(1, max_candidates))
    width = max(1, int((candidates >= 0).sum(dim=1).max()))
    candidates = candidates[:, :width]

    # relations used: both ends active, raw cosine >= tau_r; each relation once (the CSR holds both directions)
    e_ok = active[res.edge_src] & active[res.edge_dst] & (res.edge_cos >= config.tau_r)
    n_rel = max(1, kg.n_relations)
    rel_keys, first = _unique_first(res.edge_query[e_ok] * n_rel + kg.adj_relation[res.edge[e_ok]])
    r_cos, r_id = topk_by_row(rel_keys // n_rel, rel_keys % n_rel, res.edge_cos[e_ok][first], batch,
                                  config.max_relations)
    used = r_id >= 0  # row-major: query ascending, cosine descending
    r_query = torch.arange(batch, device=q.device)[:, None].expand_as(r_id)[used]
    return ActivationBatch(res, n_chunks, candidates, chunk_key, chunk_act, r_query, r_id[used], r_cos[used])


def _unique_first(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted unique keys and the index of one occurrence of each. ``[M]`` -> ``[U]``, ``[U]``."""
    uniq, inverse = torch.unique(keys, return_inverse=True)
    first = torch.full((uniq.numel(),), keys.numel(), dtype=torch.int64, device=keys.device)
    first = first.scatter_reduce(0, inverse, torch.arange(keys.numel(), device=keys.device), reduce="amin")
    return uniq, first
