"""The HTTP server (spectrag.serve.app) on 127.0.0.1: concurrent requests return what direct
calls return and are scored as one batch (counted); bad requests get a 4xx with a message;
shutting down answers every request it accepted."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from conftest import assert_same_results
import uvicorn
from fastapi.testclient import TestClient
from serving import in_thread

from spectrag.cli.demo import sample_questions
from spectrag.retriever import Retriever
from spectrag.serve.app import ServeSettings, create_app
from spectrag.serve.models import result_of

QUESTIONS = [q["question"] for q in sample_questions()]


@pytest.fixture(scope="module")
def retriever(sample_index):
    return Retriever(sample_index)


@contextmanager
def running(app):
    """``app`` under uvicorn in a thread on a free loopback port; yields (server, base url)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           timeout_graceful_shutdown=60))
    with in_thread(server) as (url, _):
        yield server, url


def _post_all(url, bodies):
    with ThreadPoolExecutor(len(bodies)) as pool, httpx.Client(timeout=120) as client:
        return list(pool.map(lambda b: client.post(url + "/v1/retrieve", json=b), bodies))


def test_concurrent_requests_equal_direct_calls_in_one_batch(retriever):
    bodies = [{"query": q, "k": k, "budget": b} for q, k, b in zip(QUESTIONS[:6], [3, None, 5, 3, 1, 2],
                                                                    [900, 900, None, 900, None, 900])]
    bodies.append({"queries": QUESTIONS[6:8], "k": 4, "budget": 900, "text": False, "detail": True})
    app = create_app(retriever, ServeSettings(max_batch=8, max_wait_ms=10_000))  # one batch when 8 are in
    with running(app) as (_, url):
        responses = _post_all(url, bodies)
        stats = httpx.get(url + "/info").json()["stats"]
    assert [r.status_code for r in responses] == [200] * len(bodies)
    assert stats["batches"] == 1 and stats["queries"] == 8 and stats["requests"] == 7
    for body, response in zip(bodies, responses):
        queries = [body["query"]] if "query" in body else body["queries"]
        contexts = retriever.retrieve(queries, k=body["k"], budget=body["budget"])
        want = [result_of(c, text=body.get("text", True), detail=body.get("detail", False)).model_dump(exclude_unset=True)
                for c in contexts]
        got = response.json()
        assert got["api_version"] == "1"
        assert_same_results(got["results"], want)
        for row, ctx in zip(got["results"], contexts):
            assert [h["chunk_id"] for h in row["hits"]] == [h.chunk_id for h in ctx.hits]
            assert ("ranking" in row) == ("scores" in row["chunks"][0]) == body.get("detail", False)
            assert ("text" in row["hits"][0]) == ("text" in row["chunks"][0]) == body.get("text", True)
            if body["budget"] is None:  # k without a budget: the context is the k hits
                assert row["budget"] is None and [c["chunk_id"] for c in row["chunks"]] == [h["chunk_id"] for h in row["hits"]]


def test_batching_off_scores_each_request_alone(retriever):
    app = create_app(retriever, ServeSettings(max_batch=8, batching=False))
    with running(app) as (_, url):
        responses = _post_all(url, [{"query": q, "budget": 500} for q in QUESTIONS[:4]])
        stats = httpx.get(url + "/info").json()["stats"]
    assert all(r.status_code == 200 for r in responses) and stats["batches"] == 4


@pytest.mark.parametrize("body, status, message", [
    ({}, 422, "exactly one of query"),
    ({"query": "a", "queries": ["b"]}, 422, "exactly one of query"),
    ({"query": " "}, 400, "query 1 is empty"),
    ({"queries": []}, 422, "queries: List should have at least 1 item"),
    ({"queries": ["q"] * 5}, 422, "queries: List should have at most 4 items"),
    ({"query": "x", "mode": "magic"}, 422, "mode: Input should be 'dense'"),
    ({"query": "x", "budget": 0}, 422, "budget: Input should be greater than or equal to 1"),
    ({"query": "x", "k": 0}, 422, "k: Input should be greater than or equal to 1"),
    ({"query": "x", "k": 51}, 422, "k: Input should be less than or equal to 50"),
    ({"query": "x", "top_k": 3}, 422, "top_k: Extra inputs are not permitted"),
    ({"query": 7}, 422, "query: Input should be a valid string"),
    ({"query": "x" * 101}, 422, "query: String should have at most 100 characters"),
    ({"queries": ["ok", "y" * 101]}, 422, "query 2 of 2 has more than 100 characters"),
    ({"query": "x", "mode": "activation"}, 400, "knowledge graph"),
    ({"query": "x", "k": 40, "mode": "dense", "budget": 10}, 200, ""),
    ({"query": "x", "k": 300}, 422, "k: Input should be less than or equal to 200"),  # the largest pool (expand.max_candidates)
    ({"query": "x", "k": 120, "mode": "dense"}, 400, "k = 120 is more than mode 'dense' ranks per query (seed.k_dense = 50)"),
])
def test_bad_requests_get_a_4xx_with_a_message(retriever, body, status, message):
    max_k = 1000 if body.get("k") in (300, 120) else 50
    app = create_app(retriever, ServeSettings(max_batch=4, max_k=max_k, max_query_chars=100, max_body_bytes=2000))
    with TestClient(app) as client:
        response = client.post("/retrieve", json=body)
    if status == 200:
        assert response.status_code == 200 and len(response.json()["results"][0]["hits"]) == body["k"], response.text
        return
    assert response.status_code == status and message in response.json()["error"], response.text


def test_malformed_and_oversized_bodies(retriever):
    app = create_app(retriever, ServeSettings(max_body_bytes=2000))
    with TestClient(app) as client:
        bad = client.post("/retrieve", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 422 and "the request body is not valid JSON" in bad.json()["error"], bad.text
        big = client.post("/retrieve", json={"query": "x" * 3000})
        assert big.status_code == 413 and "at most 2000" in big.json()["error"]
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/info").json() == client.get("/v1/info").json()
        info = client.get("/v1/info").json()
        assert info["index"]["counts"]["chunks"] == len(retriever.index.chunks) and info["serve"]["max_body_bytes"] == 2000


def test_openapi_types_the_requests_and_responses(retriever):
    """/openapi.json names the request and response models of /v1/retrieve (and of its alias),
    the error model of each 4xx, and the health model."""
    with TestClient(create_app(retriever, ServeSettings(max_k=77))) as client:
        spec = client.get("/openapi.json").json()
        small = client.post("/v1/retrieve", json={"query": QUESTIONS[0]}).json()
    schemas = spec["components"]["schemas"]
    for path in ("/v1/retrieve", "/retrieve"):
        post = spec["paths"][path]["post"]
        assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/RetrieveRequest")
        assert post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/RetrieveResponse")
        for code in ("400", "413", "422", "503"):
            assert post["responses"][code]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    assert spec["paths"]["/retrieve"]["post"]["deprecated"] is True
    assert spec["paths"]["/healthz"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Health")
    assert {"Hit", "ContextChunk", "Result"} <= schemas.keys()
    assert schemas["RetrieveRequest"]["properties"]["k"]["anyOf"][0]["maximum"] == 77
    assert {"text", "title", "doc_id", "section", "url", "score"} <= schemas["Hit"]["properties"].keys()
    # the default answer: hits and the context with their texts; no ranking, no per-stage scores
    row = small["results"][0]
    assert row["hits"] and row["hits"][0]["text"] and "ranking" not in row and "scores" not in row["chunks"][0]
    assert row["budget"] == retriever.config.budget


def test_shutdown_answers_every_accepted_request(retriever):
    """Requests held in the batching window when the server is told to stop are all answered."""
    app = create_app(retriever, ServeSettings(max_batch=64, max_wait_ms=3000))
    bodies = [{"query": q, "budget": 600, "k": 2} for q in QUESTIONS[:10]]
    with running(app) as (server, url):
        with ThreadPoolExecutor(len(bodies)) as pool, httpx.Client(timeout=120) as client:
            futures = [pool.submit(client.post, url + "/retrieve", json=b) for b in bodies]
            deadline = time.monotonic() + 60
            while app.state.batcher.pending < len(bodies):  # all accepted, none answered yet
                assert time.monotonic() < deadline
                time.sleep(0.005)
            server.should_exit = True  # what SIGTERM / Ctrl-C does
            responses = [f.result() for f in futures]
    assert [r.status_code for r in responses] == [200] * len(bodies)
    assert [r.json()["results"][0]["query"] for r in responses] == QUESTIONS[:10]
    assert app.state.batcher.closed and app.state.batcher.pending == 0 and app.state.batcher.stats.queries == 10


def test_serve_command_refuses_bad_settings(sample_index):
    from click.testing import CliRunner

    from spectrag.cli import main

    done = CliRunner().invoke(main, ["serve", str(sample_index.path), "--max-batch", "0"])
    assert done.exit_code == 2 and "error: --max-batch must be >= 1" in done.output


def test_a_budget_below_the_best_chunk_gives_it_cut_not_an_empty_result(retriever):
    with TestClient(create_app(retriever, ServeSettings(max_batch=4))) as client:
        response = client.post("/v1/retrieve", json={"query": QUESTIONS[0], "budget": 1})
    assert response.status_code == 200, response.text
    result = response.json()["results"][0]
    assert len(result["hits"]) == 1 and len(result["chunks"]) == 1
    chunk = result["chunks"][0]
    assert chunk["truncated"] is True and chunk["n_tokens"] == 1 and chunk["chunk_id"] == result["hits"][0]["chunk_id"]
    assert chunk["chunk_id"] == retriever.retrieve(QUESTIONS[0], k=1).ranking[0]
