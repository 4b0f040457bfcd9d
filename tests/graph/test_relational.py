"""The citation edges the best candidates vouch along (spectrag.graph.relational.
specific_citations): only between documents whose titles are both specific enough, symmetric,
weights as stored; against a dense numpy filter of the same edges."""

from __future__ import annotations

import numpy as np

from spectrag.graph.relational import specific_citations


def test_specific_citations_keep_edges_between_specific_titles():
    rng = np.random.default_rng(3)
    n = 30
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, n, (60, 2)) if a < b}
    rows, cols = (np.array(x, dtype=np.int64) for x in zip(*sorted(pairs)))
    weights = np.ones(len(rows), dtype=np.float32)
    spec = rng.random(n)
    for bar in (0.0, 0.4, 0.8, 1.1):
        got = specific_citations((rows, cols, weights), spec, n, bar).toarray()
        want = np.zeros((n, n), dtype=np.float32)
        for a, b in zip(rows, cols):
            if min(spec[a], spec[b]) >= bar:
                want[a, b] = want[b, a] = 1.0
        np.testing.assert_array_equal(got, want)
    assert specific_citations((rows, cols, weights), spec, n, 0.4).nnz < 2 * len(rows)  # the bar bites
    empty = np.zeros(0, dtype=np.int64)
    assert specific_citations((empty, empty, np.zeros(0, np.float32)), spec, n, 0.5).nnz == 0
