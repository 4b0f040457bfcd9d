"""Document ids cannot drift (spectrag.incremental.ids): an update given a subfolder or a file
of the folder the index was built from maps its paths to that root; a folder elsewhere whose
ids match nothing is refused naming both; ``--dry-run`` lists what add, delete and update would
do and writes nothing."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from spectrag import add_documents, build_index, delete_documents, load_index, update_documents
from spectrag.cli.main import main
from spectrag.config import EmbedConfig, GraphConfig, IndexConfig
from spectrag.errors import CorpusError
from spectrag.generations import FOLDER, read_pointer
from spectrag.index.chunk import chunk_corpus
from spectrag.index.load import load_documents

CONFIG = IndexConfig(embed=EmbedConfig(cache_dir=""), graph=GraphConfig(enabled=False))


def vectors(path) -> np.ndarray:
    rows = []
    for c in chunk_corpus(load_documents(path), CONFIG.chunk):
        v = np.random.default_rng(int(hashlib.sha256(c.text.encode()).hexdigest()[:12], 16)).standard_normal(16)
        rows.append(v / np.linalg.norm(v))
    return np.asarray(rows, dtype=np.float32)


def page(name: str, extra: str = "") -> str:
    return f"# {name}\n\nThe page {name} describes the harbour of {name}.{extra}\n"


@pytest.fixture
def tree(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "click").mkdir(parents=True)
    for name in ("a", "b"):
        (corpus / f"{name}.md").write_text(page(name))
    for name in ("c", "d", "e"):
        (corpus / "click" / f"{name}.md").write_text(page(name))
    build_index(corpus, tmp_path / "idx", CONFIG, embeddings=vectors(corpus))
    return tmp_path, corpus, tmp_path / "idx"


def _state(idx):
    return read_pointer(idx), sorted(p.name for p in (idx / FOLDER).iterdir())


def test_an_update_from_a_subfolder_or_a_file_maps_to_the_root(tree):
    tmp, corpus, idx = tree
    assert load_index(idx).manifest["source"]["root"] == str(corpus.resolve())
    (corpus / "click" / "d.md").write_text(page("d", " It was rebuilt in 1901."))
    index = update_documents(idx, corpus / "click", embeddings=vectors(corpus / "click"))
    r = index.report
    assert (r.documents_replaced, r.documents_unchanged, r.documents) == (1, 2, 1)
    assert sorted({c.doc_id for c in index.chunks}) == ["a.md", "b.md", "click/c.md", "click/d.md", "click/e.md"]
    (corpus / "click" / "e.md").write_text(page("e", " Its lighthouse is white."))
    index = update_documents(idx, corpus / "click" / "e.md", embeddings=vectors(corpus / "click" / "e.md"))
    assert index.report.documents_replaced == 1 and len({c.doc_id for c in index.chunks}) == 5
    (corpus / "click" / "f.md").write_text(page("f"))
    index = add_documents(idx, corpus / "click" / "f.md", embeddings=vectors(corpus / "click" / "f.md"))
    assert "click/f.md" in {c.doc_id for c in index.chunks}


def test_an_update_from_another_folder_that_matches_nothing_is_refused(tree):
    tmp, corpus, idx = tree
    other = tmp / "other" / "click"
    other.mkdir(parents=True)
    (other / "c.md").write_text(page("c", " changed"))
    before = _state(idx)
    with pytest.raises(CorpusError, match=rf"{other} is not under {corpus.resolve()}.*none of its 1 document ids"):
        update_documents(idx, other, embeddings=vectors(other))
    assert _state(idx) == before
    copy = tmp / "copy"  # a copy of part of the corpus, laid out like the root: its ids match, it updates
    copy.mkdir()
    (copy / "a.md").write_text(page("a", " changed"))
    assert update_documents(idx, copy, embeddings=vectors(copy)).report.documents_replaced == 1


def test_dry_runs_list_the_plan_and_write_nothing(tree):
    tmp, corpus, idx = tree
    (corpus / "click" / "c.md").write_text(page("c", " A second quay opened."))
    (corpus / "click" / "g.md").write_text(page("g"))
    new = tmp / "new"
    new.mkdir()
    (new / "h.md").write_text(page("h"))
    before = _state(idx)
    runner = CliRunner()
    out = runner.invoke(main, ["update", str(idx), str(corpus / "click"), "--dry-run", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"dry_run": True, "added": ["click/g.md"], "replaced": ["click/c.md"], "removed": []}
    out = runner.invoke(main, ["delete", str(idx), "a.md", "click/e.md", "--dry-run"])
    assert out.exit_code == 0 and "would be removed: 2 document(s)" in out.output and "click/e.md" in out.output
    out = runner.invoke(main, ["add", str(idx), str(new), "--dry-run"])
    assert out.exit_code == 0 and "would be added: 1 document(s)" in out.output and "h.md" in out.output, out.output
    assert "nothing was written" in out.output
    with pytest.raises(CorpusError, match="not in the index"):
        delete_documents(idx, ["zz.md"], dry_run=True)  # the same checks as the edit itself
    assert _state(idx) == before


def test_compact_puts_a_folder_index_in_a_builds_order(tmp_path):
    """Edits append replaced and added documents at the end; compact restores the order a build
    reads the folder in, so the index equals a fresh build file for file (graph included) and
    every mode ranks alike, ties included (ties fall to chunk position)."""
    from spectrag import compact_index
    from spectrag.retriever import Retriever
    from spectrag.config import RetrieverConfig

    config = IndexConfig(embed=EmbedConfig(cache_dir=""))
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    for name in ("b", "c", "sub/d", "sub/e", "f"):
        (corpus / f"{name}.md").write_text(page(name.split("/")[-1]) + "Shared words make equal scores.\n")
    idx = tmp_path / "idx"
    build_index(corpus, idx, config, embeddings=vectors(corpus))
    (corpus / "c.md").write_text(page("c", " Rebuilt.") + "Shared words make equal scores.\n")
    update_documents(idx, corpus / "c.md", embeddings=vectors(corpus / "c.md"), compact_above=None)
    (corpus / "a.md").write_text(page("a") + "Shared words make equal scores.\n")
    add_documents(idx, corpus / "a.md", embeddings=vectors(corpus / "a.md"), compact_above=None)
    edited = load_index(idx)
    assert [c.doc_id for c in edited.chunks][-2:] == ["c.md", "a.md"]  # appended
    compacted = compact_index(idx)
    fresh = build_index(corpus, tmp_path / "fresh", config, embeddings=vectors(corpus))
    assert [c.doc_id for c in compacted.chunks] == [c.doc_id for c in fresh.chunks]
    assert compacted.manifest["history"][-1]["reordered"] is True
    files = {k: v["sha256"] for k, v in fresh.manifest["files"].items()}
    assert {k: v["sha256"] for k, v in compacted.manifest["files"].items()} == files
    qvecs = torch_vectors(["Shared words make equal scores", "harbour of c"], fresh)
    for mode in ("bm25", "dense", "hybrid", "spectral", "ppr"):
        a = Retriever(compacted, RetrieverConfig(device="cpu")).score_batch(["Shared words", "harbour of c"], mode=mode,
                                                                           qvecs=qvecs)
        b = Retriever(fresh, RetrieverConfig(device="cpu")).score_batch(["Shared words", "harbour of c"], mode=mode,
                                                                       qvecs=qvecs)
        assert (a.selected == b.selected).all() and (a.candidates == b.candidates).all(), mode
    assert compact_index(idx).manifest["history"][-1].get("reordered") is None  # in order now: kept


def torch_vectors(texts, index):
    import torch

    rng = np.random.default_rng(5)
    v = rng.standard_normal((len(texts), index.embeddings.shape[1])).astype(np.float32)
    return torch.from_numpy(v / np.linalg.norm(v, axis=1, keepdims=True))
