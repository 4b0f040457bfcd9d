"""``spectrag eval --generate``: every method's budgeted contexts answered by the LLM
(:func:`spectrag.generate.answer`, from the run's own selections), scored with EM, token F1 and
answer containment (:mod:`spectrag.eval.qa`), beside the retrieval metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from spectrag.eval.datasets import Dataset
from spectrag.eval.qa import score_answer, score_answers
from spectrag.eval.score import Run
from spectrag.generate import UNANSWERABLE, answer
from spectrag.retriever import Retriever


def generate_answers(retriever: Retriever, ds: Dataset, runs: dict[str, Run], vectors: dict[str, torch.Tensor], *,
                     rounds: int, budget: int | None, log: Callable[[str], None] = lambda _: None,
                     ) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Per method: the answer metrics (and the share answered, citations per answer, malformed
    outputs, retrieval rounds), and the per-question answers."""
    texts = [q.text for q in ds.questions]
    golds = [list(q.answers) for q in ds.questions]
    summary: dict[str, Any] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    for name, run in runs.items():
        log(f"answers {name}" + (f" ({rounds} retrieval rounds)" if rounds > 1 else ""))
        first = [[int(i) for i in row if i >= 0] for row in run.selected.tolist()]
        got = answer(retriever, texts, rounds=rounds, mode=name, budget=budget, first=first, qvecs=vectors.get(name))
        preds = [a.answer for a in got]
        n = max(1, len(got))
        summary[name] = {
            **score_answers(preds, golds),
            "answered": round(sum(a.answer.strip().lower() != UNANSWERABLE for a in got) / n, 4),
            "citations_per_answer": round(sum(len(a.citations) for a in got) / n, 3),
            "invalid_citations": sum(a.invalid_citations for a in got),
            "malformed": sum(a.malformed for a in got),
            "rounds": round(sum(a.rounds for a in got) / n, 3),
        }
        rows[name] = [{"id": q.qid, "gold": list(q.answers), **(score_answer(a.answer, q.answers) if q.answers else {}),
                       **a.to_json()} for q, a in zip(ds.questions, got)]
    return summary, rows
