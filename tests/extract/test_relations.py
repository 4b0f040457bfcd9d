"""The LLM-free knowledge-graph source (spectrag.extract.relations): sentences, co-occurrence
relations with the sentence as relation text, the window over a long sentence, acronym
aliases."""

from __future__ import annotations

import pytest

from spectrag.extract.relations import COOCCURS, acronym_aliases, extract, split_sentences

TEXTS = [
    "The Northern Rail Authority (NRA) was founded in Skarholt. Jan Philip Solovej chaired the NRA in 1912.",
    "A station at Brayle lies on the Coastal Line.\nThe Coastal Line reached Tollsund in 1907.",
]


def test_split_sentences():
    assert split_sentences("A b. C d!  E f?\n\nG h.\n- item one\n") == ["A b.", "C d!", "E f?", "G h.", "- item one"]
    assert split_sentences("   ") == []


def test_extract_cooccurrence_relations_use_the_sentence():
    ext = extract(TEXTS, window=3)
    assert ext.facts["sentences"] == 4
    # entities per chunk, the sentence's own spelling
    assert set(ext.mentions[0]) >= {"Northern Rail Authority", "NRA", "Skarholt", "Jan Philip Solovej", "1912"}
    assert set(ext.mentions[1]) >= {"Brayle", "Coastal Line", "Tollsund", "1907"}
    first = [t for t in ext.triples if t.text == "The Northern Rail Authority (NRA) was founded in Skarholt."]
    assert {(t.subject, t.object) for t in first} == {
        ("Northern Rail Authority", "NRA"), ("Northern Rail Authority", "Skarholt"), ("NRA", "Skarholt")}
    assert all(t.predicate == COOCCURS and t.chunk == 0 for t in first)
    second = {(t.subject, t.object) for t in ext.triples if t.text.startswith("A station")}
    assert second == {("Brayle", "Coastal Line")}  # nothing crosses a sentence boundary
    assert all(t.text in split_sentences(TEXTS[t.chunk]) for t in ext.triples)


def test_window_bounds_the_links_of_a_long_sentence():
    text = "Anna, Bert, Carl, Dora, Emil, Fritz and Gustav met in Hald."
    ext = extract([text], window=2)
    keys = [m.casefold() for m in ext.mentions[0]]
    n = len(keys)
    assert n >= 6
    assert len(ext.triples) == sum(min(2, n - 1 - i) for i in range(n))
    with pytest.raises(ValueError, match="window must be >= 1"):
        extract([text], window=0)


def test_acronym_aliases():
    aliases, ambiguous = acronym_aliases([
        TEXTS[0],
        "She studied at the University of Skarholt (UoS) and at the Harbour Board (HB).",
        "The Hennick Basin (HB) floods. The European Union (EU) met. Random words (XYZ) here.",
    ])
    assert aliases == {"nra": "northern rail authority", "uos": "university of skarholt", "eu": "european union"}
    assert ambiguous == 1  # HB: two long forms
