"""The retrieval modes that spread activation over the knowledge graph
(spectrag.propagate.activation, through the pipeline), ``activation`` and ``combined``, on the
sample corpus with its KG, on the ``device`` fixture's devices: batch == single queries, the
budget holds, the activation pool and the relations used equal a per-query computation from the
plain reference (spectrag/reference/activation.py, on the CPU), and contexts list the relations.
(Named test_propagate_activation: tests/kernels/test_activation.py tests the kernel, and the test
folders are not packages, so basenames must differ.)"""

from __future__ import annotations

import importlib

import json

import numpy as np
import pytest
import torch

from spectrag.cli.demo import sample_questions
from spectrag.config import ActivationConfig, KG_MODES, RetrieverConfig
from spectrag.retriever import Retriever

QUESTIONS = [q["question"] for q in sample_questions()]


def _reference():
    return importlib.import_module("spectrag.reference.activation")


@pytest.fixture(scope="module")
def retriever(kg_index, device):
    return Retriever(kg_index, RetrieverConfig(device=str(device)))


@pytest.fixture(scope="module")
def qvecs(retriever):
    return retriever.embed(QUESTIONS)


# --- the modes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", KG_MODES)
def test_batch_equals_single_queries(retriever, qvecs, mode):
    batch = retriever.score_batch(QUESTIONS, mode=mode, budget=1500, qvecs=qvecs)
    ctx = retriever.retrieve(QUESTIONS, budget=1500, mode=mode)
    for b in range(len(QUESTIONS)):
        one = retriever.score_batch(QUESTIONS[b : b + 1], mode=mode, budget=1500, qvecs=qvecs[b : b + 1])
        width = one.candidates.shape[1]
        assert torch.equal(batch.candidates[b, :width], one.candidates[0])
        assert bool((batch.candidates[b, width:] == -1).all())
        assert torch.allclose(batch.scores[b, :width], one.scores[0], atol=1e-5)
        assert [p for p in batch.selected[b].tolist() if p >= 0] == [p for p in one.selected[0].tolist() if p >= 0]
        assert ctx[b].relations == retriever.retrieve([QUESTIONS[b]], budget=1500, mode=mode)[0].relations


@pytest.mark.parametrize("mode", KG_MODES)
@pytest.mark.parametrize("budget", [1, 400, 4000])
def test_budget_is_never_exceeded(retriever, mode, budget):
    for ctx in retriever.retrieve(QUESTIONS, budget=budget, mode=mode):
        assert ctx.used_tokens == sum(c.n_tokens for c in ctx.chunks) <= budget
        assert len({c.chunk_id for c in ctx.chunks}) == len(ctx.chunks)


PAPER = dict(link_names=False, k_dense=0)  # the paper's seeds (top-k by cosine) and activated-only pool


@pytest.mark.parametrize("settings", [ActivationConfig(**PAPER), ActivationConfig(),
                                      ActivationConfig(k=5, hops=3, c=0.2, tau_a=0.3, tau_d=0.3, tau_r=0.3, **PAPER),
                                      ActivationConfig(k=5, c=0.4, tau_a=0.3, tau_d=0.3, tau_r=0.35, **PAPER),  # tau_r <= c: full subgraph
                                      ActivationConfig(k=2, tau_d=0.3, k_named=3, k_dense=4)])
def test_pool_and_relations_equal_a_per_query_computation(kg_index, qvecs, settings, device):
    """Activation pool and relations from the plain reference (spectrag/reference/activation.py), one
    query at a time, with Python sets and sorts: seeds = top-k by cosine, then (link_names) the
    entities the question names, found by a plain whole-word regex over the entity names; pool =
    activated chunks above tau_d, then (k_dense) the query's dense top-k_dense."""
    import re

    from spectrag.extract.titles import COMMON_WORDS

    ref = _reference()
    cfg = RetrieverConfig(device=str(device), activation=settings).replace(expand__max_candidates=6)
    batch = Retriever(kg_index, cfg).score_batch(QUESTIONS, mode="activation", qvecs=qvecs)
    kg = kg_index.kg
    adj = ref.adjacency_lists(kg.adj_indptr, kg.adj_indices, np.asarray(kg.rel_text)[np.asarray(kg.adj_relation)])
    chunk_emb = np.asarray(kg_index.embeddings, dtype=np.float64)
    rels = batch.activation.relations(kg)
    n_rel_total = linked = 0
    for b in range(len(QUESTIONS)):
        q = qvecs[b].cpu().numpy()
        seeds = None
        if settings.link_names:
            sims = np.asarray(kg.entity_emb) @ q
            seeds = sorted(range(len(sims)), key=lambda e: (-sims[e], e))[: settings.k]
            text = " ".join(QUESTIONS[b].casefold().split())
            spans = []
            for e, name in enumerate(kg.names):
                key = " ".join(name.casefold().split())
                if len(key) < 4 or key in COMMON_WORDS or not re.search(r"\w", key):
                    continue
                for m in re.finditer(r"(?<!\w)" + re.escape(key) + r"(?!\w)", text):
                    spans.append((m.start(), m.end(), e))
            outer = [e for s0, e0, e in spans if not any(s1 <= s0 and e0 <= e1 and (s1, e1) != (s0, e0) for s1, e1, _ in spans)]
            named = sorted(set(outer))[: settings.k_named]
            linked += bool(set(named) - set(seeds))
            seeds = list(dict.fromkeys(seeds + named))
        _, depth, act, cos = ref.sync_reference(q, np.asarray(kg.entity_emb), np.asarray(kg.text_emb), adj,
                                                 k=settings.k, hops=settings.hops, c=settings.c, seeds=seeds)
        active = {u for u, a in act.items() if a >= settings.tau_a}
        chunk_act = {}
        for u in active:
            for c in kg.incidence[:, u].nonzero()[0].tolist():
                chunk_act[c] = max(chunk_act.get(c, 0.0), act[u])
        rel = {c: float(chunk_emb[c] @ q) for c in chunk_act}
        pool = [c for c in chunk_act if rel[c] >= settings.tau_d]
        if settings.k_dense:
            dense = chunk_emb @ q
            for c in sorted(range(len(dense)), key=lambda c: (-dense[c], c))[: settings.k_dense]:
                if c not in pool:
                    pool.append(c)
                    rel[c] = float(dense[c])
                    chunk_act.setdefault(c, 0.0)
        pool.sort(key=lambda c: (-((1 - cfg.activation.alpha) * rel[c] + cfg.activation.alpha * chunk_act[c]), c))
        got = [c for c in batch.candidates[b].tolist() if c >= 0]
        assert got == pool[: cfg.expand.max_candidates], f"query {b}"
        assert torch.allclose(batch.proximity[b][batch.candidates[b] >= 0].cpu(),
                              torch.tensor([chunk_act[c] for c in got], dtype=torch.float32), atol=1e-5)
        used = {}
        for u in active:
            for v, p, _ in adj[u]:
                if v in active and cos[p] >= settings.tau_r:
                    used[int(kg.adj_relation[p])] = cos[p]
        want = sorted(used, key=lambda r: (-used[r], r))[: settings.max_relations]
        assert [r["text"] for r in rels[b]] == [kg.texts[int(kg.rel_text[r])] for r in want], f"query {b}"
        assert all(abs(r["weight"] - used[w]) < 1e-5 for r, w in zip(rels[b], want))
        n_rel_total += len(want)
    assert n_rel_total > 0
    assert linked > 0 or not settings.link_names  # some question names an entity its cosine seeds miss


def test_combined_adds_the_activation_pool_and_proximity(retriever, qvecs):
    spectral = retriever.score_batch(QUESTIONS, mode="spectral", budget=2000, qvecs=qvecs)
    combined = retriever.score_batch(QUESTIONS, mode="combined", budget=2000, qvecs=qvecs)
    sa = combined.activation
    for b in range(len(QUESTIONS)):
        pool = {c for c in combined.candidates[b].tolist() if c >= 0}
        assert pool == {c for c in spectral.candidates[b].tolist() if c >= 0} | {c for c in sa.candidates[b].tolist() if c >= 0}
    act = sa.proximity(combined.candidates)
    assert float(act.max()) > 0 and float(combined.proximity.max()) <= 1.0 + 1e-6


def test_context_lists_relations_and_renders_them(retriever):
    ctx = retriever.retrieve(QUESTIONS[:4], budget=2000, mode="activation")
    with_rel = [c for c in ctx if c.relations]
    assert with_rel, "no relation above tau_r for any sample question"
    c = with_rel[0]
    assert set(c.relations[0]) == {"subject", "relation", "object", "text", "weight"}
    assert c.relations[0]["weight"] >= ActivationConfig().tau_r
    assert "## Relations\n- " + c.relations[0]["text"] in c.render()
    assert json.loads(json.dumps(c.to_json()))["relations"] == c.relations


@pytest.mark.parametrize("mode", KG_MODES)
@pytest.mark.parametrize("link_names", [True, False])
def test_the_compiled_path_seeds_as_the_torch_path_does(kg_index, qvecs, mode, link_names):
    """A CPU batch on the compiled path links the queries to their entities by the exact top-k
    of a bfloat16 screen (spectrag.kernels.screen), the torch path (the device path) by a float32
    tiled top-k: the same seeds here, so the same pools, proximities, selections and relations."""
    settings = ActivationConfig(link_names=link_names)
    got = {}
    for backend in ("compiled", "torch"):
        r = Retriever(kg_index, RetrieverConfig(device="cpu", backend=backend, activation=settings))
        got[backend] = r.score_batch(QUESTIONS, mode=mode, budget=1500, qvecs=qvecs.cpu())
    a, b = got["compiled"], got["torch"]
    assert torch.equal(a.activation.result.seeds, b.activation.result.seeds)
    assert torch.equal(a.candidates, b.candidates) and torch.equal(a.selected, b.selected)
    assert torch.allclose(a.proximity, b.proximity, atol=1e-6)
    assert a.activation.relations(kg_index.kg) == b.activation.relations(kg_index.kg)
