"""The pool cut of the expansion: top-P per row of a sparse priority matrix, ties by smaller id."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spectrag.expand.pool import _top_per_row


@pytest.mark.parametrize("trial", range(60))
def test_top_per_row_equals_sorted_python(trial):
    rng = np.random.default_rng(trial)
    batch, n, p = int(rng.integers(1, 6)), int(rng.integers(1, 60)), int(rng.integers(1, 30))
    m = sp.random(batch, n, density=rng.random() * rng.random(), random_state=trial, format="csr", dtype=np.float32)
    m.data = np.round(m.data * 4) / 4 + 0.25  # few distinct values: many ties, also at the cut
    ids, vals = _top_per_row(m.copy(), p)
    assert ids.shape == vals.shape == (batch, p)
    for b in range(batch):
        row = m[b]
        items = sorted(zip(row.indices.tolist(), row.data.tolist()), key=lambda t: (-t[1], t[0]))[:p]
        assert ids[b].tolist() == [i for i, _ in items] + [-1] * (p - len(items))
        assert vals[b].tolist() == [v for _, v in items] + [0.0] * (p - len(items))


def test_top_per_row_empty_matrix():
    ids, vals = _top_per_row(sp.csr_matrix((3, 10), dtype=np.float32), 4)
    assert (ids == -1).all() and (vals == 0).all()
