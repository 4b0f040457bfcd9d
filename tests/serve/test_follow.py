"""A server follows its index (spectrag.serve.follow): an edit's new generation is served after
POST /v1/reload or the next poll, answers name their generation, deleted text is no longer
served, added documents are, and the old generation is released (its folder collectable)."""

from __future__ import annotations

import gc
import shutil
import time
import weakref

import pytest
from fastapi.testclient import TestClient

from spectrag.generations import FOLDER, collect, read_pointer
from spectrag.incremental import add_documents, delete_documents
from spectrag.retriever import Retriever
from spectrag.serve.app import ServeSettings, create_app
from spectrag.store import load_index

QUERY = "Who designed the Veltra Bridge?"


@pytest.fixture
def edited_copy(sample_index, tmp_path):
    root = tmp_path / "idx"
    shutil.copytree(sample_index.path, root)
    return root


def _docs(response):
    return {c["doc_id"] for r in response.json()["results"] for c in r["chunks"]}


def test_reload_serves_the_new_generation_and_releases_the_old(edited_copy, tmp_path):
    index = load_index(edited_copy)
    old_index = weakref.ref(index)
    app = create_app(Retriever(index), ServeSettings(follow_s=0))
    del index
    with TestClient(app) as client:
        first = client.post("/v1/retrieve", json={"query": QUERY, "k": 5})
        assert first.status_code == 200
        gen = first.json()["generation"]
        assert gen == read_pointer(edited_copy) and client.get("/v1/info").json()["index"]["generation"] == gen
        top = sorted(_docs(first))[0]
        delete_documents(edited_copy, [top])
        assert client.post("/v1/retrieve", json={"query": QUERY, "k": 5}).json()["generation"] == gen  # not yet
        model = app.state.batcher.retriever.index.query_embedder()
        done = client.post("/v1/reload").json()
        assert app.state.batcher.retriever.index.query_embedder() is model is not None  # the model is not loaded again
        assert done == {"generation": str(int(gen) + 1), "previous": gen, "reloaded": True}
        after = client.post("/v1/retrieve", json={"query": QUERY, "k": 50})
        assert after.json()["generation"] == done["generation"] and top not in _docs(after)
        info = client.get("/v1/info").json()["index"]
        assert info["generation"] == done["generation"] and info["counts"] == load_index(edited_copy).manifest["counts"]
        assert client.post("/v1/reload").json()["reloaded"] is False  # nothing new
        gc.collect()
        assert old_index() is None  # the old generation's index is gone from memory
        assert collect(edited_copy) == [gen]  # and no reader holds its folder any more
        assert sorted(p.name for p in (edited_copy / FOLDER).iterdir()) == [done["generation"]]


def test_the_poller_notices_an_edit(edited_copy, tmp_path):
    added = tmp_path / "added.jsonl"
    added.write_text('{"id": "zz-new", "text": "The Quillfeather Observatory stands on Mount Ormond."}\n')
    app = create_app(Retriever(load_index(edited_copy)), ServeSettings(follow_s=0.2))
    with TestClient(app) as client:
        gen = client.post("/v1/retrieve", json={"query": "Quillfeather Observatory", "k": 3}).json()["generation"]
        add_documents(edited_copy, added)
        deadline = time.monotonic() + 120
        while client.get("/v1/info").json()["index"]["generation"] == gen and time.monotonic() < deadline:
            time.sleep(0.2)
        response = client.post("/v1/retrieve", json={"query": "Quillfeather Observatory", "k": 3}).json()
        assert response["generation"] != gen and "zz-new" in {c["doc_id"] for c in response["results"][0]["chunks"]}
