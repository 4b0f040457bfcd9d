"""Metadata filters through the whole retriever (``where=``): in every mode, on both backends,
with a different filter per query in one batch, no hit, context chunk or ranking entry is ever
a chunk the query's filter leaves out; ``k`` is filled from what a filter allows; a query
alone gives what it gives in the batch; and each query equals the plain per-query reference
(spectrag.reference.pipeline with the filter applied plainly) and, for the dense list, a
float64 brute force over only the allowed chunks.

The sample index's chunks get synthetic metadata in memory (the pipeline reads
``index.chunks``); metadata built from records and front matter, persisted and kept by edits is
tested in tests/test_metadata.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from conftest import assert_same_results
from spectrag.cli.demo import sample_questions
from spectrag.config import GRAPH_MODES, KG_MODES, RetrieverConfig
from spectrag.reference.pipeline import reference_retrieve
from spectrag.reference.where import matches
from spectrag.retriever import Retriever
from spectrag.store import load_index
from test_pipeline import assert_same, batch_row

QUESTIONS = [q["question"] for q in sample_questions()]
MODES = ("dense", "bm25", "hybrid") + GRAPH_MODES
K = 8


def with_metadata(index):
    """``index`` with every document given ``lang``, ``year``, ``tags`` and its own ``doc``, and
    its query embeddings memoized (the model's forward pass would dominate these tests)."""
    embed, memo = index.embed_queries, {}

    def embed_queries(queries: list[str], backend: str | None = None) -> np.ndarray:
        todo = [q for q in dict.fromkeys(queries) if (backend, q) not in memo]
        if todo:
            memo.update(zip([(backend, q) for q in todo], embed(todo, backend=backend)))
        return np.stack([memo[backend, q] for q in queries])

    index.embed_queries = embed_queries
    docs = list(dict.fromkeys(c.doc_id for c in index.chunks))
    meta = {d: {"lang": ["en", "de", "fr"][i % 3], "year": 2018 + i % 6, "tags": ["a", "b", "c"][: 1 + i % 3],
                "doc": d} for i, d in enumerate(docs)}
    index.chunks = [replace(c, metadata=meta[c.doc_id]) for c in index.chunks]
    return index, docs


def wheres(docs: list[str]) -> list:
    """One filter per sample question: none, broad, narrow, one document, nothing at all."""
    few = {"doc": docs[5]}
    return [{"lang": "en"}, None, {"year": {"$gte": 2021}}, {"$or": [{"lang": "de"}, {"year": 2018}]},
            {"tags": "c"}, few, {"lang": {"$nin": ["en", "de", "fr"]}}, {"lang": {"$ne": "en"}, "year": {"$lt": 2022}},
            {"tags": {"$in": ["b", "z"]}}, {"doc": {"$in": docs[:2]}}, {"$and": [{"lang": "fr"}, {"tags": "a"}]},
            {"year": {"$gt": 2019, "$lte": 2020}}][: len(QUESTIONS)]


@pytest.fixture(scope="module")
def filtered(sample_index):
    index, docs = with_metadata(load_index(sample_index.path))
    return index, wheres(docs)


def backends(device: torch.device) -> list[str]:
    return ["compiled", "torch"] if device.type == "cpu" else ["torch"]


def allowed_ids(index, where) -> set[int]:
    return {i for i, c in enumerate(index.chunks) if matches(c.metadata, where)}


def check_contexts(index, contexts, filters, mode: str) -> None:
    """Nothing filtered out anywhere; ``k`` filled from the allowed chunks (BM25: from those it matches)."""
    checked = 0
    for b, (ctx, where) in enumerate(zip(contexts, filters)):
        ok = allowed_ids(index, where)
        shown = [h.chunk_id for h in ctx.hits] + [c.chunk_id for c in ctx.chunks] + ctx.ranking
        bad = [c for c in shown if c not in ok]
        assert not bad, f"mode {mode}, query {b} ({where}): filtered-out chunks {bad[:5]} returned"
        assert all(h.metadata == index.chunks[h.chunk_id].metadata for h in ctx.hits)
        if mode != "bm25":
            assert len(ctx.hits) == min(K, len(ok)), f"mode {mode}, query {b}: {len(ctx.hits)} hits of {len(ok)} allowed"
        checked += 0 < len(ok) < len(index.chunks)
    assert checked >= 8  # the filters do cut: the test is not vacuous


@pytest.mark.parametrize("mode", MODES)
def test_no_filtered_out_chunk_in_any_mode_and_batch_invariance(filtered, device, mode):
    index, filters = filtered
    results = {}
    for backend in backends(device):
        retriever = Retriever(index, RetrieverConfig(device=str(device), backend=backend))
        topk = retriever.retrieve(QUESTIONS, k=K, mode=mode, where=filters)
        budgeted = retriever.retrieve(QUESTIONS, mode=mode, budget=800, where=filters)
        check_contexts(index, topk, filters, mode)
        check_contexts(index, budgeted, filters, "bm25")  # a budget decides the count
        for b in (0, 1, 5, 6, 7):  # a query alone, with its filter, gives what it gives in the batch
            alone = retriever.retrieve(QUESTIONS[b], k=K, mode=mode, where=filters[b])
            assert_same_results(alone, topk[b], where=f"{mode} {backend} query {b} alone")
        split = retriever.retrieve(QUESTIONS, k=K, mode=mode, where=filters, batch_size=5)
        assert_same_results(split, topk, where=f"{mode} {backend} batches of 5")
        unfiltered = retriever.retrieve(QUESTIONS[1], k=K, mode=mode)
        assert_same_results(unfiltered, topk[1], where=f"{mode} {backend} unfiltered query among filtered ones")
        results[backend] = topk
    if len(results) == 2:  # the backend chooses the speed, never the answer
        assert_same_results(results["torch"], results["compiled"], rtol=1e-5, where=f"{mode} torch vs compiled")


@pytest.mark.parametrize("mode", MODES)
def test_each_query_equals_the_filtered_reference(filtered, mode):
    index, filters = filtered
    retriever = Retriever(index, RetrieverConfig(device="cpu"))
    qvecs = retriever.embed(QUESTIONS)
    result = retriever.score_batch(QUESTIONS, mode=mode, budget=1500, qvecs=qvecs, where=filters)
    cfg = retriever.config.replace(mode=mode)
    for b, where in enumerate(filters):
        got = batch_row(result, b)
        ref = reference_retrieve(index, qvecs[b].numpy(), QUESTIONS[b], cfg, 1500, allowed=allowed_ids(index, where))
        assert_same(got, ref, f"mode {mode}, query {b} ({where})")


def test_dense_list_equals_a_brute_force_over_the_allowed_chunks(filtered):
    index, filters = filtered
    retriever = Retriever(index, RetrieverConfig(device="cpu"))
    qvecs = retriever.embed(QUESTIONS)
    allowed = retriever.state.allowed(filters)
    for backend in ("scan", "faiss", "torch"):
        from spectrag.index.dense import DenseIndex

        dense = DenseIndex(np.asarray(index.embeddings), backend=backend)
        _, ids = dense.search_tensors(qvecs, 30, allowed=allowed)
        emb = np.asarray(index.embeddings, dtype=np.float64)
        for b, where in enumerate(filters):
            ok = sorted(allowed_ids(index, where))
            scores = emb[ok] @ qvecs[b].numpy().astype(np.float64)
            want = [ok[i] for i in np.lexsort((ok, -scores))][:30]
            got = [int(i) for i in ids[b] if i >= 0]
            assert got == want, f"{backend} query {b}: {got[:5]} vs {want[:5]}"


def test_kg_modes_never_return_a_filtered_out_chunk(kg_index):
    index, docs = with_metadata(load_index(kg_index.path))
    filters = wheres(docs)
    retriever = Retriever(index, RetrieverConfig(device="cpu"))
    for mode in KG_MODES:
        for backend in ("compiled", "torch"):
            r = Retriever(index, retriever.config.replace(backend=backend))
            got = r.retrieve(QUESTIONS, k=K, mode=mode, where=filters)
            check_contexts(index, got, filters, "bm25" if mode == "activation" else mode)
            alone = r.retrieve(QUESTIONS[3], k=K, mode=mode, where=filters[3])
            assert_same_results(alone, got[3], where=f"{mode} {backend} query 3 alone")


def test_a_bad_filter_is_refused_before_any_work(filtered):
    from spectrag.util.where import FilterError

    index, _ = filtered
    retriever = Retriever(index, RetrieverConfig(device="cpu"))
    with pytest.raises(FilterError, match=r"where.lang: unknown operator \"\$like\""):
        retriever.retrieve("harbour", k=3, where={"lang": {"$like": "e"}})
    with pytest.raises(FilterError, match="where: 1 filters for 2 queries"):
        retriever.retrieve(["a", "b"], k=3, where=[{"lang": "en"}])
