"""BM25 statistics from stored token ids (spectrag.index.bm25_scores) and BM25Index.update:
removing and adding chunks gives, file for file, the index bm25s builds from scratch on the
final texts (document frequencies, lengths, mean length, vocabulary numbering, every score
bitwise), for every bm25s method, with and without stemming and stopwords."""

from __future__ import annotations

import numpy as np
import pytest

from spectrag.config import BM25Config
from spectrag.errors import CorpusError
from spectrag.index.bm25_scores import first_use_order, score_matrix, select_tokens
from spectrag.index.lexical import BM25Index

from test_lexical import METHODS, NEW_ONLY, QUERIES, TOKENIZATION, assert_same_index, synthetic_texts


def assert_identical(a: BM25Index, b: BM25Index) -> None:
    """Same vocabulary (numbering included), token ids and matrix arrays, bit for bit."""
    assert a.vocab == b.vocab
    for x, y in zip(a.tokens, b.tokens):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for part in ("indptr", "indices", "data"):
        x, y = getattr(a.matrix, part), getattr(b.matrix, part)
        np.testing.assert_array_equal(x, y, err_msg=part)
    assert a.matrix.data.dtype == b.matrix.data.dtype == np.float32


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("tokenization", TOKENIZATION)
def test_score_matrix_is_bm25s_bit_for_bit(method, tokenization):
    config = BM25Config(method=method, **TOKENIZATION[tokenization])
    built = BM25Index.build(synthetic_texts(80, seed=11, extra=NEW_ONLY), config)
    indptr, ids = built.tokens
    ours = score_matrix(ids, indptr, len(built.vocab), config)
    for part in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(ours, part), getattr(built.matrix, part), err_msg=part)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("tokenization", TOKENIZATION)
def test_update_equals_a_build_of_the_final_texts(method, tokenization):
    config = BM25Config(method=method, **TOKENIZATION[tokenization])
    old, new = synthetic_texts(70, seed=1), synthetic_texts(20, seed=2, extra=NEW_ONLY)
    old[5] = "quillon harbour"  # a term only a removed chunk holds: it leaves the vocabulary
    keep = np.random.default_rng(3).random(len(old)) > 0.25
    keep[5] = False
    updated = BM25Index.update(BM25Index.build(old, config), keep, new, config)
    final = [t for t, k in zip(old, keep) if k] + new
    full = BM25Index.build(final, config)
    assert updated.n == full.n == len(final)
    assert_identical(updated, full)
    assert_same_index(updated, full, QUERIES)


def test_removing_only_and_in_steps():
    config = BM25Config()
    texts = synthetic_texts(60, seed=4, extra=NEW_ONLY)
    rng = np.random.default_rng(5)
    index, current = BM25Index.build(texts, config), list(texts)
    for step in range(3):
        keep = rng.random(len(current)) > 0.2
        add = synthetic_texts(5, seed=20 + step)[3:]
        index = BM25Index.update(index, keep, add, config)
        current = [t for t, k in zip(current, keep) if k] + add
        assert_identical(index, BM25Index.build(current, config))
    keep = np.ones(index.n, dtype=bool)
    keep[:10] = False
    assert_identical(BM25Index.update(index, keep, [], config), BM25Index.build(current[10:], config))


def test_removing_every_indexable_chunk_is_an_error():
    config = BM25Config()
    index = BM25Index.build(["harbour mill", "the of and"], config)
    with pytest.raises(CorpusError, match="no chunk left has a term"):
        BM25Index.update(index, np.array([False, True]), [], config)
    with pytest.raises(ValueError, match=r"keep must be a bool mask \[2\]"):
        BM25Index.update(index, np.array([True]), [], config)


def test_helpers_against_plain_python():
    rng = np.random.default_rng(6)
    lengths = rng.integers(0, 6, size=12)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    ids = rng.integers(0, 9, size=int(indptr[-1])).astype(np.int32)
    keep = rng.random(12) > 0.4
    got_ids, got_ptr = select_tokens(ids, indptr, keep)
    chunks = [ids[indptr[i]:indptr[i + 1]].tolist() for i in range(12) if keep[i]]
    assert got_ids.tolist() == [t for c in chunks for t in c]
    assert np.diff(got_ptr).tolist() == [len(c) for c in chunks]
    order, renumbered = first_use_order(got_ids, 9)
    seen = list(dict.fromkeys(got_ids.tolist()))
    assert order.tolist() == seen
    assert renumbered.tolist() == [seen.index(t) for t in got_ids.tolist()]
