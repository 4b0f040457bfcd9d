"""Choosing the number of intra-op threads from measured times, for the embedder and the query
pipeline.

On an idle machine all cores win; on a machine other processes load, a parallel region waits
for its slowest thread, which the scheduler may have taken away for a whole time slice, so one
thread can be many times faster than two (bench/results/peers_cpu.md measures it). No fixed
choice is right on a shared machine, so :class:`ThreadChooser` times the candidates on real
work and keeps the faster, re-timing the other now and then because the load changes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class ThreadChooser:
    """Pick among ``choices`` thread counts by measured seconds per unit of work.

    Each choice is timed twice, then the faster is used and the other re-timed after
    ``probe_every`` steps, then after twice as many each time it loses again (up to 8x), and
    soon again when the faster one changes. Steps with fewer than ``min_units`` units are not
    timed (too short to time reliably).
    """

    def __init__(self, choices: list[int], *, probe_every: int = 8, min_units: int = 1) -> None:
        self.choices = list(dict.fromkeys(choices))
        self.probe_every, self.min_units = probe_every, min_units
        self.cost: dict[int, float] = {}  # moving average of seconds per unit
        self.samples: dict[int, int] = {}
        self._steps = 0
        self._best: int | None = None
        self._gap = probe_every
        self._next_probe = 0
        self._probing = False

    @classmethod
    def default(cls, fixed: int = 0, **kw) -> "ThreadChooser":
        """``fixed`` threads, or (``fixed = 0``) a choice between torch's thread count ``n`` and
        half of it (at least 1)."""
        if fixed:
            return cls([fixed], **kw)
        n = torch.get_num_threads()
        return cls([n, max(1, n // 2)] if n > 1 else [n], **kw)

    def pick(self, units: int) -> int:
        """Thread count for the next step of ``units`` units of work."""
        choices = self.choices
        if len(choices) == 1:
            return choices[0]
        if units < self.min_units:
            return min(choices, key=lambda c: self.cost.get(c, 0.0))
        self._steps += 1
        fewest = min(choices, key=lambda c: self.samples.get(c, 0))
        if self.samples.get(fewest, 0) < 2:
            return fewest
        best = min(choices, key=self.cost.__getitem__)
        if best != self._best:
            self._best, self._gap = best, self.probe_every
            self._next_probe = self._steps + self._gap
        if self._steps >= self._next_probe:
            self._gap = min(2 * self._gap, 8 * self.probe_every)
            self._next_probe = self._steps + self._gap
            self._probing = True
            return next(c for c in choices if c != best)
        return best

    def record(self, threads: int, units: int, seconds: float) -> None:
        """Fold one step's seconds per unit into ``threads``' figure."""
        if len(self.choices) == 1 or units < self.min_units:
            return
        cost = seconds / max(units, 1)
        old = self.cost.get(threads)
        if old is not None and not self._probing:  # a re-timing replaces a stale figure
            cost = 0.5 * old + 0.5 * cost
        self._probing = False
        self.cost[threads] = cost
        self.samples[threads] = self.samples.get(threads, 0) + 1


@contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads (and FAISS's OpenMP threads, when FAISS is loaded),
    restoring the previous counts afterwards."""
    before = torch.get_num_threads()
    faiss = sys.modules.get("faiss")
    faiss_before = faiss.omp_get_max_threads() if faiss is not None else None
    if n != before:
        torch.set_num_threads(n)
    if faiss is not None and n != faiss_before:
        faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
        if faiss is not None and faiss.omp_get_max_threads() != faiss_before:
            faiss.omp_set_num_threads(faiss_before)
