"""BM25 scores at the candidates (spectrag.seed.lexical) against a dense numpy computation on
random term matrices, padding, queries that match nothing and candidates with score 0; the
compiled kernel against the scipy product bit for bit (the same float32 sums)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.seed.lexical import lexical_scores


def _case(seed: int, batch: int = 7, vocab: int = 40, n: int = 60, width: int = 12):
    rng = np.random.default_rng(seed)
    matrix = sp.random(vocab, n, density=0.15, random_state=rng, format="csr", dtype=np.float32)
    terms = sp.random(batch, vocab, density=0.1, random_state=rng, format="csr", dtype=np.float32)
    keep = np.ones(batch, dtype=np.float32)
    keep[0] = 0.0  # a query with no term: all zeros
    terms = sp.diags(keep) @ terms
    terms.eliminate_zeros()
    candidates = np.stack([rng.permutation(n)[:width] for _ in range(batch)])
    candidates[rng.random(candidates.shape) < 0.2] = -1  # padding
    return SimpleNamespace(matrix=matrix), terms.tocsr(), torch.from_numpy(candidates)


def test_matches_dense_numpy():
    for seed in range(5):
        bm25, terms, candidates = _case(seed)
        dense = (terms @ bm25.matrix).toarray().astype(np.float64)  # [B, n]
        cand = candidates.numpy()
        want = np.where(cand >= 0, np.take_along_axis(dense, np.maximum(cand, 0), axis=1), 0.0)
        got, peak = lexical_scores(bm25, terms, candidates)
        assert got.dtype == torch.float64 and tuple(got.shape) == tuple(candidates.shape)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(peak.numpy(), dense.max(axis=1), rtol=1e-6)
        assert float(got[0].abs().max()) == 0.0 and float(peak[0]) == 0.0  # no term, no lexical evidence
        assert (got.numpy() > 0).sum() > 5  # the case has matches
        fast, fast_peak = lexical_scores(bm25, terms, candidates, compiled=True)
        assert torch.equal(fast, got) and torch.equal(fast_peak, peak)


def test_empty_matrix():
    bm25, terms, candidates = _case(11)
    empty = SimpleNamespace(matrix=sp.csr_matrix(bm25.matrix.shape, dtype=np.float32))
    for compiled in (False, True):
        got, peak = lexical_scores(empty, terms, candidates, compiled=compiled)
        assert float(got.abs().max()) == 0.0 and float(peak.abs().max()) == 0.0
