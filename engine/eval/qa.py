"""Answer-level correctness (SpectRAG 4.5.2): exact match, token F1 and answer containment of a
generated short answer against the gold answers, after SQuAD's normalization.

    normalize   lowercase; drop punctuation; drop the articles a, an, the; collapse whitespace
    EM          1[norm(pred) == norm(gold)]                                         (eq. 25)
    F1          harmonic mean of token precision and recall over the token multisets (eq. 26-27)
    contains    norm(gold) occurs in norm(pred) as a whole-token span

Where a question has several gold answers (MuSiQue's aliases), each measure takes the maximum
over them, as is standard. Token F1 of an empty prediction or an empty gold answer is 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalization: lower case, punctuation removed, articles removed, whitespace
    collapsed (in that order)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def contains(prediction: str, gold: str) -> float:
    """Whether the normalized gold answer is a whole-token span of the normalized prediction."""
    ref = normalize_answer(gold)
    return float(bool(ref) and f" {ref} " in f" {normalize_answer(prediction)} ")


def score_answer(prediction: str, golds: Sequence[str]) -> dict[str, float]:
    """EM, F1 and containment of one prediction, each the maximum over the gold answers."""
    return {"EM": max(exact_match(prediction, g) for g in golds), "F1": max(token_f1(prediction, g) for g in golds),
            "contains": max(contains(prediction, g) for g in golds)}


def score_answers(predictions: Sequence[str], golds: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Mean EM / F1 / containment over the questions that have a gold answer, and their count."""
    rows = [score_answer(p, g) for p, g in zip(predictions, golds) if g]
    means = {k: round(sum(r[k] for r in rows) / len(rows), 4) if rows else 0.0 for k in ("EM", "F1", "contains")}
    return {**means, "questions": len(rows), "without_gold_answer": sum(1 for g in golds if not g)}
