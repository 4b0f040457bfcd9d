"""The micro-batcher (spectrag.serve.batcher): concurrent submits share one score_batch call and
each gets what a direct call gives; mixed k, modes and budgets; errors reach their callers only;
a full queue is refused; close() answers everything accepted and refuses what comes after."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from conftest import assert_same_results

from spectrag.cli.demo import sample_questions
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever
from spectrag.serve.batcher import Busy, Closing, MicroBatcher

QUESTIONS = [q["question"] for q in sample_questions()]


@pytest.fixture(scope="module")
def retriever(sample_index):
    return Retriever(sample_index)


def _json(contexts):
    return [c.to_json() for c in contexts]


def _submit_together(batcher, requests):
    """Submit ``requests`` (kwargs each) from as many threads at once; their futures, in order."""
    barrier, futures = threading.Barrier(len(requests)), [None] * len(requests)

    def go(i):
        barrier.wait()
        futures[i] = batcher.submit(**requests[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return futures


def test_concurrent_submits_share_one_batch_and_equal_direct_calls(retriever):
    requests = [dict(queries=[q], k=k, budget=700) for q, k in zip(QUESTIONS[:6], [None, 2, 5, 5, 1, None])]
    requests.append(dict(queries=QUESTIONS[6:8], k=3, budget=700))  # 8 queries in all
    batcher = MicroBatcher(retriever, max_batch=8, max_wait_ms=5000)  # closes when 8 are in hand
    try:
        futures = _submit_together(batcher, requests)
        got = [f.result(timeout=120) for f in futures]
    finally:
        batcher.close()
    assert batcher.stats.batches == 1 and batcher.stats.max_batch_seen == 8 and batcher.stats.requests == 7
    for req, contexts in zip(requests, got):
        assert_same_results(contexts, retriever.retrieve(req["queries"], k=req["k"], budget=700))


def test_without_batching_every_request_is_its_own_batch(retriever):
    batcher = MicroBatcher(retriever, max_batch=8, max_wait_ms=5000, enabled=False)
    try:
        futures = _submit_together(batcher, [dict(queries=[q]) for q in QUESTIONS[:4]])
        [f.result(timeout=120) for f in futures]
    finally:
        batcher.close()
    assert batcher.stats.batches == 4 and batcher.stats.max_batch_seen == 1


def test_without_batching_every_request_is_embedded_alone_too(retriever):
    """Requests that wait while one is scored are embedded one per call when batching is off
    (with it on, in one call: the next test)."""
    held = _HeldScoring(retriever)
    batcher = MicroBatcher(held, max_batch=8, max_wait_ms=0, enabled=False)
    try:
        first = batcher.submit(QUESTIONS[:1])
        assert held.scoring.wait(60)  # the scorer holds the first request: the others queue up
        rest = [batcher.submit(QUESTIONS[i : i + 1]) for i in range(1, 4)]
        deadline = time.monotonic() + 60
        while len(held.embedded) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        held.release.set()
        got = [f.result(timeout=120) for f in [first, *rest]]
    finally:
        held.release.set()
        batcher.close()
    assert held.embedded == [QUESTIONS[i : i + 1] for i in range(4)]
    for i, contexts in enumerate(got):
        assert_same_results(contexts, retriever.retrieve(QUESTIONS[i : i + 1]))


def test_modes_and_budgets_are_scored_apart_and_errors_stay_with_their_caller(retriever):
    batcher = MicroBatcher(retriever, max_batch=16, max_wait_ms=3000)
    requests = [dict(queries=[QUESTIONS[0]], mode="dense", budget=500), dict(queries=[QUESTIONS[1]], mode="spectral"),
                dict(queries=[QUESTIONS[2]], mode="activation"),  # the sample index has no knowledge graph
                dict(queries=[QUESTIONS[3]], mode="dense", budget=500)]
    try:
        futures = _submit_together(batcher, requests)
        with pytest.raises(SpectragError, match="knowledge graph"):
            futures[2].result(timeout=120)
        for i in (0, 1, 3):
            req = requests[i]
            assert_same_results(futures[i].result(timeout=120),
                                retriever.retrieve(req["queries"], mode=req["mode"], budget=req.get("budget")))
        assert batcher.submit([QUESTIONS[4]]).result(timeout=120)  # the worker went on
    finally:
        batcher.close()
    assert batcher.stats.errors == 1


def test_limits_and_close_drains(retriever):
    batcher = MicroBatcher(retriever, max_batch=4, max_wait_ms=60_000, max_pending=6)
    with pytest.raises(SpectragError, match="at most 4"):
        batcher.submit(QUESTIONS[:5])
    with pytest.raises(SpectragError, match="query 2 of 2 is empty"):
        batcher.submit(["fine", " "])
    first = batcher.submit(QUESTIONS[:3])  # the worker holds it, waiting for company
    second = batcher.submit(QUESTIONS[3:6])
    with pytest.raises(Busy, match="6 queries are waiting"):
        batcher.submit(QUESTIONS[6:7])
    batcher.close()  # does not wait out the 60 s window: answers both, then stops
    assert len(first.result(timeout=0)) == 3 and len(second.result(timeout=0)) == 3
    assert batcher.pending == 0 and batcher.stats.batches == 2  # 3 + 3 > max_batch: two batches
    with pytest.raises(Closing):
        batcher.submit(QUESTIONS[:1])


class _HeldScoring:
    """``retriever`` whose ``score_batch`` waits for ``release``; records the queries each
    ``embed`` call got (the worker's, for a whole gathered batch)."""

    def __init__(self, retriever) -> None:
        self._inner, self.release, self.scoring = retriever, threading.Event(), threading.Event()
        self.embedded: list[list[str]] = []
        self.embedded_event = threading.Event()

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def embed(self, queries):
        self.embedded.append(list(queries))
        self.embedded_event.set()
        return self._inner.embed(queries)

    def score_batch(self, *args, **kwargs):
        self.scoring.set()
        self.threads = kwargs.get("threads")
        assert self.release.wait(120)
        return self._inner.score_batch(*args, **kwargs)


def test_the_next_batch_is_embedded_while_one_is_scored_and_the_answers_do_not_change(retriever):
    held = _HeldScoring(retriever)
    batcher = MicroBatcher(held, max_batch=8, max_wait_ms=0)
    try:
        first = batcher.submit(QUESTIONS[:2], budget=700)
        assert held.scoring.wait(60)  # the scorer holds the first batch
        held.embedded_event.clear()
        second = batcher.submit(QUESTIONS[2:5], budget=700)
        third = batcher.submit(QUESTIONS[5:6], k=2)
        assert held.embedded_event.wait(60)  # embedded while the first batch is still being scored
        assert not first.done() and held.embedded[1][0] == QUESTIONS[2]
        held.release.set()
        got = [f.result(timeout=120) for f in (first, second, third)]
    finally:
        held.release.set()
        batcher.close()
    assert_same_results(got[0], retriever.retrieve(QUESTIONS[:2], budget=700))
    assert_same_results(got[1], retriever.retrieve(QUESTIONS[2:5], budget=700))
    assert_same_results(got[2], retriever.retrieve(QUESTIONS[5:6], k=2))
    assert held.threads == max(1, torch.get_num_threads() // 2)  # the engine leaves cores to the encoder


def test_a_request_embedded_but_cancelled_before_scoring_is_never_scored(retriever):
    held = _HeldScoring(retriever)
    batcher = MicroBatcher(held, max_batch=8, max_wait_ms=0)
    try:
        first = batcher.submit(QUESTIONS[:1])
        assert held.scoring.wait(60)
        held.embedded_event.clear()
        second = batcher.submit(QUESTIONS[1:3])
        assert held.embedded_event.wait(60) and QUESTIONS[1] in held.embedded[-1]
        assert second.cancel()  # its vectors exist, but the scorer has not taken it
        held.release.set()
        assert len(first.result(timeout=120)) == 1
        assert batcher.submit(QUESTIONS[3:4]).result(timeout=120)  # the scorer went on
    finally:
        held.release.set()
        batcher.close()
    assert second.cancelled() and batcher.stats.cancelled == 1 and batcher.stats.requests == 2


def test_without_overlap_the_scorer_embeds_each_batch_itself(retriever):
    held = _HeldScoring(retriever)
    batcher = MicroBatcher(held, max_batch=8, max_wait_ms=0, overlap=False)
    try:
        first = batcher.submit(QUESTIONS[:2], budget=700)
        assert held.scoring.wait(60)
        second = batcher.submit(QUESTIONS[2:4], budget=700)
        assert not held.embedded_event.wait(0.5) and not held.embedded  # nothing embedded beside the scoring
        held.release.set()
        got = [f.result(timeout=120) for f in (first, second)]
    finally:
        held.release.set()
        batcher.close()
    assert_same_results(got[0], retriever.retrieve(QUESTIONS[:2], budget=700))
    assert_same_results(got[1], retriever.retrieve(QUESTIONS[2:4], budget=700))
    assert held.threads is None  # the retriever's own choice
