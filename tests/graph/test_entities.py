"""Entity extraction, the OpenIE import and the chunk-entity incidence: hand-made texts with the
expected entities written out, the sample corpus, and MuSiQue with its OpenIE file."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from spectrag.errors import CorpusError
from spectrag.extract.entities import entity_incidence, EntityIncidence, extract_entities, normalize_entity
from spectrag.extract.openie import load_openie_entities

OPENIE = "openie_musique_train_gpt-3.5-turbo-1106_1890.json"


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


# --- OpenIE import ---------------------------------------------------------------------------


def _write(tmp_path, data, name="openie.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_openie_matching_rules(tmp_path):
    docs = [
        {"title": "A", "text": "Alpha text.", "extracted_entities": ["The Alpha", "alpha ", "X", "..."]},
        {"title": "B", "text": "Beta text here.", "extracted_entities": ["Beta"]},  # whitespace differs
        {"title": "C2", "text": "Same text.", "extracted_entities": ["Gamma"]},  # title picks chunk 3
        {"title": "Z", "text": "Same text.", "extracted_entities": ["Delta"]},  # no title: both
        {"title": "Q", "text": "Nowhere.", "extracted_entities": ["q"]},  # unmatched
        {"title": "E", "passage": "E\nEpsilon text.", "extracted_entities": ["Eps"]},  # passage only
    ]
    path = _write(tmp_path, {"docs": docs, "ents_by_doc": []})
    texts = ["Alpha text.", "Beta  text\nhere.", "Same text.", "Same text.", " Epsilon text. "]
    titles = ["A", "B", "C1", "C2", "E"]
    ents, unmatched = load_openie_entities(path, texts, titles)
    assert ents == [["alpha", "x"], ["beta"], ["delta"], ["delta", "gamma"], ["eps"]]
    assert unmatched == 1


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "invalid JSON at line 1"),
        ([{"title": "a", "text": "b"}], "expected an object with a 'docs' list, got list"),
        ({"documents": []}, "expected an object with a 'docs' list"),
        ({"docs": ["text"]}, "docs[0] is not a JSON object"),
        ({"docs": [{"title": "a", "extracted_entities": []}]}, "docs[0] has no string 'text'"),
        ({"docs": [{"title": "a", "text": "b", "extracted_entities": "x"}]}, "'extracted_entities' is not a list"),
        ({"docs": [{"title": 3, "text": "b", "extracted_entities": []}]}, "'title' is not a string"),
    ],
)
def test_openie_bad_files(tmp_path, content, message):
    path = _write(tmp_path, content)
    with pytest.raises(CorpusError) as info:
        load_openie_entities(path, ["b"], ["a"])
    assert str(path) in str(info.value) and message in str(info.value)


def test_openie_missing_file(tmp_path):
    with pytest.raises(CorpusError, match="no such OpenIE file"):
        load_openie_entities(tmp_path / "absent.json", [], [])


def test_openie_musique_reproduces_file_counts():
    from conftest import shared_file

    from spectrag.config import ChunkConfig
    from spectrag.index.chunk import chunk_document
    from spectrag.index.load import load_documents

    corpus = shared_file("musique", "musique_train_corpus.json")
    openie = shared_file("musique", OPENIE)
    chunks = [c for d in load_documents(corpus) for c in chunk_document(d, ChunkConfig())]
    assert len(chunks) == 1890
    ents, unmatched = load_openie_entities(openie, [c.text for c in chunks], [c.title for c in chunks])
    assert unmatched == 0 and len(ents) == 1890

    data = json.loads(openie.read_text(encoding="utf-8"))
    assert len(data["docs"]) == 1890
    direct = {}
    for doc in data["docs"]:
        keys = {normalize_entity(e) for e in doc["extracted_entities"]} - {""}
        direct[doc["text"]] = sorted(keys)
    assert len({e for keys in direct.values() for e in keys}) == len({e for x in ents for e in x})
    assert sum(map(len, direct.values())) == sum(map(len, ents))
    assert all(ents[i] == direct[c.text] for i, c in enumerate(chunks))

    inc = entity_incidence(ents)
    assert inc.matrix.shape == (1890, len(inc.vocab))
    df = np.asarray(inc.matrix.sum(axis=0)).ravel()
    assert df.min() >= 2 and df.max() <= 50


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
