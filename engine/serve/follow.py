"""A server that follows its index: when an edit makes a new generation current
(:mod:`spectrag.generations`), the server loads it beside the one it serves and swaps.

:class:`IndexFollower` polls the index's ``CURRENT`` every ``poll_s`` seconds (a read of one
small file) and reloads on ``POST /v1/reload`` (:meth:`IndexFollower.reload`). A reload loads the
new generation (every checksum verified, as at start-up), builds a retriever over it with the same
settings, warms it up, and only then hands it to the batcher, whose worker takes its retriever
once per batch: a batch being scored finishes on the generation it started on, the next one runs
on the new generation, and each answer names the generation it came from. The old retriever is
then dropped (with it the old generation's lock, so the next edit removes its folder) and the
memory is collected: two indexes are held only while the new one loads. A generation that fails
to load is logged once and the old one stays in service; the next poll tries again if CURRENT
moves on.
"""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import dataclass
from typing import Any

from spectrag.errors import SpectragError
from spectrag.retriever import Retriever
from spectrag.store import current_generation, load_index
from spectrag.util.console import LOGGER


@dataclass
class Reload:
    """What one check did: the generation served after it, the one before, and why nothing was
    swapped (``None``: it was, or there was nothing to do)."""

    generation: str
    previous: str
    reloaded: bool
    seconds: float = 0.0
    error: str | None = None


def _share_model(old: Any, new: Any) -> None:
    """Give ``new`` the query embedder ``old`` has loaded when both embed with the same model and
    settings (an edit never changes them): a reload then does not load the model again."""
    same = old.manifest["embedding"] == new.manifest["embedding"] and old.config.embed == new.config.embed
    if same:  # one embedder per query runtime (Index.query_embedder): the loaded ones go along
        for backend, embedder in getattr(old, "_embedders", {}).items():
            new._embedders.setdefault(backend, embedder)


class IndexFollower:
    """Keeps ``batcher.retriever`` on the current generation of its index.

    ``poll_s``: seconds between looks at ``CURRENT`` (``None`` or 0: only explicit reloads).
    ``warm_up``: score one query on a new retriever before it is swapped in (the first real batch
    then does not pay for loading the model state)."""

    def __init__(self, batcher: Any, *, poll_s: float | None = 2.0, warm_up: bool = True) -> None:
        self.batcher = batcher
        self.root = batcher.retriever.index.path
        self.poll_s = poll_s or None
        self.warm_up = warm_up
        self.reloads = 0
        self.failed: str | None = None  # the generation that last failed to load (logged once)
        self._lock = threading.Lock()  # one reload at a time (poller and POST /v1/reload)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.poll_s is not None:
            self._thread = threading.Thread(target=self._poll, name="spectrag-follow", daemon=True)
            self._thread.start()

    @property
    def generation(self) -> str:
        """The generation the batcher scores on now."""
        return self.batcher.retriever.index.generation

    def reload(self, *, force: bool = False) -> Reload:
        """Swap to the current generation when it is not the one served (``force``: try again a
        generation that failed to load before; the poller does not)."""
        with self._lock:
            served = self.batcher.retriever
            before = served.index.generation
            try:
                target = current_generation(self.root)
            except SpectragError as exc:
                return self._failed(before, "?", exc, force)
            if target == before:
                return Reload(before, before, False)
            if target == self.failed and not force:
                return Reload(before, before, False, error=f"generation {target} did not load (see the log)")
            start = time.perf_counter()
            try:
                index = load_index(self.root)  # CURRENT resolved again: a newer one is fine
                _share_model(served.index, index)
                fresh = Retriever(index, served.config)
                if self.warm_up:
                    fresh.retrieve("warm-up")
            except (SpectragError, OSError) as exc:
                return self._failed(before, target, exc, force)
            del index
            self.batcher.retriever = fresh  # the worker takes it at its next batch
            after = fresh.index.generation
            chunks = len(fresh.index.chunks)
            del served, fresh
            gc.collect()  # the old generation's arrays and tensors, now unreferenced
            seconds = time.perf_counter() - start
            self.reloads += 1
            self.failed = None
            LOGGER.info(f"index {self.root}: now serving generation {after} ({chunks:,} chunks; was generation "
                        f"{before}), loaded in {seconds:.2f} s")
            return Reload(after, before, True, seconds)

    def _failed(self, before: str, target: str, exc: Exception, force: bool) -> Reload:
        if self.failed != target or force:
            LOGGER.warning(f"index {self.root}: generation {target} did not load, still serving generation {before}: {exc}")
            self.failed = target
        return Reload(before, before, False, error=str(exc))

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.reload()
            except Exception as exc:  # noqa: BLE001  (the poller outlives any one failure; logged)
                LOGGER.warning(f"index {self.root}: checking for a new generation failed: {exc}")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
