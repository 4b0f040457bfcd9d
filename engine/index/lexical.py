"""Stage 4b of the offline build: the BM25 lexical index (``bm25s``).

bm25s precomputes every (term, chunk) BM25 contribution into a sparse matrix at index time.
We store that matrix (CSR ``[vocab, n]``) and score a whole batch of queries as one sparse
product ``Q @ S`` with ``Q`` the ``[B, vocab]`` query term counts, then take a tiled top-k:
no per-query loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from engine.config import BM25Config
from engine.errors import ConfigError


def _bm25s():
    import bm25s

    return bm25s


def _stemmer(language: str):
    if not language:
        return None
    try:
        import Stemmer
    except ImportError:
        raise ConfigError("bm25.stemmer needs PyStemmer: pip install PyStemmer (or set stemmer = \"\")") from None
    try:
        return Stemmer.Stemmer(language)
    except KeyError:
        raise ConfigError(f"bm25.stemmer: PyStemmer has no language {language!r}") from None


class BM25Index:
    """BM25 over chunk texts. Shapes: ``search(queries: list[str], k)`` -> scores, ids ``[B, k]``."""

    FOLDER = "bm25"

    def __init__(self, config: BM25Config, vocab: dict[str, int], matrix: sp.csr_matrix) -> None:
        self.config = config
        self.vocab = vocab
        self.matrix = matrix  # (vocab, n) BM25 contribution of each term to each chunk
        self._stem = _stemmer(config.stemmer)

    @property
    def n(self) -> int:
        return self.matrix.shape[1]

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        return _bm25s().tokenize(
            texts,
            lower=True,
            stopwords=self.config.stopwords or None,
            stemmer=self._stem,
            return_ids=False,
            show_progress=False,
        )

    @classmethod
    def build(cls, texts: list[str], config: BM25Config) -> "BM25Index":
        bm25s = _bm25s()
        stem = _stemmer(config.stemmer)
        tokens = bm25s.tokenize(
            texts, lower=True, stopwords=config.stopwords or None, stemmer=stem, show_progress=False
        )
        model = bm25s.BM25(k1=config.k1, b=config.b, method=config.method)
        model.index(tokens, show_progress=False)
        s = model.scores
        # bm25s keeps a CSC matrix of shape (n_docs, vocab): exactly the CSR of (vocab, n_docs)
        matrix = sp.csr_matrix(
            (s["data"], s["indices"], s["indptr"]), shape=(len(s["indptr"]) - 1, s["num_docs"])
        )
        # bm25s may add an empty-string token for empty texts; it has no row and never matches
        vocab = {t: i for t, i in model.vocab_dict.items() if t and i < matrix.shape[0]}
        return cls(config, vocab, matrix)

    def query_matrix(self, queries: list[str]) -> sp.csr_matrix:
        """Term counts of the queries over the index vocabulary; unknown terms are dropped."""
        rows, cols = [], []
        for b, terms in enumerate(self._tokenize(queries)):
            ids = [self.vocab[t] for t in terms if t in self.vocab]
            rows += [b] * len(ids)
            cols += ids
        data = np.ones(len(rows), dtype=np.float32)
        return sp.csr_matrix((data, (rows, cols)), shape=(len(queries), len(self.vocab)))

    def score(self, queries: list[str]) -> sp.csr_matrix:
        """BM25 scores of every chunk for every query, as sparse ``[B, n]``."""
        return (self.query_matrix(queries) @ self.matrix).tocsr()

    def search(self, queries: list[str], k: int, *, tile: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` chunks per query, ties by smaller chunk id; slots past the last chunk with a
        non-zero score hold id -1 and score 0 (FAISS's convention).

        Shapes: -> scores, ids ``[B, min(k, n)]``.
        """
        import torch

        from kernels.topk import topk_sparse_rows

        k = min(k, self.n)
        scores = np.empty((len(queries), k), dtype=np.float32)
        ids = np.empty((len(queries), k), dtype=np.int64)
        for lo in range(0, len(queries), tile):
            rows = self.score(queries[lo : lo + tile])  # (tile, n) sparse: only chunks sharing a term
            rows.data[rows.data < 0] = 0  # BM25 scores are >= 0; keep only positive ones
            rows.eliminate_zeros()
            s, i = topk_sparse_rows(torch.from_numpy(rows.indptr), torch.from_numpy(rows.indices),
                                    torch.from_numpy(rows.data), k)
            scores[lo : lo + tile] = s.numpy()
            ids[lo : lo + tile] = i.numpy()
        return scores, ids

    def save(self, folder: Path) -> None:
        out = folder / self.FOLDER
        out.mkdir()
        np.save(out / "data.npy", self.matrix.data.astype(np.float32))
        np.save(out / "indices.npy", self.matrix.indices.astype(np.int32))
        np.save(out / "indptr.npy", self.matrix.indptr.astype(np.int64))
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        info = {"terms": terms, "shape": list(self.matrix.shape)}
        (out / "vocab.json").write_text(json.dumps(info, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, config: BM25Config) -> "BM25Index":
        src = folder / cls.FOLDER
        info = json.loads((src / "vocab.json").read_text(encoding="utf-8"))
        matrix = sp.csr_matrix(
            (
                np.load(src / "data.npy", mmap_mode="r"),
                np.load(src / "indices.npy", mmap_mode="r"),
                np.load(src / "indptr.npy", mmap_mode="r"),
            ),
            shape=tuple(info["shape"]),
        )
        return cls(config, {t: i for i, t in enumerate(info["terms"])}, matrix)
