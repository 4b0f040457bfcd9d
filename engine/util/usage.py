"""Wall time, CPU time and peak resident memory of build stages, for the manifest.

:func:`begin` / :func:`end` measure one stage (they nest); ``end`` returns wall seconds, CPU
seconds (this process and its finished children, all threads: on a shared machine it shows the
work when wall time shows the contention) and the peak resident memory in MiB.

Memory: on Linux the kernel keeps a high-water mark of the resident set (``VmHWM`` in
``/proc/self/status``) and resets it to the current RSS when ``5`` is written to
``/proc/self/clear_refs``. :func:`start` folds the mark into every open measurement and resets
it; :func:`stop` folds it again and returns the largest value seen since its :func:`start`. So
measurements nest (a build stage and the graph sub-stages inside it) and cost two small file
operations each, with no sampling thread. Where the reset is refused or ``/proc`` is absent,
the value is the process's peak so far (``getrusage``), which :func:`exact` reports. The
reset also resets ``getrusage``'s ``ru_maxrss`` (the same counter): after a measured build,
the process peak is the largest stage peak.

Memory of child processes (the chunking and entity pools) is not included;
:func:`children_peak_mib` gives the largest child.
"""

from __future__ import annotations

import itertools
import os
import resource
import sys
import time
from dataclasses import dataclass

_open: dict[int, float] = {}  # token -> largest high-water mark seen since its start (KiB)
_tokens = itertools.count()
_resettable: bool | None = None


def _status_kib(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def _maxrss_kib(who: int = resource.RUSAGE_SELF) -> float:
    peak = resource.getrusage(who).ru_maxrss
    return peak / 1024.0 if sys.platform == "darwin" else float(peak)  # bytes on macOS


def _reset() -> None:
    global _resettable
    if _resettable is False:
        return
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        _resettable = True
    except OSError:
        _resettable = False


def _fold() -> None:
    hwm = _status_kib("VmHWM:")
    hwm = _maxrss_kib() if hwm is None else hwm
    for token, seen in _open.items():
        _open[token] = max(seen, hwm)
    _reset()


def start() -> int:
    """Begin a measurement; returns its token."""
    _fold()
    token = next(_tokens)
    _open[token] = _status_kib("VmRSS:") or 0.0
    return token


def stop(token: int) -> float:
    """Peak resident memory in MiB since :func:`start` returned ``token``."""
    _fold()
    return round(_open.pop(token) / 1024.0, 1)


def exact() -> bool:
    """Whether peaks are per measurement (the high-water mark could be reset)."""
    if _resettable is None:
        _reset()
    return bool(_resettable)


def rss_mib() -> float:
    """Current resident memory in MiB (0 where ``/proc`` is absent)."""
    return round((_status_kib("VmRSS:") or 0.0) / 1024.0, 1)


def children_peak_mib() -> float:
    """Peak resident memory of the largest finished child process, in MiB."""
    return round(_maxrss_kib(resource.RUSAGE_CHILDREN) / 1024.0, 1)


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass(frozen=True)
class Mark:
    wall: float
    cpu: float
    token: int


def begin() -> Mark:
    """Start measuring a stage."""
    return Mark(time.perf_counter(), cpu_seconds(), start())


def end(mark: Mark) -> tuple[float, float, float]:
    """``(wall seconds, CPU seconds, peak RSS MiB)`` since :func:`begin` returned ``mark``."""
    return (round(time.perf_counter() - mark.wall, 3), round(cpu_seconds() - mark.cpu, 3), stop(mark.token))
