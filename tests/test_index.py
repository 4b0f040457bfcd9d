"""The built index: dense and BM25 search against references, persistence, checksums,
atomic writes, the embedding cache, and bad input to the build."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from spectrag import build_index, load_index
from spectrag.config import BM25Config, EmbedConfig, IndexConfig
from spectrag.errors import ConfigError, CorpusError, IndexFormatError, SpectragError
from spectrag.index.dense import DenseIndex
from spectrag.index.lexical import BM25Index
from spectrag.store import MANIFEST

QUESTIONS = ["In which town was the designer of the Veltra Bridge born?", "Who founded the Greywater Shipping Company?"]


def test_sample_index_counts_and_manifest(sample_index):
    m = sample_index.manifest
    assert m["counts"]["documents"] == 30
    assert m["counts"]["chunks"] == len(sample_index.chunks) == sample_index.embeddings.shape[0]
    assert m["tokenizer"].startswith("tiktoken:cl100k_base")
    assert m["embedding"]["dim"] == 384 and m["embedding"]["model"] == "all-MiniLM-L6-v2"
    assert set(m["files"]) >= {"chunks.jsonl", "embeddings.npy", "dense.faiss", "bm25/vocab.json"}
    assert {"torch", "faiss-cpu", "bm25s"} <= set(m["versions"])
    norms = np.linalg.norm(sample_index.embeddings, axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)


def test_dense_search_equals_numpy_brute_force(sample_index):
    xq = sample_index.embed_queries(QUESTIONS)
    scores, ids = sample_index.dense_search(xq, 10)
    brute = xq @ np.asarray(sample_index.embeddings).T
    for b in range(len(QUESTIONS)):
        expected = np.sort(brute[b])[::-1][:10]
        np.testing.assert_allclose(scores[b], expected, atol=1e-5)
        # tie-aware: every returned id scores at least the 10th best
        assert np.all(brute[b][ids[b]] >= expected[-1] - 1e-5)


def test_torch_backend_equals_faiss(sample_index):
    xq = sample_index.embed_queries(QUESTIONS)
    s1, i1 = sample_index.dense.search(xq, 15)
    s2, i2 = DenseIndex(np.asarray(sample_index.embeddings), backend="torch").search(xq, 15)
    np.testing.assert_allclose(s1, s2, atol=1e-5)
    np.testing.assert_array_equal(i1, i2)


def test_bm25_against_hand_computed_lucene_scores():
    corpus = ["apple banana apple", "banana cherry", "cherry cherry cherry date", "eggplant"]
    index = BM25Index.build(corpus, BM25Config(stemmer="", stopwords=""))
    k1, b, n = 1.5, 0.75, len(corpus)
    lengths = [len(t.split()) for t in corpus]
    avgdl = sum(lengths) / n

    def lucene(term: str, doc: int) -> float:
        tf = corpus[doc].split().count(term)
        df = sum(term in t.split() for t in corpus)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf / (tf + k1 * (1 - b + b * lengths[doc] / avgdl)) if tf else 0.0

    query = "apple cherry"
    expected = [lucene("apple", d) + lucene("cherry", d) for d in range(n)]
    got = index.score([query]).toarray()[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    scores, ids = index.search([query, "zucchini"], 4)
    assert ids[0].tolist() == [0, 2, 1, -1]  # the non-matching doc is an empty slot
    assert ids[1].tolist() == [-1, -1, -1, -1] and not scores[1].any()


def test_bm25_finds_exact_terms(sample_index):
    _, ids = sample_index.bm25_search(["Veltra Bridge"], 3)
    assert sample_index.chunks[ids[0][0]].doc_id == "veltra_bridge.txt"


def test_round_trip_gives_identical_results(sample_index):
    again = load_index(sample_index.path)
    assert again.chunks == sample_index.chunks
    np.testing.assert_array_equal(np.asarray(again.embeddings), np.asarray(sample_index.embeddings))
    for a, b in zip(again.bm25_search(QUESTIONS, 8), sample_index.bm25_search(QUESTIONS, 8)):
        np.testing.assert_array_equal(a, b)
    xq = sample_index.embed_queries(QUESTIONS)
    for a, b in zip(again.dense_search(xq, 8), sample_index.dense_search(xq, 8)):
        np.testing.assert_array_equal(a, b)


@pytest.fixture
def index_copy(sample_index, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(sample_index.path, target)
    return target


def test_corrupt_file_is_detected(index_copy):
    emb = index_copy / "embeddings.npy"
    data = bytearray(emb.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    emb.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="embeddings.npy is corrupt"):
        load_index(index_copy)


def test_truncated_and_missing_files_are_detected(index_copy, sample_index):
    (index_copy / "dense.faiss").unlink()
    with pytest.raises(IndexFormatError, match="dense.faiss listed in the manifest is missing"):
        load_index(index_copy)
    shutil.copy(sample_index.path / "dense.faiss", index_copy / "dense.faiss")
    (index_copy / "chunks.jsonl").write_text("")
    with pytest.raises(IndexFormatError, match="chunks.jsonl has 0 bytes"):
        load_index(index_copy, verify=False)


def test_version_and_manifest_problems(index_copy, tmp_path):
    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["format_version"] = 99
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="format version 99, this engine reads version 1"):
        load_index(index_copy)
    (index_copy / MANIFEST).write_text("{not json")
    with pytest.raises(IndexFormatError, match="corrupt manifest"):
        load_index(index_copy)
    (index_copy / MANIFEST).unlink()
    with pytest.raises(IndexFormatError, match="not a SpectRAG index"):
        load_index(index_copy)
    with pytest.raises(IndexFormatError, match="no such index folder"):
        load_index(tmp_path / "missing")


def test_failure_mid_build_leaves_nothing(tmp_path, index_config, monkeypatch):
    from conftest import FIXTURES

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(BM25Index, "build", explode)
    out = tmp_path / "idx"
    with pytest.raises(RuntimeError, match="disk full"):
        build_index(FIXTURES / "formats" / "folder", out, index_config)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary folder left behind either


def test_failure_during_overwrite_keeps_the_old_index(index_copy, index_config, monkeypatch):
    from conftest import FIXTURES

    before = (index_copy / MANIFEST).read_bytes()
    monkeypatch.setattr(BM25Index, "save", lambda *a, **k: (_ for _ in ()).throw(OSError("no space")))
    with pytest.raises(OSError):
        build_index(FIXTURES / "formats" / "folder", index_copy, index_config, overwrite=True)
    assert (index_copy / MANIFEST).read_bytes() == before
    load_index(index_copy)


def test_existing_output_is_refused_unless_overwrite(index_copy, index_config):
    from conftest import FIXTURES

    with pytest.raises(SpectragError, match="already exists; pass --overwrite"):
        build_index(FIXTURES / "formats" / "folder", index_copy, index_config)
    index = build_index(FIXTURES / "formats" / "folder", index_copy, index_config, overwrite=True)
    assert index.manifest["counts"]["documents"] == 3


def test_embedding_cache_skips_unchanged_chunks(tmp_path, embed_cache):
    from conftest import FIXTURES

    config = IndexConfig(embed=EmbedConfig(cache_dir=str(tmp_path / "cache")))
    first = build_index(FIXTURES / "formats" / "folder", tmp_path / "a", config)
    assert first.report.cache_hits == 0
    second = build_index(FIXTURES / "formats" / "folder", tmp_path / "b", config)
    assert second.report.cache_hits == len(second.chunks)
    np.testing.assert_array_equal(np.asarray(first.embeddings), np.asarray(second.embeddings))
    # cached vectors equal freshly computed ones
    fresh = build_index(FIXTURES / "formats" / "folder", tmp_path / "c", IndexConfig(embed=EmbedConfig(cache_dir="")))
    np.testing.assert_allclose(np.asarray(fresh.embeddings), np.asarray(first.embeddings), atol=1e-6)


def test_build_rejects_bad_input(tmp_path, index_config):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("Some text here.")
    (tmp_path / "corpus" / "empty.txt").write_text("  \n")
    with pytest.raises(CorpusError, match="document 'empty.txt' is empty"):
        build_index(tmp_path / "corpus", tmp_path / "out", index_config)
    assert not (tmp_path / "out").exists()
    index = build_index(tmp_path / "corpus", tmp_path / "out", index_config, skip_empty=True)
    assert index.manifest["counts"]["skipped_empty_documents"] == 1
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "e.md").write_text("")
    with pytest.raises(CorpusError, match="empty corpus"):
        build_index(tmp_path / "only", tmp_path / "out2", index_config, skip_empty=True)
    bad_model = IndexConfig(embed=EmbedConfig(model=str(tmp_path / "no-model")))
    with pytest.raises(ConfigError, match="neither all-MiniLM-L6-v2 nor an existing model folder"):
        build_index(tmp_path / "corpus", tmp_path / "out3", bad_model, skip_empty=True)


def test_dense_results_do_not_depend_on_batch_size():
    # FAISS uses a BLAS kernel once B * d is large; its rounding must not reorder near-ties
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2000, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[7] = x[3]  # an exact tie
    index = DenseIndex(x)
    queries = np.tile(x[3:4] + 0.001, (2500, 1)).astype(np.float32)
    _, big = index.search(queries, 12)
    _, one = index.search(queries[:1], 12)
    assert (big == one[0]).all()
    assert one[0][:2].tolist() == [3, 7]
