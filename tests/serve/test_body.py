"""Request bodies (spectrag.serve.body): the size limit holds for chunked uploads (no
Content-Length), counted as the bytes arrive, answered 413 at once; a body that trickles or
stalls gets a 408 after ``body_timeout_s``; /healthz stays fast with many such connections
open, and never waits for the batcher."""

from __future__ import annotations

import time

import httpx
import pytest
from serving import HeldRetriever, half_request, served

from spectrag.retriever import Retriever
from spectrag.serve.app import ServeSettings, create_app
from spectrag.serve.models import result_of

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def retriever(sample_index):
    return Retriever(sample_index)


def test_chunked_upload_over_the_limit_is_413_as_soon_as_it_passes(retriever):
    limit, total = 64 << 10, 200 << 20
    sent = [0]

    def body(size, chunk=1 << 16):
        yield b'{"query": "'
        while sent[0] < size:
            part = min(chunk, size - sent[0])
            sent[0] += part
            yield b"x" * part
        yield b'"}'

    app = create_app(retriever, ServeSettings(max_body_bytes=limit))
    with served(app) as (_, url, _):
        start = time.perf_counter()
        big = httpx.post(url + "/retrieve", content=body(total), headers=JSON, timeout=120)
        seconds = time.perf_counter() - start
        assert big.status_code == 413 and f"at most {limit}" in big.json()["error"], big.text
        # the server stopped reading at the limit: the client wrote little more than what the
        # sockets buffer before it saw the answer, not the 200 MB (22.7 s before the fix)
        assert sent[0] < total // 4 and seconds < 20, (sent[0], seconds)
        sent[0] = 0
        small = httpx.post(url + "/retrieve", content=(p for p in (b'{"query": "Who designed ', b'the Veltra Bridge?", ',
                                                                   b'"k": 3, "budget": 500}')), headers=JSON, timeout=120)
        assert small.status_code == 200, small.text
        want = retriever.retrieve(["Who designed the Veltra Bridge?"], k=3, budget=500)
        assert small.json()["results"] == [result_of(c, text=True).model_dump(exclude_unset=True) for c in want]
        sent[0] = 0  # just under the limit, in 1,000-byte chunks: read whole, then refused by the query's length
        under = httpx.post(url + "/retrieve", content=body(limit - 100, 1000), headers=JSON, timeout=120)
        assert under.status_code == 422 and "at most 4096 characters" in under.json()["error"], under.text


def test_a_body_that_stalls_gets_408_and_healthz_stays_fast(retriever):
    app = create_app(retriever, ServeSettings(body_timeout_s=1.5))
    with served(app) as (_, url, _):
        socks = [half_request(url, chunked=i % 2 == 1) for i in range(100)]
        try:
            times = []
            with httpx.Client(timeout=30) as client:
                for _ in range(10):
                    start = time.perf_counter()
                    assert client.get(url + "/healthz").json() == {"status": "ok"}
                    times.append(time.perf_counter() - start)
            assert max(times) < 2.0, times  # 100 stalled bodies cost the event loop nothing
            for sock in socks:
                sock.settimeout(30)
                answer = b""
                while part := sock.recv(4096):  # until the server closes the connection
                    answer += part
                assert answer.startswith(b"HTTP/1.1 408") and b"within 1.5 s" in answer, answer[:300]
        finally:
            for sock in socks:
                sock.close()


def test_healthz_and_info_never_wait_for_the_batcher(retriever):
    held = HeldRetriever(retriever, held=True)
    app = create_app(held, ServeSettings(max_wait_ms=0))
    with served(app) as (_, url, _), httpx.Client(timeout=60) as client:
        import threading

        answer = {}
        thread = threading.Thread(target=lambda: answer.update(r=client.post(url + "/retrieve", json={"query": "x"})))
        thread.start()
        assert held.started.wait(60)  # the worker is busy scoring
        start = time.perf_counter()
        assert client.get(url + "/healthz").json() == {"status": "ok"}
        assert client.get(url + "/info").status_code == 200
        assert time.perf_counter() - start < 5.0
        assert thread.is_alive()  # the retrieval is still held
        held.release.set()
        thread.join(60)
        assert answer["r"].status_code == 200
