"""Named-document matching weighed by title specificity (spectrag.seed.titles): the specificity
against its definition on a corpus written here, generic titles ("Arguments", "Settings") naming
nothing, and the batched matcher against the per-query reference on the sample index."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from spectrag.cli.demo import sample_questions
from spectrag.config import BM25Config
from spectrag.index.lexical import BM25Index
from spectrag.seed.titles import TitleIndex, title_specificity

_ref = importlib.import_module("spectrag.reference.pipeline")

# 40 chunks: every one mentions arguments and settings; "veltra" is in one chunk, "harbour" and "toll" in 8
TITLES = ["Arguments"] * 10 + ["Settings"] * 10 + ["Veltra Bridge"] + ["Harbour Tolls"] * 3 + ["Misc"] * 16
TEXTS = [f"{t}\nThese arguments and settings configure part {i}." for i, t in enumerate(TITLES)]
for i in (22, 23, 30, 31, 32, 33, 34):
    TEXTS[i] += " The harbour toll applies."


@pytest.fixture(scope="module")
def bm25():
    return BM25Index.build(TEXTS, BM25Config())


def test_specificity_is_the_scaled_idf_of_the_rarest_term(bm25):
    n = len(TEXTS)
    spec = title_specificity(["Arguments", "Settings", "Veltra Bridge", "Harbour Tolls", "the", "zzzunknown"], bm25)
    df = {"argument": n, "setting": n, "veltra": 1, "harbour": 8}
    want = [math.log(n / df["argument"]) / math.log(n), 0.0, 1.0, math.log(n / df["harbour"]) / math.log(n), 0.0, 0.0]
    np.testing.assert_allclose(spec, want, atol=1e-12)


def test_document_frequency_counts_a_long_page_once(bm25):
    """With each chunk's document, a term's frequency counts documents: the 10 chunks titled
    "Arguments" are one page, so its title term is in as many documents as "settings"."""
    docs = np.array([{"Arguments": 0, "Settings": 1, "Veltra Bridge": 2, "Harbour Tolls": 3}.get(t, 4 + i - 24)
                     for i, t in enumerate(TITLES)])  # the "Misc" chunks (24..39) are documents 4..19
    n = len(set(docs.tolist()))  # 4 titled documents + 16 one-chunk ones
    spec = title_specificity(["Arguments", "Veltra Bridge", "Harbour Tolls"], bm25, docs)
    harbour_docs = 1 + 5  # its own page and the five one-chunk documents that mention it
    want = [0.0, 1.0, math.log(n / harbour_docs) / math.log(n)]
    np.testing.assert_allclose(spec, want, atol=1e-12)


def test_generic_titles_name_nothing(bm25):
    titles = TitleIndex(TITLES, bm25)
    q = ["Which arguments and settings does the Veltra Bridge take?", "What do the harbour tolls cost?"]
    every = titles.named(q).toarray() > 0
    specific = titles.named(q, min_specificity=0.5).toarray() > 0
    assert every[0, :20].all() and every[0, 20]  # without the bar: Arguments and Settings too
    assert specific[0].nonzero()[0].tolist() == [20]  # only the Veltra Bridge
    assert math.log(40 / 8) / math.log(40) < 0.5 and not specific[1].any()  # "harbour" in 8 of 40 chunks
    assert specific.sum() < every.sum()


@pytest.mark.parametrize("bar", [0.0, 0.3, 0.5, 0.7])
def test_batched_equals_reference_on_the_sample_index(sample_index, bar):
    questions = [q["question"] for q in sample_questions()] + ["What does the Veltra Bridge cost?"]
    codes: dict[str, int] = {}
    docs = np.array([codes.setdefault(c.doc_id, len(codes)) for c in sample_index.chunks])  # as the state numbers them
    titles = TitleIndex([c.title for c in sample_index.chunks], sample_index.bm25, docs)
    got = titles.named(questions, min_specificity=bar).tocsr()
    total = 0
    for b, text in enumerate(questions):
        want = _ref.named_chunks(sample_index, text, bar)
        assert set(got[b].indices.tolist()) == want, (bar, text)
        total += len(want)
    if bar <= 0.5:
        assert total > 0  # some questions name documents at this bar: the comparison can fail


@pytest.mark.parametrize("bar", [0.0, 0.5, 0.7])
def test_a_question_without_the_titles_it_names_equals_the_reference(sample_index, bar):
    questions = [q["question"] for q in sample_questions()] + ["What does the Veltra Bridge cost?"]
    codes: dict[str, int] = {}
    docs = np.array([codes.setdefault(c.doc_id, len(codes)) for c in sample_index.chunks])
    titles = TitleIndex([c.title for c in sample_index.chunks], sample_index.bm25, docs)
    got = titles.without_names(questions, min_specificity=bar)
    want = [_ref.without_names(sample_index, text, bar) for text in questions]
    assert got == want
    blanked = sum(g != " ".join(q.casefold().split()) for g, q in zip(got, questions))
    if bar <= 0.5:
        assert blanked > 0  # some titles are blanked: the comparison can fail


def test_without_names_blanks_only_the_names_that_name_something(bm25):
    titles = TitleIndex(TITLES, bm25)
    got = titles.without_names(["Which arguments does the  Veltra Bridge toll take?"], min_specificity=0.5)
    assert got == ["which arguments does the   toll take?"]  # "Arguments" is too common to name a page


@pytest.mark.parametrize("bar", [0.0, 0.5])
def test_reading_without_the_blanked_text_gives_the_same_names(sample_index, bar):
    questions = [q["question"] for q in sample_questions()] + ["What does the Veltra Bridge cost?", ""]
    titles = TitleIndex([c.title for c in sample_index.chunks], sample_index.bm25)
    named, rest, names = titles.read(questions, min_specificity=bar)
    named_only, none, names_only = titles.read(questions, min_specificity=bar, blanked=False)
    assert none is None and names_only == names and (named_only != named).nnz == 0
    # the names are what the blanked text lost: its characters and theirs make the question's
    for q, r, n in zip(questions, rest, names):
        assert sorted((r + n).replace(" ", "")) == sorted(q.casefold().replace(" ", ""))
    assert any(names)  # some questions name a document: the comparison can fail
