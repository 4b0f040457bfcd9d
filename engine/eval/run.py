"""Running one method over all questions in batches: every batch goes through
:meth:`spectrag.retriever.Retriever.score_batch` (that is, :func:`spectrag.pipeline.run`) with the
shared query vectors."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from spectrag.eval.score import Run
from spectrag.util.console import bar as console_bar

_PROGRESS: ContextVar[bool] = ContextVar("spectrag_eval_progress", default=False)


@contextmanager
def progress_bars(show: bool = True) -> Iterator[None]:
    """Within this block every :func:`run_method` counts its questions on a progress bar (stderr)."""
    token = _PROGRESS.set(show)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def _pad_cat(parts: list[torch.Tensor]) -> torch.Tensor:
    width = max(1, max(p.shape[1] for p in parts))
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]), value=-1) for p in parts])


_clock = time.perf_counter  # the timer of Run.seconds (a test gives a fake one)


def run_method(retriever, texts: list[str], qvecs: torch.Tensor, mode: str, budget: int | None,
               batch_size: int) -> Run:
    """``retriever.score_batch`` over the questions in batches of ``batch_size``. ``Run.seconds``
    (the q/s column) is timed after an untimed warm-up batch of this method (the first batch's
    questions, its result discarded): a first call pays for compiling and loading, and without
    its own warm-up the method run first paid for the others (the figures hung on --methods' order)."""
    ranks, sels, used = [], [], []
    seconds = 0.0
    if texts:
        retriever.score_batch(texts[:batch_size], budget=budget, mode=mode, qvecs=qvecs[:batch_size])  # warm-up
    with console_bar(total=len(texts), desc=mode, unit=" questions", show=_PROGRESS.get()) as bar:
        for lo in range(0, len(texts), batch_size):
            start = _clock()
            res = retriever.score_batch(texts[lo : lo + batch_size], budget=budget, mode=mode,
                                        qvecs=qvecs[lo : lo + batch_size])
            seconds += _clock() - start
            ranks.append(res.ranking().cpu())
            sels.append(res.selected_ids().cpu())
            used.append(res.used_tokens.cpu())
            bar.update(res.candidates.shape[0])
    return Run(_pad_cat(ranks), _pad_cat(sels), torch.cat(used), seconds)


def with_config(retriever, **overrides: Any):
    """A copy of ``retriever`` sharing its state, with settings replaced as in
    :meth:`spectrag.config.RetrieverConfig.replace` (``expand__hops=0``)."""
    other = copy.copy(retriever)
    other.config = retriever.config.replace(**overrides)
    return other
