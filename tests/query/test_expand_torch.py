"""The torch (device) expansion and blocks hold to the scipy path of spectrag.expand.pool."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spectrag.expand.blocks import candidate_blocks_of
from spectrag.expand.pool import expand
from spectrag.kernels.csr import TorchCSR
from spectrag.expand.blocks import candidate_blocks_torch
from spectrag.expand.pool import expand_torch


def _graph(rng, n: int, density: float, dyadic: bool) -> sp.csr_matrix:
    m = sp.random(n, n, density=density, random_state=int(rng.integers(1 << 30)), format="csr", dtype=np.float32)
    if dyadic:  # multiples of 1/8: every sum below is exact in float32, so no summation-order effect
        m.data = (np.ceil(m.data * 8) / 8).astype(np.float32)
    m = (m + m.T).tocsr()
    m.setdiag(0)
    m.eliminate_zeros()
    m.sort_indices()
    return m


def _seeds(rng, batch: int, n: int, width: int, dyadic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.from_numpy(rng.integers(-1, n, size=(batch, width)))  # -1 = empty slot; repeats allowed
    w = rng.random((batch, width)).astype(np.float32)
    if dyadic:
        w = np.ceil(w * 8) / 8
    return ids, torch.from_numpy(w.astype(np.float32))


@pytest.mark.parametrize("trial", range(12))
def test_expand_equals_scipy_exactly_when_sums_are_exact(trial):
    rng = np.random.default_rng(trial)
    n = int(rng.integers(5, 300))
    graph = _graph(rng, n, float(rng.choice([0.005, 0.02, 0.1])), dyadic=True)
    ids, w = _seeds(rng, int(rng.integers(1, 7)), n, int(rng.integers(1, 6)), dyadic=True)
    p, hops = int(rng.integers(1, 60)), int(rng.integers(0, 4))
    want_ids, want_pri = expand(ids, w, graph, max_candidates=p, hops=hops)
    got_ids, got_pri = expand_torch(ids, w, TorchCSR.from_scipy(graph, torch.device("cpu")), max_candidates=p, hops=hops)
    assert torch.equal(got_ids, want_ids)
    assert torch.equal(got_pri, want_pri.to(torch.float32))


@pytest.mark.parametrize("trial", range(8))
def test_expand_matches_scipy_up_to_rounding_at_the_cut(trial):
    rng = np.random.default_rng(100 + trial)
    n = 400
    graph = _graph(rng, n, 0.02, dyadic=False)
    ids, w = _seeds(rng, 5, n, 8, dyadic=False)
    want_ids, want_pri = expand(ids, w, graph, max_candidates=50)
    got_ids, got_pri = expand_torch(ids, w, TorchCSR.from_scipy(graph, torch.device("cpu")), max_candidates=50)
    assert torch.allclose(got_pri, want_pri.to(torch.float32), rtol=1e-6, atol=1e-7)
    for b in range(ids.shape[0]):
        # a pool may differ only by members whose priority ties the cut to within rounding
        differ = set(got_ids[b].tolist()) ^ set(want_ids[b].tolist())
        priority = dict(zip(want_ids[b].tolist(), want_pri[b].tolist())) | dict(zip(got_ids[b].tolist(), got_pri[b].tolist()))
        cut = float(want_pri[b, -1])
        assert all(abs(priority[c] - cut) <= 1e-6 for c in differ)


def test_blocks_equal_the_scipy_blocks():
    rng = np.random.default_rng(7)
    n = 250
    graphs = [_graph(rng, n, 0.03, dyadic=False), _graph(rng, n, 0.01, dyadic=False)]
    ids, w = _seeds(rng, 6, n, 5, dyadic=False)
    pools, _ = expand(ids, w, graphs[0], max_candidates=40)
    want = candidate_blocks_of(pools, graphs)
    got = candidate_blocks_torch(pools, [TorchCSR.from_scipy(g, torch.device("cpu")) for g in graphs])
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert float(got[0].abs().sum()) > 0  # the pools do hold edges: the comparison is not vacuous


def test_rows_without_seeds_are_empty():
    graph = _graph(np.random.default_rng(3), 30, 0.1, dyadic=True)
    ids = torch.tensor([[-1, -1], [4, -1]])
    got_ids, got_pri = expand_torch(ids, torch.ones(2, 2), TorchCSR.from_scipy(graph, torch.device("cpu")), max_candidates=10)
    assert (got_ids[0] == -1).all() and (got_pri[0] == 0).all()
    assert got_ids[1, 0] == 4 and got_pri[1, 0] == 3.0  # the seed first: 2 + weight
