"""Shared set-up of the benchmark scripts. Import it BEFORE numpy / scipy / torch / faiss:
thread counts are read by those libraries when they load."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time


def pin_threads(default: str, *, passive: bool = False) -> str:
    """Set OMP/OpenBLAS/MKL threads from ``--threads N`` in argv (else ``default``); returns it.

    ``passive`` lets idle OpenMP workers sleep instead of spin: on a loaded machine spinning
    workers made 2-thread sparse products many times slower than one thread.
    """
    threads = default
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            threads = sys.argv[i + 1]
        elif arg.startswith("--threads="):
            threads = arg.split("=", 1)[1]
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = threads
    if passive:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return threads


def cpu_model() -> str:
    """The CPU's model name, for results tables."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def median_seconds(fn, repeats: int, *, warmup: bool = True, device=None, slow_s: float | None = None):
    """Median wall seconds of ``repeats`` calls of ``fn`` and the last call's result, after one
    untimed warm-up call (unless ``warmup`` is false). With a CUDA ``device`` every call is
    synchronized, so the time covers the kernels and not just their launch. ``slow_s``: when the
    warm-up took longer than this, one timed call only (long runs vary little, and time is short)."""

    def sync() -> None:
        if device is not None and str(device).startswith("cuda"):
            import torch

            torch.cuda.synchronize()

    runs, out = repeats, None
    if warmup:
        t0 = time.perf_counter()
        out = fn()
        sync()
        if slow_s is not None and time.perf_counter() - t0 > slow_s:
            runs = 1
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out
