"""EM, token F1 and containment with SQuAD's normalization, on cases worked out by hand."""

from __future__ import annotations

import pytest

from spectrag.eval.qa import contains, exact_match, normalize_answer, score_answer, score_answers, token_f1


def test_normalization_is_squads():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a day.") == "apple day"
    assert normalize_answer("theater") == "theater"  # articles only as whole words
    assert normalize_answer("U.S.A.") == "usa"
    assert normalize_answer("  Rock'n'Roll\t(music) ") == "rocknroll music"
    assert normalize_answer("A") == ""


def test_exact_match():
    assert exact_match("the Eiffel tower.", "Eiffel Tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0


def test_token_f1_by_hand():
    # pred [eiffel, tower, in, paris], gold [eiffel, tower]: P = 2/4, R = 1, F1 = 2 * (1/2) / (3/2) = 2/3
    assert token_f1("Eiffel Tower in Paris", "the Eiffel Tower") == pytest.approx(2 / 3)
    # pred [eiffel, tower, paris]: P = 2/3, R = 1, F1 = 2 * (2/3) / (5/3) = 0.8
    assert token_f1("Eiffel Tower, Paris", "the Eiffel Tower") == pytest.approx(0.8)
    # multisets: pred [new, york, new], gold [new, york]: common 2, P = 2/3, R = 1 -> 0.8
    assert token_f1("new york new", "New York") == pytest.approx(0.8)
    # pred [1851], gold [born, 1851]: P = 1, R = 1/2 -> 2/3
    assert token_f1("1851", "born 1851") == pytest.approx(2 / 3)
    assert token_f1("London", "Paris") == 0.0
    assert token_f1("", "Paris") == 0.0 and token_f1("the", "a") == 0.0


def test_containment_is_whole_tokens():
    assert contains("It was G. Stanley Hall, in 1892.", "G. Stanley Hall") == 1.0
    assert contains("Hallway", "Hall") == 0.0
    assert contains("anything", "the") == 0.0  # an empty normalized gold answer contains nothing


def test_best_over_aliases_and_means():
    got = score_answer("Stanley Hall", ["G. Stanley Hall", "Stanley Hall"])
    assert got == {"EM": 1.0, "F1": 1.0, "contains": 1.0}
    # pred [stanley], gold [g, stanley, hall]: P = 1, R = 1/3 -> F1 = 0.5; alias [stanley, hall]: R = 1/2 -> 2/3
    assert score_answer("Stanley", ["G. Stanley Hall", "Stanley Hall"])["F1"] == pytest.approx(2 / 3)
    summary = score_answers(["Paris", "Rome", "x"], [["paris"], ["Milan"], []])
    assert summary == {"EM": 0.5, "F1": 0.5, "contains": 0.5, "questions": 2, "without_gold_answer": 1}
