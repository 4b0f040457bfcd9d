"""Utility-question matching held to a plain per-query loop, and its place as the third RRF list."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from conftest import to_cpu
from spectrag.index.dense import DenseIndex
from spectrag.seed.rrf import reciprocal_rank_fusion
from spectrag.seed.seed import seed
from spectrag.seed.utility import QuestionIndex


def _data(n_chunks=40, n_questions=90, d=16, b=7, seed_=0):
    rng = np.random.default_rng(seed_)
    q = rng.standard_normal((n_questions, d)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    owners = rng.integers(0, n_chunks, n_questions)
    owners[:3] = 5  # one chunk with several questions
    x = rng.standard_normal((b, d)).astype(np.float32)
    return q, owners, x / np.linalg.norm(x, axis=1, keepdims=True)


def _loop(q, owners, x, k):
    """Per query: each chunk's best question score, chunks by score then id."""
    out = []
    for row in x:
        best: dict[int, float] = {}
        for o, s in zip(owners, q.astype(np.float64) @ row.astype(np.float64)):
            best[int(o)] = max(best.get(int(o), -np.inf), float(s))
        out.append(sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k])
    return out


@pytest.mark.parametrize("k", [1, 5, 50])
def test_search_equals_a_loop_over_queries(device, k):
    q, owners, x = _data()
    index = QuestionIndex(q, owners, device=device)
    scores, ids = to_cpu(index.search(torch.from_numpy(x).to(device), k))
    for b, expected in enumerate(_loop(q, owners, x, k)):
        got = [(int(i), float(s)) for i, s in zip(ids[b], scores[b]) if i >= 0]
        assert [i for i, _ in got] == [i for i, _ in expected]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=1e-5, atol=1e-6)
    assert ids.shape[1] == min(k, len(set(owners.tolist())))


def test_no_questions():
    index = QuestionIndex(np.zeros((0, 4), np.float32), np.zeros(0, np.int64))
    s, i = index.search(torch.ones(2, 4), 5)
    assert s.shape == i.shape == (2, 0)


def test_seed_fuses_the_utility_list_except_in_the_baselines(device):
    q, owners, x = _data(n_chunks=30, d=8)
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((30, 8)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    dense = DenseIndex(emb)
    questions = QuestionIndex(q, owners, device=device)
    xq = torch.from_numpy(x).to(device)

    class _BM25:  # BM25 list: chunk ids in a fixed per-query order
        def search_terms(self, terms, k, device=None):
            ids = np.stack([np.roll(np.arange(30), r)[:k] for r in range(len(x))])
            return np.linspace(1, 0.5, k, dtype=np.float32)[None].repeat(len(x), 0), ids

        def search_terms_tensors(self, terms, k, device=None, allowed=None):
            s, i = self.search_terms(terms, k)
            return torch.from_numpy(s).to(device), torch.from_numpy(i).to(device)

    terms = sp.csr_matrix(np.ones((len(x), 3)))
    ids, _ = seed("spectral", xq, terms, dense, _BM25(), k_dense=10, k_bm25=10, rrf_k=60, questions=questions, k_utility=10)
    d_s, d_i = dense.search_tensors(xq, 10)
    _, bm_i = _BM25().search_terms(terms, 10)
    u_i = [[c for c, _ in row] for row in _loop(q, owners, x, 10)]
    _, expected = reciprocal_rank_fusion([d_i.cpu(), torch.from_numpy(bm_i), torch.tensor(u_i)], k=60, top=10)
    assert torch.equal(ids.cpu(), expected)
    hybrid, _ = seed("hybrid", xq, terms, dense, _BM25(), k_dense=10, k_bm25=10, questions=questions, k_utility=10)
    _, plain = reciprocal_rank_fusion([d_i.cpu(), torch.from_numpy(bm_i)], k=60, top=10)
    assert torch.equal(hybrid.cpu(), plain)
    off, _ = seed("spectral", xq, terms, dense, _BM25(), k_dense=10, k_bm25=10, questions=questions, k_utility=0)
    assert torch.equal(off.cpu(), plain)
    hyde, _ = seed("hyde", xq, terms, dense, _BM25(), k_dense=10, questions=questions)
    assert torch.equal(hyde.cpu(), d_i.cpu())
