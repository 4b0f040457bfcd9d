"""The OpenIE import (spectrag.extract.openie): records matched onto chunks (entities and
triples), malformed triples counted, bad files named, and the real MuSiQue file: importing it
reproduces its entity and triple counts, as entities alone and as a knowledge graph."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import shared_file

from spectrag.errors import CorpusError
from spectrag.extract.entities import entity_incidence, normalize_entity
from spectrag.extract.openie import load_openie, load_openie_entities
from spectrag.kg.graph import assemble

OPENIE = "openie_musique_train_gpt-3.5-turbo-1106_1890.json"


def _write(tmp_path, docs) -> str:
    path = tmp_path / "openie.json"
    path.write_text(json.dumps({"docs": docs}), encoding="utf-8")
    return str(path)


def test_records_match_chunks_and_triples_become_relations(tmp_path):
    texts = ["Alpha Bridge crosses the Drum.", "Alpha  Bridge crosses\nthe Drum.", "Beta was built by Gamma.", "Same text"]
    titles = ["A", "A2", "B", "S2"]
    docs = [
        {"title": "A", "text": "Alpha Bridge crosses the Drum.", "extracted_entities": ["Alpha Bridge", "Drum"],
         "extracted_triples": [["Alpha Bridge", "crosses", "Drum"], ["only two", "parts"]]},
        {"passage": "B\nBeta was built by Gamma.", "extracted_entities": ["Beta"],
         "extracted_triples": [["Beta", "built by", "Gamma"]]},
        {"title": "S2", "text": "Same text", "extracted_entities": ["Sigma"], "extracted_triples": []},
        {"title": "Z", "text": "no such passage", "extracted_entities": ["Zed"], "extracted_triples": [["Zed", "is", "z"]]},
    ]
    ext = load_openie(_write(tmp_path, docs), texts, titles)
    assert ext.facts == {"file": str(tmp_path / "openie.json"), "records": 4, "unmatched_records": 1,
                         "entity_mentions": 4, "triples": 3, "malformed_triples": 1}
    assert ext.mentions[0] == ["Alpha Bridge", "Drum"] and ext.mentions[1] == []  # exact text wins
    assert ext.mentions[2] == ["Beta"] and ext.mentions[3] == ["Sigma"]
    assert [(t.chunk, t.text) for t in ext.triples] == [(0, "Alpha Bridge crosses Drum"), (2, "Beta built by Gamma")]
    kg, _ = assemble(ext, len(texts))
    assert kg.keys == ["alpha bridge", "beta", "drum", "gamma", "sigma"]  # triple ends are entities too
    assert kg.incidence[2].indices.tolist() == [1, 3]  # chunk 2 describes Beta and Gamma


def test_whitespace_and_title_matching(tmp_path):
    texts = ["Same passage.", "Same   passage."]
    ext = load_openie(_write(tmp_path, [{"title": "T2", "text": "Same\npassage.", "extracted_entities": ["E"]}]),
                      texts, ["T1", "T2"])
    assert ext.mentions == [[], ["E"]]  # both match after whitespace normalization; the title decides


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "expected an object with a 'docs' list, got list"),
    ('{"docs": [3]}', r"docs\[0\] is not a JSON object"),
    ('{"docs": [{"text": "x", "extracted_triples": {}}]}', r"docs\[0\] field 'extracted_triples' is not a list"),
    ('{"docs": [{"title": "x"}]}', r"docs\[0\] has no string 'text'"),
    ("{oops", "invalid JSON at line 1"),
])
def test_bad_files_are_named(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=message):
        load_openie(path, ["x"], ["x"])
    with pytest.raises(CorpusError, match="no such OpenIE file"):
        load_openie(tmp_path / "missing.json", ["x"], ["x"])


def test_musique_openie_counts_are_reproduced():
    path = shared_file("musique", OPENIE)
    corpus = json.loads(shared_file("musique", "musique_train_corpus.json").read_text(encoding="utf-8"))
    docs = json.loads(path.read_text(encoding="utf-8"))["docs"]
    # independent counts from the raw file
    mentions = sum(len(d["extracted_entities"]) for d in docs)
    triples = [t for d in docs for t in d["extracted_triples"]]
    good = [t for t in triples if isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t)]
    assert (len(docs), mentions, len(triples)) == (1890, 17658, 17419)

    ext = load_openie(path, [p["text"] for p in corpus], [p["title"] for p in corpus])
    assert ext.facts["records"] == 1890 and ext.facts["unmatched_records"] == 0
    assert ext.facts["entity_mentions"] == mentions and ext.facts["triples"] == len(triples)
    assert ext.facts["malformed_triples"] == len(triples) - len(good) == 185
    assert len(ext.triples) == len(good)

    kg, drops = assemble(ext, len(corpus))  # no aliases: entities are exactly the distinct keys
    keys = {normalize_entity(e) for d in docs for e in d["extracted_entities"]}
    keys |= {normalize_entity(x) for t in good for x in (t[0], t[2])}
    keys.discard("")
    assert kg.n_entities == len(keys)
    relations = {(normalize_entity(s), " ".join(p.split()), normalize_entity(o), " ".join(f"{s} {p} {o}".split()))
                 for s, p, o in good if normalize_entity(s) and normalize_entity(o) and normalize_entity(s) != normalize_entity(o)}
    assert kg.n_relations == len(relations)
    assert drops["empty_endpoint"] + drops["self_loop"] + drops["duplicate"] + kg.n_relations == len(good)
    assert kg.adj_indices.shape[0] == 2 * kg.n_relations
    # every chunk describes the entities of its record
    assert int((kg.incidence.getnnz(axis=1) > 0).sum()) == sum(1 for d in docs if d["extracted_entities"] or d["extracted_triples"])


# --- entities alone (load_openie_entities), for the entity signal of the graph ----------------------


def _write_file(tmp_path, data, name="openie.json"):
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
    path = _write_file(tmp_path, {"docs": docs, "ents_by_doc": []})
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
    path = _write_file(tmp_path, content)
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
    # passages kept whole (the file has one record per passage; the default 256-token chunks split
    # the longest ones): chunk_size above the longest passage
    whole = ChunkConfig(chunk_size=1200, overlap=100)
    chunks = [c for d in load_documents(corpus) for c in chunk_document(d, whole)]
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
