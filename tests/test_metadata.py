"""Metadata from the corpus to the hits: a JSONL record's ``metadata`` kept on every chunk of
its document, persisted in ``chunks.jsonl`` (an optional field: an index written without it
loads with empty metadata), checked at load, kept by every edit (add, delete, update; a change
of metadata alone replaces the document) and filterable after it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import reseal
from spectrag import add_documents, delete_documents, load_index, update_documents
from spectrag.contexts import build_contexts
from spectrag.errors import IndexFormatError
from spectrag.reference.index_format import broken_invariants
from spectrag.retriever import Retriever
from test_incremental import build_supplied, chunk_vectors, synthetic_docs, write_jsonl, SYNTH_CONFIG

EDIT = {"compact_above": None}


def meta(i: int) -> dict:
    return {"lang": ["en", "de"][i % 2], "year": 2015 + i % 7, "tags": ["a", "b"][: 1 + i % 2]}


@pytest.fixture(scope="module")
def records():
    docs = synthetic_docs(40, seed=4)
    for i, d in enumerate(docs):
        if i % 5:  # every fifth record has none
            d["metadata"] = meta(i)
    return docs


@pytest.fixture(scope="module")
def built(records, tmp_path_factory):
    root = tmp_path_factory.mktemp("meta")
    return build_supplied(write_jsonl(root / "corpus.jsonl", records[:30]), root / "idx"), root


def by_doc(index) -> dict[str, dict]:
    out = {}
    for c in index.chunks:
        assert out.setdefault(c.doc_id, c.metadata) == c.metadata  # one document, one metadata
    return out


def want(records) -> dict[str, dict]:
    return {r["id"]: r.get("metadata", {}) for r in records}


def test_built_index_keeps_record_metadata(built, records):
    index, _ = built
    assert by_doc(index) == want(records[:30])
    loaded = load_index(index.path)
    assert by_doc(loaded) == want(records[:30])
    rows = [json.loads(line) for line in (index.folder / "chunks.jsonl").read_text().splitlines()]
    assert sum("metadata" in r for r in rows) == sum(1 for c in index.chunks if c.metadata) > 0
    assert broken_invariants(index.path) == []


def test_hits_carry_metadata_and_filters_use_it(built):
    index, _ = built
    retriever = Retriever(load_index(index.path))
    texts = ["mill road visited", "harbour ships sailed"]
    qvecs = retriever.state.embeddings[[3, 40]].clone()
    result = retriever.score_batch(texts, mode="spectral", qvecs=qvecs, where=[{"lang": "de"}, {"year": {"$gte": 2019}}])
    contexts = build_contexts(retriever.index, texts, result, 5)
    assert all(h.metadata["lang"] == "de" for h in contexts[0].hits) and len(contexts[0].hits) == 5
    assert all(h.metadata["year"] >= 2019 for h in contexts[1].hits) and len(contexts[1].hits) == 5
    assert contexts[0].hits[0].to_json()["metadata"] == contexts[0].hits[0].metadata


def test_an_index_without_metadata_loads_with_none(sample_index):
    assert '"metadata"' not in (sample_index.folder / "chunks.jsonl").read_text()
    index = load_index(sample_index.path)
    assert all(c.metadata == {} for c in index.chunks)
    columns = Retriever(index).state.metadata
    assert not columns.mask({"lang": "en"}).any() and columns.mask({"lang": {"$ne": "en"}}).all()


def test_a_bad_metadata_field_is_an_index_format_error(built, tmp_path):
    index, _ = built
    copy = tmp_path / "bad"
    shutil.copytree(index.folder, copy)  # the current generation, as a flat index
    lines = (copy / "chunks.jsonl").read_text().splitlines()
    row = json.loads(lines[2])
    row["metadata"] = ["not", "an", "object"]
    lines[2] = json.dumps(row)
    (copy / "chunks.jsonl").write_text("\n".join(lines) + "\n")
    reseal(copy)
    with pytest.raises(IndexFormatError, match="line 3: field 'metadata' is not a JSON object"):
        load_index(copy)
    assert broken_invariants(copy) == ["chunks: metadata a JSON object"]


def test_edits_keep_and_change_metadata(built, records, tmp_path):
    index, root = built
    path = tmp_path / "idx"
    shutil.copytree(index.path, path)
    added = records[30:]
    corpus = write_jsonl(tmp_path / "add.jsonl", added)
    inc = add_documents(path, corpus, embeddings=chunk_vectors(corpus, SYNTH_CONFIG), **EDIT)
    assert by_doc(inc) == want(records)
    inc = delete_documents(path, ["doc001", "doc033"], **EDIT)
    kept = {d: m for d, m in want(records).items() if d not in ("doc001", "doc033")}
    assert by_doc(inc) == kept
    changed = [dict(r) for r in records if r["id"] in ("doc002", "doc005")]
    for r in changed:  # the text is the same, only the metadata changes
        r["metadata"] = {"lang": "fr", "reviewed": True}
    corpus = write_jsonl(tmp_path / "update.jsonl", changed)
    inc = update_documents(path, corpus, embeddings=chunk_vectors(corpus, SYNTH_CONFIG), **EDIT)
    assert inc.report.documents_replaced == 2
    assert by_doc(inc) == {**kept, "doc002": changed[0]["metadata"], "doc005": changed[1]["metadata"]}
    assert by_doc(load_index(path)) == by_doc(inc)
    assert broken_invariants(path) == []
    columns = Retriever(load_index(path)).state.metadata
    fr = np.flatnonzero(columns.mask({"lang": "fr"}))
    assert {inc.chunks[i].doc_id for i in fr} == {"doc002", "doc005"}
