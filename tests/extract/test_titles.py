"""The title matcher (spectrag.extract.titles): whole words, case-insensitive, nested and
duplicate titles, and MuSiQue against a brute-force regex reference."""

from __future__ import annotations

import json
import re

from spectrag.extract.titles import title_key, TitleMatcher

TITLES = ["Ilse Marrow", "Skarholt", "University of Skarholt", "Time", "Oslo", "NRA", "Cassel Reach", "Água"]


def test_title_matcher_whole_word_case_insensitive():
    m = TitleMatcher(TITLES)
    got = m.find(
        [
            "The bridge was designed by ilse MARROW in 1889.",
            "Skarholters are not Skarholt; Skarholt's harbour is, and so is Skarholt-based.",
            "She studied at the University of Skarholt.",
            "time and Time again",  # a common word alone: ignored
            "The NRA runs trains.",  # shorter than 4 characters: ignored
            "OSLO, oslo and Oslo.",  # reported once
            "Cassel\nReach, then cassel  reach",  # whitespace runs and line breaks collapse
            "Marrowbone Ilse Marrowfield xSkarholt",  # no whole word
            "",
            "água fresca",  # casefolded non-ASCII
        ]
    )
    assert got == [[0], [1], [2], [], [], [4], [6], [], [], [7]]


def test_title_matcher_nested_and_duplicates():
    text = ["The University of Skarholt is in Skarholt."]
    assert TitleMatcher(TITLES).find(["The University of Skarholt."]) == [[2]]
    assert TitleMatcher(TITLES).find(text) == [[1, 2]]  # the second Skarholt stands alone
    assert TitleMatcher(TITLES, keep_nested=True).find(["The University of Skarholt."]) == [[1, 2]]
    # equal titles (after casefolding) are all reported, each once
    assert TitleMatcher(["Paris", "PARIS", "Lyon"]).find(["paris, Paris and lyon"]) == [[0, 1, 2]]
    # overlapping (not nested) titles both count
    m = TitleMatcher(["Mount Harrowtop", "Harrowtop Observatory"])
    assert m.find(["on Mount Harrowtop Observatory grounds"]) == [[0, 1]]
    assert TitleMatcher([]).find(["anything", "else"]) == [[], []]
    assert TitleMatcher(["Water", "Abc", "  "]).n_patterns == 0


def _reference_titles(titles: list[str], texts: list[str]) -> list[list[int]]:
    """Brute force: every title x every text with a regex (nested matches kept)."""
    keys = [title_key(t) for t in titles]
    out = []
    for text in texts:
        t = " ".join(text.casefold().split())
        found = []
        for i, key in enumerate(keys):
            if len(key) < 4 or key in _common() or key not in t:
                continue
            left = r"(?<!\w)" if re.match(r"\w", key[0]) else ""
            right = r"(?!\w)" if re.match(r"\w", key[-1]) else ""
            if re.search(left + re.escape(key) + right, t):
                found.append(i)
        out.append(found)
    return out


def _common():
    from spectrag.extract.titles import COMMON_WORDS

    return COMMON_WORDS


def test_title_matcher_on_musique_matches_brute_force():
    from conftest import shared_file

    corpus = json.loads(shared_file("musique", "musique_train_corpus.json").read_text(encoding="utf-8"))
    titles = [r["title"] for r in corpus]
    texts = [r["text"] for r in corpus]
    m = TitleMatcher(titles, keep_nested=True)
    got = m.find(texts)
    assert got[:200] == _reference_titles(titles, texts[:200])
    assert sum(map(len, got)) > 1000
    # dropping nested matches only removes titles
    plain = TitleMatcher(titles).find(texts)
    assert all(set(a) <= set(b) for a, b in zip(plain, got))
