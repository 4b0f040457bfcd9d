"""Answers from the retrieved context, with citations, and iterative retrieval (SA-RAG's CoT
retrieval, after IRCoT), for many questions at once.

``answer(retriever, questions, rounds=1)``:

    round 1      every question retrieved in one batch (``Retriever.score_batch``)
    rounds 2..n  the model reasons over the context and its notes so far and either answers or
                 writes a follow-up question (:data:`spectrag.llm.prompts.STEP_USER`); all the
                 follow-ups of a round are retrieved in ONE ``score_batch`` call, and the new
                 chunks join each question's context (duplicates dropped)
    answer       the questions not yet answered get the grounded answer prompt
                 (:data:`spectrag.llm.prompts.ANSWER_USER`) on their context and notes

``rounds`` counts retrievals (SA-RAG uses at most three); ``rounds = 1`` is single-shot RAG.
The context shown to the model is grouped by source document with each passage's chunk id
(:func:`spectrag.llm.prompts.render_context`), and the answer cites those ids: ``citations``
keeps the cited ids that were in the context (others are counted in ``invalid_citations``).
Each round's retrieval has the full ``budget``, so a question's context grows to at most
``rounds * budget`` tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from spectrag.contexts import build_contexts
from spectrag.errors import ConfigError, SpectragError
from spectrag.llm import parse, prompts
from spectrag.llm.client import LLMClient
from spectrag.retriever import Retriever, check_queries

UNANSWERABLE = "unanswerable"


@dataclass
class Answer:
    """One question's answer: the short ``answer``, the model's full ``text``, the chunk ids it
    cited and those it was shown (``context``, in order), the retrieval queries (the question,
    then each follow-up), the notes of the iterative steps, and whether its output had no
    ``Answer:`` line (``malformed``: then ``answer`` is its last line)."""

    question: str
    answer: str
    text: str
    citations: list[int]
    context: list[int]
    queries: list[str]
    notes: list[str] = field(default_factory=list)
    invalid_citations: int = 0
    malformed: bool = False

    @property
    def rounds(self) -> int:
        return len(self.queries)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rounds": self.rounds}


def _client(retriever: Retriever, llm: LLMClient | None) -> LLMClient:
    client = llm or retriever.llm
    if client is None:
        raise ConfigError("answers need an LLM endpoint: pass --llm-base-url URL (Retriever(..., llm=...))")
    return client


def _retrieve(retriever: Retriever, queries: list[str], mode: str | None, budget: int | None,
              qvecs: torch.Tensor | None = None) -> tuple[list[list[int]], list[list[str]]]:
    """One ``score_batch`` for all ``queries``: each one's selected chunk ids and relation texts."""
    result = retriever.score_batch(queries, budget=budget, mode=mode, qvecs=qvecs)
    contexts = build_contexts(retriever.index, queries, result)
    return [[c.chunk_id for c in ctx.chunks] for ctx in contexts], [[r["text"] for r in ctx.relations] for ctx in contexts]


def answer(
    retriever: Retriever,
    questions: Sequence[str],
    *,
    rounds: int = 1,
    mode: str | None = None,
    budget: int | None = None,
    llm: LLMClient | None = None,
    first: Sequence[Sequence[int]] | None = None,
    qvecs: torch.Tensor | None = None,
    progress: bool = False,
) -> list[Answer]:
    """Answers to ``questions`` in order (see the module docstring). ``mode``, ``budget``: the
    retrieval's (default: the retriever's config). ``first``: the first round's selected chunk
    ids per question, when they are already known (the evaluation's runs); ``qvecs [B, d]``:
    the questions' vectors for the first round. ``llm``: default the retriever's client."""
    client = _client(retriever, llm)
    questions = check_queries(questions)
    if rounds < 1:
        raise SpectragError(f"rounds must be >= 1 (retrievals per question), got {rounds}")
    n = len(questions)
    if first is not None:
        if len(first) != n:
            raise SpectragError(f"{n} questions but {len(first)} first-round contexts")
        context = [[int(i) for i in ids if int(i) >= 0] for ids in first]
        relations: list[list[str]] = [[] for _ in range(n)]
    else:
        context, relations = _retrieve(retriever, questions, mode, budget, qvecs)
    chunks = retriever.index.chunks
    render = lambda b: prompts.render_context([(i, chunks[i]) for i in context[b]], relations[b])  # noqa: E731
    queries = [[q] for q in questions]
    notes: list[list[str]] = [[] for _ in range(n)]
    done: dict[int, tuple[str, str]] = {}  # question -> (model text, short answer)
    active = list(range(n))
    for _ in range(1, rounds):
        replies = client.chat([prompts.step_prompt(questions[b], render(b), notes[b]) for b in active], stage="step",
                              progress=progress)
        follow: list[tuple[int, str]] = []
        bad = 0
        for b, reply in zip(active, replies):
            step = parse.step(reply.text)
            if step is None:  # neither an answer nor a follow-up: the final prompt decides
                bad += 1
                continue
            if step.notes:
                notes[b].append(step.notes)
            if step.answer is not None:
                done[b] = (reply.text, step.answer)
            else:
                follow.append((b, step.follow_up))
        client.note_malformed("step", bad)
        if not follow:
            break
        new_ids, new_rel = _retrieve(retriever, [f for _, f in follow], mode, budget)  # the round's one batch
        for (b, f), ids, rel in zip(follow, new_ids, new_rel):
            queries[b].append(f)
            seen = set(context[b])
            context[b] += [i for i in ids if i not in seen]
            relations[b] += [t for t in rel if t not in relations[b]]
        active = [b for b, _ in follow]
    rest = [b for b in range(n) if b not in done]
    replies = client.chat([prompts.answer_prompt(questions[b], render(b), notes[b]) for b in rest], stage="answer",
                          progress=progress)
    malformed = set()
    for b, reply in zip(rest, replies):
        short = parse.final_answer(reply.text)
        if short is None:
            malformed.add(b)
            lines = [ln.strip() for ln in reply.text.splitlines() if ln.strip()]
            short = lines[-1] if lines else ""
        done[b] = (reply.text, short)
    client.note_malformed("answer", len(malformed))
    out = []
    for b, q in enumerate(questions):
        text, short = done[b]
        shown = set(context[b])
        cited = parse.citations(text + " " + " ".join(notes[b]))
        out.append(Answer(q, short, text, [c for c in cited if c in shown], context[b], queries[b], notes[b],
                          sum(c not in shown for c in cited), b in malformed))
    return out


__all__ = ["UNANSWERABLE", "Answer", "answer"]
