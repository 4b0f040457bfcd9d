"""The batched pipeline (spectrag.pipeline.run, through ``Retriever.score_batch``) against the
plain per-query reference (spectrag/reference/pipeline.py, on the CPU), with the pipeline on the
``device`` fixture's devices (the same tolerance on any device).

For every mode, ``Retriever.score_batch`` over a batch of queries must give, for each query,
what :func:`reference_retrieve` gives for that query alone and what ``score_batch`` gives for a
batch of one:

* the same candidate set;
* relevance, proximity and final scores within ``TOL = 1e-5`` (absolute; the batched code
  works in float32, the reference mostly in float64; observed differences are below 1e-6);
* the same ranking, allowing two candidates to swap only when their reference scores are
  within ``TOL`` of each other;
* the same selected chunk ids in the same order, and the same number of tokens used.

Two indexes: the bundled sample corpus (``sample_index``, its 12 sample questions, embedded
with the index's model) and a small synthetic corpus of a few hundred chunks built from
generated text files with supplied random clustered embeddings and random query vectors, whose
candidate pools are cut at ``P`` (so the expansion priority matters) and contain isolated
nodes (so the PPR dangling rule and the Laplacian of isolated nodes are exercised).

The synthetic texts give many chunks the same BM25 score, so ties straddle the k = 50 cut of
the BM25 list (the test checks that they do): ``BM25Index.search`` must keep the smaller ids.
"""

from __future__ import annotations

import importlib

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import require_index_packages

from spectrag.cli.demo import sample_questions
from spectrag.config import BASELINE_MODES, GRAPH_MODES, RetrieverConfig
from spectrag.retriever import Retriever

_ref = importlib.import_module("spectrag.reference.pipeline")
bm25_list, reference_retrieve, reference_state, subgraph = (
    _ref.bm25_list, _ref.reference_retrieve, _ref.reference_state, _ref.subgraph)

TOL = 1e-5
QUESTIONS = [q["question"] for q in sample_questions()]


# ---------------------------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------------------------


def batch_row(result, b: int) -> dict:
    """Row ``b`` of a BatchResult as plain Python, keyed by chunk id."""
    cand = result.candidates[b].tolist()
    real = [(pos, c) for pos, c in enumerate(cand) if c >= 0]
    pick = lambda t: {c: float(t[b, pos]) for pos, c in real}  # noqa: E731
    return {
        "candidates": [c for _, c in real],
        "scores": pick(result.scores),
        "relevance": pick(result.relevance),
        "proximity": pick(result.proximity),
        "ranking": [c for c in result.ranking()[b].tolist() if c >= 0],
        "selected": [cand[p] for p in result.selected[b].tolist() if p >= 0],
        "used_tokens": int(result.used_tokens[b]),
    }


def assert_same(got: dict, want: dict, where: str) -> None:
    """``got`` (batched) equals ``want`` (reference or single query) up to ``TOL`` and ties."""
    assert set(got["candidates"]) == set(want["candidates"]), (
        f"{where}: candidate sets differ: only batched {sorted(set(got['candidates']) - set(want['candidates']))}, "
        f"only reference {sorted(set(want['candidates']) - set(got['candidates']))}"
    )
    for key in ("relevance", "proximity", "scores"):
        worst = max(want["candidates"], key=lambda c: abs(got[key][c] - want[key][c]), default=None)
        if worst is not None:
            diff = abs(got[key][worst] - want[key][worst])
            assert diff <= TOL, f"{where}: {key} of chunk {worst}: {got[key][worst]!r} vs {want[key][worst]!r}"
    if got["ranking"] != want["ranking"]:  # swaps only between scores equal within TOL
        pos = {c: k for k, c in enumerate(want["ranking"])}
        s = want["scores"]
        for k, a in enumerate(got["ranking"]):
            for b in got["ranking"][k + 1 :]:
                if pos[a] > pos[b]:
                    assert abs(s[a] - s[b]) <= TOL, (
                        f"{where}: ranking swaps chunks {a} and {b} with scores {s[a]!r} and {s[b]!r}"
                    )
    assert got["selected"] == want["selected"], f"{where}: selection {got['selected']} vs {want['selected']}"
    assert got["used_tokens"] == want["used_tokens"], f"{where}: used tokens differ"


def check_bm25_lists(index, texts: list[str], k: int) -> int:
    """The engine's BM25 lists (``BM25Index.search`` on the whole batch, as the pipeline calls
    it) equal the reference's: positive scores, best first, ties by the smaller chunk id, also
    among chunks tied at the k-th score. Returns how many queries have such a tie straddling
    the cut (more chunks at the k-th score than slots left for them)."""
    _, ids = index.bm25.search(texts, k)
    straddling = 0
    for b, text in enumerate(texts):
        want, want_s = bm25_list(index, text, k)
        got = [int(i) for i in ids[b] if i >= 0]
        if got != want:
            row = index.bm25.score([text]).toarray()[0]
            detail = [(c, float(row[c])) for c in sorted(set(got) ^ set(want))]
            raise AssertionError(f"query {b}: BM25 list {got} != reference {want}; differing chunks (id, score): {detail}")
        if len(want) == k:
            row = index.bm25.score([text]).toarray()[0]
            straddling += int((row == want_s[-1]).sum()) > want_s.count(want_s[-1])
    return straddling


def check_batch(retriever: Retriever, texts: list[str], qvecs: torch.Tensor, mode: str, budget: int) -> None:
    """Batch vs batch of one vs reference, for every query."""
    cfg = replace(retriever.config, mode=mode)
    batch = retriever.score_batch(texts, mode=mode, budget=budget, qvecs=qvecs)
    if mode != "dense":
        check_bm25_lists(retriever.index, texts, cfg.seed.k_bm25)
    for b, text in enumerate(texts):
        got = batch_row(batch, b)
        where = f"mode {mode}, budget {budget}, query {b}"
        single = batch_row(retriever.score_batch([text], mode=mode, budget=budget, qvecs=qvecs[b : b + 1]), 0)
        assert_same(got, single, where + " (batch of one)")
        ref = reference_retrieve(retriever.index, qvecs[b].cpu().numpy(), text, cfg, budget)
        assert_same(got, ref, where + " (reference)")


# ---------------------------------------------------------------------------------------------
# sample index, sample questions
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_retriever(sample_index, device):
    return Retriever(sample_index, RetrieverConfig(device=str(device)))


@pytest.fixture(scope="module")
def sample_qvecs(sample_retriever):
    return sample_retriever.embed(QUESTIONS)


@pytest.mark.parametrize("mode", BASELINE_MODES + GRAPH_MODES)
def test_sample_index_equals_reference(sample_retriever, sample_qvecs, mode):
    check_batch(sample_retriever, QUESTIONS, sample_qvecs, mode, budget=1500)


def test_sample_index_bridging_changes_scores_and_matches_reference(sample_retriever, sample_qvecs):
    """Bridging is exercised (some score moves on the sample questions) and its switch-off
    also matches the reference."""
    on = sample_retriever.score_batch(QUESTIONS, mode="spectral", budget=1500, qvecs=sample_qvecs)
    off_cfg = sample_retriever.config.replace(bridge__rounds=0)
    off = Retriever(sample_retriever.index, off_cfg)
    off_result = off.score_batch(QUESTIONS, mode="spectral", budget=1500, qvecs=sample_qvecs)
    assert torch.equal(on.candidates, off_result.candidates)
    lifted = (on.scores - off_result.scores).abs() > 1e-6
    assert lifted.any(), "bridging moved no score on the sample questions: the test would be vacuous"
    check_batch(off, QUESTIONS[:4], sample_qvecs[:4], "spectral", budget=1500)


def switched_off(retriever, qvecs, **change):
    """The sample questions scored with the default and with ``change``: the other retriever,
    both results and the real candidates whose ranking score moved (the pools are the same)."""
    off = Retriever(retriever.index, retriever.config.replace(**change))
    a = retriever.score_batch(QUESTIONS, mode="spectral", budget=1500, qvecs=qvecs)
    b = off.score_batch(QUESTIONS, mode="spectral", budget=1500, qvecs=qvecs)
    assert torch.equal(a.candidates, b.candidates)
    moved = ((a.scores - b.scores).abs() > 1e-6) & (a.candidates >= 0)
    assert moved.any(), f"no ranking score moved with {change}: the test would be vacuous"
    return off, a, b, moved


def test_sample_index_bridged_chunks_bring_the_question_beyond_its_names(sample_retriever, sample_qvecs):
    """The relevance a bridged chunk brings (the question without the titles it names,
    ``bridge.target_lexical_weight``) moves some score on the sample questions, so the
    comparisons with the reference above exercise it; switched off, it still matches."""
    off, _, _, _ = switched_off(sample_retriever, sample_qvecs, bridge__target_lexical_weight=0.0)
    check_batch(off, QUESTIONS[:4], sample_qvecs[:4], "spectral", budget=1500)


def test_sample_index_other_candidates_rank_by_the_question_beyond_its_names(sample_retriever, sample_qvecs):
    """``bridge.others_beyond_names`` moves some ranking score on the sample questions (so the
    comparisons with the reference above exercise it), mostly down (a lowered start can change
    which best candidates vouch along citations, so a few rise); switched off, it still matches
    the reference."""
    off, a, b, moved = switched_off(sample_retriever, sample_qvecs, bridge__others_beyond_names=False)
    assert int((a.scores[moved] < b.scores[moved]).sum()) > int((a.scores[moved] > b.scores[moved]).sum())
    check_batch(off, QUESTIONS[:4], sample_qvecs[:4], "spectral", budget=1500)


def test_sample_index_first_bridges_of_named_documents_are_exercised(sample_retriever, sample_qvecs):
    """``bridge.cover_named`` lifts some ranking score on the sample questions (one names two
    documents), so the comparisons with the reference above exercise it; switched off, it still
    matches the reference."""
    off, a, b, moved = switched_off(sample_retriever, sample_qvecs, bridge__cover_named=False)
    assert bool((a.scores[moved] > b.scores[moved]).all())  # lifted, never lowered
    rows = moved.any(dim=1).nonzero().squeeze(1).tolist()
    check_batch(off, [QUESTIONS[r] for r in rows], sample_qvecs[rows], "spectral", budget=1500)


def test_sample_index_named_documents_are_exercised(sample_retriever, sample_qvecs):
    """Some sample questions name corpus titles, so the named seed list and the protection are
    part of the comparisons with the reference above; switched off, it still matches."""
    assert sample_retriever.encode(QUESTIONS, sample_qvecs).named.nnz > 0
    off = Retriever(sample_retriever.index, sample_retriever.config.replace(bridge__protect_named=False,
                                                                              seed__k_named=0))
    a = sample_retriever.score_batch(QUESTIONS, mode="spectral", budget=1500, qvecs=sample_qvecs)
    b = off.score_batch(QUESTIONS, mode="spectral", budget=1500, qvecs=sample_qvecs)
    assert not torch.equal(a.scores, b.scores)
    check_batch(off, QUESTIONS[:4], sample_qvecs[:4], "spectral", budget=1500)


def test_sample_index_default_budget(sample_retriever, sample_qvecs):
    check_batch(sample_retriever, QUESTIONS[:4], sample_qvecs[:4], "spectral", budget=12_000)


# ---------------------------------------------------------------------------------------------
# synthetic index: generated text files, supplied clustered embeddings
# ---------------------------------------------------------------------------------------------

N_DOCS, N_TOPICS, DIM = 320, 8, 48
_SYLLABLES = "ka lo mer vin tas dor el ran sov bri quel nor fa ith gul pen tor wy sam ost".split()
_WORDS = ("harbour river mill tower archive bridge canal market ledger survey beacon garrison "
          "orchard quarry foundry chapel ferry granary lantern charter treaty census tariff "
          "council voyage glacier meadow fortress vineyard observatory library").split()


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def write_corpus(folder: Path, seed: int = 7) -> tuple[list[int], list[str]]:
    """``N_DOCS`` one-chunk text files; topic words, names shared inside a topic and mentions of
    other documents' titles give BM25, entity and citation material. Returns each document's
    topic (in file order) and some query texts."""
    rng = random.Random(seed)
    titles = [f"{_name(rng)} {rng.choice(_WORDS).capitalize()}" for _ in range(N_DOCS)]
    names = [[f"{_name(rng)} {_name(rng)}" for _ in range(6)] for _ in range(N_TOPICS)]
    words = [rng.sample(_WORDS, 8) for _ in range(N_TOPICS)]
    topics = []
    for i, title in enumerate(titles):
        t = rng.randrange(N_TOPICS)
        topics.append(t)
        other = titles[rng.randrange(N_DOCS)]
        body = " ".join(
            f"The {rng.choice(words[t])} of {title} was recorded by {rng.choice(names[t])} in "
            f"{rng.randint(1700, 1950)} near the {rng.choice(words[t])} and the {rng.choice(_WORDS)}."
            for _ in range(rng.randint(3, 5))
        )
        text = f"{title}\n\n{body} It is often compared with {other}.\n"
        (folder / f"doc_{i:04d}.txt").write_text(text, encoding="utf-8")
    # query texts on random topics (independent of the query vectors' topics, so BM25 and dense
    # seeds often sit in different parts of the graph)
    queries = []
    for _ in range(64):
        t = rng.randrange(N_TOPICS)
        queries.append(f"{rng.choice(words[t])} {rng.choice(_WORDS)} {rng.choice(names[t])}")
    return topics, queries


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    require_index_packages()
    from spectrag.config import EmbedConfig, IndexConfig
    from spectrag.build import build_index
    from spectrag.index.chunk import chunk_document
    from spectrag.index.load import iter_documents

    root = tmp_path_factory.mktemp("synthetic")
    corpus = root / "corpus"
    corpus.mkdir()
    topics, texts = write_corpus(corpus)
    config = IndexConfig(embed=EmbedConfig(cache_dir=""))
    doc_topic = {f"doc_{i:04d}.txt": t for i, t in enumerate(topics)}
    chunk_topics = [doc_topic[c.doc_id] for d in iter_documents(corpus, "folder") for c in chunk_document(d, config.chunk)]
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((N_TOPICS, DIM))
    vectors = centres[chunk_topics] + 1.2 * rng.standard_normal((len(chunk_topics), DIM))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    index = build_index(corpus, root / "index", config, embeddings=vectors)
    # 12 random query vectors near the topic centres, each with a short random text
    qv = centres[np.arange(12) % N_TOPICS] + 1.5 * rng.standard_normal((12, DIM))
    qv = torch.from_numpy((qv / np.linalg.norm(qv, axis=1, keepdims=True)).astype(np.float32))
    qtexts = texts[:12]
    return index, qv, qtexts


@pytest.mark.parametrize("mode", BASELINE_MODES + GRAPH_MODES)
def test_synthetic_index_equals_reference(synthetic, mode, device):
    index, qv, texts = synthetic
    assert 250 <= len(index.chunks) <= 400 and index.graph is not None
    retriever = Retriever(index, RetrieverConfig(device=str(device)))
    if mode == "bm25":
        assert check_bm25_lists(index, texts, retriever.config.seed.k_bm25) > 0, "no BM25 tie straddles the cut"
    check_batch(retriever, texts, qv, mode, budget=2500)


def test_synthetic_small_pools_cut_and_isolated_nodes(synthetic, device):
    """P = 30 from 10 seeds: the cut at P drops one-hop links, leaving isolated pool members."""
    index, qv, texts = synthetic
    retriever = Retriever(index, RetrieverConfig(device=str(device)).replace(expand__n_seeds=10, expand__max_candidates=30))
    batch = retriever.score_batch(texts, mode="ppr", budget=2000, qvecs=qv)
    isolated = 0
    for b in range(len(texts)):
        pool = [c for c in batch.candidates[b].tolist() if c >= 0]
        G = subgraph(reference_state(index), pool)
        isolated += sum(1 for c in pool if G.degree(c) == 0)
    assert isolated > 0, "no isolated candidate: the dangling-node path is not exercised"
    for mode in GRAPH_MODES:
        check_batch(retriever, texts, qv, mode, budget=2000)


# ---------------------------------------------------------------------------------------------
# an index with utility questions (LLM-built, tests/fake_llm.py): the third RRF list
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["hybrid", "hyde", "ppr", "spectral"])
def test_utility_question_seeding_equals_reference(llm_index, device, mode):
    retriever = Retriever(llm_index[1], RetrieverConfig(device=str(device)))
    assert retriever.state.questions is not None
    qvecs = retriever.embed(QUESTIONS)  # hyde's vectors are whatever the pipeline is given
    check_batch(retriever, QUESTIONS, qvecs, mode, budget=1500)


def test_utility_question_seeding_changes_the_seeds(llm_index):
    on = Retriever(llm_index[1])
    off = Retriever(llm_index[1], RetrieverConfig().replace(seed__k_utility=0))
    qvecs = on.embed(QUESTIONS)
    a = on.score_batch(QUESTIONS, mode="spectral", qvecs=qvecs)
    b = off.score_batch(QUESTIONS, mode="spectral", qvecs=qvecs)
    assert not torch.equal(a.candidates, b.candidates), "the utility list changed no pool: the test would be vacuous"


def test_sample_index_calibrated_relevance_matches_reference(sample_retriever, sample_qvecs):
    """The graph modes' relevance (dense and BM25 standardized over the pool, weight
    ``seed.lexical_weight``) is held to the per-query reference at other weights than the default
    too, and it does change the relevance (the check can fail); at weight 0 it is the cosine."""
    texts, qvecs = QUESTIONS, sample_qvecs
    heavy = Retriever(sample_retriever.index, sample_retriever.config.replace(seed__lexical_weight=2.0))
    for mode in ("spectral", "heat"):
        check_batch(heavy, texts[:6], qvecs[:6], mode, 4000)
    plain = Retriever(sample_retriever.index, sample_retriever.config.replace(seed__lexical_weight=0.0))
    cos = plain.score_batch(texts, qvecs=qvecs)
    with_lex = sample_retriever.score_batch(texts, qvecs=qvecs)
    assert torch.equal(cos.candidates, with_lex.candidates)  # the seeds and pools are unchanged
    assert float((with_lex.relevance - cos.relevance).abs().max()) > 0.01
    dense = torch.einsum("bpd,bd->bp", sample_retriever.state.embeddings[cos.candidates.clamp(min=0)], qvecs)
    real = cos.candidates >= 0
    torch.testing.assert_close(cos.relevance[real], dense[real], atol=1e-5, rtol=0)


def test_sample_index_bridging_from_any_top_candidate_matches_reference(sample_retriever, sample_qvecs):
    """``bridge.anchors = "top"`` (any of the best candidates vouches for its neighbours, the
    engine's earlier rule) against the reference, and it bridges more than the named anchors."""
    top = Retriever(sample_retriever.index, sample_retriever.config.replace(bridge__anchors="top"))
    check_batch(top, QUESTIONS[:6], sample_qvecs[:6], "spectral", 1500)
    alpha = sample_retriever.config.propagate.alpha

    def lifted(result) -> int:  # candidates scored above their own relevance and proximity
        return int(((result.scores - (1 - alpha) * result.relevance - alpha * result.proximity) > 1e-6).sum())

    a = top.score_batch(QUESTIONS, mode="spectral", qvecs=sample_qvecs)
    b = sample_retriever.score_batch(QUESTIONS, mode="spectral", qvecs=sample_qvecs)
    assert lifted(a) > lifted(b)


# ---------------------------------------------------------------------------------------------
# every propagate.blocks setting and both backends give one answer (QueryState.from_arrays)
# ---------------------------------------------------------------------------------------------

#: scores and proximities may differ by float32 rounding between the kernels (dense ``bmm``
#: against one block-diagonal CSR, compiled against torch; observed <= 3e-7); rankings and
#: selections must be identical
BLOCKS_TOL = 1e-5
SETTINGS = [(backend, blocks) for backend in ("compiled", "torch") for blocks in ("dense", "sparse", "auto")
            if not (backend == "compiled" and blocks != "auto")]  # the compiled kernels ignore `blocks`


def clustered_state(device, *, n: int, cluster: int, links: int, isolated: float, seed: int):
    """A :class:`QueryState` of ``n`` chunks in clusters of ``cluster`` consecutive ids, each
    linking to ``links`` random chunks of its own cluster (a symmetric graph, one weight in
    (0.05, 1] per undirected edge, no self-loop); a fraction ``isolated`` of the chunks has no
    edge. Query vectors near random chunks, dense seeds by the torch scan. Returns the state,
    ``[12, d]`` queries and the isolated chunks ``[n]`` bool."""
    import scipy.sparse as sp

    from spectrag.index.dense import DenseIndex
    from spectrag.state import QueryState

    rng = np.random.default_rng(seed)
    d = 32
    home = np.arange(n) // cluster
    centres = rng.standard_normal((home.max() + 1, d))
    emb = centres[home] + 0.8 * rng.standard_normal((n, d))
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    row = np.repeat(np.arange(n), links)
    col = home[row] * cluster + rng.integers(0, cluster, row.size)
    col = np.minimum(col, n - 1)
    alone = rng.random(n) < isolated
    keep = (row != col) & ~alone[row] & ~alone[col]
    lo, hi = np.minimum(row[keep], col[keep]), np.maximum(row[keep], col[keep])
    upper = sp.coo_matrix((np.ones(lo.size), (lo, hi)), shape=(n, n)).tocsr()
    upper.data = rng.uniform(0.05, 1.0, upper.nnz)  # duplicates merged: one weight per edge
    W = (upper + upper.T).tocsr().astype(np.float32)
    W.sort_indices()
    coords = rng.standard_normal((n, 8))
    state = QueryState.from_arrays(emb, tokens=rng.integers(50, 400, n), doc_codes=np.arange(n) // 4, clusters=home,
                                   coordinates=coords, weights=W, relations=W,
                                   dense=DenseIndex(emb, backend="torch", device=str(device)), device=device)
    at = rng.integers(0, n, 12)
    q = emb[at] + 0.6 * rng.standard_normal((12, d)) / d**0.5
    return state, torch.from_numpy((q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)), alone


@pytest.fixture(scope="module")
def pool_states(device):
    """Two states on ``device``: ``full`` (pools of the whole P = 200, ~20 in-pool edges a node,
    no isolated node: the pools of bench/gpu_check.py) and ``sparse`` (a thin graph where a
    third of the chunks are isolated: pools shorter than P, padding slots, dangling seeds)."""
    return {"full": clustered_state(device, n=3000, cluster=300, links=10, isolated=0.0, seed=5),
            "sparse": clustered_state(device, n=1200, cluster=120, links=1, isolated=0.35, seed=6)}


def _run_setting(state, q, mode: str, backend: str, blocks: str):
    from spectrag.pipeline import run

    config = RetrieverConfig(device=str(state.device), backend=backend, mode=mode).replace(propagate__blocks=blocks)
    return run(state, q.to(state.device), config)


@pytest.mark.parametrize("pools", ["full", "sparse"])
@pytest.mark.parametrize("mode", ["ppr", "heat", "spectral"])
def test_every_blocks_setting_and_backend_gives_one_answer(pool_states, device, pools, mode):
    state, q, _ = pool_states[pools]
    settings = [s for s in SETTINGS if device.type == "cpu" or s[0] == "torch"]
    results = {s: _run_setting(state, q, mode, *s) for s in settings}
    want_key = ("torch", "sparse")
    want = results[want_key]
    mask = want.candidates.cpu() >= 0
    if pools == "full":
        assert bool(mask.all()), "the full pools are not full"
    else:
        assert not bool(mask.all()), "the sparse pools have no padding slot"
    for key, got in results.items():
        where = f"{mode}, {pools} pools, backend={key[0]}, blocks={key[1]} vs {want_key}"
        assert torch.equal(got.candidates.cpu(), want.candidates.cpu()), f"{where}: pools differ"
        for name in ("proximity", "relevance", "scores"):
            a, b = getattr(got, name).cpu(), getattr(want, name).cpu()
            diff = float((a[mask] - b[mask]).abs().max())
            assert diff <= BLOCKS_TOL, f"{where}: {name} differs by {diff:.3g} (tol {BLOCKS_TOL})"
        assert torch.equal(got.ranking().cpu(), want.ranking().cpu()), f"{where}: rankings differ"
        assert torch.equal(got.selected_ids().cpu(), want.selected_ids().cpu()), f"{where}: selections differ"
    if mode != "heat":  # PPR was computed: proximity is not constant (else the test could not fail)
        assert float(want.proximity[mask.to(want.proximity.device)].std()) > 0.05


def test_sparse_pools_hold_isolated_and_padding_slots(pool_states):
    """The ``sparse`` state really exercises dangling seeds and padding: isolated chunks in the
    pools, and pools shorter than P."""
    state, q, alone = pool_states["sparse"]
    res = _run_setting(state, q, "ppr", "torch", "dense")
    cand = res.candidates.cpu()
    real = cand[cand >= 0]
    assert bool(torch.from_numpy(alone)[real].any()), "no isolated chunk in any pool"
    assert int((cand >= 0).sum(dim=1).min()) < cand.shape[1], "every pool is full"


def test_directed_graph_is_refused_and_would_split_the_blocks_settings(device):
    """Root cause of issue 35's divergence: bench/gpu_check.py gave the pipeline a graph with
    the pattern of a symmetric one but an independent weight per direction. The sparse block
    kernels (and the compiled ones) read ``P^T = A D^{-1}`` off each block's own entries, which
    is the walk only for symmetric ``A``; the dense blocks transpose. ``from_arrays`` now refuses
    such a graph; built unchecked, the two settings disagree (so the test above can fail)."""
    import scipy.sparse as sp

    from spectrag.errors import SpectragError
    from spectrag.index.dense import DenseIndex
    from spectrag.state import QueryState

    state, q, _ = clustered_state(device, n=3000, cluster=300, links=10, isolated=0.0, seed=5)
    W = state.weights.copy()
    W.data = np.random.default_rng(0).uniform(0.05, 1.0, W.nnz).astype(np.float32)  # a weight per direction
    emb = state.embeddings.cpu().numpy()
    kwargs = dict(coordinates=state.coords.cpu().numpy(), weights=W, relations=W, device=device,
                  dense=DenseIndex(emb, backend="torch", device=str(device)))
    with pytest.raises(SpectragError, match="weights: not symmetric"):
        QueryState.from_arrays(emb, **kwargs)
    with pytest.raises(SpectragError, match="self-loop"):
        QueryState.from_arrays(emb, **{**kwargs, "weights": (W + W.T + sp.eye(W.shape[0], format="csr")).tocsr()})
    directed = QueryState.from_arrays(emb, **kwargs, check_graphs=False)
    a = _run_setting(directed, q[:4], "ppr", "torch", "dense")
    b = _run_setting(directed, q[:4], "ppr", "torch", "sparse")
    assert float((a.proximity - b.proximity).abs().max()) > 0.05


def test_named_in_compiled_equals_the_search_and_the_device_keys():
    """Which candidates are named chunks: the compiled kernel (CPU), the sorted-key search on a
    CSR and on NamedChunks (the device path) against a plain set lookup; padding, rows that name
    nothing, named chunks outside the pool."""
    pytest.importorskip("numba")
    import scipy.sparse as sp

    from spectrag.pipeline import named_in
    from spectrag.seed.titles import NamedChunks

    rng = np.random.default_rng(5)
    batch, n, width = 13, 300, 40
    named = sp.random(batch, n, density=0.06, random_state=rng, format="csr", dtype=np.float32)
    named = sp.diags(np.r_[0.0, np.ones(batch - 1)]) @ named  # the first query names nothing
    named.eliminate_zeros()
    named = named.tocsr()
    candidates = torch.from_numpy(np.stack([rng.permutation(n)[:width] for _ in range(batch)]))
    candidates[torch.from_numpy(rng.random((batch, width)) < 0.2)] = -1
    want = torch.tensor([[c >= 0 and c in set(named.indices[named.indptr[b]:named.indptr[b + 1]].tolist())
                          for c in candidates[b].tolist()] for b in range(batch)])
    assert int(want.sum()) > 20 and not bool(want[0].any())
    assert torch.equal(named_in(named, candidates), want)
    assert torch.equal(named_in(NamedChunks.from_csr(named, "cpu"), candidates), want)
    assert torch.equal(named_in(named, candidates, compiled=True), want)
