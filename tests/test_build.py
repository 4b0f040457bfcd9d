"""The index build (spectrag.build): counts and manifest of the sample index, atomic writes
(a failed build leaves nothing, a failed overwrite keeps the old index), the embedding cache,
and bad input to the build. (Reading an index back: tests/test_store.py; the dense and BM25
indexes themselves: tests/index/.)"""

from __future__ import annotations

import numpy as np
import pytest

from spectrag import build_index, load_index
from spectrag.build import embedding_text
from spectrag.config import EmbedConfig, IndexConfig
from spectrag.errors import ConfigError, CorpusError, SpectragError
from spectrag.index.lexical import BM25Index
from spectrag.store import MANIFEST
from spectrag.types import Chunk


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


def test_failure_mid_build_leaves_nothing(tmp_path, index_config, monkeypatch):
    from conftest import FIXTURES

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(BM25Index, "build", explode)
    out = tmp_path / "idx"
    with pytest.raises(RuntimeError, match="disk full"):
        build_index(FIXTURES / "formats" / "folder", out, index_config)
    assert not out.exists()
    # no temporary folder left behind either, nor the index's lock file (its holder removes it)
    assert [p.name for p in tmp_path.iterdir()] == []


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




# --- the LLM stage (tests/fake_llm.py) ---------------------------------------------------------


def test_llm_outputs_are_files_the_build_reads_back(llm_index):
    """llm/questions.json is a graph.questions_file and llm/openie.json an --openie file: read by
    the existing import paths, they give the stored question vectors and the knowledge graph's
    triples."""
    from spectrag.extract.openie import load_openie
    from spectrag.graph.questions import embed_questions, read_questions_file

    _, index = llm_index
    n = len(index.chunks)
    questions = read_questions_file(index.folder / "llm" / "questions.json", n)
    assert len(questions) == n - 1 and all(len(q) >= 1 for q in questions.values())  # one answer was malformed
    again = embed_questions(questions, n, index.embedder.encode)
    stored = index.graph["questions"]
    assert np.array_equal(again.owners, stored.owners)
    np.testing.assert_allclose(again.vectors, stored.vectors, atol=1e-6)
    ext = load_openie(index.folder / "llm" / "openie.json", [c.text for c in index.chunks], [c.title for c in index.chunks])
    kg = index.manifest["kg"]
    assert ext.facts["unmatched_records"] == 0 and ext.facts["malformed_triples"] == 0
    assert (ext.facts["records"], ext.facts["triples"]) == (kg["records"], kg["triples"]) and kg["source"] == "llm"


def test_an_interrupted_llm_stage_resumes_from_the_cache(tmp_path, embed_cache, llm_config, llm_server):
    """A chunk whose requests keep failing stops the build (no index is left) after the others
    are cached; the next build asks only for that chunk."""
    from dataclasses import replace

    from spectrag.cli.demo import sample_corpus
    from spectrag.config import GraphConfig, KGConfig
    from spectrag.errors import LLMError

    config = IndexConfig(embed=EmbedConfig(cache_dir=embed_cache), graph=GraphConfig(enabled=False),
                         kg=KGConfig(enabled=True, source="llm"))
    llm_server.fail("500", times=1000, when="Morwen Star was")
    with pytest.raises(LLMError, match="openie requests .* failed after 3 retries .* run again to resume"):
        build_index(sample_corpus(), tmp_path / "idx", config, llm=llm_config)
    assert not (tmp_path / "idx").exists()
    asked = {r["messages"][1]["content"] for r in llm_server.requests if r["fault"] is None}
    failing = {r["messages"][1]["content"] for r in llm_server.requests if r["fault"] == "500"}
    llm_server.reset()
    index = build_index(sample_corpus(), tmp_path / "idx", config, llm=replace(llm_config, max_retries=0))
    again = {r["messages"][1]["content"] for r in llm_server.requests}
    assert again == failing and not again & asked
    assert index.manifest["llm"]["usage"]["stages"]["openie"]["cached"] == len(asked)
    assert index.manifest["kg"]["source"] == "llm"
# --- bad corpora caught before the expensive stages (issue 16) ------------------------------


def test_duplicate_document_ids_are_refused_with_the_ids(tmp_path, index_config):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "One."}\n{"id": "b", "text": "Two."}\n{"id": "a", "text": "Three."}\n')
    with pytest.raises(CorpusError, match=r"1 document id\(s\) occur more than once \('a'\)"):
        build_index(corpus, tmp_path / "out", index_config)


def test_a_corpus_without_bm25_terms_fails_before_embedding(tmp_path, index_config):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "To be or not to be."}\n')
    stages: list[str] = []
    with pytest.raises(CorpusError, match="no chunk has a term BM25 can index"):
        build_index(corpus, tmp_path / "out", index_config, on_stage=stages.append)
    assert "embed" not in stages and not (tmp_path / "out").exists()


def test_skip_invalid_counts_and_lists_what_it_left_out(tmp_path, index_config):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.md").write_text("# Alpha\n\nThe Alpha station keeps the lighthouse.\n")
    (tmp_path / "corpus" / "b.txt").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(CorpusError, match="b.txt: not UTF-8"):
        build_index(tmp_path / "corpus", tmp_path / "out", index_config)
    index = build_index(tmp_path / "corpus", tmp_path / "out", index_config, skip_invalid=True)
    assert index.manifest["counts"]["skipped_invalid"] == 1 and index.manifest["counts"]["documents"] == 1
    assert index.manifest["source"]["skipped_invalid"][0][0] == "b.txt"


def test_a_broken_model_folder_is_a_config_error(tmp_path, index_config):
    import dataclasses

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    (model / "modules.json").write_text("[]")
    (tmp_path / "c.txt").write_text("Some text.")
    config = dataclasses.replace(index_config, embed=EmbedConfig(model=str(model), cache_dir=""))
    with pytest.raises(ConfigError, match="is not a loadable sentence-transformers model"):
        build_index(tmp_path / "c.txt", tmp_path / "out", config)


def _chunk(text: str, title: str, section: tuple[str, ...]) -> Chunk:
    return Chunk(doc_id="d", title=title, section=section, url="", text=text, n_tokens=3, start=0, end=len(text))


@pytest.mark.parametrize("chunk, headings, want", [
    # a chunk in a subsection: the page title, then every heading above it
    (_chunk("Run it nightly.", "Celery", ("Periodic Tasks", "Entries")), True,
     "Celery > Periodic Tasks > Entries\nRun it nightly."),
    (_chunk("Run it nightly.", "Celery", ("Periodic Tasks", "Entries")), False, "Celery\nRun it nightly."),
    # the heading the chunk opens with is not repeated, nor one that only repeats the title
    (_chunk("Entries\nRun it nightly.", "Celery", ("Periodic Tasks", "Entries")), True,
     "Celery > Periodic Tasks\nEntries\nRun it nightly."),
    (_chunk("Some text.", "The :mod:`celery` app", ("The celery app", "Usage")), True,
     "The :mod:`celery` app > Usage\nSome text."),
    # a passage without sections keeps the old form, and a title it opens with is not repeated
    (_chunk("It is a city.", "Paris", ()), True, "Paris\nIt is a city."),
    (_chunk("Paris is the capital.", "Paris", ()), True, "Paris is the capital."),
])
def test_embedding_text_carries_the_section_headings(chunk, headings, want):
    assert embedding_text(chunk, EmbedConfig(include_headings=headings)) == want
