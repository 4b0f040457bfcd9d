"""What the engine writes to stderr besides its results: progress bars, one-line stage messages
(the ``spectrag`` logger), and nothing of the third-party libraries it drives.

Progress bars are off unless a block of code turns them on (:func:`showing`; the command line
does for a terminal, unless ``--quiet``), so the Python API prints nothing by itself. Stage
messages go to ``logging.getLogger("spectrag")`` at INFO; the command line shows them
(:func:`configure_logging`), a library user sees them only if their logging is set to.
"""

from __future__ import annotations

import logging
import sys
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


def bar(iterable: Any = None, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr, drawn only inside :func:`showing`; ``leave=False`` by default, so a
    finished stage leaves the terminal to the next one."""
    kwargs.setdefault("leave", False)
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    disable = kwargs.pop("disable", False) or not _SHOW.get()
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
