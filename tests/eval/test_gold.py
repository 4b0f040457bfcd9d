"""Question loaders and gold mapping on each corpus format's fixture (tests/fixtures/formats),
with question files written beside a copy of the corpus: mapped, ambiguous and missing items
are all counted, none dropped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, shared_file

from spectrag.config import ChunkConfig
from spectrag.errors import CorpusError
from spectrag.eval.datasets import load_dataset
from spectrag.eval.gold import chunk_gold, map_gold, unit_table
from spectrag.index.chunk import chunk_document
from spectrag.index.load import iter_documents

FORMATS = FIXTURES / "formats"


def _map(ds):
    docs = list(iter_documents(ds.corpus, ds.fmt))
    chunks = [c for d in docs for c in chunk_document(d, ChunkConfig())]
    table = unit_table(docs, chunks, ds.fmt)
    return table, map_gold(ds.questions, table)


def _gold_names(table, gold, b):
    return [gold.names[u] for u in gold.units[b].tolist() if u >= 0]


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_musique_by_title_and_text(tmp_path):
    shutil.copy(FORMATS / "musique.json", tmp_path / "mq_corpus.json")
    film = "Lake Orun is also the name of a 1970 film."
    _write(tmp_path / "mq.json", [
        {"id": "2hop__1_2", "question": "Which stream feeds Lake Orun?", "paragraphs": [
            {"idx": 0, "title": "Lake Orun", "paragraph_text": "Lake Orun is a lake fed by the Sava stream.", "is_supporting": True},
            {"idx": 1, "title": "Sava stream", "paragraph_text": "The Sava stream rises on Mount Tek.", "is_supporting": True},
            {"idx": 2, "title": "Lake Orun", "paragraph_text": film, "is_supporting": False}]},
        {"id": "3hop1__3_4_5", "question": "What film?", "paragraphs": [
            {"idx": 0, "title": "Lake Orun", "paragraph_text": film, "is_supporting": True},
            {"idx": 1, "title": "Lake Orun", "paragraph_text": "A passage the corpus lacks.", "is_supporting": True}]},
    ])
    ds = load_dataset("musique", tmp_path)  # the folder; the questions file works too
    assert load_dataset("musique", tmp_path / "mq.json").questions == ds.questions
    assert [q.groups for q in ds.questions] == [{"hops": "2hop"}, {"hops": "3hop"}]
    table, gold = _map(ds)
    # the two "Lake Orun" passages are told apart by their text
    assert _gold_names(table, gold, 0) == ["0", "1"] and _gold_names(table, gold, 1)[0] == "2"
    assert gold.report["mapped"] == 3 and gold.report["unmapped"] == 1
    assert gold.report["unmapped_reasons"] == {"not found": 1}
    assert gold.report["unmapped_examples"] == [{"question": "3hop1__3_4_5", "item": "Lake Orun", "reason": "not found"}]
    assert gold.n_gold.tolist() == [2, 2]  # the unmapped item stays in the denominator
    assert _gold_names(table, gold, 1)[1] == "unmapped:3hop1__3_4_5:1"


@pytest.mark.parametrize("name", ["2wiki", "hotpotqa"])
def test_supporting_facts_formats(tmp_path, name):
    shutil.copy(FORMATS / f"{name}.json", tmp_path / f"{name}_corpus.json")
    questions = [{
        "_id": "a1", "question": "Where does the stream that feeds Lake Orun rise?", "type": "compositional", "level": "hard",
        "supporting_facts": [["Sava stream", 0], ["Lake Orun", 0], ["Sava stream", 0]],
        # sentences split differently from the corpus text: whitespace does not matter
        "context": [["Sava stream", ["The Sava stream rises", "on Mount Tek."]],
                    ["Lake Orun", ["Lake Orun is a lake fed by the Sava stream."]]],
    }, {
        "_id": "a2", "question": "How high is Mount Tek?", "type": "bridge", "level": "easy",
        "supporting_facts": [["Mount Tek", 0], ["Lake Orun", 0]], "context": [],
    }]
    _write(tmp_path / f"{name}.json", questions)
    ds = load_dataset(name, tmp_path / f"{name}.json")
    table, gold = _map(ds)
    r = gold.report
    if name == "2wiki":  # corpus: two "Lake Orun" passages, no "Mount Tek"
        assert ds.questions[0].groups == {"type": "compositional"}
        assert _gold_names(table, gold, 0) == ["1", "0"]
        assert r["mapped_by"] == {"title+text": 2}
        # a2: Mount Tek is absent, "Lake Orun" alone names two passages
        assert r["unmapped_reasons"] == {"not found": 1, "ambiguous title (unique)": 1}
    else:  # hotpotqa corpus: title -> sentences, no "Lake Orun"
        assert ds.questions[0].groups == {"type": "compositional", "level": "hard"}
        assert _gold_names(table, gold, 1)[0] == "Mount_Tek"  # by its unique title (no context given)
        assert r["mapped_by"] == {"title+text": 1, "title (unique)": 1}
        assert r["unmapped_reasons"] == {"not found": 2}
    assert r["gold_items"] == 4 and r["mapped"] + r["unmapped"] == 4
    assert gold.n_gold.tolist() == [2, 2]


def test_multihop_rag(tmp_path):
    shutil.copy(FORMATS / "multihop_rag_corpus.json", tmp_path / "corpus.json")
    ev = {"title": "Storm hits coast", "url": "https://news.example/storm", "source": "Example Weather", "fact": "A storm hit."}
    _write(tmp_path / "MultiHopRAG.json", [
        {"query": "Did the storm and the profit happen in the same month?", "question_type": "temporal_query",
         "evidence_list": [ev, {"title": "Chipmaker posts record profit", "url": "https://news.example/chip"}, ev]},
        {"query": "Which article mentions a volcano?", "question_type": "null_query", "evidence_list": []},
    ])
    ds = load_dataset("multihop-rag", tmp_path)
    assert [q.groups["type"] for q in ds.questions] == ["temporal", "null"]
    table, gold = _map(ds)
    assert _gold_names(table, gold, 0) == ["1", "0"]  # the repeated evidence article counts once
    assert gold.report["mapped_by"] == {"title+url": 3} and gold.report["duplicate_items"] == 1
    assert gold.report["questions_without_gold"] == 1 and gold.n_gold.tolist() == [2, 0]


def test_beir_graded_qrels(tmp_path):
    shutil.copy(FORMATS / "beir" / "corpus.jsonl", tmp_path / "corpus.jsonl")
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "fever drug"}\n{"_id": "q2", "text": "pain"}\n'
                                             '{"_id": "q3", "text": "not judged"}\n', encoding="utf-8")
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t1\nq2\td2\t0\nq2\tdx\t1\n",
                                                 encoding="utf-8")
    ds = load_dataset("beir", tmp_path)
    assert [q.qid for q in ds.questions] == ["q1", "q2"]  # the questions of the qrels split
    table, gold = _map(ds)
    assert _gold_names(table, gold, 0) == ["d1", "d2"] and gold.gains[0, :2].tolist() == [2.0, 1.0]
    assert gold.report["unmapped"] == 1 and gold.n_gold.tolist() == [2, 1]  # dx is not in the corpus


def test_beir_question_types_from_metadata(tmp_path):
    shutil.copy(FORMATS / "beir" / "corpus.jsonl", tmp_path / "corpus.jsonl")
    (tmp_path / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "fever drug", "metadata": {"type": "two-doc", "answer": "x"}}\n'
        '{"_id": "q2", "text": "pain", "metadata": {"answer": "y"}}\n', encoding="utf-8")
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("q1\td1\t1\nq1\td2\t1\nq2\td2\t1\n", encoding="utf-8")
    ds = load_dataset("beir", tmp_path)
    assert [q.groups for q in ds.questions] == [{"type": "two-doc"}, {"type": "none"}]
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "fever drug"}\n{"_id": "q2", "text": "pain"}\n',
                                            encoding="utf-8")
    assert all(q.groups == {} for q in load_dataset("beir", tmp_path).questions)  # no types: no table


def test_sample_gold_documents_and_chunk_level():
    ds = load_dataset("sample")
    assert len(ds.questions) == 12 and {q.groups["type"] for q in ds.questions} == {"2hop", "3hop", "comparison"}
    table, gold = _map(ds)
    assert gold.report["unmapped"] == 0 and gold.report["mapped_by"] == {"document id": gold.report["gold_items"]}
    assert gold.report["gold_units_split_into_chunks"] > 0  # Markdown documents split by section
    chunk_level = chunk_gold(gold, table, len(table.chunk_unit))
    for b in range(len(ds.questions)):
        units = {u for u in gold.units[b].tolist() if u >= 0}
        chunks = {c for c in chunk_level.units[b].tolist() if c >= 0}
        assert chunks == {c for u in units for c in table.unit_chunks[u]}


def test_real_musique_maps_every_supporting_paragraph():
    qfile = shared_file("musique", "musique_train.json")
    ds = load_dataset("musique", qfile)
    table, gold = _map(ds)
    assert gold.report["gold_items"] == 237 and gold.report["mapped_by"] == {"title+text": 237}
    assert table.n_units == 1890
    assert {q.groups["hops"] for q in ds.questions} == {"2hop", "3hop", "4hop"}


def test_index_of_another_corpus_is_refused():
    ds = load_dataset("sample")
    docs = list(iter_documents(ds.corpus, ds.fmt))
    chunks = [c for d in docs for c in chunk_document(d, ChunkConfig())]
    other = list(iter_documents(FORMATS / "musique.json", "musique"))
    with pytest.raises(CorpusError, match="which the dataset corpus lacks"):
        unit_table(other, chunks, "musique")


@pytest.mark.parametrize("name, setup, match", [
    ("musique", lambda p: None, "expected exactly one \\*_corpus.json"),
    ("musique", lambda p: _write(p / "x_corpus.json", []), "questions file of dataset 'musique' not found"),
    ("beir", lambda p: None, "no corpus.jsonl"),
    ("multihop-rag", lambda p: None, "MultiHopRAG.json"),
    ("nope", lambda p: None, "unknown dataset 'nope'"),
])
def test_bad_dataset_folders_name_the_problem(tmp_path, name, setup, match):
    setup(tmp_path)
    with pytest.raises(CorpusError, match=match):
        load_dataset(name, tmp_path)


def test_bad_question_record_names_the_field(tmp_path):
    shutil.copy(FORMATS / "musique.json", tmp_path / "q_corpus.json")
    _write(tmp_path / "q.json", [{"id": "1", "paragraphs": []}])
    with pytest.raises(CorpusError, match="question 0 has no str field 'question'"):
        load_dataset("musique", tmp_path)
