"""What the engine writes to stderr besides its results: progress bars, one-line stage messages
(the ``spectrag`` logger), and nothing of the third-party libraries it drives.

Progress bars are off unless a block of code turns them on (:func:`showing`; the command line
does, unless ``--quiet``), so the Python API prints nothing by itself. On a terminal a bar is a
tqdm bar; when stderr is not a terminal (a log file, CI) it is a line on the ``spectrag`` logger
at INFO every :data:`LOG_EVERY_S` seconds, with the count, the rate and an estimate of the time
left (:class:`LogBar`). Stage messages go to ``logging.getLogger("spectrag")`` at INFO; the
command line shows them (:func:`configure_logging`; in a log with ``--log-level info``), a library
user sees them only if their logging is set to.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on use: `spectrag --help` and the error paths do not need it
    from tqdm.auto import tqdm

LOGGER = logging.getLogger("spectrag")
LEVELS = ("debug", "info", "warning", "error")

_SHOW: ContextVar[bool] = ContextVar("spectrag_progress", default=False)


@contextmanager
def showing(show: bool = True) -> Iterator[None]:
    """Within this block, :func:`bar` draws its bars (on stderr)."""
    token = _SHOW.set(bool(show))
    try:
        yield
    finally:
        _SHOW.reset(token)


def progress_on() -> bool:
    """Whether the current block shows progress bars (:func:`showing`)."""
    return _SHOW.get()


LOG_EVERY_S = 5.0  # seconds between two progress lines in a log


class _Discard:
    """A file that drops what tqdm writes (a :class:`LogBar` logs instead)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


@functools.cache
def log_bar_class() -> type:
    """:class:`LogBar`, made on first use (tqdm is imported on use: ``spectrag --help`` and the
    command line's error paths do not need it)."""
    from tqdm.auto import tqdm

    class LogBar(tqdm):
        """A tqdm bar that, instead of drawing, logs a line on the ``spectrag`` logger at INFO at most
        every ``every`` seconds: ``embed: 12,288/50,000 chunks (25%), 210 chunks/s, about 3 min
        left``; and a last line when it closes if it logged any."""

        def __init__(self, *args: Any, every: float | None = None, **kwargs: Any) -> None:
            self._every = LOG_EVERY_S if every is None else every
            self._logged_at: float | None = None
            self._logged_n = 0
            kwargs.update(file=_Discard(), mininterval=self._every, miniters=1, dynamic_ncols=False)
            kwargs.pop("ncols", None)
            super().__init__(*args, **kwargs)

        def line(self, final: bool = False) -> str:
            """The progress line: count (of the total), rate, time left (or taken, ``final``)."""
            d = self.format_dict
            n, total, elapsed = d["n"], d["total"], d["elapsed"]
            unit = str(d.get("unit") or "it").strip()
            rate = n / elapsed if elapsed > 0 else 0.0  # the mean rate: steadier than tqdm's smoothed one
            text = f"{d.get('prefix') or 'progress'}: {n:,}" + (f"/{total:,} {unit} ({100 * n / total:.0f}%)" if total else f" {unit}")
            if d.get("postfix"):
                text += f" [{str(d['postfix']).lstrip(', ')}]"  # the step now running (the graph stage)
            if rate >= 1:
                text += f", {rate:,.1f} {unit}/s"
            elif rate:
                text += f", {1 / rate:,.1f} s per {unit}"
            if final:
                text += f", {duration(elapsed)} in all"
            elif total and rate and n < total:
                text += f", about {duration((total - n) / rate)} left"
            return text

        def display(self, msg: str | None = None, pos: int | None = None) -> bool:
            now = time.monotonic()
            closing = self.disable or msg == "" or getattr(self, "_closing", False)
            if closing:
                return True
            if self.n and self.n != self._logged_n and (self._logged_at is None or now - self._logged_at >= self._every * 0.999):
                # the first line after `every` seconds too: a stage that ends sooner logs nothing
                if self._logged_at is not None or now - self._start_mono >= self._every:
                    LOGGER.info(self.line())
                    self._logged_at, self._logged_n = now, self.n
            return True

        def refresh(self, nolock: bool = False, lock_args: Any = None) -> bool:
            return self.display()

        def reset(self, total: float | None = None) -> None:
            self._start_mono = time.monotonic()
            super().reset(total)

        def close(self) -> None:
            if not self.disable and self._logged_at is not None:
                LOGGER.info(self.line(final=True))
            self._closing = True
            super().close()

        def __new__(cls, *args: Any, **kwargs: Any) -> "LogBar":
            obj = super().__new__(cls, *args, **kwargs)
            obj._start_mono = time.monotonic()
            return obj

    return LogBar


def __getattr__(name: str) -> Any:  # ``from spectrag.util.console import LogBar``
    if name == "LogBar":
        return log_bar_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{max(s, 0)} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _terminal(file: Any) -> bool:
    isatty = getattr(file, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed file
        return False


def bar(iterable: Any = None, *, show: bool | None = None, **kwargs: Any) -> tqdm:
    """A progress bar on stderr, drawn only inside :func:`showing` (or when ``show`` is true): a
    tqdm bar on a terminal, ``leave=False`` by default so a finished stage leaves the terminal to
    the next one; else a :class:`LogBar`, a log line every few seconds."""
    kwargs.setdefault("leave", False)
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    show = _SHOW.get() if show is None else show
    disable = kwargs.pop("disable", False) or not show
    if not disable and not _terminal(kwargs["file"]):
        return log_bar_class()(iterable, **kwargs)
    from tqdm.auto import tqdm

    return tqdm(iterable, disable=disable, **kwargs)


def configure_logging(level: str = "info", *, quiet: bool = False) -> None:
    """The command line's logging: ``spectrag`` messages at ``level`` (``--quiet``: warnings and
    errors only) on stderr as bare lines; other libraries' loggers stay at WARNING."""
    level = "warning" if quiet else level
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(level.upper())
    LOGGER.propagate = False


@contextmanager
def third_party_quiet() -> Iterator[None]:
    """Silence the libraries the engine drives while it calls them: transformers' "Loading weights"
    bars and its info / advisory logging, huggingface_hub's bars, sentence-transformers' info logs.
    Their previous settings are restored after the block (a user's own use of them is not changed).
    (FAISS's k-means warning is avoided where k-means is called: ``min_points_per_centroid=1``.)"""
    saved: list[tuple[Any, ...]] = []
    try:
        from transformers.utils import logging as hf_logging  # a sentence-transformers dependency
    except ImportError:  # pragma: no cover - sentence-transformers always brings it
        hf_logging = None
    if hf_logging is not None:
        saved.append(("hf", hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()))
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    st_logger = logging.getLogger("sentence_transformers")
    saved.append(("st", st_logger.level))
    st_logger.setLevel(max(st_logger.level, logging.WARNING))
    try:
        yield
    finally:
        for item in saved:
            if item[0] == "hf" and hf_logging is not None:
                if item[1]:
                    hf_logging.enable_progress_bar()
                hf_logging.set_verbosity(item[2])
            elif item[0] == "st":
                st_logger.setLevel(item[1])


@contextmanager
def root_logger_quiet() -> Iterator[None]:
    """Silence warnings sent to the root logger (ONNX Runtime's quantizer advises pre-processing
    through ``logging.warning``), without the side effect that call has on an unconfigured root
    logger (``basicConfig``: a stderr handler left behind); the root's handlers and level are
    restored after the block."""
    root = logging.getLogger()
    guard, level = logging.NullHandler(), root.level
    root.addHandler(guard)  # a handler present: logging.warning() does not call basicConfig()
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(guard)
        root.setLevel(level)
