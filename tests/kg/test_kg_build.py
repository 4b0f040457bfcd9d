"""The knowledge graph inside an index (spectrag.kg.build, spectrag.kg.store): built,
checksummed, loaded, a corrupt file refused, off by default, its settings checked before any
stage runs; and ``spectrag index --openie`` / ``retrieve --mode activation`` end to end. (The
retrieval modes ``activation`` and ``combined``: tests/propagate/test_propagate_activation.py;
named so because tests/test_build.py tests spectrag.build and the test folders are not
packages, so basenames must differ.)"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from spectrag.build import build_index
from spectrag.cli import main
from spectrag.cli.demo import sample_corpus, sample_questions
from spectrag.generations import current_folder
from spectrag.config import EmbedConfig, IndexConfig, KGConfig, load_config
from spectrag.errors import ConfigError, IndexFormatError, SpectragError
from spectrag.retriever import Retriever
from spectrag.store import load_index

QUESTIONS = [q["question"] for q in sample_questions()]


# --- the KG in the index -----------------------------------------------------------------------


def test_kg_is_persisted_checksummed_and_reloaded(kg_index):
    facts = kg_index.manifest["kg"]
    assert facts["source"] == "extractor" and facts["entities"] > 100 and facts["relations"] > 100
    files = kg_index.manifest["files"]
    kg_files = sorted(p.relative_to(kg_index.folder).as_posix() for p in (kg_index.folder / "kg").iterdir())
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
    shutil.copytree(kg_index.folder, copy)
    path = copy / "kg" / "adjacency.indices.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="kg/adjacency.indices.npy is corrupt"):
        load_index(copy)


def test_kg_is_off_by_default_and_modes_say_how_to_get_it(sample_index):
    assert sample_index.kg is None and not (sample_index.folder / "kg").exists()
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
    with pytest.raises(ConfigError, match="needs an LLM endpoint"):
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
    manifest = json.loads((current_folder(out) / "manifest.json").read_text())
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
