"""Counting the host synchronizations a piece of torch code makes: :class:`SyncCounter`.

On a GPU every read of a device value by the host (``.item()``, ``.tolist()``, ``.cpu()``,
``bool(t)``, ...) and every op whose output size depends on the data (``nonzero``, boolean-mask
indexing (reads and writes), ``unique``, ``repeat_interleave`` without ``output_size``, ``bincount``,
``masked_select``) waits for the device queue to drain. A batch that makes a fixed number of them
whatever B is keeps the device busy; one that makes one per query does not. The counter runs on
the CPU too (nothing is synchronized there, but the same calls are made), so a CPU test can hold
the device path to a fixed count.

Usage::

    with SyncCounter() as syncs:
        run(state, batch, config)
    syncs.total, syncs.counts  # {"item": 3, "nonzero": 2, ...}

It patches ``torch.Tensor`` methods and ``torch`` functions for the duration of the block
(single-threaded use: tests and benchmarks). ``where=True`` also records the caller
(``file:line``) of each event, for finding them.
"""

from __future__ import annotations

import sys
from collections import Counter

import torch

# Tensor methods that hand a device value to the host or need its size from the data
_METHODS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "nonzero",
            "unique", "masked_select", "bincount", "repeat_interleave", "argwhere")
# torch functions of the same kind
_FUNCTIONS = ("nonzero", "unique", "masked_select", "bincount", "repeat_interleave", "argwhere", "unique_consecutive")


def _is_bool_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class SyncCounter:
    """Counts, by kind, the calls that synchronize the host with the device (module docstring).

    ``counts``: kind -> number of calls; ``total``: their sum; ``places`` (with ``where``):
    (kind, ``file:line``) -> number. Nested calls (a method that calls another patched one) count
    once, as the outermost. Every call counts on the CPU as well (``.cpu()`` of a CPU tensor
    too), so that a CPU run counts what the same code makes on a GPU; a ``repeat_interleave``
    given ``output_size`` (or an int of repeats) does not count.
    """

    def __init__(self, *, where: bool = False) -> None:
        self.counts: Counter = Counter()
        self.places: Counter = Counter()
        self.where = where
        self._saved: list[tuple[object, str, object]] = []
        self._depth = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def _note(self, kind: str) -> None:
        self.counts[kind] += 1
        if self.where:
            frame = sys._getframe(2)
            while frame is not None and frame.f_code.co_filename == __file__:
                frame = frame.f_back
            self.places[(kind, f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "?")] += 1

    def _wrap(self, owner, name: str, counts) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            if self._depth == 0 and counts(args, kwargs):
                self._note(name.strip("_"))
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1

        self._saved.append((owner, name, original))
        setattr(owner, name, wrapper)

    def __enter__(self) -> "SyncCounter":
        def always(args, kwargs) -> bool:
            return True

        def sized_by_data(args, kwargs) -> bool:
            """repeat_interleave(repeats) or (x, repeats) with a tensor of repeats and no output_size."""
            repeats = args[1] if len(args) > 1 else kwargs.get("repeats", args[0] if len(args) == 1 else None)
            return isinstance(repeats, torch.Tensor) and kwargs.get("output_size") is None

        for name in _METHODS:
            self._wrap(torch.Tensor, name, sized_by_data if name == "repeat_interleave" else always)
        for name in _FUNCTIONS:
            self._wrap(torch, name, sized_by_data if name == "repeat_interleave" else always)
        original_getitem = torch.Tensor.__getitem__

        def getitem(tensor, index):
            if self._depth == 0 and _is_bool_index(index):
                self._note("bool-index")
            self._depth += 1
            try:
                return original_getitem(tensor, index)
            finally:
                self._depth -= 1

        original_setitem = torch.Tensor.__setitem__

        def setitem(tensor, index, value):
            if self._depth == 0 and _is_bool_index(index):
                self._note("bool-index")
            self._depth += 1
            try:
                return original_setitem(tensor, index, value)
            finally:
                self._depth -= 1

        self._saved += [(torch.Tensor, "__getitem__", original_getitem), (torch.Tensor, "__setitem__", original_setitem)]
        torch.Tensor.__getitem__, torch.Tensor.__setitem__ = getitem, setitem
        if hasattr(torch, "cuda"):
            self._wrap(torch.cuda, "synchronize", always)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()

    def report(self) -> str:
        """The counts as one line, ``kind n, kind n, ...`` (most first)."""
        return ", ".join(f"{k} {v}" for k, v in self.counts.most_common()) or "none"

