"""The Retriever (spectrag.retriever) on the sample index, on the ``device`` fixture's devices:
batch equals single queries (bitwise), the torch graph backend equals the scipy one, budgets
hold, modes run, contexts carry provenance and render, bad input is refused. (Against the
per-query reference: tests/test_pipeline.py; the ``retrieve`` command: tests/cli/test_retrieve.py.)"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import torch

from spectrag.cli.demo import sample_questions
from spectrag.config import BASELINE_MODES, GRAPH_MODES, RetrieverConfig
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever

QUESTIONS = [q["question"] for q in sample_questions()]


@pytest.fixture(scope="module")
def retriever(sample_index, device):
    return Retriever(sample_index, RetrieverConfig(device=str(device)))


@pytest.fixture(scope="module")
def qvecs(retriever):
    return retriever.embed(QUESTIONS)


@pytest.mark.parametrize("mode", BASELINE_MODES + GRAPH_MODES)
def test_batch_equals_single_queries(retriever, qvecs, mode):
    batch = retriever.score_batch(QUESTIONS, mode=mode, budget=1500, qvecs=qvecs)
    for b in range(len(QUESTIONS)):
        one = retriever.score_batch(QUESTIONS[b : b + 1], mode=mode, budget=1500, qvecs=qvecs[b : b + 1])
        width = one.candidates.shape[1]
        assert torch.equal(batch.candidates[b, :width], one.candidates[0])
        assert torch.equal(batch.scores[b, :width], one.scores[0])  # bitwise: no batch-dependent kernels
        sel_b = [p for p in batch.selected[b].tolist() if p >= 0]
        sel_1 = [p for p in one.selected[0].tolist() if p >= 0]
        assert sel_b == sel_1
        assert batch.ranking()[b, :width].tolist() == one.ranking()[0].tolist()


@pytest.mark.parametrize("mode", ["heat", "ppr", "spectral"])
def test_torch_graph_backend_equals_scipy(sample_index, retriever, qvecs, mode):
    """Expansion and blocks as torch tensors (what a GPU runs) give the CPU path's results."""
    on_device = Retriever(sample_index, replace(retriever.config, graph_backend="torch"))
    scipy_path = Retriever(sample_index, replace(retriever.config, graph_backend="scipy"))  # what auto runs on the CPU
    got = on_device.score_batch(QUESTIONS, mode=mode, budget=1500, qvecs=qvecs)
    want = scipy_path.score_batch(QUESTIONS, mode=mode, budget=1500, qvecs=qvecs)
    assert torch.equal(got.candidates, want.candidates)
    assert torch.allclose(got.scores, want.scores, atol=1e-6)
    assert torch.equal(got.selected, want.selected)
    with pytest.raises(SpectragError, match="graph_backend"):
        RetrieverConfig(graph_backend="cuda")


@pytest.mark.parametrize("mode", [m for m in BASELINE_MODES + GRAPH_MODES if m != "hyde"])  # hyde: tests/test_generate.py
@pytest.mark.parametrize("budget", [1, 300, 4000])
def test_budget_is_never_exceeded(retriever, qvecs, mode, budget):
    contexts = retriever.retrieve(QUESTIONS, budget=budget, mode=mode)
    for ctx in contexts:
        assert ctx.used_tokens == sum(c.n_tokens for c in ctx.chunks) <= budget
        assert len({c.chunk_id for c in ctx.chunks}) == len(ctx.chunks)
    if budget == 1:  # smaller than every chunk: a clear, empty result
        assert all(ctx.chunks == [] and ctx.used_tokens == 0 for ctx in contexts)


def test_spectral_context_has_provenance_and_renders(retriever):
    ctx = retriever.retrieve(QUESTIONS[:1], budget=2000)[0]
    assert ctx.mode == "spectral" and ctx.chunks
    first = ctx.chunks[0]
    assert first.phase == "core" and set(first.scores) == {"relevance", "proximity", "final"}
    text = ctx.render()
    assert text.startswith("## ") and first.text[:40] in text
    data = json.loads(json.dumps(ctx.to_json()))
    assert data["chunks"][0]["doc_id"] == first.doc_id and data["ranking"] == ctx.ranking


def test_large_batch_and_deep_seeding(retriever):
    many = (QUESTIONS * 84)[:1000]
    contexts = retriever.retrieve(many, budget=600, mode="hybrid")
    assert len(contexts) == 1000
    assert [c.chunk_id for c in contexts[0].chunks] == [c.chunk_id for c in contexts[12].chunks]
    deep = Retriever(retriever.index, retriever.config.replace(seed__k_dense=10_000, seed__k_bm25=10_000, expand__max_candidates=10_000))
    ctx = deep.retrieve(QUESTIONS[:2], mode="spectral")
    assert len(ctx[0].ranking) == len(retriever.index.chunks)


def test_bad_queries_and_settings(retriever):
    with pytest.raises(SpectragError, match="query 1 is empty"):
        retriever.retrieve(["fine", "  "])
    with pytest.raises(SpectragError, match="no queries"):
        retriever.retrieve([])
    with pytest.raises(SpectragError, match=re.escape("budget must be an integer in [1, 10,000,000], got 0")):
        retriever.retrieve(["x"], budget=0)
    with pytest.raises(SpectragError, match=re.escape("budget must be an integer in [1, 10,000,000], got 2305843")):
        retriever.retrieve(["x"], budget=2**61)  # a per-call budget gets the config file's range
    with pytest.raises(SpectragError, match="mode must be one of"):
        RetrieverConfig(mode="magic")


def test_split_batches_equal_one_big_batch(retriever):
    many = QUESTIONS  # 12 queries
    one = [c.to_json() for c in retriever.retrieve(many, k=7, budget=800, batch_size=len(many))]
    for batch_size in (1, 5):
        assert [c.to_json() for c in retriever.retrieve(many, k=7, budget=800, batch_size=batch_size)] == one
    parts = list(retriever.batches(many, k=7, budget=800, batch_size=5))
    assert [len(p) for p in parts] == [5, 5, 2] and [c.to_json() for p in parts for c in p] == one


@pytest.mark.parametrize("mode", ["dense", "hybrid", "spectral"])
def test_top_k_hits_are_the_ranking_with_its_scores(retriever, qvecs, mode):
    """Hits = the first k of BatchResult.ranking(), each with its candidate's final score."""
    k = 12
    contexts = retriever.retrieve(QUESTIONS, k=k, mode=mode, budget=1000)
    res = retriever.score_batch(QUESTIONS, mode=mode, budget=1000, qvecs=qvecs)
    for b, ctx in enumerate(contexts):
        cand, score = res.candidates[b].tolist(), res.scores[b].tolist()
        want = [(retriever.index.chunks[c].doc_id, c, score[cand.index(c)]) for c in ctx.ranking[:k]]
        assert [(h.doc_id, h.chunk_id) for h in ctx.hits] == [w[:2] for w in want]  # ids exact
        assert [h.score for h in ctx.hits] == pytest.approx([w[2] for w in want], rel=1e-6)
        assert len(ctx.hits) == min(k, len(ctx.ranking))
        assert all(a.score >= b.score for a, b in zip(ctx.hits, ctx.hits[1:]))
        doc_id, chunk_id, _ = ctx.hits[0]  # unpacks like a tuple
        assert doc_id == retriever.index.chunks[chunk_id].doc_id
    assert retriever.retrieve(QUESTIONS[:1])[0].hits == []  # no k: no hits
    assert json.loads(json.dumps(contexts[0].to_json()))["hits"][0].keys() == {"doc_id", "chunk_id", "score"}


def test_a_string_gives_one_context_and_a_path_loads(sample_index, retriever):
    ctx = retriever.retrieve(QUESTIONS[0], k=3)
    assert ctx.query == QUESTIONS[0] and len(ctx.hits) == 3
    again = Retriever(sample_index.path).retrieve([QUESTIONS[0]], k=3)[0]
    assert again.to_json() == Retriever(sample_index, device="cpu").retrieve([QUESTIONS[0]], k=3)[0].to_json()


def test_bad_k_batch_size_and_device(sample_index, retriever, monkeypatch):
    with pytest.raises(SpectragError, match="k must be an integer >= 1, got 0"):
        retriever.retrieve(QUESTIONS, k=0)
    with pytest.raises(SpectragError, match="batch_size must be an integer >= 1, got -1"):
        retriever.retrieve(QUESTIONS, batch_size=-1)
    with pytest.raises(SpectragError, match="query 24 is empty"):  # checked before any batch runs
        retriever.retrieve(QUESTIONS * 2 + [""], batch_size=4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SpectragError, match="CUDA is not available"):
        Retriever(sample_index, device="cuda")


def test_context_json_round_trip_is_exact(retriever):
    """Context.from_json(json of to_json) gives back an equal Context (how Ray actors send them)."""
    from spectrag.contexts import Context

    for ctx in retriever.retrieve(QUESTIONS[:4], k=5, budget=1500):
        back = Context.from_json(json.loads(json.dumps(ctx.to_json())))
        assert back == ctx and back.hits and back.chunks
        assert isinstance(back.chunks[0].section, tuple) and back.hits[0].score == ctx.hits[0].score
