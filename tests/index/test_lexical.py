"""The BM25 index (spectrag.index.lexical): scores against hand-computed Lucene BM25; search
through torch sparse products (the GPU path), on the ``device`` fixture's devices, against the
scipy path; and BM25Index.extend: adding chunks tokenizes only the new ones and gives the index
a full build of the union gives (same scores, same top-k), for every bm25s method, with and
without stemming and stopwords; an index saved without token ids still loads and an add then
rebuilds in full."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import require_index_packages

from spectrag import build_index, load_index
from spectrag.config import BM25Config, EmbedConfig, GraphConfig, IndexConfig
from spectrag.errors import ConfigError, IndexFormatError
from spectrag import add_documents
from spectrag.generations import current_folder
from spectrag.index.chunk import chunk_document
from spectrag.index import lexical
from spectrag.index.lexical import TOKEN_FILES, BM25Index
from spectrag.index.load import iter_documents
from spectrag.store import MANIFEST

# --------------------------------------------------------------------------- scores and search

def test_bm25_against_hand_computed_lucene_scores():
    corpus = ["apple banana apple", "banana cherry", "cherry cherry cherry date", "eggplant"]
    index = BM25Index.build(corpus, BM25Config(stemmer="", stopwords=""))
    k1, b, n = 1.5, 0.75, len(corpus)
    lengths = [len(t.split()) for t in corpus]
    avgdl = sum(lengths) / n

    def lucene(term: str, doc: int) -> float:
        tf = corpus[doc].split().count(term)
        df = sum(term in t.split() for t in corpus)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf / (tf + k1 * (1 - b + b * lengths[doc] / avgdl)) if tf else 0.0

    query = "apple cherry"
    expected = [lucene("apple", d) + lucene("cherry", d) for d in range(n)]
    got = index.score([query]).toarray()[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    scores, ids = index.search([query, "zucchini"], 4)
    assert ids[0].tolist() == [0, 2, 1, -1]  # the non-matching doc is an empty slot
    assert ids[1].tolist() == [-1, -1, -1, -1] and not scores[1].any()


def test_bm25_finds_exact_terms(sample_index):
    _, ids = sample_index.bm25_search(["Veltra Bridge"], 3)
    assert sample_index.chunks[ids[0][0]].doc_id == "veltra_bridge.txt"


BACKEND_WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda river mountain castle king".split()


def _corpus(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(BACKEND_WORDS, size=int(rng.integers(3, 30)))) for _ in range(n)]


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_torch_search_equals_scipy_search(method, device):
    bm = BM25Index.build(_corpus(0, 400), BM25Config(method=method, stemmer=""))
    queries = _corpus(1, 37) + ["unknownword", "castle castle king"]
    s_cpu, i_cpu = bm.search(queries, 25, tile=16)
    s_t, i_t = bm.search(queries, 25, tile=16, device=device, backend="torch")
    np.testing.assert_allclose(s_t, s_cpu, rtol=1e-6, atol=1e-7)
    for b in range(len(queries)):
        differ = set(i_t[b].tolist()) ^ set(i_cpu[b].tolist())
        score = dict(zip(i_cpu[b].tolist(), s_cpu[b].tolist())) | dict(zip(i_t[b].tolist(), s_t[b].tolist()))
        # ids may differ only by chunks whose score ties the cut to within rounding
        assert all(abs(score[c] - s_cpu[b, -1]) <= 1e-5 for c in differ), b
    assert (i_t[len(queries) - 2] == -1).all()  # a query without known terms finds nothing
    with pytest.raises(ConfigError, match="backend"):
        bm.search(queries, 5, backend="cuda")


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_compiled_search_equals_scipy_bitwise(method):
    """The compiled product + top-k sums each chunk's term scores as scipy's product does: the
    same ids, order and float32 scores; rows without a match end in id -1, score 0."""
    bm = BM25Index.build(_corpus(2, 500), BM25Config(method=method, stemmer=""))
    queries = _corpus(3, 41) + ["unknownword", "castle castle king", "king"]
    matches = np.diff((bm.query_matrix(queries) @ bm.matrix).tocsr().indptr)
    for k in (1, 7, 60, 1000):
        s_ref, i_ref = bm.search(queries, k, backend="scipy")
        s_c, i_c = bm.search(queries, k, backend="compiled")
        np.testing.assert_array_equal(i_c, i_ref)
        np.testing.assert_array_equal(s_c, s_ref)
    assert (i_c[len(queries) - 3] == -1).all() and (s_c[len(queries) - 3] == 0).all()
    assert (matches >= 32 * 7).sum() > 10  # rows with many matches for few places: the top-k's floor runs


# --------------------------------------------------------------------------- BM25Index.extend

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
TOKENIZATION = {"stemmed": {}, "plain": {"stemmer": "", "stopwords": ""}}
WORDS = ["harbour", "harbours", "river", "rivers", "mill", "milling", "bridge", "stone", "market", "markets",
         "tower", "ferry", "ferries", "the", "of", "and", "a", "in", "north", "northern", "salt", "saltworks"]
NEW_ONLY = ["quillon", "zephyrine", "oxbowed"]  # terms that occur only in the added chunks


def synthetic_texts(n: int, seed: int, extra: list[str] = ()) -> list[str]:
    """``n`` short texts of 3..25 words drawn from WORDS (plus ``extra``); some texts are empty
    or stopwords only, so chunk lengths and document frequencies vary."""
    rng = np.random.default_rng(seed)
    vocab = WORDS + list(extra)
    texts = [" ".join(rng.choice(vocab, size=rng.integers(3, 26))) for _ in range(n)]
    texts[1], texts[2] = "", "the of and a in"
    return texts


QUERIES = ["harbour ferries", "river mill bridge", "northern salt market", "the of", "quillon", "zephyrine harbour",
           "oxbowed stone towers", "unknownword", ""]


def assert_same_index(a: BM25Index, b: BM25Index, queries: list[str]) -> None:
    sa, sb = a.score(queries), b.score(queries)
    sa.eliminate_zeros()
    sb.eliminate_zeros()
    for q in range(len(queries)):
        ra, rb = sa.getrow(q), sb.getrow(q)
        np.testing.assert_array_equal(np.sort(ra.indices), np.sort(rb.indices), err_msg=queries[q])
        np.testing.assert_allclose(ra.toarray(), rb.toarray(), atol=1e-6, rtol=0, err_msg=queries[q])
    for k in (1, 5, 40):
        (s1, i1), (s2, i2) = a.search(queries, k), b.search(queries, k)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_allclose(s1, s2, atol=1e-6, rtol=0)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("tokenization", TOKENIZATION)
def test_extend_equals_build_of_the_union(method, tokenization):
    config = BM25Config(method=method, **TOKENIZATION[tokenization])
    old, new = synthetic_texts(60, seed=1), synthetic_texts(25, seed=2, extra=NEW_ONLY)
    extended = BM25Index.extend(BM25Index.build(old, config), new, config)
    full = BM25Index.build(old + new, config)
    assert extended.n == full.n == 85
    assert_same_index(extended, full, QUERIES)
    # terms are numbered by first use, so even the vocabulary, the matrix and the ids agree
    assert extended.vocab == full.vocab
    for x, y in zip(extended.tokens, full.tokens):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(extended.matrix.indptr, full.matrix.indptr)
    np.testing.assert_array_equal(extended.matrix.indices, full.matrix.indices)
    np.testing.assert_array_equal(extended.matrix.data, full.matrix.data)


def test_extend_twice_and_after_save_load(tmp_path):
    config = BM25Config()
    parts = [synthetic_texts(40, seed=s, extra=NEW_ONLY[: s - 3]) for s in (3, 4, 5)]
    first = BM25Index.build(parts[0], config)
    first.save(tmp_path)
    loaded = BM25Index.load(tmp_path, config)
    assert all(isinstance(a, np.memmap) for a in loaded.tokens)
    twice = BM25Index.extend(BM25Index.extend(loaded, parts[1], config), parts[2], config)
    assert_same_index(twice, BM25Index.build(parts[0] + parts[1] + parts[2], config), QUERIES)


def test_new_terms_are_searchable():
    config = BM25Config()
    old = synthetic_texts(30, seed=6)
    new = ["The quillon of the northern harbour", "zephyrine ferries", "harbour mill"]
    extended = BM25Index.extend(BM25Index.build(old, config), new, config)
    assert "quillon" in extended.vocab and "quillon" not in BM25Index.build(old, config).vocab
    scores, ids = extended.search(["quillon", "zephyrine ferry"], 3)
    assert ids[0, 0] == 30 and ids[0, 1] == -1  # only the new chunk holds the term
    assert ids[1, 0] == 31 and scores[1, 0] > 0


def test_extend_needs_tokens_and_the_same_tokenization(tmp_path):
    config = BM25Config()
    index = BM25Index.build(synthetic_texts(20, seed=7), config)
    with pytest.raises(ConfigError, match="bm25.stemmer"):
        BM25Index.extend(index, ["harbour"], BM25Config(stemmer=""))
    # k1, b and the method do not touch the token ids: they may change
    BM25Index.extend(index, ["harbour"], BM25Config(method="atire", k1=1.2))
    index.save(tmp_path)
    for name in TOKEN_FILES:
        (tmp_path / "bm25" / name).unlink()
    older = BM25Index.load(tmp_path, config)
    assert older.tokens is None
    with pytest.raises(IndexFormatError, match="no stored token ids"):
        BM25Index.extend(older, ["harbour"], config)


def test_load_refuses_token_ids_that_do_not_fit(tmp_path):
    config = BM25Config()
    BM25Index.build(synthetic_texts(20, seed=8), config).save(tmp_path)
    np.save(tmp_path / "bm25" / TOKEN_FILES[0], np.arange(5, dtype=np.int64))
    with pytest.raises(IndexFormatError, match="tokens.indptr.npy"):
        BM25Index.load(tmp_path, config)


# --------------------------------------------------------------------------- through add_documents

CONFIG = IndexConfig(embed=EmbedConfig(cache_dir=""), graph=GraphConfig(enabled=False))
DIM = 8


def write_corpus(path: Path, first: int, count: int, extra: list[str] = ()) -> Path:
    rows = [{"id": f"doc{d:03d}", "title": f"Document {d}", "text": " ".join(synthetic_texts(4, seed=d, extra=extra))}
            for d in range(first, first + count)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def vectors(corpus: Path) -> np.ndarray:
    """One deterministic unit vector per chunk (the dense index is not under test here)."""
    n = sum(len(chunk_document(d, CONFIG.chunk)) for d in iter_documents(corpus, "jsonl"))
    v = np.random.default_rng(n).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def drop_token_files(index_dir: Path) -> None:
    """Make ``index_dir`` look like an index written before token ids were stored."""
    manifest = json.loads((index_dir / MANIFEST).read_text(encoding="utf-8"))
    for name in TOKEN_FILES:
        (index_dir / "bm25" / name).unlink()
        del manifest["files"][f"bm25/{name}"]
    (index_dir / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def test_add_extends_or_falls_back_to_a_full_build(tmp_path, monkeypatch):
    require_index_packages()
    old = write_corpus(tmp_path / "old.jsonl", 0, 15)
    new = write_corpus(tmp_path / "new.jsonl", 15, 6, extra=NEW_ONLY)
    union = tmp_path / "union.jsonl"
    union.write_text(old.read_text() + new.read_text(), encoding="utf-8")
    build_index(old, tmp_path / "current", CONFIG, embeddings=vectors(old))
    shutil.copytree(tmp_path / "current", tmp_path / "legacy")
    drop_token_files(current_folder(tmp_path / "legacy"))
    assert load_index(tmp_path / "legacy").bm25.tokens is None  # an older index still loads
    full = build_index(union, tmp_path / "full", CONFIG, embeddings=vectors(union))

    tokenized = []  # how many texts each add tokenizes for BM25
    tokenize = lexical._tokenize_ids

    def counting(texts, config):
        tokenized.append(len(texts))
        return tokenize(texts, config)

    monkeypatch.setattr(lexical, "_tokenize_ids", counting)
    current = add_documents(tmp_path / "current", new, embeddings=vectors(new))
    legacy = add_documents(tmp_path / "legacy", new, embeddings=vectors(new))
    n_new = sum(c.doc_id >= "doc015" for c in full.chunks)
    assert tokenized == [n_new, len(full)]  # with stored ids only the new chunks; without, all of them

    files = ["bm25/" + f for f in ("data.npy", "indices.npy", "indptr.npy", "vocab.json", *TOKEN_FILES)]
    for index in (current, legacy):
        assert len(index) == len(full) and index.bm25.tokens is not None
        for name in files:
            assert index.manifest["files"][name]["sha256"] == full.manifest["files"][name]["sha256"], name
        s1, i1 = index.bm25_search(QUERIES, 10)
        s2, i2 = full.bm25_search(QUERIES, 10)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_allclose(s1, s2, atol=1e-6, rtol=0)


def test_query_matrices_of_one_tokenizer_call_equal_each_group_alone(sample_index):
    bm = sample_index.bm25
    first = ["flood flood of 1907", "", "qqqq not a term", "bridge toll"]
    second = ["the flood", "bridge bridge bridge"]
    a, b = bm.query_matrices(first, second)
    for got, texts in ((a, first), (b, second)):
        want = np.zeros((len(texts), len(bm.vocab)), np.float32)
        for row, terms in enumerate(bm._tokenize(texts)):  # term counts, one text at a time
            for t in terms:
                if t in bm.vocab:
                    want[row, bm.vocab[t]] += 1
        assert got.dtype == np.float32 and got.has_canonical_format
        assert np.array_equal(got.toarray(), want)
        assert np.array_equal(bm.query_matrix(texts).toarray(), want)
    assert a.toarray().max() == 2 and b.toarray().max() == 3  # repeated terms are counted
    assert [m.shape for m in bm.query_matrices([], ["x"])] == [(0, len(bm.vocab)), (1, len(bm.vocab))]


# --------------------------------------------------------------------------- query tokenizer

def _texts_to_tokenize() -> list[str]:
    """Questions and passages of the dev sets (when present), and text no corpus has: other
    scripts, digits, underscores, apostrophes, combining marks, stopwords in capitals."""
    from conftest import SHARED_DATA

    texts = ["The THE the a An", "it's O'Neil's don't", "x y z ab", "snake_case_words and CamelCase",
             "naïve café Ærøskøbing e\u0301te\u0301", "北京大学 東京 данные Ωmega", "3.14 2nd 1990s x86_64",
             "", "   ", "running runs ran runner", "!!! ??? ---", "ǅemal ﬁnal straße ΣΊΣΥΦΟΣ"]
    musique = SHARED_DATA / "musique" / "musique_train.json"
    if musique.exists():
        texts += [q["question"] for q in json.loads(musique.read_text())]
        corpus = json.loads((SHARED_DATA / "musique" / "musique_train_corpus.json").read_text())
        texts += [p["title"] + " " + p["text"] for p in corpus[:400]]
    docs = SHARED_DATA / "docs-dev" / "queries.jsonl"
    if docs.exists():
        texts += [json.loads(line)["text"] for line in docs.read_text().splitlines() if line.strip()]
    rng = np.random.default_rng(7)
    alphabet = list("abcXYZ _'-.éßİıΣς中٣") + ["\u0301", "\u200b", "\t", "\n"]
    texts += ["".join(rng.choice(alphabet, size=int(rng.integers(0, 40)))) for _ in range(300)]
    return texts


@pytest.mark.parametrize("stemmer,stopwords", [("en", "en"), ("", "en"), ("en", ""), ("", "")])
def test_query_tokens_are_bm25s_tokens(stemmer, stopwords):
    """The query tokenizer gives bm25s.tokenize's terms (the ones the chunks were indexed with)
    for questions, passages and odd text, with and without a stemmer and stopwords."""
    import bm25s

    bm = BM25Index.build(_corpus(2, 50), BM25Config(stemmer=stemmer, stopwords=stopwords))
    texts = _texts_to_tokenize()
    want = bm25s.tokenize(texts, lower=True, stopwords=stopwords or None,
                          stemmer=lexical._stemmer(stemmer), return_ids=False, show_progress=False)
    got = bm._tokenize(texts)
    assert got == want
    assert sum(map(len, got)) > 500 and any(not t for t in got)  # the case has terms, and texts without any
