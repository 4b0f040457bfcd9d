"""Shutdown (spectrag.serve.shutdown): within the grace period every open request is answered;
past it, those still waiting get a 503 with a message (never a 500), the batcher never sets a
result on a cancelled future and never dies, and the process exits within the grace period plus
``BACKSTOP_S``. The last test is the issue's recipe against ``spectrag serve`` itself: 32
concurrent POST /retrieve of 64 queries each, SIGTERM, ``--graceful-s 1`` (before the fix: 29 of
32 answered 500, ``InvalidStateError`` in the batcher, the exit 2.3 s past the grace period)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serving import HeldRetriever, served

from spectrag.cli.demo import sample_questions
from spectrag.retriever import Retriever
from spectrag.serve.app import ServeSettings, create_app
from spectrag.serve.batcher import MicroBatcher
from spectrag.serve.shutdown import BACKSTOP_S, EXIT_DEADLINE_S

QUESTIONS = [q["question"] for q in sample_questions()]


@pytest.fixture(scope="module")
def retriever(sample_index):
    return Retriever(sample_index)


@pytest.fixture
def thread_errors(monkeypatch):
    """Exceptions that end a thread (the batcher's worker must never die)."""
    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    return errors


def test_a_cancelled_request_is_never_scored_and_the_worker_lives(retriever, thread_errors):
    held = HeldRetriever(retriever, held=True)
    batcher = MicroBatcher(held, max_batch=8, max_wait_ms=0)
    first = batcher.submit(QUESTIONS[:2])
    assert held.started.wait(60)  # the worker is scoring ``first``: it can no longer be cancelled
    second, third = batcher.submit(QUESTIONS[2:4]), batcher.submit(QUESTIONS[4:5])
    assert not first.cancel() and second.cancel()  # ``second`` waits in the queue: its caller gives up
    held.release.set()
    assert len(first.result(60)) == 2 and len(third.result(60)) == 1
    assert batcher.submit(QUESTIONS[5:6]).result(60)  # the worker went on
    batcher.close(timeout=60)
    assert second.cancelled() and batcher.stats.cancelled == 1 and batcher.stats.requests == 3
    assert batcher.pending == 0 and not thread_errors


@pytest.mark.parametrize("graceful_s", [60.0, 2.5])
def test_shutdown_answers_within_the_grace_period_then_503(retriever, graceful_s, thread_errors):
    """Scoring takes 1.5 s a batch (of at most 4 queries); 8 requests are open when shutdown
    begins (the first scored alone). With a grace period long enough all are answered; with 2.5 s
    the first is answered and the others get a 503 with a message, and the server is gone within
    2.5 + BACKSTOP_S s."""
    slow = HeldRetriever(retriever, held=True, delay=1.5)
    app = create_app(slow, ServeSettings(max_batch=4, max_wait_ms=0))
    bodies = [{"query": q, "budget": 600, "k": 2} for q in QUESTIONS[:8]]
    with served(app, graceful_s=graceful_s) as (server, url, thread):
        with ThreadPoolExecutor(len(bodies)) as pool, httpx.Client(timeout=120) as client:
            futures = [pool.submit(client.post, url + "/retrieve", json=b) for b in bodies]
            deadline = time.monotonic() + 60
            while app.state.batcher.pending < len(bodies):  # all accepted
                assert time.monotonic() < deadline
                time.sleep(0.005)
            slow.release.set()
            server.should_exit = True  # what SIGTERM / Ctrl-C does
            start = time.monotonic()
            responses = [f.result() for f in futures]
            thread.join(graceful_s + BACKSTOP_S + 10)
            exit_s = time.monotonic() - start
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 503}, [r.text for r in responses]
    if graceful_s > 10:
        assert codes == [200] * len(bodies)
        assert [r.json()["results"][0]["query"] for r in responses] == QUESTIONS[:8]
    else:
        assert codes.count(503) >= 4 and 200 in codes, codes
        assert all("grace period of 2.5 s" in r.json()["error"] for r in responses if r.status_code == 503)
        assert exit_s < graceful_s + BACKSTOP_S + 1.0, exit_s
    assert not thread.is_alive() and not thread_errors
    assert app.state.batcher.stats.errors == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_past_the_grace_period_recipe(sample_index, tmp_path):
    """The issue's recipe on the sample index: 32 x 64 queries open, SIGTERM, --graceful-s 1."""
    port, log = _free_port(), tmp_path / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "spectrag.cli.main", "serve", str(sample_index.path), "--port",
                                 str(port), "--graceful-s", "1"], stdout=subprocess.DEVNULL, stderr=err, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        queries = [f"{QUESTIONS[i % len(QUESTIONS)]} ({i})" for i in range(64)]
        first = threading.Event()

        def post(_):
            try:
                r = httpx.post(url + "/retrieve", json={"queries": queries, "budget": 2000, "k": 5}, timeout=300)
                return r.status_code, r.text[:300]
            except httpx.HTTPError as exc:  # a connection closed: allowed, a clean end too
                return "closed", repr(exc)
            finally:
                first.set()

        with ThreadPoolExecutor(32) as pool:
            answers = pool.map(post, range(32))
            assert first.wait(300)  # the batcher is under way; most requests are still queued
            proc.send_signal(signal.SIGTERM)
            start = time.monotonic()
            code = proc.wait(60)
            exit_s = time.monotonic() - start
            answers = list(answers)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    statuses = [a[0] for a in answers]
    assert set(statuses) <= {200, 503, "closed"} and 503 in statuses, answers[:3]
    assert all("grace period" in body for s, body in answers if s == 503)
    assert "Traceback" not in text and "InvalidStateError" not in text, text[-3000:]
    assert exit_s < 1 + BACKSTOP_S + EXIT_DEADLINE_S + 0.5, exit_s  # grace, backstop, the exit deadline, jitter
    assert code in (0, -signal.SIGTERM), code  # uvicorn re-raises SIGTERM after a clean shutdown


def test_exit_within_ends_a_process_that_would_hang():
    """What ``spectrag serve`` arms when shutdown begins: the process ends at the deadline even
    with a non-daemon thread still busy (a kernel pool mid-batch)."""
    code = ("import threading, time; from spectrag.serve.shutdown import exit_within; "
            "threading.Thread(target=time.sleep, args=(30,)).start(); exit_within(0.5); time.sleep(30)")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert done.returncode == 1 and "exiting now" in done.stderr, done.stderr
    assert took < 15, took  # the 30 s sleeps did not hold it (the rest is Python's start-up)
