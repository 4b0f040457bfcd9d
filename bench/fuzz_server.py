"""bench_fuzz.py's categories for the HTTP server (issue 25), on the sample index in this process:

* **request bodies**: bodies of random sizes around the limit, sent chunked (no Content-Length,
  random chunk sizes) or with a Content-Length, bodies that stop half-way (raw sockets), and
  broken chunk framing. A body over the limit must get a 413, one that stalls a 408 within the
  body time-out (plus slack), broken framing a 400, the rest an answer; never a 500, and
  ``/healthz`` answers throughout.
* **shutdown**: rounds of concurrent requests (random count and size) with the server told to
  stop at a random moment and a random grace period: every request gets a 200 or a 503 (or its
  connection closed), never a 500; the batcher's thread never dies; the server is gone within
  the grace period plus ``BACKSTOP_S`` and 1.5 s of slack.

Outcomes as in bench_fuzz.py: *ok* (an answer), *refused* (the 4xx / 503 with a message the case
calls for), *wrong* (anything else, or a slow exit), *crash* (an exception in the server).
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

LIMIT = 4096  # bytes of request body
BODY_TIMEOUT_S = 1.0


@contextmanager
def _server(retriever, settings, graceful_s: float = 30.0):
    """The app under spectrag's uvicorn server in a thread; yields (server, url, thread)."""
    from spectrag.serve.app import create_app, make_server

    app = create_app(retriever, settings)
    server = make_server(app, host="127.0.0.1", port=0, graceful_s=graceful_s, log_level="critical")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}", thread, app
    finally:
        server.should_exit = True
        thread.join(60)


def _raw(url: str, payload: bytes, *, read: bool = True, timeout: float = 30.0) -> bytes:
    """Send ``payload`` on a fresh connection; the whole answer, until the server closes it."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(payload)
        out = b""
        while read and (part := sock.recv(65536)):
            out += part
        return out


def run_bodies(tally, retriever, n: int, seed: int) -> None:
    import httpx

    from spectrag.serve.app import ServeSettings

    rng = random.Random(seed)
    head = b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    with _server(retriever, ServeSettings(max_body_bytes=LIMIT, body_timeout_s=BODY_TIMEOUT_S)) as (_, url, _, _), \
            httpx.Client(timeout=60) as client:
        for i in range(n):
            kind = rng.choices(["chunked", "length", "stall", "framing"], [0.6, 0.25, 0.1, 0.05])[0]
            size = rng.choice([rng.randint(0, 2 * LIMIT), LIMIT, LIMIT + 1, rng.randint(LIMIT, 50 * LIMIT)])
            body = json.dumps({"query": f"Veltra Bridge {i}", "budget": 200}).encode()
            body += b" " * max(size - len(body), 0)  # valid JSON of ``size`` bytes (or the bare query)
            try:
                if kind == "chunked":
                    cuts = sorted(rng.sample(range(1, len(body)), min(rng.randint(0, 8), len(body) - 1))) if len(body) > 1 else []
                    parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
                    r = client.post(url + "/retrieve", content=iter(parts), headers={"content-type": "application/json"})
                    status, want = r.status_code, 413 if len(body) > LIMIT else 200
                elif kind == "length":
                    r = client.post(url + "/retrieve", content=body, headers={"content-type": "application/json"})
                    status, want = r.status_code, 413 if len(body) > LIMIT else 200
                elif kind == "stall":
                    start = time.monotonic()
                    answer = _raw(url, head + b"Content-Length: %d\r\n\r\n" % (len(body) + 10) + body[: len(body) // 2])
                    status = int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1 ") else -1
                    want = 413 if len(body) + 10 > LIMIT else 408
                    if want == 408 and time.monotonic() - start > BODY_TIMEOUT_S + 5:
                        status = -2  # answered, but late
                else:
                    answer = _raw(url, head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body[:20] + b"\r\n0\r\n\r\n")
                    status = int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1 ") else -1
                    want = 400
            except (httpx.HTTPError, OSError) as exc:
                tally.add("request bodies", "wrong", f"{kind} of {len(body)} bytes: {exc!r}")
                continue
            outcome = ("ok" if status == 200 else "refused") if status == want else "wrong"
            tally.detail("request bodies", f"{kind} {'over' if len(body) > LIMIT else 'within'} the limit: {status}")
            tally.add("request bodies", outcome, f"{kind} of {len(body)} bytes: {status}, expected {want}")
            if i % 25 == 0 and client.get(url + "/healthz").status_code != 200:
                tally.add("request bodies", "wrong", "/healthz did not answer 200")


def run_shutdowns(tally, retriever, rounds: int, seed: int) -> None:
    import httpx

    from spectrag.serve.app import ServeSettings
    from spectrag.serve.shutdown import BACKSTOP_S

    rng = random.Random(seed)
    died: list = []
    hook, threading.excepthook = threading.excepthook, lambda args: died.append(args.exc_value)
    try:
        for r in range(rounds):
            graceful_s, clients = rng.choice([0.2, 0.5, 1.0, 2.0, 30.0]), rng.randint(4, 32)
            sizes = [rng.randint(1, 64) for _ in range(clients)]
            with _server(retriever, ServeSettings(max_batch=256), graceful_s) as (server, url, thread, app):
                def post(size, k=r):
                    try:
                        resp = httpx.post(url + "/retrieve", json={"queries": [f"harbour {k}.{j}" for j in range(size)],
                                                                   "budget": 500}, timeout=300)
                        return resp.status_code, resp.text[:200]
                    except httpx.HTTPError as exc:
                        return "closed", repr(exc)

                with ThreadPoolExecutor(clients) as pool:
                    futures = [pool.submit(post, size) for size in sizes]
                    time.sleep(rng.uniform(0.0, 1.5))
                    server.should_exit = True  # what SIGTERM does
                    start = time.monotonic()
                    answers = [f.result() for f in futures]
                    thread.join(graceful_s + BACKSTOP_S + 30)
                    exit_s = time.monotonic() - start
            for status, text in answers:
                if status == 200:
                    tally.add("shutdown", "ok")
                elif status == "closed" or (status == 503 and ("grace period" in text or "shutting down" in text)):
                    tally.add("shutdown", "refused")
                else:
                    tally.add("shutdown", "wrong", f"round {r} (grace {graceful_s} s): {status} {text}")
            slow = exit_s > graceful_s + BACKSTOP_S + 1.5
            tally.detail("shutdown", f"grace {graceful_s:g} s: exit within {-(-exit_s // 0.5) * 0.5:g} s")
            tally.add("shutdown", "wrong" if slow or thread.is_alive() else "ok",
                      f"round {r}: exit {exit_s:.2f} s after the signal, grace {graceful_s} s")
            if died:
                tally.add("shutdown", "crash", f"round {r}: a thread died: {died[-1]!r}")
                died.clear()
    finally:
        threading.excepthook = hook
