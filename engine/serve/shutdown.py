"""Shutdown within the grace period: every open request gets its answer or a 503, never a 500.

When SIGTERM / Ctrl-C arrives, uvicorn stops accepting connections and waits for the open
requests; when its wait (``timeout_graceful_shutdown``) runs out it cancels their tasks, and a
cancelled task is answered 500 with a traceback. So the server keeps its own deadline, a little
earlier: :class:`GracefulServer` starts the app's :class:`GracePeriod` (``--graceful-s``) the
moment shutdown begins, and a request still waiting for the batcher when it ends is answered
503 (its queued work is cancelled; the batcher skips cancelled requests). uvicorn's own wait is
``graceful_s + BACKSTOP_S``, a backstop that finds nothing left to cancel. The app's lifespan
then waits for the batcher no longer than what is left of the grace period, so the process exits
within about ``graceful_s`` + ``BACKSTOP_S`` of the signal (measured in bench/bench_serve.py).
Whatever still holds the process after that (a batch being scored that nobody waits for any
more, the kernels' worker threads, a slow event loop) is cut short by :func:`exit_within`:
``spectrag serve`` ends at most ``EXIT_DEADLINE_S`` after the backstop (a server only reads its
index, so nothing is lost).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import uvicorn

from spectrag.serve.batcher import Closing

BACKSTOP_S = 1.0  # uvicorn cancels what is still open this long after the grace period
EXIT_DEADLINE_S = 0.5  # and the process ends this long after that, whatever is still running


def exit_within(seconds: float) -> threading.Timer:
    """End the process ``seconds`` from now unless it has exited by then (a daemon timer)."""

    def _end() -> None:
        logging.getLogger("spectrag").warning(f"still running {seconds:g} s after shutdown began "
                                              "(--graceful-s + backstop): exiting now")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(1)

    timer = threading.Timer(seconds, _end)
    timer.daemon = True
    timer.start()
    return timer


class GracePeriod:
    """The shutdown deadline on the event loop: :meth:`begin` starts it, :meth:`answer` awaits a
    batcher future until it ends."""

    def __init__(self) -> None:
        self.grace_s: float | None = None
        self._ends_at: float | None = None  # loop time
        self._over: asyncio.Future | None = None

    @property
    def started(self) -> bool:
        return self._ends_at is not None

    def remaining(self) -> float | None:
        """Seconds left (>= 0), or None before shutdown began."""
        if self._ends_at is None:
            return None
        return max(self._ends_at - asyncio.get_running_loop().time(), 0.0)

    def _future(self) -> asyncio.Future:
        if self._over is None:
            self._over = asyncio.get_running_loop().create_future()
        return self._over

    def begin(self, grace_s: float) -> None:
        """Start the grace period (on the event loop); a second call changes nothing."""
        if self._ends_at is not None:
            return
        loop = asyncio.get_running_loop()
        self.grace_s, self._ends_at = grace_s, loop.time() + grace_s
        over = self._future()
        loop.call_later(grace_s, lambda: over.done() or over.set_result(None))

    async def answer(self, future: concurrent.futures.Future) -> Any:
        """``future``'s result, or :class:`Closing` once the grace period has ended (the future
        is then cancelled: the batcher drops it unless it is already being scored)."""
        wrapped = asyncio.wrap_future(future)
        try:
            await asyncio.wait({wrapped, self._future()}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not wrapped.done():
                wrapped.cancel()  # also cancels ``future`` where it has not started
        if wrapped.cancelled():
            raise Closing(f"the server is shutting down and this request was not answered within its grace period of "
                          f"{self.grace_s:g} s (--graceful-s); retry on another instance")
        return wrapped.result()


class GracefulServer(uvicorn.Server):
    """uvicorn's server that calls ``on_shutdown()`` (on the event loop) as shutdown begins,
    before uvicorn waits for the open requests."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets=None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets)
