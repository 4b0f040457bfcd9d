"""Utility questions (SpectRAG 3.2.1): the questions each chunk answers, from a questions file
(``graph.questions_file``) or from the LLM (``graph.utility_questions``), embedded once.

They feed two stages: the utility edge signal (kNN over each chunk's summed question vectors,
:func:`spectrag.graph.signals.utility_edges`) and utility-question seeding (a third RRF list,
:mod:`spectrag.seed.utility`), which reads the stored question vectors::

    graph/questions.vectors.npy   float32 [Q, d]   each question's embedding, L2-normalized
    graph/questions.owners.npy    int64 [Q]        the chunk each question belongs to

The questions file is JSON ``{"<chunk id>": ["question", ...], ...}``; an index whose questions
came from the LLM keeps them in that format in ``llm/questions.json``, reusable as a file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spectrag.errors import ConfigError, CorpusError, brief
from spectrag.util.checks import check_floats, check_ints, load_npy

VECTORS = "questions.vectors.npy"
OWNERS = "questions.owners.npy"


@dataclass
class QuestionSet:
    """Questions flattened in chunk-id order. Shapes: ``owners [Q]`` int64, ``vectors [Q, d]``."""

    owners: np.ndarray
    vectors: np.ndarray

    def chunk_sums(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per chunk, the sum of its question vectors and whether it has any. ``-> [n, d], [n]``."""
        sums = np.zeros((n, self.vectors.shape[1]), np.float32)
        np.add.at(sums, self.owners, self.vectors)
        has = np.zeros(n, bool)
        has[self.owners] = True
        return sums, has


def read_questions_file(path: str | Path, n_chunks: int) -> dict[int, list[str]]:
    """The questions file at ``path`` as ``chunk id -> questions``; :class:`CorpusError` names
    the key or value that is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"graph.questions_file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: expected an object chunk id -> [questions]")
    out: dict[int, list[str]] = {}
    for key, questions in data.items():
        if not (str(key).isdigit() and int(key) < n_chunks):
            raise CorpusError(f"{path}: key {brief(key)} is not a chunk id in [0, {n_chunks})")
        if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
            raise CorpusError(f"{path}: value of {brief(key)} is not a list of question strings")
        out[int(key)] = questions
    return out


def embed_questions(questions: Mapping[int | str, Sequence[str]], n_chunks: int,
                    encode: Callable[[list[str]], np.ndarray]) -> QuestionSet:
    """Every question embedded once (``encode``: texts -> float32 ``[m, d]``, L2-normalized)."""
    owners: list[int] = []
    texts: list[str] = []
    for key in sorted(questions, key=int):
        cid = int(key)
        if not 0 <= cid < n_chunks:
            raise CorpusError(f"utility questions: chunk id {cid} is not in [0, {n_chunks})")
        kept = [q for q in questions[key] if q.strip()]
        owners += [cid] * len(kept)
        texts += kept
    vectors = np.ascontiguousarray(encode(texts), dtype=np.float32) if texts else np.zeros((0, 1), np.float32)
    return QuestionSet(np.asarray(owners, dtype=np.int64), vectors)


def save_questions(folder: Path, questions: QuestionSet) -> None:
    """Write the question vectors and owners into ``folder`` (the index's ``graph/``)."""
    np.save(folder / VECTORS, questions.vectors)
    np.save(folder / OWNERS, questions.owners)


def load_questions(folder: Path, *, n: int, dim: int | None = None) -> QuestionSet | None:
    """The stored questions (memory-mapped, checked: owners in ``[0, n)``, vectors ``[Q, dim]``
    finite), or None for an index without them."""
    if not (folder / VECTORS).exists():
        return None
    owners = check_ints(load_npy(folder / OWNERS), f"{folder / OWNERS}", (None,), 0, max(n, 1))
    vectors = check_floats(load_npy(folder / VECTORS), f"{folder / VECTORS}", (owners.shape[0], dim), unit_rows=True)
    return QuestionSet(owners, vectors)
