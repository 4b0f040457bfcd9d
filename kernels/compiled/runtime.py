"""What every compiled kernel shares: whether numba is there, the ``njit`` options (cached,
GIL released) and the thread pool that runs a batch's queries in parallel."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import torch

_HAVE_NUMBA = importlib.util.find_spec("numba") is not None
_CPUS = os.cpu_count() or 1  # read once: the call is a system call, and parallel_rows runs per stage


def available() -> bool:
    """True when numba is installed (the compiled CPU kernels can run)."""
    return _HAVE_NUMBA


def require() -> None:
    """ImportError with the install command when numba is missing."""
    if not _HAVE_NUMBA:
        raise ImportError("the compiled CPU kernels need numba: pip install numba "
                          "(or set backend = 'torch' to use the torch kernels)")


def jit(fn: Callable, *, reassociate: bool = False, inline: bool = False) -> Callable:
    """``numba.njit`` with the options every kernel uses: compiled once and cached on disk (the
    first call of a process then loads machine code instead of compiling), the GIL released
    so that pool threads run at once, IEEE arithmetic in program order (results match the torch
    path's float32 operations). ``reassociate``: the compiler may reorder and fuse a float64
    sum (SIMD; 4-6x faster dot products); only for sums that are rounded to float32 or compared
    afterwards, where an order's ~1e-16 difference does not show. ``inline``: compiled into
    each caller (a small helper of a hot loop: a call would cost more than its work)."""
    require()
    import numba

    fastmath = {"reassoc", "contract"} if reassociate else False
    return numba.njit(cache=True, nogil=True, fastmath=fastmath, error_model="numpy",
                      inline="always" if inline else "never")(fn)


@lru_cache(maxsize=None)
def _pool(workers: int, pid: int) -> ThreadPoolExecutor:
    """One pool per size and process: a forked child inherits the parent's pool objects but
    none of their threads, so work queued there would never run."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="spectrag-kernel")


def parallel_rows(kernel: Callable, rows: int, *args, threads: int | None = None, min_rows: int = 4) -> None:
    """Run ``kernel(lo, hi, *args)`` over ``[0, rows)`` split into contiguous ranges, one per
    worker of a pool of ``threads`` (default: ``torch.get_num_threads()``). Each range's work
    is independent (a query's result never depends on the range it is in), so any split gives
    the same output; fewer than ``min_rows`` rows per worker run on the caller's thread."""
    threads = torch.get_num_threads() if threads is None else threads
    threads = max(1, min(threads, rows // max(min_rows, 1), _CPUS))
    if threads == 1 or rows == 0:
        kernel(0, rows, *args)
        return
    bounds = [rows * i // threads for i in range(threads + 1)]
    pool = _pool(threads, os.getpid())
    futures = [pool.submit(kernel, lo, hi, *args) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    for f in futures:
        f.result()  # re-raises a worker's exception here
