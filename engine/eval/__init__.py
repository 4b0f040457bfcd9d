"""Retrieval evaluation: ``evaluate(dataset, data, methods=...)`` and ``spectrag eval``.

Modules in data order: :mod:`~engine.eval.datasets` (questions and gold evidence per format),
:mod:`~engine.eval.gold` (gold -> passages -> chunks), :mod:`~engine.eval.metrics` (batched
Recall@k, MRR, nDCG, set P/R/F1), :mod:`~engine.eval.graphs` (graph without one signal, for
ablations), :mod:`~engine.eval.runner` (index, methods, ablations, sweep),
:mod:`~engine.eval.report` (Markdown, JSON, TREC) and :mod:`~engine.eval.plots`.
"""

from engine.eval.datasets import DATASETS, load_dataset
from engine.eval.runner import evaluate

__all__ = ["DATASETS", "evaluate", "load_dataset"]
