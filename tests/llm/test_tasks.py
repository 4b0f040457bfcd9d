"""The LLM's jobs on the test server: outputs in the questions-file and OpenIE formats, malformed
answers counted and skipped (never raised), nothing lost on a re-run."""

from __future__ import annotations

from spectrag.extract.openie import openie_extraction
from spectrag.llm import LLMClient
from spectrag.llm.tasks import hyde_passages, openie_records, utility_questions
from spectrag.types import Chunk

TEXTS = ["The Veltra Bridge was designed by Ilse Marrow. It opened in 1907.",
         "Ilse Marrow was born in Cassel Reach. She studied at the University of Skarholt.",
         "The Morwen Star was built by Greywater Shipping Company.",
         "The Veltra Bridge was designed by Ilse Marrow. It opened in 1907."]  # a repeated passage
CHUNKS = [Chunk(f"d{i}", f"Title {i % 3}", (), "", t, len(t.split()), 0, len(t)) for i, t in enumerate(TEXTS)]


def test_utility_questions_in_the_questions_file_format(llm_config, llm_server):
    client = LLMClient(llm_config)
    questions, facts = utility_questions(CHUNKS, client, per_chunk=2)
    assert questions["1"] == ["Is it true that Ilse Marrow was born in Cassel Reach?",
                              "Is it true that She studied at the University of Skarholt?"]
    assert sorted(questions) == ["0", "1", "2", "3"] and questions["2"] == ["Is it true that The Morwen Star was built "
                                                                             "by Greywater Shipping Company?"]
    assert (facts["questions"], facts["malformed"], facts["model"]) == (7, 0, "fake-model")
    assert len(llm_server.requests) == 3  # the repeated passage is asked once (same prompt)


def test_malformed_questions_are_counted_and_skipped(llm_config, llm_server):
    llm_server.fail("bad_json", when="Cassel Reach")
    llm_server.fail("empty", when="Morwen Star")
    client = LLMClient(llm_config)
    questions, facts = utility_questions(CHUNKS, client, per_chunk=2)
    assert sorted(questions) == ["0", "3"]
    assert (facts["malformed"], facts["malformed_chunks"]) == (2, [1, 2])
    assert client.usage["utility_questions"].malformed == 2


def test_openie_records_read_back_by_the_openie_import(llm_config, llm_server):
    llm_server.fail("bad_triples", when="Morwen Star")
    llm_server.fail("bad_json", when="Cassel Reach")
    docs, facts = openie_records(CHUNKS, LLMClient(llm_config))
    assert [d["idx"] for d in docs] == [0, 2]  # chunk 3 repeats chunk 0; chunk 1's answer was cut short
    assert docs[0]["extracted_entities"] == ["The Veltra Bridge", "Ilse Marrow", "It"]
    assert docs[0]["extracted_triples"] == [["The Veltra Bridge", "is mentioned with", "Ilse Marrow"],
                                            ["Ilse Marrow", "is mentioned with", "It"]]
    assert docs[1]["extracted_triples"] == [["A", "rel", "B"]]
    assert (facts["malformed"], facts["malformed_triples"], facts["malformed_entities"]) == (1, 3, 1)
    ext = openie_extraction(docs, TEXTS, [c.title for c in CHUNKS], source="llm")
    assert ext.facts["unmatched_records"] == 0 and ext.facts["malformed_triples"] == 0
    assert {t.chunk for t in ext.triples} == {0, 2, 3}  # a record reaches every chunk with its text


def test_hyde_passages_fall_back_to_the_query(llm_config, llm_server):
    llm_server.fail("empty", when="second")
    client = LLMClient(llm_config)
    out = hyde_passages(["first question?", "second question?"], client)
    assert out == ["first question? The answer to this question is described here.", "second question?"]
    assert client.usage["hyde"].malformed == 1
