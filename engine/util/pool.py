"""Order-preserving process pool for the pure-Python build stages (chunking, entity extraction).

Work is cut into contiguous blocks ``[lo, hi)`` of item indices; forked workers run
``fn(lo, hi)`` on blocks and the parent concatenates the returned lists in block order, so the
result is the same list for any worker count. The inputs are inherited by the forked workers
(``fn`` is a closure over them, set before the fork), never pickled; only results travel back.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from typing import Any

from spectrag.util.console import bar as bar_


#: below this many items the work runs in this process (starting a pool costs ~0.1 s)
MIN_ITEMS = 20_000
MAX_WORKERS = 8

_job: Callable[[int, int], list[Any]] | None = None  # the block function, inherited by workers


def _run(bounds: tuple[int, int]) -> list[Any]:
    assert _job is not None, "pool worker started without a job"
    return _job(*bounds)


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def resolve_workers(workers: int, n_items: int) -> int:
    """``workers`` as given, or for 0 the usable CPUs (at most :data:`MAX_WORKERS`) when there
    are at least :data:`MIN_ITEMS` items and 1 below."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be an int >= 0 (0: automatic), got {workers!r}")
    if workers:
        return workers
    return max(1, min(usable_cpus(), MAX_WORKERS)) if n_items >= MIN_ITEMS else 1


def map_blocks(
    fn: Callable[[int, int], list[Any]],
    n_items: int,
    *,
    workers: int,
    block: int,
    progress: str | None = None,
) -> list[Any]:
    """``fn(0, b) + fn(b, 2b) + ...`` over ``n_items`` items in blocks of ``block``, in
    ``workers`` forked processes (serially for 1 worker, one block, or no ``fork``).
    ``progress``: a tqdm description, or None for no bar."""
    global _job
    bounds = [(lo, min(n_items, lo + block)) for lo in range(0, n_items, block)]
    parallel = workers > 1 and len(bounds) > 1 and "fork" in mp.get_all_start_methods()
    if progress:

        def bar(it):
            return bar_(it, total=len(bounds), desc=f"{progress} ({block} documents per block)", unit=" blocks", show=True)
    else:

        def bar(it):
            return it

    if not parallel:
        return [x for part in bar(fn(lo, hi) for lo, hi in bounds) for x in part]
    if _job is not None:
        raise RuntimeError("map_blocks is not reentrant: a pool is already running in this process")
    _job = fn
    try:
        with mp.get_context("fork").Pool(min(workers, len(bounds))) as pool:
            return [x for part in bar(pool.imap(_run, bounds)) for x in part]
    finally:
        _job = None
