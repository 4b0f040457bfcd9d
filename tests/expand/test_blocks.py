"""The induced candidate blocks of spectrag.expand.blocks: the torch path, on the ``device``
fixture's devices, equals the scipy path exactly."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.expand.blocks import candidate_blocks_of, candidate_blocks_torch
from spectrag.expand.pool import expand
from spectrag.kernels.csr import TorchCSR


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


def test_blocks_equal_the_scipy_blocks(device):
    rng = np.random.default_rng(7)
    n = 250
    graphs = [_graph(rng, n, 0.03, dyadic=False), _graph(rng, n, 0.01, dyadic=False)]
    ids, w = _seeds(rng, 6, n, 5, dyadic=False)
    pools, _ = expand(ids, w, graphs[0], max_candidates=40)
    want = candidate_blocks_of(pools, graphs)
    got = [b.cpu() for b in candidate_blocks_torch(pools.to(device), [TorchCSR.from_scipy(g, device) for g in graphs])]
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert float(got[0].abs().sum()) > 0  # the pools do hold edges: the comparison is not vacuous
