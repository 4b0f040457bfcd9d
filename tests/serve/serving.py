"""Helpers of the server tests: the app under spectrag's own uvicorn server in a thread, raw
sockets that send half a request, and a retriever whose scoring can be held or slowed."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

from spectrag.serve.app import make_server


@contextmanager
def served(app, *, graceful_s: float = 60.0):
    """``app`` under :func:`spectrag.serve.app.make_server` (what ``spectrag serve`` runs) on a
    free loopback port, in a thread; yields (server, base url, thread)."""
    server = make_server(app, host="127.0.0.1", port=0, graceful_s=graceful_s, log_level="warning")
    with in_thread(server) as (url, thread):
        yield server, url, thread


@contextmanager
def in_thread(server):
    """A uvicorn server (bound to port 0) run in a thread until the block ends; yields (base url,
    thread)."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", thread
    finally:
        server.should_exit = True
        thread.join(60)


def half_request(url: str, *, chunked: bool = False) -> socket.socket:
    """A connection that sends the headers of a POST /retrieve and the start of its body, then
    nothing more (what a slow or stalled client does)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    framing = b"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"query\": \"abcd" if chunked else \
        b"Content-Length: 1000\r\n\r\n{\"query\": \"abcd"
    sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + framing)
    return sock


class HeldRetriever:
    """A retriever whose ``score_batch`` waits for ``release`` (an Event) and then sleeps
    ``delay`` seconds: scoring that takes as long as a test needs."""

    def __init__(self, retriever, *, delay: float = 0.0, held: bool = False) -> None:
        self._inner, self.delay = retriever, delay
        self.release = threading.Event()
        self.started = threading.Event()  # set when a batch starts scoring
        if not held:
            self.release.set()

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def score_batch(self, *args, **kwargs):
        self.started.set()
        self.release.wait(120)
        time.sleep(self.delay)
        return self._inner.score_batch(*args, **kwargs)
