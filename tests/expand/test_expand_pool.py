"""The candidate pools of spectrag.expand.pool: the scipy path's cut (top-P per row of a sparse
priority matrix, ties by smaller id) against sorted Python, and the torch expansion, on the
``device`` fixture's devices, against the scipy path (exact where every sum is exact, otherwise
up to float32 rounding at the cut, on any device). (The blocks: tests/expand/test_blocks.py.
Named test_expand_pool: tests/util/ holds a test_util_pool, and the test folders are not
packages, so basenames must differ.)"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spectrag.expand.pool import _top_per_row, expand, expand_torch
from spectrag.kernels.csr import TorchCSR

from random_pools import random_graph, random_seeds


# --- the scipy path's cut --------------------------------------------------------------------------


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


# --- the torch expansion against the scipy one ------------------------------------------------------


@pytest.mark.parametrize("trial", range(12))
def test_expand_equals_scipy_exactly_when_sums_are_exact(trial, device):
    rng = np.random.default_rng(trial)
    n = int(rng.integers(5, 300))
    graph = random_graph(rng, n, float(rng.choice([0.005, 0.02, 0.1])), dyadic=True)
    ids, w = random_seeds(rng, int(rng.integers(1, 7)), n, int(rng.integers(1, 6)), dyadic=True)
    p, hops = int(rng.integers(1, 60)), int(rng.integers(0, 4))
    want_ids, want_pri = expand(ids, w, graph, max_candidates=p, hops=hops)
    got_ids, got_pri = expand_torch(ids.to(device), w.to(device), TorchCSR.from_scipy(graph, device), max_candidates=p, hops=hops)
    got_ids, got_pri = got_ids.cpu(), got_pri.cpu()
    assert torch.equal(got_ids, want_ids)
    assert torch.equal(got_pri, want_pri.to(torch.float32))


@pytest.mark.parametrize("trial", range(8))
def test_expand_matches_scipy_up_to_rounding_at_the_cut(trial, device):
    rng = np.random.default_rng(100 + trial)
    n = 400
    graph = random_graph(rng, n, 0.02, dyadic=False)
    ids, w = random_seeds(rng, 5, n, 8, dyadic=False)
    want_ids, want_pri = expand(ids, w, graph, max_candidates=50)
    got_ids, got_pri = expand_torch(ids.to(device), w.to(device), TorchCSR.from_scipy(graph, device), max_candidates=50)
    got_ids, got_pri = got_ids.cpu(), got_pri.cpu()
    assert torch.allclose(got_pri, want_pri.to(torch.float32), rtol=1e-6, atol=1e-7)
    for b in range(ids.shape[0]):
        # a pool may differ only by members whose priority ties the cut to within rounding
        differ = set(got_ids[b].tolist()) ^ set(want_ids[b].tolist())
        priority = dict(zip(want_ids[b].tolist(), want_pri[b].tolist())) | dict(zip(got_ids[b].tolist(), got_pri[b].tolist()))
        cut = float(want_pri[b, -1])
        assert all(abs(priority[c] - cut) <= 1e-6 for c in differ)


def test_rows_without_seeds_are_empty(device):
    graph = random_graph(np.random.default_rng(3), 30, 0.1, dyadic=True)
    ids = torch.tensor([[-1, -1], [4, -1]], device=device)
    got_ids, got_pri = expand_torch(ids, torch.ones(2, 2, device=device), TorchCSR.from_scipy(graph, device), max_candidates=10)
    assert (got_ids[0] == -1).all() and (got_pri[0] == 0).all()
    assert got_ids[1, 0] == 4 and got_pri[1, 0] == 3.0  # the seed first: 2 + weight


# --- the dense and the sparse CPU paths ---------------------------------------------------------


@pytest.mark.parametrize("trial", range(12))
def test_dense_and_sparse_cpu_paths_agree(trial, monkeypatch):
    """Small batches take the dense walk-mass path, large ones scipy's sparse products: exactly
    the same pools and priorities where every sum is exact (dyadic weights)."""
    import spectrag.expand.pool as pool

    rng = np.random.default_rng(300 + trial)
    n = int(rng.integers(5, 300))
    # odd trials: a directed graph (the walk pushes along rows, F W, whatever W's symmetry)
    graph = random_graph(rng, n, float(rng.choice([0.005, 0.02, 0.1])), dyadic=True, symmetric=trial % 2 == 0)
    ids, w = random_seeds(rng, int(rng.integers(1, 7)), n, int(rng.integers(1, 6)), dyadic=True)
    if trial % 3 == 0:  # seeds of negative weight (a negative cosine): negative walk mass, ranked last
        w = -w
    p, hops = int(rng.integers(1, 60)), int(rng.integers(0, 4))
    dense_ids, dense_pri = expand(ids, w, graph, max_candidates=p, hops=hops)
    monkeypatch.setattr(pool, "DENSE_MAX", 0)
    sparse_ids, sparse_pri = expand(ids, w, graph, max_candidates=p, hops=hops)
    assert torch.equal(dense_ids, sparse_ids)
    assert torch.equal(dense_pri, sparse_pri.to(torch.float32))
