"""The Retriever (spectrag.retriever) on the sample index, on the ``device`` fixture's devices:
batch equals single queries (bitwise), the torch graph backend equals the scipy one, budgets
hold, modes run, contexts carry provenance and render, bad input is refused. (Against the
per-query reference: tests/test_pipeline.py; the ``retrieve`` command: tests/cli/test_retrieve.py.)"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace

import pytest
import torch
from conftest import SCORE_RTOL, assert_same_results

from spectrag.cli.demo import sample_questions
from spectrag.config import BASELINE_MODES, GRAPH_MODES, RetrieverConfig
from spectrag.errors import ConfigError, SpectragError
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
        torch.testing.assert_close(batch.scores[b, :width], one.scores[0], rtol=SCORE_RTOL, atol=0)
        sel_b = [p for p in batch.selected[b].tolist() if p >= 0]
        sel_1 = [p for p in one.selected[0].tolist() if p >= 0]
        assert sel_b == sel_1
        assert batch.ranking()[b, :width].tolist() == one.ranking()[0].tolist()


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None,
                    reason="onnxruntime / onnx not installed (the onnx extra)")
def test_onnx_query_embedding_keeps_batch_invariance(sample_index):
    """``embed_backend = "onnx"`` (each query alone in ONNX Runtime): the same results alone at one
    thread and in batches at two, and the same top ranks as the torch encoder on the sample."""
    alone = Retriever(sample_index, RetrieverConfig(mode="spectral", threads=1, device="cpu", embed_backend="onnx"))
    many = Retriever(sample_index, RetrieverConfig(mode="spectral", threads=2, device="cpu", embed_backend="onnx"))
    want = alone.retrieve(QUESTIONS, k=10, budget=1200, batch_size=1)
    for batch_size in (3, len(QUESTIONS)):
        assert_same_results(many.retrieve(QUESTIONS[::-1], k=10, budget=1200, batch_size=batch_size)[::-1], want)
    torch_way = Retriever(sample_index, RetrieverConfig(mode="spectral", threads=1, device="cpu"))
    top = [[h.chunk_id for h in c.hits[:5]] for c in torch_way.retrieve(QUESTIONS, k=10, budget=1200, batch_size=1)]
    assert top == [[h.chunk_id for h in c.hits[:5]] for c in want]


@pytest.mark.parametrize("mode", ["hybrid", "spectral"])
def test_a_query_alone_at_one_thread_equals_it_in_any_batch_at_two(sample_index, mode):
    """Batch invariance (README): the same ranking and context for a query alone (one thread)
    and among companions in batches of any size at another thread count; scores within SCORE_RTOL."""
    alone = Retriever(sample_index, RetrieverConfig(mode=mode, threads=1, device="cpu"))
    many = Retriever(sample_index, RetrieverConfig(mode=mode, threads=2, device="cpu"))
    want = alone.retrieve(QUESTIONS, k=10, budget=1200, batch_size=1)
    for batch_size in (3, 7, len(QUESTIONS)):
        assert_same_results(many.retrieve(QUESTIONS[::-1], k=10, budget=1200, batch_size=batch_size)[::-1], want)


def test_a_batch_given_its_thread_count_scores_the_same(sample_index, qvecs):
    """``score_batch(threads=)`` (what the server's scorer passes) moves no answer; 0 is refused."""
    r = Retriever(sample_index, RetrieverConfig(mode="spectral", device="cpu"))
    one = r.score_batch(QUESTIONS, budget=1200, qvecs=qvecs, threads=1)
    two = r.score_batch(QUESTIONS, budget=1200, qvecs=qvecs, threads=2)
    assert torch.equal(one.candidates, two.candidates) and torch.equal(one.selected, two.selected)
    assert torch.equal(one.scores, two.scores)
    with pytest.raises(ConfigError, match="threads must be >= 1"):
        r.score_batch(QUESTIONS, qvecs=qvecs, threads=0)


@pytest.mark.parametrize("mode", ["heat", "ppr", "spectral"])
def test_torch_backend_equals_compiled(sample_index, retriever, qvecs, mode):
    """The torch kernels (what a GPU runs) give the compiled CPU kernels' results."""
    on_device = Retriever(sample_index, replace(retriever.config, backend="torch"))
    compiled = Retriever(sample_index, replace(retriever.config, backend="compiled"))  # what auto runs on the CPU
    got = on_device.score_batch(QUESTIONS, mode=mode, budget=1500, qvecs=qvecs)
    want = compiled.score_batch(QUESTIONS, mode=mode, budget=1500, qvecs=qvecs)
    assert torch.equal(got.candidates, want.candidates)
    assert torch.allclose(got.scores, want.scores, atol=1e-6)
    assert torch.equal(got.selected, want.selected)
    with pytest.raises(SpectragError, match="backend"):
        RetrieverConfig(backend="cuda")


@pytest.mark.parametrize("mode", [m for m in BASELINE_MODES + GRAPH_MODES if m != "hyde"])  # hyde: tests/test_generate.py
@pytest.mark.parametrize("budget", [1, 300, 4000])
def test_budget_is_never_exceeded(retriever, qvecs, mode, budget):
    contexts = retriever.retrieve(QUESTIONS, budget=budget, mode=mode)
    for ctx in contexts:
        assert ctx.used_tokens == sum(c.n_tokens for c in ctx.chunks) <= budget
        assert len({c.chunk_id for c in ctx.chunks}) == len(ctx.chunks)
    if budget == 1:  # smaller than every chunk: the best chunk cut to one token, flagged (spectrag.contexts)
        assert all(ctx.truncated and len(ctx.chunks) == 1 and ctx.used_tokens == 1 for ctx in contexts)
        assert all(ctx.chunks[0].chunk_id == ctx.ranking[0] for ctx in contexts)


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
    with pytest.raises(SpectragError, match="query 2 of 2 is empty"):
        retriever.retrieve(["fine", "  "])
    with pytest.raises(SpectragError, match="queries must be a string or a list of strings, got NoneType"):
        retriever.retrieve(None)
    with pytest.raises(SpectragError, match="queries must be a string or a list of strings, got int 123"):
        retriever.retrieve(123)
    with pytest.raises(SpectragError, match=r"query 2 of 2 is not a string \(got int 5\)"):
        retriever.retrieve(["fine", 5])
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
    one = retriever.retrieve(many, k=7, budget=800, batch_size=len(many))
    for batch_size in (1, 5):
        assert_same_results(retriever.retrieve(many, k=7, budget=800, batch_size=batch_size), one)
    parts = list(retriever.batches(many, k=7, budget=800, batch_size=5))
    assert [len(p) for p in parts] == [5, 5, 2]
    assert_same_results([c for p in parts for c in p], one)


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
    assert json.loads(json.dumps(contexts[0].to_json()))["hits"][0].keys() == {
        "doc_id", "chunk_id", "score", "text", "title", "section", "url", "metadata"}


@pytest.mark.parametrize("mode", ["dense", "hybrid", "spectral"])
def test_k_means_k_results_with_their_text(retriever, mode):
    """retrieve(q, k=5): 5 hits with the chunk's text and provenance, and a context of those 5
    chunks (no budget applied); the same k with a budget: the budgeted context, the same hits."""
    table = retriever.index.chunks
    for ctx in retriever.retrieve(QUESTIONS, k=5, mode=mode):
        assert len(ctx.hits) == 5 and ctx.budget is None
        for h in ctx.hits:
            c = table[h.chunk_id]
            assert (h.text, h.title, h.doc_id, h.section, h.url) == (c.text, c.title, c.doc_id, c.section, c.url)
        assert [c.chunk_id for c in ctx.chunks] == [h.chunk_id for h in ctx.hits] == ctx.ranking[:5]
        assert all(c.phase == "ranked" for c in ctx.chunks)
        assert ctx.used_tokens == sum(c.n_tokens for c in ctx.chunks)
        assert [c.scores["final"] for c in ctx.chunks] == pytest.approx([h.score for h in ctx.hits], abs=1e-6)
    for top, budgeted in zip(retriever.retrieve(QUESTIONS, k=5, mode=mode),
                             retriever.retrieve(QUESTIONS, k=5, mode=mode, budget=3000)):
        assert budgeted.hits == top.hits and budgeted.budget == 3000
        assert budgeted.used_tokens <= 3000 and all(c.phase != "ranked" for c in budgeted.chunks)


def test_without_k_the_hits_are_the_context_in_rank_order(retriever):
    default = RetrieverConfig().budget
    for ctx in retriever.retrieve(QUESTIONS):
        assert ctx.budget == default and ctx.used_tokens <= default
        chosen = {c.chunk_id for c in ctx.chunks}
        assert [h.chunk_id for h in ctx.hits] == [c for c in ctx.ranking if c in chosen]
        assert {h.chunk_id: h.text for h in ctx.hits} == {c.chunk_id: c.text for c in ctx.chunks}


def test_k_beyond_the_pool_is_refused_or_honoured_when_the_pool_is_raised(retriever):
    with pytest.raises(SpectragError, match=r"k = 201 is more than mode 'spectral' ranks per query "
                                            r"\(expand.max_candidates = 200\)"):
        retriever.retrieve(QUESTIONS[0], k=201)
    with pytest.raises(SpectragError, match=r"seed.k_dense / seed.k_bm25 = 50.*raise seed.k_dense and seed.k_bm25"):
        retriever.retrieve(QUESTIONS[0], k=51, mode="hybrid")
    with pytest.raises(SpectragError, match=r"seed.k_dense = 50"):
        retriever.retrieve(QUESTIONS[0], k=60, mode="dense")
    n = len(retriever.index.chunks)  # ~100 chunks: a corpus smaller than k gives all it has
    wide = Retriever(retriever.index, retriever.config.replace(seed__k_dense=300, expand__max_candidates=300))
    assert len(wide.retrieve(QUESTIONS[0], k=250, mode="dense").hits) == n
    assert len(wide.retrieve(QUESTIONS[0], k=60, mode="dense").hits) == 60


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
    with pytest.raises(SpectragError, match="query 25 of 25 is empty"):  # checked before any batch runs; numbered from 1
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
