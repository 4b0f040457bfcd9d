"""Answers with citations and iterative retrieval (spectrag.generate) on the LLM-built sample
index, against the test server: each round's follow-ups go through one score_batch call."""

from __future__ import annotations

import pytest

from spectrag.cli.demo import sample_questions
from spectrag.config import RetrieverConfig
from spectrag.errors import ConfigError, SpectragError
from spectrag.generate import answer
from spectrag.retriever import Retriever

QUESTIONS = [q["question"] for q in sample_questions()][:5]


@pytest.fixture
def counted(llm_index, llm_config, monkeypatch):
    """A retriever whose score_batch calls are recorded (batch sizes)."""
    retriever = Retriever(llm_index[1], RetrieverConfig(budget=600), llm=llm_config)
    calls = []
    original = retriever.score_batch

    def score_batch(queries, **kw):
        calls.append(list(queries))
        return original(queries, **kw)

    monkeypatch.setattr(retriever, "score_batch", score_batch)
    return retriever, calls


def test_iterative_rounds_are_batched(counted, llm_server):
    retriever, calls = counted
    got = answer(retriever, QUESTIONS, rounds=3)
    # round 1: all questions in one batch; round 2: every follow-up in one batch; in round 3 the
    # server answers from its notes, so no third retrieval
    assert [len(c) for c in calls] == [5, 5]
    assert calls[1] == [f"{q} (more detail)" for q in QUESTIONS]
    usage = retriever.llm.usage
    assert usage["step"].requests == 10 and usage["answer"].requests == 0
    index = retriever.index
    for a in got:
        assert a.rounds == 2 and a.queries[0] in QUESTIONS and len(a.notes) == 2
        assert len(a.context) == len(set(a.context))  # the rounds' chunks, each once
        assert a.answer == index.chunks[a.context[0]].title and a.citations and set(a.citations) <= set(a.context)
        assert not a.malformed and a.invalid_citations == 0


def test_single_shot_and_given_first_contexts(counted, llm_server):
    retriever, calls = counted
    one = answer(retriever, QUESTIONS[:2], rounds=1, mode="dense")
    assert [len(c) for c in calls] == [2] and "step" not in retriever.llm.usage
    assert all(a.rounds == 1 and a.notes == [] for a in one)
    again = answer(retriever, QUESTIONS[:2], first=[a.context for a in one])
    assert [len(c) for c in calls] == [2]  # no retrieval: the contexts were given
    assert [a.answer for a in again] == [a.answer for a in one]


def test_malformed_answers_are_counted_not_raised(counted, llm_server):
    retriever, _ = counted
    llm_server.fail("empty", when=QUESTIONS[1])
    got = answer(retriever, QUESTIONS[:3])
    assert [a.malformed for a in got] == [False, True, False] and got[1].answer == ""
    assert retriever.llm.usage["answer"].malformed == 1


def test_errors(llm_index, llm_config):
    with pytest.raises(ConfigError, match="answers need an LLM endpoint"):
        answer(Retriever(llm_index[1]), QUESTIONS)
    retriever = Retriever(llm_index[1], llm=llm_config)
    with pytest.raises(SpectragError, match="rounds must be >= 1"):
        answer(retriever, QUESTIONS, rounds=0)
    with pytest.raises(SpectragError, match="query 2 of 2 is empty"):
        answer(retriever, ["ok?", " "])
