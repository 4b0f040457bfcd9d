"""Sparse block-diagonal graphs (spectrag.kernels.blocks) on the ``device`` fixture's devices:
dense round trips, the block Laplacian against the dense one, and the block kernels (PPR and
heat) against their dense-block counterparts."""

from __future__ import annotations

import pytest
import torch

from spectrag.kernels.blocks import BlockGraph, block_laplacian_csr, row_sums
from spectrag.kernels.heat import chebyshev_heat_blocks, chebyshev_heat_dense_batched
from spectrag.kernels.laplacian import block_laplacian
from spectrag.kernels.pagerank import personalized_pagerank_blocks, personalized_pagerank_dense_batched


def symmetric_blocks(seed: int, batch: int = 7, p: int = 30, density: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(batch, p, p, generator=g, dtype=torch.float64)
    w = torch.where(torch.rand(batch, p, p, generator=g) < density, w, torch.zeros_like(w))
    w = torch.maximum(w, w.transpose(1, 2))
    w.diagonal(dim1=1, dim2=2).zero_()
    mask = torch.ones(batch, p, dtype=torch.bool)
    mask[2, -11:] = False  # padding
    mask[4, :] = False  # an empty block
    w[:, 5, :] = 0.0
    w[:, :, 5] = 0.0  # an isolated (dangling) node in every block
    w = w.masked_fill(~(mask[:, :, None] & mask[:, None, :]), 0.0)
    return w, mask


def test_dense_round_trip_and_degrees(device):
    w, _ = symmetric_blocks(0)
    blocks = BlockGraph.from_dense(w.to(device))
    assert torch.equal(blocks.dense().cpu(), w)
    torch.testing.assert_close(row_sums(blocks).cpu(), w.sum(2), rtol=0, atol=1e-12)
    x = torch.rand(w.shape[0] * w.shape[1], 1, dtype=torch.float64)
    got = torch.sparse.mm(blocks.operator().to(device), x.to(device)).cpu().reshape(w.shape[0], -1)
    torch.testing.assert_close(got, torch.bmm(w, x.reshape(w.shape[0], -1, 1)).squeeze(2), rtol=0, atol=1e-12)


def test_block_laplacian_equals_the_dense_one(device):
    w, _ = symmetric_blocks(1)
    L = block_laplacian_csr(BlockGraph.from_dense(w.to(device)), torch.float64).to_dense().cpu()
    want = torch.block_diag(*block_laplacian(w))
    torch.testing.assert_close(L, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_ppr_blocks_equal_dense_blocks(device, seed):
    w, mask = symmetric_blocks(seed)
    g = torch.Generator().manual_seed(seed + 10)
    restart = (torch.rand(w.shape[0], w.shape[1], generator=g, dtype=torch.float64) * (torch.rand(w.shape[0], w.shape[1], generator=g) < 0.3))
    restart[:, 0] = 1.0  # every real block has a restart node
    restart = restart.masked_fill(~mask, 0.0)
    live = mask.any(1)
    want = personalized_pagerank_dense_batched(w[live], restart[live], mask=mask[live], tol=1e-10, max_iter=300)
    got = personalized_pagerank_blocks(BlockGraph.from_dense(w[live].to(device)), restart[live].to(device),
                                       mask=mask[live].to(device), tol=1e-10, max_iter=300)
    torch.testing.assert_close(got.scores.cpu(), want.scores, rtol=0, atol=1e-12)
    assert got.n_iter == want.n_iter and torch.equal(got.column_iters.cpu(), want.column_iters)


def test_heat_blocks_equal_dense_blocks(device):
    w, mask = symmetric_blocks(3)
    x = torch.rand(w.shape[0], w.shape[1], dtype=torch.float64).masked_fill(~mask, 0.0)
    want = chebyshev_heat_dense_batched(block_laplacian(w), x, 0.8, mask=mask, tol=1e-10)
    got = chebyshev_heat_blocks(BlockGraph.from_dense(w.to(device)), x.to(device), 0.8, mask=mask.to(device), tol=1e-10)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=1e-12)


def test_bad_inputs_are_named():
    w, mask = symmetric_blocks(0)
    blocks = BlockGraph.from_dense(w)
    with pytest.raises(ValueError, match=r"X must be a floating \[7, 30\] tensor"):
        personalized_pagerank_blocks(blocks, torch.zeros(3, 30, dtype=torch.float64))
    with pytest.raises(ValueError, match="non-negative"):
        personalized_pagerank_blocks(BlockGraph.from_dense(-w), torch.ones(7, 30, dtype=torch.float64))
