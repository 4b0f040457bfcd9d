"""Micro-batching: concurrent requests gathered into one tensor batch.

The batcher's threads own the :class:`~spectrag.retriever.Retriever` (the model, the query state,
every tensor); callers only enqueue. Two threads share the work, as continuous batching does:

- the **embedder** takes requests as they arrive (all that are waiting at once, in one call) and
  embeds their queries (a query's vector does not depend on its batch), while
- the **scorer** runs the engine: when it is free it takes the first embedded request, waits for
  company for at most ``max_wait_ms`` after that request arrived (or until ``max_batch`` queries
  are in hand), and scores what it took with ONE :meth:`Retriever.score_batch` call per (mode,
  budget) (the pipeline takes one of each per batch; requests differing there are scored side by
  side in the same round). Requests that arrive while it is busy are embedded meanwhile and
  make its next batch.

A third thread builds each scored batch's contexts while the scorer scores the next (the
embedding and the engine release the GIL). Each caller's future gets its own contexts, with its
own ``k`` (the ranking does not depend on the budget, so a top-k request shares any batch of its
mode). ``overlap=False`` leaves the embedding to the scorer (inside ``score_batch``).

``enabled=False`` embeds and scores every request alone (the same threads, no gathering in
either): the reference the load test compares against. :meth:`close` stops taking requests and returns when every request
already accepted has its answer (or after ``timeout`` seconds). A caller may cancel its future
(the server does when its shutdown grace period ends): a request cancelled before the scorer
takes it is never scored (its query vectors may have been computed), and no result is ever set
on a cancelled future; nothing a request does stops the batcher's threads.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict, deque
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
    vectors: torch.Tensor | None = None  # [len(queries), d], set by the embedder
    embedded_by: Retriever | None = None  # whose model made ``vectors``


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
    """``submit(queries, mode=, budget=, k=) -> Future[list[Context]]``, embedded by one thread as
    it arrives, scored in batches by another.

    ``max_batch``: queries per ``score_batch`` call (default 256), and the most one request may
    carry. ``max_wait_ms``: how long the first request of a batch waits for company (default 5).
    ``max_pending``: queries waiting at most (default ``16 * max_batch``); beyond, :class:`Busy`.
    ``overlap``: the embedder embeds requests while the scorer runs the batch before (default);
    False: the scorer embeds each batch itself (for a machine of one core, where the overlap
    only makes the stages take turns).
    """

    def __init__(self, retriever: Retriever, *, max_batch: int = 256, max_wait_ms: float = 5.0,
                 enabled: bool = True, max_pending: int | None = None, overlap: bool = True) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise SpectragError(f"max_batch must be >= 1 and max_wait_ms >= 0, got {max_batch} and {max_wait_ms}")
        self.retriever = retriever
        self.max_batch, self.max_wait = max_batch, max_wait_ms / 1000
        self.enabled, self.overlap = enabled, overlap
        # overlapped, the engine leaves half the cores to the query encoder, which embeds beside it
        # (a parallel region that shares its cores waits for a thread the scheduler took away)
        self._threads = max(1, torch.get_num_threads() // 2) if overlap else None
        self.max_pending = max_pending or 16 * max_batch
        self.stats = Stats()
        self._queue: queue.Queue = queue.Queue()  # _Request items, then _STOP
        self._pending = 0  # queries submitted and not yet answered
        self._lock = threading.Lock()
        self._closing = False  # no more submits (set by close)
        # embedded requests, in arrival order, for the scorer; ``_drained``: the embedder has passed
        # on the last request there will be
        self._ready: deque[_Request] = deque()
        self._ready_changed = threading.Condition()
        self._drained = False
        # one thread builds the contexts of a scored batch while the scorer scores the next
        self._finisher = ThreadPoolExecutor(1, thread_name_prefix="spectrag-contexts")
        self._embedder = threading.Thread(target=self._embed_loop, name="spectrag-embedder", daemon=True)
        self._scorer = threading.Thread(target=self._score_loop, name="spectrag-scorer", daemon=True)
        self._embedder.start()
        self._scorer.start()

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
        self._embedder.join(timeout)
        self._scorer.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def pending(self) -> int:
        """Queries accepted and not yet answered."""
        return self._pending

    # -- the embedder -------------------------------------------------------------------------

    def _embed_loop(self) -> None:
        """Every waiting request (up to ``max_batch`` queries; one when batching is off), embedded
        in one call, then handed to the scorer; until the close marker."""
        stopped = False
        try:
            while not stopped:
                reqs, size = [self._queue.get()], 0
                # without batching, one request per model call here too: nothing is gathered
                while (self.enabled and reqs[-1] is not _STOP
                       and (size := size + len(reqs[-1].queries)) < self.max_batch):
                    try:
                        reqs.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if reqs[-1] is _STOP:  # the last item ever queued
                    stopped = True
                    reqs.pop()
                if self.overlap:
                    self._embed(reqs)
                with self._ready_changed:
                    self._ready.extend(reqs)
                    self._ready_changed.notify()
        finally:
            with self._ready_changed:
                self._drained = True
                self._ready_changed.notify()

    def _embed(self, reqs: list[_Request]) -> None:
        """Sets each request's ``vectors`` (mode ``hyde`` embeds passages, not queries: those are
        left to the scorer, as are all when embedding fails: the callers get that error there)."""
        todo = [r for r in reqs if r.mode != "hyde" and not r.future.cancelled()]
        if not todo:
            return
        retriever = self.retriever
        try:
            vectors = retriever.embed([q for r in todo for q in r.queries])
        except Exception:  # noqa: BLE001  (raised again, to the callers, where the batch is scored)
            return
        lo = 0
        for r in todo:
            r.vectors, r.embedded_by = vectors[lo : lo + len(r.queries)], retriever
            lo += len(r.queries)

    # -- the scorer ---------------------------------------------------------------------------

    def _score_loop(self) -> None:
        try:
            while (batch := self._take()) is not None:
                self._score(batch)
        finally:
            self._finisher.shutdown(wait=True)  # the scorer ends once every scored batch has its answers

    def _take(self) -> list[_Request] | None:
        """The next batch: the first embedded request and those that join it within ``max_wait``
        of its arrival, up to ``max_batch`` queries (None once every request is answered)."""
        with self._ready_changed:
            while not self._ready and not self._drained:
                self._ready_changed.wait()
            if not self._ready:
                return None
            if self.enabled:
                deadline = self._ready[0].arrived + self.max_wait
                while not self._drained and sum(len(r.queries) for r in self._ready) < self.max_batch:
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    self._ready_changed.wait(left)
            batch = [self._ready.popleft()]
            size = len(batch[0].queries)
            while self.enabled and self._ready and size + len(self._ready[0].queries) <= self.max_batch:
                batch.append(self._ready.popleft())
                size += len(batch[-1].queries)
            return batch

    def _score(self, batch: list[_Request]) -> None:
        """One ``score_batch`` per (mode, budget) among ``batch``; each future gets its slice.
        A request whose future was cancelled is dropped here (a running future cannot be
        cancelled any more, so the results set below always land)."""
        retriever = self.retriever  # once per batch: a reload (serve/follow.py) swaps it between batches
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
            # the embedder's vectors, when this retriever's model made them all (else embedded here)
            qvecs = torch.cat([r.vectors for r in reqs]) if all(r.embedded_by is retriever for r in reqs) else None
            try:
                result = retriever.score_batch(texts, mode=mode, budget=budget, qvecs=qvecs, threads=self._threads,
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

