"""Knowledge-graph assembly and the LLM-free source: sentences, co-occurrence relations with the
sentence as relation text, acronym aliases, entity merging, relation COO and the adjacency."""

from __future__ import annotations

import numpy as np
import pytest

from spectrag.extract.relations import COOCCURS, acronym_aliases, extract, split_sentences
from spectrag.types import Extraction, Triple
from spectrag.kg.graph import adjacency, assemble

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


def test_assemble_merges_entities_and_deduplicates_relations():
    ext = Extraction(
        mentions=[["The Journal", "journal", "NRA"], ["Journal", "Northern Rail Authority"], []],
        triples=[
            Triple(0, "The Journal", "published by", "NRA", "The Journal published by NRA"),
            Triple(1, "Journal", "published by", "Northern Rail Authority", "Journal published by Northern Rail Authority"),
            Triple(1, "journal", "published by", "NRA", "The Journal published by NRA"),  # duplicate after merging
            Triple(2, "NRA", "is", "Northern Rail Authority", "NRA is Northern Rail Authority"),  # self-loop via alias
            Triple(2, "...", "is", "x", "... is x"),  # empty key
        ],
    )
    kg, drops = assemble(ext, 3, {"nra": "northern rail authority"})
    assert kg.keys == ["journal", "northern rail authority"]
    assert kg.names[0] in ("Journal", "The Journal")  # most frequent surface form
    assert "NRA" in kg.aliases[1] or "nra" in kg.aliases[1]
    assert kg.alias_map()["nra"] == 1 and kg.alias_map()["journal"] == 0
    assert drops == {"empty_endpoint": 1, "self_loop": 1, "duplicate": 1}
    assert kg.n_relations == 2
    assert kg.rel_subject.tolist() == [0, 0] and kg.rel_object.tolist() == [1, 1]
    assert kg.rel_chunk.tolist() == [0, 1]
    assert kg.predicates == ["published by"] and len(kg.texts) == 2
    # incidence: chunk 2 describes the ends of its (dropped) self-loop, not the empty one
    assert kg.incidence.toarray().tolist() == [[1, 1], [1, 1], [0, 1]]
    assert kg.line(0) == f"{kg.names[0]} published by {kg.names[1]}"


def test_adjacency_holds_both_directions_sorted():
    subject, obj = np.array([2, 0, 2, 1]), np.array([0, 1, 0, 3])
    indptr, nbr, rel = adjacency(4, subject, obj)
    pairs = [(u, int(nbr[p]), int(rel[p])) for u in range(4) for p in range(indptr[u], indptr[u + 1])]
    assert pairs == [(0, 1, 1), (0, 2, 0), (0, 2, 2), (1, 0, 1), (1, 3, 3), (2, 0, 0), (2, 0, 2), (3, 1, 3)]
