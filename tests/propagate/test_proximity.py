"""The proximities of spectrag.propagate.proximity on the sparse blocks, on the ``device``
fixture's devices, against dense float64 kernels on the CPU: PPR (sparse and dense paths) and
heat (against scipy's expm per block)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

import spectrag.propagate.proximity as propagate
from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.laplacian import block_laplacian
from spectrag.kernels.pagerank import personalized_pagerank_dense_batched


def random_blocks(seed: int, batch: int = 6, p: int = 50):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(batch, p, p, generator=g) * (torch.rand(batch, p, p, generator=g) < 0.1)
    w = torch.maximum(w, w.transpose(1, 2))
    mask = torch.ones(batch, p, dtype=torch.bool)
    mask[1, -9:] = False
    w = w.masked_fill(~(mask[:, :, None] & mask[:, None, :]), 0.0)
    restart = torch.zeros(batch, p)
    restart[:, :5] = torch.rand(batch, 5, generator=g)
    return w, restart, mask


def float64_proximity(w, restart, mask):
    """The fixed point (networkx's iteration run to tol 1e-12), scaled as the proximity is."""
    res = personalized_pagerank_dense_batched(w.double(), restart.double(), mask=mask, tol=1e-12, max_iter=500)
    x = res.scores.masked_fill(~mask, 0.0)
    return x / x.amax(dim=1, keepdim=True)


@pytest.mark.parametrize("method", ["power", "chebyshev"])
@pytest.mark.parametrize("dense", [False, True])
def test_ppr_proximity_matches_float64_dense_kernel(device, dense, method):
    # the solvers stop at an L1 change of 1e-8 per node: a few 1e-6 of the scaled proximity
    for seed in range(3):
        w, restart, mask = random_blocks(seed)
        blocks = BlockGraph.from_dense(w.to(device))
        got = propagate.ppr_proximity(blocks, restart.to(device), mask.to(device), dense=dense, method=method).cpu()
        torch.testing.assert_close(got.double(), float64_proximity(w, restart, mask), rtol=0, atol=3e-6)


@pytest.mark.parametrize("dense", [False, True])
def test_heat_proximity_matches_expm_per_block(device, dense):
    w, _, mask = random_blocks(4)
    rel = torch.rand(w.shape[0], w.shape[1], generator=torch.Generator().manual_seed(1)).masked_fill(~mask, 0.0)
    got = propagate.heat_proximity(BlockGraph.from_dense(w.to(device)), rel.to(device), mask.to(device), 0.7,
                                   dense=dense).cpu().double()
    L = block_laplacian(w.double())
    want = torch.stack([torch.from_numpy(scipy.linalg.expm(-0.7 * L[b].numpy()) @ rel[b].double().numpy())
                        for b in range(w.shape[0])]).masked_fill(~mask, 0.0)
    want = want / want.amax(dim=1, keepdim=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert np.isfinite(got.numpy()).all()


def test_graph_scope_ppr_exact_matrix_agrees_with_power_iteration(device):
    """Whole-graph PPR read at the candidates: the exact PageRankMatrix and batched power
    iteration (which stops within n * tol, L1, of the fixed point) agree to that tolerance."""
    from spectrag.kernels.pagerank import PageRankMatrix, random_walk_operator

    g = torch.Generator().manual_seed(3)
    n = 120
    A = torch.rand(n, n, generator=g, dtype=torch.float64) * (torch.rand(n, n, generator=g) < 0.05)
    A = torch.maximum(A, A.T)
    A.fill_diagonal_(0)
    walk = random_walk_operator(A.to_sparse_csr().to(device))
    candidates = torch.stack([torch.randperm(n, generator=g)[:30] for _ in range(5)]).to(device)
    candidates[2, -4:] = -1
    seeds = candidates[:, :4]
    w = torch.rand(5, 4, generator=g).to(device)
    mask = candidates >= 0
    exact = propagate.graph_ppr_proximity(PageRankMatrix.build(walk, 0.85), candidates, seeds, w, mask).cpu()
    iterated = propagate.graph_ppr_proximity(walk, candidates, seeds, w, mask, tol=1e-10).cpu()
    torch.testing.assert_close(exact, iterated, rtol=0, atol=1e-6)
