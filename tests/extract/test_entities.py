"""Entity extraction and the chunk-entity incidence (spectrag.extract.entities): hand-made texts
with the expected entities written out, the sample corpus and MuSiQue; and the large-corpus paths
held to the plain ones: the entity frequency cap (products linear in n), the candidate matcher
against ``finditer``, extraction in a process pool. (Importing OpenIE entities:
tests/extract/test_openie.py; entity edges: tests/graph/test_signals.py.)"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from spectrag.extract import entities as ent
from spectrag.extract.entities import entity_incidence, EntityIncidence, extract_entities, normalize_entity


def test_normalize_entity():
    assert normalize_entity("  The  Northern Rail\nAuthority.") == "northern rail authority"
    assert normalize_entity("“Quoted”") == "quoted"
    assert normalize_entity("THE Who") == "who"
    assert normalize_entity("the") == "the"
    assert normalize_entity("Theatre Royal") == "theatre royal"
    assert normalize_entity("C++") == "c++"
    assert normalize_entity("(Skarholt),") == "skarholt"
    assert normalize_entity("...") == ""


HAND = [
    (
        "The Northern Rail Authority (NRA) was founded on 4 May 1912 in Skarholt. Jan Philip "
        "Solovej studied at the University of Skarholt in March 1911.",
        ["1911", "1912", "4 may 1912", "jan philip solovej", "march 1911", "northern rail authority",
         "nra", "skarholt", "university of skarholt"],
    ),
    (
        "Its population was 23,400 in 2021; the index is 1.355 and 42 boats sail. The Aurand "
        "period (1702–1822) ended. However, Venning left.",
        ["1.355", "1702", "1822", "2021", "23,400", "aurand", "venning"],
    ),
    (
        "Skarholt is the capital. In Tollsund, the Moot met on Monday, January 5, 1920, and in the "
        "1920s. Order of the Gannet winners: Åsa Venning and Pieter Quell.",
        ["1920", "1920s", "5 january 1920", "moot", "order of the gannet", "pieter quell", "tollsund",
         "åsa venning", "åsa venning and pieter quell"],
    ),
    (
        "## 2.1 Conquest and administration\n\n- Brayle station opened.\n| Station | Hennick |\n"
        "The HCR ran trains. St. Orla's Church stands in Tollsund.",
        ["hcr", "orla's church", "tollsund"],
    ),
    ("", []),
    ("no capitals, 12 numbers or dates here.", []),
]


def test_extract_entities_hand_made():
    got = extract_entities([text for text, _ in HAND])
    for (text, expected), entities in zip(HAND, got):
        assert entities == expected, text


def test_extract_entities_with_titles():
    titles = ["Ilse Marrow", "River Drüm", "Skarholt", "Water", "Lake Sorrel"]
    got = extract_entities(
        ["The bridge by Ilse Marrow crosses the river drüm near skarholt and water.", "Nothing."], titles
    )
    assert got == [["ilse marrow", "river drüm", "skarholt"], []]
    assert extract_entities([]) == [] and extract_entities(["x"], []) == [[]]


@pytest.fixture(scope="module")
def sample_chunks():
    from spectrag.config import ChunkConfig
    from spectrag.cli.demo import sample_corpus
    from spectrag.index.chunk import chunk_document
    from spectrag.index.load import load_documents

    return [c for d in load_documents(sample_corpus()) for c in chunk_document(d, ChunkConfig())]


def test_sample_corpus_entities(sample_chunks):
    texts = [c.text for c in sample_chunks]
    titles = sorted({c.title for c in sample_chunks})
    ents = extract_entities(texts, titles)
    assert all(e == sorted(set(e)) for e in ents)
    by_doc = {}
    for c, e in zip(sample_chunks, ents):
        by_doc.setdefault(c.doc_id, set()).update(e)
    assert {"ilse marrow", "veltra bridge", "9 september 1893", "1907", "river drüm"} <= by_doc["veltra_bridge.txt"]
    assert {"nra", "northern rail authority", "hollin coast railway", "hcr", "1 june 1889"} <= by_doc["coastal_line.md"]
    assert {"23,400", "cassel reach", "vmtc", "hollin sea", "2021"} <= by_doc["cassel_reach.txt"]
    inc = entity_incidence(ents, max_df=0.2, min_df=2)
    col = inc.vocab.index("ilse marrow")
    holders = {sample_chunks[i].doc_id for i in inc.matrix[:, col].nonzero()[0]}
    assert {"veltra_bridge.txt", "ilse_marrow.md"} <= holders


def test_extractor_on_musique():
    from conftest import shared_file

    corpus = json.loads(shared_file("musique", "musique_train_corpus.json").read_text(encoding="utf-8"))
    texts = [r["text"] for r in corpus]
    titles = [r["title"] for r in corpus]
    ents = extract_entities(texts, titles)  # throughput is measured in bench/bench_graph.py
    mean = sum(map(len, ents)) / len(ents)
    assert 5 < mean < 25
    first = ents[0]  # Journal of Mathematical Physics
    assert {"jan philip solovej", "university of copenhagen", "january 1960", "1.355",
            "american institute of physics", "journal of mathematical physics"} <= set(first)


# --- incidence -------------------------------------------------------------------------------


def test_entity_incidence_exact():
    entities = [["a", "b", "c"], ["a", "b"], ["a", "d"], ["b", "b"], []]
    inc = entity_incidence(entities, max_df=3, min_df=2)
    assert isinstance(inc, EntityIncidence)
    assert inc.vocab == ["a", "b"] and inc.dropped_frequent == 0
    assert sp.isspmatrix_csr(inc.matrix) and inc.matrix.dtype == np.float32
    assert inc.matrix.toarray().tolist() == [[1, 1], [1, 1], [1, 0], [0, 1], [0, 0]]
    assert np.allclose(inc.idf, [math.log(5 / 3)] * 2) and inc.idf.shape == (2,)

    tight = entity_incidence(entities, max_df=2, min_df=2)
    assert tight.vocab == [] and tight.dropped_frequent == 2 and tight.matrix.shape == (5, 0)
    loose = entity_incidence(entities, max_df=5, min_df=1)
    assert loose.vocab == ["a", "b", "c", "d"]
    assert np.allclose(loose.idf, np.log(5 / np.array([3, 3, 1, 1])))


def test_entity_incidence_fraction_has_a_floor():
    n = 200
    entities = [[] for _ in range(n)]
    for i in range(120):
        entities[i].append("common")
    for i in range(0, 200, 5):
        entities[i].append("mid")  # 40 chunks
    entities[7].append("rare")
    entities[8].append("pair")
    entities[9].append("pair")
    default = entity_incidence(entities)  # 0.01 * 200 = 2, floor 50
    assert default.vocab == ["mid", "pair"] and default.dropped_frequent == 1
    assert entity_incidence(entities, max_df=0.5).vocab == ["mid", "pair"]  # limit 100 < 120
    assert entity_incidence(entities, max_df=0.7).vocab == ["common", "mid", "pair"]
    assert entity_incidence(entities, max_df=40).vocab == ["mid", "pair"]
    assert entity_incidence(entities, max_df=39).vocab == ["pair"]
    assert entity_incidence(entities, max_df=39).dropped_frequent == 2
    assert entity_incidence(entities, min_df=3, max_df=1.0).vocab == ["common", "mid"]


@pytest.mark.parametrize("kwargs", [{"max_df": 0.0}, {"max_df": 1.5}, {"max_df": 0}, {"min_df": 0}, {"max_df": "x"}])
def test_entity_incidence_rejects_bad_limits(kwargs):
    with pytest.raises(ValueError):
        entity_incidence([["a"], ["a"]], **kwargs)


def test_entity_incidence_empty():
    inc = entity_incidence([])
    assert inc.matrix.shape == (0, 0) and inc.vocab == [] and inc.idf.shape == (0,)


# --- large-corpus paths ------------------------------------------------------------------------


def _entity_lists(n: int, seed: int) -> list[list[str]]:
    """Local entities (groups of 40 chunks) plus 5 corpus-wide ones in ~10 % of chunks each."""
    rng = np.random.default_rng(seed)
    lists = []
    for i in range(n):
        local = {f"l{i // 40}-{j}" for j in rng.integers(0, 12, 3)}
        wide = {f"w{j}" for j in range(5) if rng.random() < 0.1}
        lists.append(sorted(local | wide))
    return lists


def _products(inc: ent.EntityIncidence) -> int:
    df = np.diff(inc.matrix.tocsc().indptr)
    return int((df.astype(np.int64) ** 2).sum())  # scalar products of X X^T


def test_entity_cap_makes_the_products_linear_in_n():
    capped, frac = {}, {}
    for n in (2000, 4000, 8000):
        lists = _entity_lists(n, seed=n)
        capped[n] = ent.entity_incidence(lists, max_df=0.2, max_count=60)
        frac[n] = ent.entity_incidence(lists, max_df=0.2)
        assert _products(capped[n]) <= 60 * capped[n].matrix.nnz  # the bound the cap gives
        assert capped[n].dropped_frequent == 5 and not any(v.startswith("w") for v in capped[n].vocab)
    # with the cap the work per chunk stays flat; a fractional limit keeps the wide entities (n^2)
    per_chunk = [_products(capped[n]) / n for n in (2000, 4000, 8000)]
    assert max(per_chunk) <= 1.2 * min(per_chunk)
    assert _products(frac[8000]) / _products(frac[2000]) > 10


def test_entity_incidence_max_count_is_an_absolute_limit():
    lists = [["a", "b"]] * 30 + [["b", "c"]] * 30
    assert ent.entity_incidence(lists, max_df=100).vocab == ["a", "b", "c"]
    assert ent.entity_incidence(lists, max_df=100, max_count=30).vocab == ["a", "c"]
    assert ent.entity_incidence(lists, max_df=20, max_count=30).vocab == []  # the tighter limit wins
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_count"):
            ent.entity_incidence(lists, max_count=bad)


def _texts(seed: int, count: int) -> list[str]:
    rng = np.random.default_rng(seed)
    pieces = ["the", "of", "The", "Skarholt", "University of Skarholt", "4 May 1912", "May 4, 1912", "March 1911",
              "1,234", "3.14", "1907", "1920s", "NRA", "HCR2", "Émile Zola", "Ωmega", "١٢٣", "McDonald's", "St. Orla's Church",
              "Orsby and Gull Bay", "x2Y", "—", ".", "\n", "## 2.1 Conquest", "|", "J. Smith", "in", "Jean-Paul"]
    return [" ".join(pieces[j] for j in rng.integers(0, len(pieces), 40)) for _ in range(count)]


def test_candidate_matcher_equals_finditer():
    for text in _texts(0, 300):
        got = [(m.span(), m.lastgroup) for m in ent._matches(text)]
        want = [(m.span(), m.lastgroup) for m in ent._PATTERN.finditer(text)]
        assert got == want


def test_extract_entities_in_a_pool_equals_serial():
    texts = _texts(1, 4200)  # two blocks of 4096
    titles = ["University of Skarholt", "Gull Bay"]
    assert ent.extract_entities(texts, titles, workers=2) == ent.extract_entities(texts, titles, workers=1)
