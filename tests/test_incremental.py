"""Incremental indexing (spectrag.incremental) against a full rebuild of the union: chunks,
embeddings, dense and BM25 search, every graph signal, the fused graph, the spectrum and the
Retriever's results; the exact semantic kNN update against semantic_edges; atomicity and bad
input. (Lanczos warm starts, which the spectrum update uses: tests/kernels/test_lanczos.py.)"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spectrag import build_index, load_index
from spectrag.config import EmbedConfig, IndexConfig
from spectrag.errors import CorpusError, IndexFormatError, SpectragError
from spectrag.graph.fuse import signal_matrix
from spectrag.graph.signals import semantic_edges
from spectrag import add_documents
from spectrag.index.chunk import chunk_document

from spectrag.index.lexical import BM25Index
from spectrag.index.load import iter_documents
from spectrag.store import MANIFEST
from spectrag.retriever import Retriever
from spectrag.config import RetrieverConfig

DIM = 32
TOPICS = 6
SYL = "ka lo mer vin tas dor el ran sov bri quel nor fa ith gul pen".split()
SIGNALS = ("semantic", "adjacency", "section", "entity", "citation")


# ------------------------------------------------------------------------------ synthetic corpus


def _word(i: int) -> str:
    return (SYL[i % len(SYL)] + SYL[(i // len(SYL) + 3) % len(SYL)]).capitalize()


def synthetic_docs(n: int, seed: int = 0) -> list[dict]:
    """``n`` JSONL records with sections, title mentions, links, shared names and years. Record
    0 is titled "Skarholt"; record 1 mentions "Skarholt Harbour", the title of record ``n - 1``:
    once that record is added, the shorter match inside it stops counting (nested-title rule)."""
    rng = random.Random(seed)
    titles = [f"{_word(i)} {_word(7 * i + 1)} Mill" for i in range(n)]
    titles[0], titles[-1] = "Skarholt", "Skarholt Harbour"
    people = [f"{_word(100 + j)} {_word(200 + j)}" for j in range(24)]
    docs = []
    for i in range(n):
        parts = [f"# {titles[i]}"]
        for s in range(rng.randint(1, 3)):
            sentences = [
                f"In {rng.randint(1700, 1990)} {rng.choice(people)} visited {titles[rng.randrange(n)]} "
                f"on the {_word(300 + i % TOPICS).lower()} road."
                for _ in range(rng.randint(2, 6))
            ]
            if rng.random() < 0.3:
                sentences.append(f"See [the mill](doc{rng.randrange(n):03d}) for details.")
            parts.append(f"## Part {s + 1}\n\n" + " ".join(sentences))
        if i == 1:
            parts.append("## Port\n\nThe ships of Skarholt Harbour sailed in 1820.")
        docs.append({"id": f"doc{i:03d}", "title": titles[i], "text": "\n\n".join(parts)})
    return docs


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def chunk_vectors(path: Path, config: IndexConfig) -> np.ndarray:
    """Deterministic per-chunk vectors (topic centre + noise seeded by the chunk text)."""
    centres = np.random.default_rng(99).standard_normal((TOPICS, DIM))
    rows = []
    for doc in iter_documents(path, "jsonl"):
        for chunk in chunk_document(doc, config.chunk):
            seed = int(hashlib.sha256(chunk.text.encode()).hexdigest()[:12], 16)
            v = centres[int(doc.doc_id[3:]) % TOPICS] + 0.9 * np.random.default_rng(seed).standard_normal(DIM)
            rows.append(v / np.linalg.norm(v))
    return np.asarray(rows, dtype=np.float32)


SYNTH_CONFIG = IndexConfig(embed=EmbedConfig(cache_dir=""))


def build_supplied(corpus: Path, out: Path, config: IndexConfig = SYNTH_CONFIG):
    return build_index(corpus, out, config, embeddings=chunk_vectors(corpus, config))


def add_supplied(index_dir: Path, corpus: Path, config: IndexConfig = SYNTH_CONFIG):
    return add_documents(index_dir, corpus, embeddings=chunk_vectors(corpus, config))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """(old index path, incremental index, full rebuild, corpora folder): 90 + 30 documents."""
    root = tmp_path_factory.mktemp("synth")
    docs = synthetic_docs(120)
    old_corpus = write_jsonl(root / "old.jsonl", docs[:90])
    new_corpus = write_jsonl(root / "new.jsonl", docs[90:])
    full_corpus = write_jsonl(root / "full.jsonl", docs)
    build_supplied(old_corpus, root / "old")
    shutil.copytree(root / "old", root / "inc")
    inc = add_supplied(root / "inc", new_corpus)
    full = build_supplied(full_corpus, root / "full")
    return root / "old", inc, full, root


# ------------------------------------------------------------------------------------- checks


def assert_same_graph(inc, full, perm: np.ndarray | None = None, atol: float = 1e-6) -> None:
    """Fused W within ``atol``, eigenvalues within 1e-6, spectral projectors within 1e-4;
    ``perm[i]`` is the full build's id of incremental chunk ``i``."""
    p = np.arange(len(inc)) if perm is None else perm
    w_inc, w_full = inc.graph["weights"], full.graph["weights"][p][:, p]
    assert (w_inc != 0).nnz == (w_full != 0).nnz and abs(w_inc - w_full).max() <= atol
    np.testing.assert_array_equal((w_inc != 0).toarray(), (w_full != 0).toarray())
    np.testing.assert_allclose(inc.graph["eigenvalues"], full.graph["eigenvalues"], atol=1e-6)
    u = np.asarray(inc.graph["coordinates"], dtype=np.float64)
    v = np.asarray(full.graph["coordinates"], dtype=np.float64)[p]
    u, v = np.linalg.qr(u)[0], np.linalg.qr(v)[0]  # stored as float32: re-orthonormalize
    assert np.linalg.norm(u @ u.T - v @ v.T, 2) <= 1e-4
    cosines = np.linalg.svd(u.T @ v, compute_uv=False)
    assert np.sqrt(max(0.0, 1 - cosines.min() ** 2)) <= 1e-4  # sine of the largest principal angle


def stored_signal_matrix(index, name: str) -> sp.csr_matrix:
    return signal_matrix(index.graph["signals"][name], len(index), symmetric=False)


def assert_same_retrieval(inc, full, queries: list[str], qvecs: torch.Tensor) -> None:
    for mode in ("hybrid", "spectral"):
        a = Retriever(inc, RetrieverConfig(device="cpu")).score_batch(queries, mode=mode, qvecs=qvecs)
        b = Retriever(full, RetrieverConfig(device="cpu")).score_batch(queries, mode=mode, qvecs=qvecs)
        assert torch.equal(a.candidates, b.candidates), mode
        assert torch.equal(a.selected, b.selected), mode
        torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------- synthetic: no model


def test_synthetic_add_equals_full_rebuild(synth):
    _, inc, full, _ = synth
    assert len(inc) == len(full) > 200
    assert inc.chunks == full.chunks  # same chunks, same order, same ids
    np.testing.assert_array_equal(np.asarray(inc.embeddings), np.asarray(full.embeddings))
    for name in ("dense.faiss", "bm25/data.npy", "bm25/indices.npy", "bm25/indptr.npy", "bm25/vocab.json",
                 "bm25/tokens.indptr.npy", "bm25/tokens.ids.npy"):
        assert inc.manifest["files"][name]["sha256"] == full.manifest["files"][name]["sha256"], name
    for name in SIGNALS:
        a, b = stored_signal_matrix(inc, name), stored_signal_matrix(full, name)
        assert (a != b).nnz == 0 or abs(a - b).max() <= 1e-6, name
        np.testing.assert_array_equal((a != 0).toarray(), (b != 0).toarray())
    assert_same_graph(inc, full)
    np.testing.assert_array_equal(inc.graph["clusters"], full.graph["clusters"])
    np.testing.assert_array_equal(inc.graph["rcm_order"], full.graph["rcm_order"])


def test_synthetic_search_and_retrieval_match(synth):
    _, inc, full, _ = synth
    rng = np.random.default_rng(5)
    qv = rng.standard_normal((8, DIM)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    queries = [f"{_word(100 + j)} visited {_word(300 + j % TOPICS).lower()} Skarholt" for j in range(8)]
    for search in ("dense_search", "bm25_search"):
        arg = qv if search == "dense_search" else queries
        s1, i1 = getattr(inc, search)(arg, 10)
        s2, i2 = getattr(full, search)(arg, 10)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_allclose(s1, s2, atol=1e-6)
    assert_same_retrieval(inc, full, queries, torch.from_numpy(qv))


def test_nested_title_drops_an_old_citation_edge(synth):
    """An old chunk mentioning "Skarholt Harbour" cited "Skarholt" until a document of that
    longer title arrived: the add must remove the old edge, as a rebuild does."""
    old_path, inc, _, _ = synth
    old = load_index(old_path)
    src = next(i for i, c in enumerate(old.chunks) if c.doc_id == "doc001" and "Skarholt Harbour" in c.text)
    target = next(i for i, c in enumerate(old.chunks) if c.doc_id == "doc000")
    assert stored_signal_matrix(old, "citation")[min(src, target), max(src, target)] == 1
    new_cit = stored_signal_matrix(inc, "citation")
    assert new_cit[min(src, target), max(src, target)] == 0
    harbour = next(i for i, c in enumerate(inc.chunks) if c.doc_id == "doc119")
    assert new_cit[min(src, harbour), max(src, harbour)] == 1


def test_manifest_records_the_addition(synth):
    _, inc, full, _ = synth
    m = inc.manifest
    assert m["counts"]["documents"] == 120 and m["counts"]["chunks"] == len(inc)
    assert m["counts"]["tokens"] == full.manifest["counts"]["tokens"]
    (addition,) = m["additions"]
    assert addition["documents"] == 30 and addition["first_chunk"] == len(inc) - addition["chunks"]
    assert m["graph"]["spectrum"]["warm_start"] and m["graph"]["spectrum"]["converged"]
    assert inc.report.lanczos["n_iter"] >= 1 and inc.report.seconds["bm25"] >= 0
    # every stage has its wall and CPU seconds and peak RSS, in the report and the manifest
    assert set(inc.report.cpu_seconds) == set(inc.report.peak_rss_mib) == set(inc.report.seconds) >= {"verify", "bm25"}
    assert addition["cpu_seconds"].items() <= inc.report.cpu_seconds.items()  # written before the "write" stage
    assert addition["peak_rss_mib"] and min(inc.report.peak_rss_mib.values()) > 0
    load_index(inc.path)  # every checksum verifies


def test_added_chunks_out_of_full_build_order_compare_modulo_permutation(tmp_path):
    """Old = even records, new = odd ones: the full build interleaves them; with no top-k cut
    (so no tie broken by chunk id) the graphs are equal modulo the permutation."""
    config = replace(SYNTH_CONFIG, graph=replace(SYNTH_CONFIG.graph, entity_top_k=10_000, max_degree=10_000))
    docs = synthetic_docs(80, seed=3)
    old = write_jsonl(tmp_path / "old.jsonl", docs[0::2])
    new = write_jsonl(tmp_path / "new.jsonl", docs[1::2])
    full_corpus = write_jsonl(tmp_path / "full.jsonl", docs)
    build_supplied(old, tmp_path / "inc", config)
    inc = add_supplied(tmp_path / "inc", new, config)
    full = build_supplied(full_corpus, tmp_path / "full", config)
    where = {(c.doc_id, c.start): i for i, c in enumerate(full.chunks)}
    perm = np.array([where[(c.doc_id, c.start)] for c in inc.chunks])
    assert sorted(perm.tolist()) == list(range(len(full))) and not np.array_equal(perm, np.arange(len(full)))
    assert [full.chunks[j] for j in perm] == inc.chunks
    np.testing.assert_array_equal(np.asarray(inc.embeddings), np.asarray(full.embeddings)[perm])
    assert_same_graph(inc, full, perm)


# ----------------------------------------------------------------------- the exact kNN update


@pytest.mark.parametrize(("n", "n_old", "k", "min_cos"), [(300, 240, 10, 0.0), (120, 5, 10, 0.0), (200, 150, 4, 0.2)])
def test_semantic_update_equals_semantic_edges(n, n_old, k, min_cos):
    rng = np.random.default_rng(n + n_old)
    x = rng.standard_normal((n, 16)).astype(np.float32)
    x[: n // 3] += 2.0  # some cluster structure
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    old = semantic_edges(x[:n_old], k, min_cos=min_cos)
    old_sym = old.maximum(old.T).tocsr()  # what an index stores
    got = semantic_update(old_sym, x, n_old, k, min_cos=min_cos)
    want = semantic_edges(x, k, min_cos=min_cos)
    np.testing.assert_array_equal((got != 0).toarray(), (want != 0).toarray())
    assert abs(got - want).max() <= 1e-6


def test_warm_start_extends_by_neighbour_means():
    w = sp.csr_matrix(np.array([[0, 1, 0, 1], [1, 0, 0, 3], [0, 0, 0, 0], [1, 3, 0, 0]], dtype=np.float32))
    prev = np.array([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]])
    got = warm_start(w, prev)
    np.testing.assert_allclose(got, [[1, 0], [0, 1], [5, 5], [0.25, 0.75]])


# ---------------------------------------------------------------------- atomicity, bad input


@pytest.fixture
def old_copy(synth, tmp_path) -> Path:
    old_path = synth[0]
    shutil.copytree(old_path, tmp_path / "idx")
    return tmp_path / "idx"


@pytest.mark.parametrize("where", ["bm25", "spectrum"])
def test_failed_add_leaves_the_old_index(old_copy, synth, monkeypatch, where):
    import spectrag.incremental as inc_mod

    before = {p.relative_to(old_copy): p.read_bytes() for p in old_copy.rglob("*") if p.is_file()}

    def explode(*args, **kwargs):
        raise OSError("no space left on device")

    if where == "bm25":
        monkeypatch.setattr(BM25Index, "save", explode)
    else:
        monkeypatch.setattr(inc_mod, "warm_spectrum", explode)
    with pytest.raises(OSError, match="no space"):
        add_supplied(old_copy, synth[3] / "new.jsonl")
    after = {p.relative_to(old_copy): p.read_bytes() for p in old_copy.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in old_copy.parent.iterdir()) == [".idx.lock", "idx"]  # no temporary folder left
    assert len(load_index(old_copy)) == len(load_index(synth[0]))


def test_missing_and_corrupt_index(synth, old_copy, tmp_path):
    new = synth[3] / "new.jsonl"
    with pytest.raises(IndexFormatError, match="no such index folder"):
        add_supplied(tmp_path / "nothing", new)
    data = bytearray((old_copy / "chunks.jsonl").read_bytes())
    data[10] ^= 1
    (old_copy / "chunks.jsonl").write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="chunks.jsonl is corrupt"):
        add_supplied(old_copy, new)


def test_clashing_ids_empty_addition_and_embeddings(synth, old_copy, tmp_path):
    root = synth[3]
    with pytest.raises(CorpusError, match=r"document id 'doc000' is already in the index .*\(90 of 90 ids clash\)"):
        add_supplied(old_copy, root / "old.jsonl")
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"id": "x1", "text": "  "}])
    with pytest.raises(CorpusError, match="document 'x1' is empty"):
        add_documents(old_copy, empty, embeddings=np.zeros((0, DIM), np.float32))
    with pytest.raises(CorpusError, match="empty corpus"):
        add_documents(old_copy, empty, skip_empty=True, embeddings=np.zeros((0, DIM), np.float32))
    with pytest.raises(SpectragError, match=r"pass embeddings \(float32 \[\d+, 32\]\)"):
        add_documents(old_copy, root / "new.jsonl")
    with pytest.raises(CorpusError, match=r"embeddings has shape \(3, 32\), expected"):
        add_documents(old_copy, root / "new.jsonl", embeddings=np.zeros((3, DIM), np.float32))
    assert (old_copy / MANIFEST).exists() and len(load_index(old_copy)) == len(load_index(synth[0]))


# ----------------------------------------------------------------- the sample corpus, embedded


@pytest.fixture(scope="module")
def sample_split(tmp_path_factory):
    """The sample corpus indexed as its first 20 files, then the last 10 added, with an
    embedding cache of its own (so no vector comes from the full build's cache)."""
    from spectrag.cli.demo import sample_corpus

    root = tmp_path_factory.mktemp("sample-split")
    files = sorted(p for p in sample_corpus().iterdir() if p.is_file())
    assert len(files) == 30
    for name, part in (("first", files[:20]), ("rest", files[20:])):
        (root / name).mkdir()
        for f in part:
            shutil.copy(f, root / name / f.name)
    config = IndexConfig(embed=EmbedConfig(cache_dir=str(root / "cache")))
    build_index(root / "first", root / "old", config)
    shutil.copytree(root / "old", root / "inc")
    return root, add_documents(root / "inc", root / "rest")


def test_sample_add_equals_full_rebuild(sample_split, sample_index):
    from spectrag.cli.demo import sample_questions

    _, inc = sample_split
    full = sample_index
    assert inc.chunks == full.chunks
    assert inc.report.documents == 10 and inc.manifest["counts"]["documents"] == 30
    np.testing.assert_allclose(np.asarray(inc.embeddings), np.asarray(full.embeddings), atol=1e-5)
    assert_same_graph(inc, full)
    questions = [q["question"] for q in sample_questions()]
    qv = full.embed_queries(questions)
    for search, arg in (("dense_search", qv), ("bm25_search", questions)):
        s1, i1 = getattr(inc, search)(arg, 10)
        s2, i2 = getattr(full, search)(arg, 10)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_allclose(s1, s2, atol=1e-5)
    assert_same_retrieval(inc, full, questions, torch.from_numpy(qv))


def test_cli_add(sample_split, tmp_path):
    from click.testing import CliRunner

    from spectrag.cli import main

    root, _ = sample_split
    shutil.copytree(root / "old", tmp_path / "idx")
    result = CliRunner().invoke(main, ["add", str(tmp_path / "idx"), str(root / "rest"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["added"]["documents"] == 10 and out["counts"]["documents"] == 30
    assert out["added"]["embedding_cache_hits"] == out["added"]["chunks"]  # the fixture embedded them
    again = CliRunner().invoke(main, ["add", str(tmp_path / "idx"), str(root / "rest")])
    assert again.exit_code == 2 and "error:" in again.output and "is already in the index" in again.output
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "extra.md").write_text("# Extra\n\nA new document about the Veltra Bridge.\n")
    with pytest.raises(SpectragError, match="embeddings: .* embeds with the model 'all-MiniLM-L6-v2'"):
        add_documents(tmp_path / "idx", tmp_path / "extra", embeddings=np.zeros((1, 384), np.float32))


def test_knowledge_graph_is_rebuilt_in_full(tmp_path, embed_cache):
    """An index with a knowledge graph gets the graph of all chunks, as a rebuild would."""
    pytest.importorskip("spectrag.kg.build")
    from spectrag.config import KGConfig
    from spectrag.cli.demo import sample_corpus

    files = sorted(p for p in sample_corpus().iterdir() if p.is_file())[:5]
    for name, part in (("first", files[:3]), ("rest", files[3:]), ("all", files)):
        (tmp_path / name).mkdir()
        for f in part:
            shutil.copy(f, tmp_path / name / f.name)
    config = IndexConfig(embed=EmbedConfig(cache_dir=embed_cache), kg=KGConfig(enabled=True, source="extractor"))
    build_index(tmp_path / "first", tmp_path / "inc", config)
    inc = add_documents(tmp_path / "inc", tmp_path / "rest")
    full = build_index(tmp_path / "all", tmp_path / "full", config)
    assert inc.kg is not None and "kg" in inc.report.seconds
    kg_files = sorted(f for f in full.manifest["files"] if f.startswith("kg/"))
    assert kg_files and kg_files == sorted(f for f in inc.manifest["files"] if f.startswith("kg/"))
    for f in kg_files:  # same cache, so the same vectors: the files are byte-identical
        assert inc.manifest["files"][f]["sha256"] == full.manifest["files"][f]["sha256"], f


def test_an_index_built_with_the_llm_stage_is_refused(llm_index, tmp_path):
    """`spectrag add` does not run the LLM stage: refused before anything is written."""
    from conftest import FIXTURES

    target = tmp_path / "llm-copy"
    shutil.copytree(llm_index[1].path, target)
    before = (target / "manifest.json").read_bytes()
    with pytest.raises(SpectragError, match="built with the LLM stage .* rebuild the index"):
        add_documents(target, FIXTURES / "formats" / "folder")
    assert (target / "manifest.json").read_bytes() == before
