"""Retrieval evaluation: ``evaluate(dataset, data, methods=...)`` and ``spectrag eval``.

Modules in data order: :mod:`~spectrag.eval.datasets` (questions and gold evidence per format),
:mod:`~spectrag.eval.gold` (gold -> passages -> chunks), :mod:`~spectrag.eval.metrics` (batched
Recall@k, MRR, nDCG, set P/R/F1), :mod:`~spectrag.eval.graphs` (graph without one signal, for
ablations), :mod:`~spectrag.eval.runner` (index, methods, ablations, sweep),
:mod:`~spectrag.eval.report` (Markdown, JSON, TREC) and :mod:`~spectrag.eval.plots`.
"""

from spectrag.eval.datasets import DATASETS, load_dataset
from spectrag.eval.runner import evaluate

__all__ = ["DATASETS", "evaluate", "load_dataset"]
