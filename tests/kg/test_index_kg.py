"""The knowledge graph inside an index (built, checksummed, loaded), and the retrieval modes
``activation`` and ``combined`` on the sample corpus: batch == single queries, the budget holds,
the activation pool and the relations used equal a per-query computation from the plain
reference, and ``spectrag index --openie`` / ``retrieve --mode activation`` end to end."""

from __future__ import annotations

import importlib

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from spectrag.cli import main
from spectrag.config import EmbedConfig, IndexConfig, KGConfig, load_config
from spectrag.cli.demo import sample_corpus, sample_questions
from spectrag.errors import ConfigError, IndexFormatError, SpectragError
from spectrag.build import build_index
from spectrag.store import load_index
from spectrag.config import ActivationConfig, KG_MODES
from spectrag.retriever import Retriever
from spectrag.config import RetrieverConfig

QUESTIONS = [q["question"] for q in sample_questions()]


def _reference():
    return importlib.import_module("spectrag.reference.activation")


@pytest.fixture(scope="module")
def kg_index(sample_index, tmp_path_factory, embed_cache):
    """The sample corpus with the extractor KG (the chunk vectors come from the session cache
    that ``sample_index`` filled)."""
    config = IndexConfig(embed=EmbedConfig(cache_dir=embed_cache), kg=KGConfig(enabled=True))
    return build_index(sample_corpus(), tmp_path_factory.mktemp("kg") / "sample-kg", config)


@pytest.fixture(scope="module")
def retriever(kg_index):
    return Retriever(kg_index, RetrieverConfig(device="cpu"))


@pytest.fixture(scope="module")
def qvecs(retriever):
    return retriever.embed(QUESTIONS)


# --- the KG in the index -----------------------------------------------------------------------


def test_kg_is_persisted_checksummed_and_reloaded(kg_index):
    facts = kg_index.manifest["kg"]
    assert facts["source"] == "extractor" and facts["entities"] > 100 and facts["relations"] > 100
    files = kg_index.manifest["files"]
    kg_files = sorted(p.relative_to(kg_index.path).as_posix() for p in (kg_index.path / "kg").iterdir())
    assert len(kg_files) == 14 and all(f in files and len(files[f]["sha256"]) == 64 for f in kg_files)
    again = load_index(kg_index.path, verify=True)
    kg, kg2 = kg_index.kg, again.kg
    assert kg2.keys == kg.keys and kg2.names == kg.names and kg2.texts == kg.texts
    assert np.array_equal(kg2.adj_indices, kg.adj_indices) and (kg2.incidence != kg.incidence).nnz == 0
    d = kg_index.embeddings.shape[1]
    assert kg.entity_emb.shape == (kg.n_entities, d) and kg.text_emb.shape == (len(kg.texts), d)
    assert kg.entity_emb.dtype == np.float32 and np.allclose(np.linalg.norm(kg.entity_emb, axis=1), 1, atol=1e-4)
    # names are embedded with the index's model
    probe = kg_index.embed_queries(kg.names[:3])
    assert np.allclose(probe, kg.entity_emb[:3], atol=1e-4)


def test_corrupt_kg_file_is_refused(kg_index, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(kg_index.path, copy)
    path = copy / "kg" / "adjacency.indices.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="kg/adjacency.indices.npy is corrupt"):
        load_index(copy)


def test_kg_is_off_by_default_and_modes_say_how_to_get_it(sample_index):
    assert sample_index.kg is None and not (sample_index.path / "kg").exists()
    assert sample_index.manifest["kg"] is None
    with pytest.raises(SpectragError, match="--openie FILE"):
        Retriever(sample_index).retrieve(QUESTIONS[:1], mode="activation")


def test_kg_config(tmp_path, embed_cache):
    with pytest.raises(ConfigError, match="kg.source must be one of"):
        KGConfig(source="magic")
    with pytest.raises(ConfigError, match="kg.openie_file is empty"):
        KGConfig(source="openie")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[kg]\nenabled = true\nwindow = 2\n')
    assert load_config(cfg).kg == KGConfig(enabled=True, window=2)
    llm = IndexConfig(embed=EmbedConfig(cache_dir=embed_cache), graph=replace(IndexConfig().graph, enabled=False),
                      kg=KGConfig(enabled=True, source="llm"))
    seen = []  # refused before any stage ran: no loading, chunking or embedding first
    with pytest.raises(ConfigError, match="needs an LLM client"):
        build_index(sample_corpus(), tmp_path / "llm", llm, on_stage=seen.append)
    assert not (tmp_path / "llm").exists() and seen == []
    missing = replace(llm, kg=KGConfig(enabled=True, openie_file=str(tmp_path / "none.json")))
    with pytest.raises(ConfigError, match="none.json does not exist"):
        build_index(sample_corpus(), tmp_path / "missing", missing, on_stage=seen.append)
    missing = replace(llm, kg=KGConfig(), graph=replace(IndexConfig().graph, entities_file=str(tmp_path / "e.json")))
    with pytest.raises(ConfigError, match="graph.entities_file .*e.json does not exist"):
        build_index(sample_corpus(), tmp_path / "missing", missing, on_stage=seen.append)
    assert seen == []
    supplied = replace(llm, kg=KGConfig(enabled=True))
    n = len(load_index_chunks())
    with pytest.raises(ConfigError, match="precomputed embeddings"):
        build_index(sample_corpus(), tmp_path / "sup", supplied, embeddings=np.eye(n, 8, dtype=np.float32))


def load_index_chunks():
    from spectrag.index.chunk import chunk_document
    from spectrag.index.load import iter_documents

    return [c for d in iter_documents(sample_corpus(), "folder") for c in chunk_document(d, IndexConfig().chunk)]


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


@pytest.mark.parametrize("settings", [ActivationConfig(), ActivationConfig(k=5, hops=3, c=0.2, tau_a=0.3, tau_d=0.3, tau_r=0.3),
                                      ActivationConfig(k=5, c=0.4, tau_a=0.3, tau_d=0.3, tau_r=0.35)])  # tau_r <= c: full subgraph
def test_pool_and_relations_equal_a_per_query_computation(kg_index, qvecs, settings):
    """Activation pool and relations from the plain reference (spectrag/reference/activation.py), one
    query at a time, with Python sets and sorts."""
    ref = _reference()
    cfg = RetrieverConfig(device="cpu", activation=settings).replace(expand__max_candidates=6)
    batch = Retriever(kg_index, cfg).score_batch(QUESTIONS, mode="activation", qvecs=qvecs)
    kg = kg_index.kg
    adj = ref.adjacency_lists(kg.adj_indptr, kg.adj_indices, np.asarray(kg.rel_text)[np.asarray(kg.adj_relation)])
    chunk_emb = np.asarray(kg_index.embeddings, dtype=np.float64)
    rels = batch.activation.relations(kg)
    n_rel_total = 0
    for b in range(len(QUESTIONS)):
        q = qvecs[b].numpy()
        _, depth, act, cos = ref.sync_reference(q, np.asarray(kg.entity_emb), np.asarray(kg.text_emb), adj,
                                                 k=settings.k, hops=settings.hops, c=settings.c)
        active = {u for u, a in act.items() if a >= settings.tau_a}
        chunk_act = {}
        for u in active:
            for c in kg.incidence[:, u].nonzero()[0].tolist():
                chunk_act[c] = max(chunk_act.get(c, 0.0), act[u])
        rel = {c: float(chunk_emb[c] @ q) for c in chunk_act}
        pool = [c for c in chunk_act if rel[c] >= settings.tau_d]
        pool.sort(key=lambda c: (-((1 - cfg.activation.alpha) * rel[c] + cfg.activation.alpha * chunk_act[c]), c))
        got = [c for c in batch.candidates[b].tolist() if c >= 0]
        assert got == pool[: cfg.expand.max_candidates], f"query {b}"
        assert torch.allclose(batch.proximity[b][batch.candidates[b] >= 0],
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


# --- the command line --------------------------------------------------------------------------------


def test_cli_index_with_openie_then_retrieve_activation(tmp_path, monkeypatch, embed_cache):
    monkeypatch.setenv("SPECTRAG_CACHE_DIR", embed_cache)
    passages = [
        {"title": "Veltra Bridge", "text": "The Veltra Bridge was designed by Ilse Marrow."},
        {"title": "Ilse Marrow", "text": "Ilse Marrow was born in Tollsund."},
        {"title": "Tollsund", "text": "Tollsund is a harbour town on the Drum estuary."},
    ]
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(passages), encoding="utf-8")
    docs = [
        {"title": "Veltra Bridge", "text": passages[0]["text"], "extracted_entities": ["Veltra Bridge", "Ilse Marrow"],
         "extracted_triples": [["Veltra Bridge", "designed by", "Ilse Marrow"]]},
        {"title": "Ilse Marrow", "text": passages[1]["text"], "extracted_entities": ["Ilse Marrow", "Tollsund"],
         "extracted_triples": [["Ilse Marrow", "born in", "Tollsund"]]},
        {"title": "Tollsund", "text": passages[2]["text"], "extracted_entities": ["Tollsund", "Drum estuary"],
         "extracted_triples": [["Tollsund", "on", "Drum estuary"]]},
    ]
    openie = tmp_path / "openie.json"
    openie.write_text(json.dumps({"docs": docs}), encoding="utf-8")
    runner = CliRunner()
    out = tmp_path / "idx"
    result = runner.invoke(main, ["index", str(corpus), "--format", "musique", "--openie", str(openie), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["kg"]["source"] == "openie" and summary["kg"]["entities"] == 4 and summary["kg"]["relations"] == 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["graph"]["entities"]["source"] == str(openie)  # the entity signal uses the file too
    assert "knowledge graph" in runner.invoke(main, ["info", str(out)]).output
    result = runner.invoke(main, ["retrieve", str(out), "--mode", "activation", "-q", "Where was the designer of the Veltra Bridge born?",
                                  "-q", "Which estuary is Tollsund on?", "--no-text"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["mode"] for r in rows] == ["activation", "activation"]
    assert all("relations" in r for r in rows)
    bad = runner.invoke(main, ["index", str(corpus), "--openie", str(tmp_path / "none.json"), "-o", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "no such file" in bad.output
