"""The BM25 device path (spectrag.index.lexical: DeviceTerms, BM25Index.dense_scores,
search_device, scores_at): on the ``device`` fixture's devices, bit for bit the scipy product
and the compiled kernels (the same float32 sums in the same order), tie order included, in one
tile or many, for every bm25s method."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import to_cpu

from spectrag.config import BM25Config
from spectrag.index import lexical
from spectrag.index.lexical import BM25Index
from spectrag.kernels.compiled.topk import product_at

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda river mountain castle king".split()


def corpus(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 30)))) for _ in range(n)]
    return texts + texts[:40]  # duplicates: exact ties between chunks


@pytest.fixture(scope="module", params=["lucene", "bm25+"])
def bm(request):
    return BM25Index.build(corpus(0, 300), BM25Config(method=request.param, stemmer=""))


def queries(bm) -> "object":
    texts = corpus(1, 37)[:37] + ["unknownword", "castle castle king", "alpha", "river " * 12]
    return bm.query_matrix(texts)


@pytest.mark.parametrize("tile_max", [None, 340 * 5])  # one tile, or tiles of 5 queries
def test_dense_scores_and_search_equal_scipy_and_compiled_bits(bm, device, tile_max, monkeypatch):
    if tile_max:
        monkeypatch.setattr(lexical, "DENSE_SCORES_MAX", tile_max)
    q = queries(bm)
    terms = bm.device_terms(q, device)
    assert terms.tile_rows == (5 if tile_max else q.shape[0])
    dense = torch.cat([to_cpu(bm.dense_scores(terms, lo, min(q.shape[0], lo + terms.tile_rows)))
                       for lo in range(0, q.shape[0], terms.tile_rows)])
    want = (q @ bm.matrix).toarray()
    assert np.array_equal(dense.numpy(), want)  # bit for bit
    s, i = to_cpu(bm.search_device(terms, 25))
    s_c, i_c = bm.search_terms(q, 25, backend="compiled")
    s_s, i_s = bm.search_terms(q, 25, backend="scipy")
    assert np.array_equal(i.numpy(), i_c) and np.array_equal(s.numpy(), s_c)
    assert np.array_equal(i_c, i_s)
    ties = sum(int((want[b] == want[b][i_c[b, -1]]).sum()) > int((s_c[b] == s_c[b, -1]).sum()) for b in range(len(i_c))
               if i_c[b, -1] >= 0)
    assert ties > 0, "no tie straddles the cut: the tie order would be untested"
    assert (i[37] == -1).all() and (s[37] == 0).all()  # no known term: nothing found


def test_scores_at_equal_product_at_bits(bm, device):
    q = queries(bm)
    rng = np.random.default_rng(3)
    cand = np.stack([rng.permutation(bm.n)[:60] for _ in range(q.shape[0])])
    cand[:, -7:] = -1  # padding
    got = to_cpu(bm.scores_at(bm.device_terms(q, device), torch.from_numpy(cand).to(device)))
    qc = q.tocsr()
    m = bm.matrix
    want, _ = product_at(qc.indptr, qc.indices, qc.data, m.indptr, m.indices, m.data, m.shape[1], cand)
    assert np.array_equal(got.numpy(), want)
    assert (got[:, -7:] == 0).all() and (got > 0).any()


def test_device_terms_refuse_another_vocabulary(bm):
    with pytest.raises(ValueError, match="vocab"):
        bm.device_terms(queries(bm)[:, :5], "cpu")
