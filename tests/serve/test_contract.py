"""The server's HTTP contract: strict types, every refusal in the documented status and shape
(``{"error": "..."}``), one set of limits stated in /v1/info and /openapi.json and enforced alike
by the server, the CLI and Python, header timeouts, and /docs that works offline."""

from __future__ import annotations

import json
import re
import socket
import time

import pytest
from fastapi.testclient import TestClient
from serving import served

from spectrag.config import MAX_BUDGET, MAX_QUERY_CHARS
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever
from spectrag.serve.app import ServeSettings, create_app


@pytest.fixture(scope="module")
def retriever(sample_index):
    return Retriever(sample_index)


@pytest.fixture(scope="module")
def client(retriever):
    with TestClient(create_app(retriever, ServeSettings(max_body_bytes=200_000))) as c:
        yield c


@pytest.mark.parametrize("body, field", [
    ({"query": "x", "k": "5"}, "k"),
    ({"query": "x", "k": True}, "k"),
    ({"query": "x", "k": 5.0}, "k"),
    ({"query": "x", "budget": "100"}, "budget"),
    ({"query": "x", "budget": False}, "budget"),
    ({"query": "x", "text": "yes"}, "text"),
    ({"query": "x", "detail": 1}, "detail"),
    ({"query": ["x"]}, "query"),
    ({"queries": "x"}, "queries"),
    ({"queries": ["x", 3]}, "queries.1"),
])
def test_no_coercion(client, body, field):
    """A number is a JSON number and a flag a JSON boolean: strings, booleans and floats are not
    read as integers, nor strings as flags."""
    response = client.post("/v1/retrieve", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"].startswith(f"{field}: "), response.text


def _raw(client, payload: bytes):
    return client.post("/v1/retrieve", content=payload, headers={"content-type": "application/json"})


@pytest.mark.parametrize("payload, says", [
    (b"{not json", "not valid JSON"),
    (b'{"query": "x", }', "not valid JSON"),
    (b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
    (b'{"query": "x", "k": ' + b"9" * 5000 + b"}", "too many digits"),
    (b'{"query": "caf\xe9"}', "not UTF-8"),
    (b"", "Field required"),
])
def test_unreadable_bodies_are_422_in_the_error_shape(client, payload, says):
    response = _raw(client, payload)
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) <= {"error", "detail"} and says in body["error"], body


def test_other_refusals_are_in_the_error_shape(client):
    wrong_method = client.get("/v1/retrieve")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"].startswith("method GET is not allowed")
    assert "POST" in wrong_method.json()["error"] and wrong_method.headers["allow"] == "POST"
    missing = client.get("/v2/retrieve")
    assert missing.status_code == 404 and "/openapi.json" in missing.json()["error"]
    assert set(missing.json()) == {"error"}


def test_one_set_of_limits(client, retriever):
    """/v1/info and /openapi.json state the limits the request model enforces: ``k`` at most
    the largest pool (a mode's smaller pool is a 400 naming its setting), budget, query length,
    queries, body size."""
    limits = client.get("/v1/info").json()["limits"]
    spec = client.get("/openapi.json").json()
    assert spec["info"]["x-limits"] == limits
    pool = retriever.config.expand.max_candidates
    assert limits["k"]["max"] == pool and limits["k"]["per_mode"]["dense"] == retriever.config.seed.k_dense
    assert limits["budget"] == {"min": 1, "max": MAX_BUDGET} and limits["query_chars"] == MAX_QUERY_CHARS
    assert limits["body_bytes"] == 200_000
    props = spec["components"]["schemas"]["RetrieveRequest"]["properties"]
    assert props["k"]["anyOf"][0]["maximum"] == pool and props["budget"]["anyOf"][0]["maximum"] == MAX_BUDGET
    assert props["query"]["anyOf"][0]["maxLength"] == MAX_QUERY_CHARS
    assert f"{limits['body_bytes']:,} bytes" in spec["info"]["description"]
    over = client.post("/v1/retrieve", json={"query": "x", "k": pool + 1})
    assert over.status_code == 422 and over.json()["error"] == f"k: Input should be less than or equal to {pool}"
    dense = client.post("/v1/retrieve", json={"query": "x", "k": pool, "mode": "dense"})
    assert dense.status_code == 400 and "seed.k_dense" in dense.json()["error"]
    assert client.post("/v1/retrieve", json={"query": "x", "budget": MAX_BUDGET + 1}).status_code == 422
    long = client.post("/v1/retrieve", json={"query": "x" * (MAX_QUERY_CHARS + 1)})
    assert long.status_code == 422 and f"at most {MAX_QUERY_CHARS}" in long.json()["error"]


def test_python_and_cli_share_the_query_limit(retriever, sample_index):
    from click.testing import CliRunner

    from spectrag.cli import main

    with pytest.raises(SpectragError, match=f"query 1 has {MAX_QUERY_CHARS + 1:,} characters; at most 4,096"):
        retriever.retrieve("x" * (MAX_QUERY_CHARS + 1))
    assert retriever.retrieve("y" * MAX_QUERY_CHARS, k=1).hits  # the limit itself is allowed
    done = CliRunner().invoke(main, ["retrieve", str(sample_index.path), "-q", "z" * 106_666, "-k", "1"])
    assert done.exit_code != 0 and "at most 4,096" in done.output, done.output


def test_docs_page_needs_nothing_from_outside(client):
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "an external script, style or link"
    for name in ("/v1/retrieve", "/v1/info", "RetrieveRequest", "ErrorResponse", "/openapi.json"):
        assert name in html
    assert "&lt;= 200" in html  # k's bound, from the schema
    assert client.get("/redoc").status_code == 404


def _slow_headers(url: str, *, every_s: float, lines: int) -> tuple[bytes, float]:
    """Send a request line and then one header line every ``every_s`` seconds; the server's
    answer (whatever arrived before it closed) and when the connection closed."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(0.05)
    start, got = time.monotonic(), b""
    sock.sendall(b"POST /v1/retrieve HTTP/1.1\r\n")
    try:
        for i in range(lines):
            deadline = time.monotonic() + every_s
            while time.monotonic() < deadline:
                try:
                    chunk = sock.recv(4096)
                except socket.timeout:
                    continue
                if not chunk:
                    return got, time.monotonic() - start
                got += chunk
            sock.sendall(f"X-Slow-{i}: {i}\r\n".encode())
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    return got, time.monotonic() - start


def test_slow_headers_get_a_408(retriever):
    app = create_app(retriever, ServeSettings(header_timeout_s=0.6))
    with served(app, graceful_s=1.0) as (_, url, _thread):
        got, closed_after = _slow_headers(url, every_s=0.2, lines=30)  # 6 s of headers if allowed
        assert got.startswith(b"HTTP/1.1 408") and b'"error": "request headers not received in full within 0.6 s"' in got
        assert 0.5 < closed_after < 3.0, closed_after
        host, port = url.removeprefix("http://").split(":")
        silent = socket.create_connection((host, int(port)))  # says nothing at all
        silent.settimeout(5)
        assert silent.recv(4096).startswith(b"HTTP/1.1 408")
        silent.close()
        # a client that sends its headers at once is not affected, nor is a kept-alive connection between requests
        import httpx

        with httpx.Client(timeout=60) as http:
            assert http.post(url + "/v1/retrieve", json={"query": "bridge", "k": 1}).status_code == 200
            time.sleep(0.9)  # longer than the header timeout, shorter than uvicorn's keep-alive (5 s)
            assert http.post(url + "/v1/retrieve", json={"query": "bridge", "k": 1}).status_code == 200


def test_broken_http_is_a_400_in_the_error_shape(retriever):
    app = create_app(retriever, ServeSettings())
    with served(app, graceful_s=1.0) as (_, url, _thread):
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.settimeout(30)
            sock.sendall(b"POST /v1/retrieve HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
            got = b""
            while chunk := sock.recv(4096):
                got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head, got
    assert "not a valid HTTP/1.1 request" in json.loads(body)["error"]
