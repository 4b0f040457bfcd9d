"""Knowledge-graph assembly (spectrag.kg.graph): entity merging, relation COO and the adjacency.
(The LLM-free source that feeds it: tests/extract/test_relations.py.)"""

from __future__ import annotations

import numpy as np

from spectrag.kg.graph import adjacency, assemble
from spectrag.types import Extraction, Triple


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
