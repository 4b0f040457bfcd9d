"""Micro-batching: concurrent requests gathered into one tensor batch.

The batcher's threads own the :class:`~spectrag.retriever.Retriever` (the model, the query state,
every tensor); callers only enqueue. The worker takes the first waiting request, then keeps
gathering for at most ``max_wait_ms`` after it arrived, or until ``max_batch`` queries are in
hand, and scores what it gathered with ONE :meth:`Retriever.score_batch` call per (mode, budget)
(the pipeline takes one of each per batch; requests differing there are scored side by side in the
same round). Three stages overlap, each on a thread of its own: the worker gathers a batch and
embeds its queries (one call; a query's vector does not depend on its batch), a scorer thread runs
the engine on the batch before it, and a finisher builds the contexts of the batch before that
(the embedding and the engine release the GIL), so the cores are not idle while one stage waits
on another. Each caller's future gets its own contexts, with its own ``k`` (the ranking does not
depend on the budget, so a top-k request shares any batch of its mode).

``enabled=False`` scores every request alone (the same worker, no gathering): the reference the
load test compares against. :meth:`close` stops taking requests and returns when every request
already accepted has its answer (or after ``timeout`` seconds). A caller may cancel its future
(the server does when its shutdown grace period ends): a request cancelled before the scorer
takes it is never scored (its query vectors may have been computed), and the worker never sets a result on a cancelled future; nothing a
request does stops the worker.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from spectrag.config import RetrieverConfig, check_setting
from spectrag.contexts import build_contexts
from spectrag.errors import SpectragError
from spectrag.limits import check_k, check_queries
from spectrag.retriever import Retriever
from spectrag.util.where import check_where

_STOP = object()  # queued by close(): after it, nothing more arrives


class Closing(SpectragError):
    """The batcher no longer takes requests (it is shutting down)."""


class Busy(SpectragError):
    """More queries are waiting than the batcher holds (``max_pending``)."""


@dataclass
class _Request:
    queries: list[str]
    mode: str
    budget: int
    k: int | None
    budgeted: bool = True  # the context: the budgeted selection (else the top k, Retriever.retrieve's rule)
    where: dict | None = None  # the request's metadata filter (a batch mixes filters: one per query)
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.perf_counter)


@dataclass
class Stats:
    """Counters since start: requests and queries answered, ``score_batch`` calls, the largest batch."""

    requests: int = 0
    queries: int = 0
    batches: int = 0
    max_batch_seen: int = 0
    errors: int = 0
    cancelled: int = 0  # requests whose caller gave up before they were scored


class MicroBatcher:
    """``submit(queries, mode=, budget=, k=) -> Future[list[Context]]``, gathered and embedded by
    one worker thread, scored by one scorer thread.

    ``max_batch``: queries per ``score_batch`` call (default 256), and the most one request may
    carry. ``max_wait_ms``: how long the first request of a batch waits for company (default 5).
    ``max_pending``: queries waiting at most (default ``16 * max_batch``); beyond, :class:`Busy`.
    """

    def __init__(self, retriever: Retriever, *, max_batch: int = 256, max_wait_ms: float = 5.0,
                 enabled: bool = True, max_pending: int | None = None) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise SpectragError(f"max_batch must be >= 1 and max_wait_ms >= 0, got {max_batch} and {max_wait_ms}")
        self.retriever = retriever
        self.max_batch, self.max_wait = max_batch, max_wait_ms / 1000
        self.enabled = enabled
        self.max_pending = max_pending or 16 * max_batch
        self.stats = Stats()
        self._queue: queue.Queue = queue.Queue()  # _Request items, then _STOP
        self._pending = 0  # queries submitted and not yet answered
        self._lock = threading.Lock()
        self._closing = False  # no more submits (set by close)
        self._stopped = False  # the worker has seen the close marker
        self._carry: _Request | None = None  # a request that did not fit in the last batch
        # a gathered, embedded batch waits here for the scorer: at most one, so the worker stays one
        # batch ahead (later requests keep queueing and make the next batch larger)
        self._ready: queue.Queue = queue.Queue(maxsize=1)  # (retriever, batch, vectors | None), then _STOP
        # one thread builds the contexts of a scored batch while the scorer scores the next
        self._finisher = ThreadPoolExecutor(1, thread_name_prefix="spectrag-contexts")
        self._scorer = threading.Thread(target=self._score_loop, name="spectrag-scorer", daemon=True)
        self._worker = threading.Thread(target=self._loop, name="spectrag-batcher", daemon=True)
        self._scorer.start()
        self._worker.start()

    # -- callers ------------------------------------------------------------------------------

    def submit(self, queries: list[str], *, mode: str | None = None, budget: int | None = None,
               k: int | None = None, where: dict | None = None) -> Future:
        """Enqueue one request (``where``: a metadata filter for its queries); its future resolves
        to one :class:`Context` per query."""
        queries = list(queries)
        check_queries(queries)
        where = check_where(where)
        if len(queries) > self.max_batch:
            raise SpectragError(f"{len(queries)} queries in one request; at most {self.max_batch} (max_batch)")
        config = self.retriever.config
        check_k(k, config, mode)
        if budget is not None:  # refused here, not in the worker: the config file's range (retriever.budget)
            budget = check_setting(RetrieverConfig, "budget", budget, label="budget")
        req = _Request(queries, mode or config.mode, config.budget if budget is None else budget, k,
                       budgeted=k is None or budget is not None, where=where)
        with self._lock:
            if self._closing:
                raise Closing("the server is shutting down; retry on another instance")
            if self._pending + len(queries) > self.max_pending:
                raise Busy(f"{self._pending} queries are waiting (at most {self.max_pending}); retry later")
            self._pending += len(queries)
            self._queue.put(req)
        return req.future

    def close(self, timeout: float | None = None) -> None:
        """Stop taking requests; return once every accepted request has been answered, or after
        ``timeout`` seconds (None: no limit)."""
        with self._lock:
            if not self._closing:
                self._closing = True
                self._queue.put(_STOP)  # the last item ever queued: what is before it is answered first
        deadline = None if timeout is None else time.monotonic() + timeout
        self._worker.join(timeout)
        self._scorer.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def pending(self) -> int:
        """Queries accepted and not yet answered."""
        return self._pending

    # -- the worker ---------------------------------------------------------------------------

    def _loop(self) -> None:
        """The worker: gather a batch, embed it, hand it to the scorer."""
        try:
            while not (self._stopped and self._carry is None):
                first, self._carry = self._carry or self._queue.get(), None
                if first is _STOP:
                    self._stopped = True
                    continue
                batch = self._gather(first)
                retriever = self.retriever  # once per batch: a reload (serve/follow.py) swaps it between batches
                self._ready.put((retriever, batch, self._embed(retriever, batch)))
        finally:
            self._ready.put(_STOP)

    def _embed(self, retriever: Retriever, batch: list[_Request]) -> torch.Tensor | None:
        """The query vectors ``[Q, d]`` of every query of ``batch`` in order, in one call (mode
        ``hyde`` embeds passages, not queries: its rows go unused); None when embedding fails (the
        scorer then embeds each group itself and its callers get that error)."""
        if all(r.mode == "hyde" for r in batch) or all(r.future.cancelled() for r in batch):
            return None
        try:
            return retriever.embed([q for r in batch for q in r.queries])
        except Exception:  # noqa: BLE001  (raised again, to the callers, where the group is scored)
            return None

    def _score_loop(self) -> None:
        """The scorer: each embedded batch through the engine, its contexts to the finisher."""
        try:
            while (item := self._ready.get()) is not _STOP:
                self._score(*item)
        finally:
            self._finisher.shutdown(wait=True)  # the scorer ends once every scored batch has its answers

    def _gather(self, first: _Request) -> list[_Request]:
        """``first`` and the requests that join it: those already waiting, and those arriving
        within ``max_wait`` of ``first``, up to ``max_batch`` queries."""
        batch, size = [first], len(first.queries)
        deadline = first.arrived + self.max_wait
        while self.enabled and size < self.max_batch and not self._stopped:
            try:
                req = self._queue.get(timeout=max(deadline - time.perf_counter(), 0.0))
            except queue.Empty:
                break
            if req is _STOP:
                self._stopped = True
                break
            if size + len(req.queries) > self.max_batch:
                self._carry = req  # the first of the next batch
                break
            batch.append(req)
            size += len(req.queries)
        return batch

    def _score(self, retriever: Retriever, batch: list[_Request], vectors: torch.Tensor | None) -> None:
        """One ``score_batch`` per (mode, budget) among ``batch`` (``vectors [Q, d]``: its queries'
        vectors in order, or None), with the retriever that embedded it; each future gets its
        slice. A request whose future was cancelled is dropped here (a running future cannot be
        cancelled any more, so the results set below always land)."""
        rows, lo = {}, 0
        for r in batch:  # each request's rows of ``vectors``
            rows[id(r)], lo = (lo, lo + len(r.queries)), lo + len(r.queries)
        live = [r for r in batch if r.future.set_running_or_notify_cancel()]
        if len(live) < len(batch):
            self._done([r for r in batch if r.future.cancelled()], cancelled=True)
        groups: dict[tuple[str, int], list[_Request]] = defaultdict(list)
        for req in sorted(live, key=lambda r: not r.budgeted):  # budgeted requests make the groups
            # a top-k context does not depend on the budget: it joins any group of its mode
            key = (req.mode, req.budget) if req.budgeted else next((g for g in groups if g[0] == req.mode),
                                                                   (req.mode, req.budget))
            groups[key].append(req)
        for (mode, budget), reqs in groups.items():
            texts = [q for r in reqs for q in r.queries]
            index = retriever.index  # the contexts come from the index that scored them
            qvecs = None if vectors is None or mode == "hyde" else \
                torch.cat([vectors[slice(*rows[id(r)])] for r in reqs])
            try:
                result = retriever.score_batch(texts, mode=mode, budget=budget, qvecs=qvecs,
                                               where=[r.where for r in reqs for _ in r.queries])
            except Exception as exc:  # noqa: BLE001  (the callers get the error; the scorer goes on)
                self._failed(reqs, exc)
                continue
            # the contexts (Python objects, text) are built beside the next batch's embedding and
            # scoring, which release the GIL (ONNX Runtime, torch, numba)
            self._finisher.submit(self._finish, reqs, texts, index, result)

    def _failed(self, reqs: list[_Request], exc: Exception) -> None:
        for r in reqs:
            r.future.set_exception(exc)
        self._done(reqs, errors=len(reqs))

    def _finish(self, reqs: list[_Request], texts: list[str], index, result) -> None:
        """The finisher thread: each request's contexts from its slice of the scored batch."""
        try:
            contexts = build_contexts(index, texts, result, [r.k for r in reqs for _ in r.queries],
                                      budgeted=[r.budgeted for r in reqs for _ in r.queries])
        except Exception as exc:  # noqa: BLE001
            self._failed(reqs, exc)
            return
        lo = 0
        for r in reqs:
            r.future.generation = index.generation  # the answer names the index generation it came from
            r.future.set_result(contexts[lo : lo + len(r.queries)])
            lo += len(r.queries)
        self._done(reqs, batch_size=len(texts))

    def _done(self, reqs: list[_Request], *, batch_size: int = 0, errors: int = 0, cancelled: bool = False) -> None:
        with self._lock:
            self._pending -= sum(len(r.queries) for r in reqs)
            s = self.stats
            if cancelled:
                s.cancelled += len(reqs)
                return
            s.requests += len(reqs)
            s.queries += sum(len(r.queries) for r in reqs)
            s.errors += errors
            if batch_size:
                s.batches += 1
                s.max_batch_seen = max(s.max_batch_seen, batch_size)

