"""BM25 search through torch sparse products (the GPU path) holds to the scipy path."""

from __future__ import annotations

import numpy as np
import pytest

from spectrag.config import BM25Config
from spectrag.errors import ConfigError
from spectrag.index.lexical import BM25Index

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda river mountain castle king".split()


def _corpus(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 30)))) for _ in range(n)]


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_torch_search_equals_scipy_search(method):
    bm = BM25Index.build(_corpus(0, 400), BM25Config(method=method, stemmer=""))
    queries = _corpus(1, 37) + ["unknownword", "castle castle king"]
    s_cpu, i_cpu = bm.search(queries, 25, tile=16)
    s_t, i_t = bm.search(queries, 25, tile=16, backend="torch")
    np.testing.assert_allclose(s_t, s_cpu, rtol=1e-6, atol=1e-7)
    for b in range(len(queries)):
        differ = set(i_t[b].tolist()) ^ set(i_cpu[b].tolist())
        score = dict(zip(i_cpu[b].tolist(), s_cpu[b].tolist())) | dict(zip(i_t[b].tolist(), s_t[b].tolist()))
        # ids may differ only by chunks whose score ties the cut to within rounding
        assert all(abs(score[c] - s_cpu[b, -1]) <= 1e-5 for c in differ), b
    assert (i_t[len(queries) - 2] == -1).all()  # a query without known terms finds nothing
    with pytest.raises(ConfigError, match="backend"):
        bm.search(queries, 5, backend="cuda")
