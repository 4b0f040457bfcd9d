"""``"where"`` in ``POST /v1/retrieve``: requests with different filters are scored in one batch
(a filter per query) and equal direct calls; every hit carries its metadata; a bad filter is a
422 naming its place and operator."""

from __future__ import annotations

import pytest
from conftest import assert_same_results
from fastapi.testclient import TestClient
from test_app import _post_all, running
from test_filters import with_metadata

from spectrag.cli.demo import sample_questions
from spectrag.retriever import Retriever
from spectrag.serve.app import ServeSettings, create_app
from spectrag.serve.models import result_of
from spectrag.store import load_index

QUESTIONS = [q["question"] for q in sample_questions()]


@pytest.fixture(scope="module")
def retriever(sample_index):
    return Retriever(with_metadata(load_index(sample_index.path))[0])


def test_filtered_requests_share_a_batch_and_equal_direct_calls(retriever):
    wheres = [{"lang": "de"}, None, {"year": {"$gte": 2021}}, {"$or": [{"lang": "fr"}, {"tags": "c"}]}]
    bodies = [{"query": q, "k": 4, "where": w} for q, w in zip(QUESTIONS, wheres)]
    app = create_app(retriever, ServeSettings(max_batch=4, max_wait_ms=10_000))  # one batch when 4 are in
    with running(app) as (_, url):
        responses = _post_all(url, bodies)
        import httpx

        stats = httpx.get(url + "/info").json()["stats"]
    assert [r.status_code for r in responses] == [200] * 4 and stats["batches"] == 1
    for body, response in zip(bodies, responses):
        ctx = retriever.retrieve(body["query"], k=4, where=body["where"])
        want = result_of(ctx).model_dump(exclude_unset=True)
        got = response.json()["results"][0]
        assert_same_results(got, want)
        assert len(got["hits"]) == 4 and all(h["metadata"]["doc"] == h["doc_id"] for h in got["hits"])
    assert all(h["metadata"]["lang"] == "de" for h in responses[0].json()["results"][0]["hits"])


@pytest.mark.parametrize("where, message", [
    ({"lang": {"$regex": "d"}}, 'where.lang: unknown operator "$regex"'),
    ({"$or": {"lang": "de"}}, "where.$or takes a non-empty list of filters"),
    ("lang = de", "where: Input should be a valid dictionary"),
])
def test_a_bad_filter_is_a_422(retriever, where, message):
    with TestClient(create_app(retriever, ServeSettings())) as client:
        response = client.post("/v1/retrieve", json={"query": "harbour", "where": where})
    assert response.status_code == 422 and message in response.json()["error"], response.text
