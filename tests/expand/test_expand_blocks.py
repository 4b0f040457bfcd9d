"""The induced candidate blocks of spectrag.expand.blocks (sparse BlockGraphs), by the compiled
CPU kernel and by torch on the ``device`` fixture's devices, against each pool's submatrix
sliced with scipy, exactly; the two give the same arrays, entry for entry."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spectrag.expand.blocks import candidate_blocks
from spectrag.expand.pool import expand
from spectrag.kernels.csr import TorchCSR

from random_pools import random_graph, random_seeds


def sliced(pools: torch.Tensor, g: sp.csr_matrix) -> torch.Tensor:
    """Each pool's submatrix, one query at a time with scipy: ``[B, P, P]``."""
    out = torch.zeros(pools.shape[0], pools.shape[1], pools.shape[1])
    for b, row in enumerate(pools.tolist()):
        pos = [p for p, c in enumerate(row) if c >= 0]
        sub = g[[row[p] for p in pos]][:, [row[p] for p in pos]].toarray()
        out[b][np.ix_(pos, pos)] = torch.from_numpy(sub)
    return out


@pytest.mark.parametrize("table", [True, False])
def test_blocks_equal_the_scipy_submatrices(device, table, monkeypatch):
    import spectrag.kernels.blocks as kb

    if not table:  # the sorted-keys lookup for corpora too large for a position table
        monkeypatch.setattr(kb, "POSITION_TABLE_MAX", 0)
    rng = np.random.default_rng(7)
    n = 250
    graphs = [random_graph(rng, n, 0.03, dyadic=False), random_graph(rng, n, 0.01, dyadic=False)]
    ids, w = random_seeds(rng, 6, n, 5, dyadic=False)
    pools, _ = expand(ids, w, graphs[0], max_candidates=40)
    pools[2, -5:] = -1  # padding inside the pool
    want = [sliced(pools, g) for g in graphs]
    compiled = [g.materialize() for g in candidate_blocks(pools, graphs)]  # scipy graphs: the compiled CPU kernel
    on_torch = candidate_blocks(pools.to(device), [TorchCSR.from_scipy(g, device) for g in graphs])
    for got in (compiled, on_torch):
        assert all(torch.equal(a.dense().cpu(), b) for a, b in zip(got, want))
        # the flat CSR describes the same entries
        for blk in got:
            assert torch.equal(blk.crow[1:] - blk.crow[:-1], torch.bincount(blk.src, minlength=blk.batch * blk.width))
    for a, b in zip(compiled, on_torch):  # the same arrays, in the same entry order
        for name in ("crow", "col", "val", "src"):
            assert torch.equal(getattr(a, name), getattr(b, name).cpu()), name
    assert float(want[0].abs().sum()) > 0  # the pools do hold edges: the comparison is not vacuous
