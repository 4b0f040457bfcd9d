"""Reading model output: JSON in prose or fences, malformed parts dropped and counted."""

from __future__ import annotations

from spectrag.llm import parse


def test_json_object_finds_json_in_prose_and_fences():
    assert parse.json_object('{"a": 1}') == {"a": 1}
    assert parse.json_object('Sure!\n```json\n{"a": [1, 2]}\n```\nDone.') == {"a": [1, 2]}
    assert parse.json_object('The result is {"a": 2} as asked') == {"a": 2}
    assert parse.json_object('{"questions": ["cut') is None
    assert parse.json_object("no json here") is None


def test_questions():
    assert parse.questions('{"questions": ["Who?", " Why? ", "Who?", 3, ""]}', 5) == ["Who?", "Why?"]
    assert parse.questions('["A?", "B?", "C?"]', 2) == ["A?", "B?"]
    assert parse.questions('{"questions": []}', 3) is None
    assert parse.questions('{"questions": ["trunc', 3) is None
    assert parse.questions('{"other": ["A?"]}', 3) is None


def test_openie_drops_and_counts_malformed_parts():
    got = parse.openie('{"named_entities": ["A", 7, "A", "B"], "triples": [["A", "b"], ["A", "rel", "B"], [1, 2, 3], "x", ["A", " ", "B"]]}')
    assert got.entities == ["A", "B"] and got.bad_entities == 1
    assert got.triples == [["A", "rel", "B"]] and got.bad_triples == 4
    assert parse.openie('{"named_entities": ["A"], "triples": "none"}').bad_triples == 1
    assert parse.openie('[["A", "r", "B"]]') is None
    assert parse.openie('{"named_entities": ["A"') is None


def test_final_answer_and_citations():
    text = "The bridge [3] was built by Ilse Marrow [5, 7].\nAnswer: Cassel Reach [5]."
    assert parse.final_answer(text) == "Cassel Reach"
    assert parse.citations(text) == [3, 5, 7]
    assert parse.final_answer("**Answer:** *1851*") == "1851"
    assert parse.final_answer("Answer: first\nmore thought\nAnswer: second") == "second"
    assert parse.final_answer("I think it is Paris.") is None


def test_step():
    s = parse.step("Notes: A is in B [2].\nFollow-up question: Where is B?")
    assert (s.notes, s.answer, s.follow_up) == ("A is in B [2].", None, "Where is B?")
    s = parse.step("Notes: all found\nthe rest is clear\nAnswer: C.")
    assert (s.notes, s.answer, s.follow_up) == ("all found the rest is clear", "C", None)
    s = parse.step("Follow-up: what year?\nAnswer: 1900")  # an answer wins over a follow-up
    assert (s.answer, s.follow_up) == ("1900", None)
    assert parse.step("I do not know.") is None
