"""gathered_dot (spectrag.kernels.gather) on the ``device`` fixture's devices: equal to the
materialized product, bitwise independent of the tile size and of the batch."""

from __future__ import annotations

import torch

from spectrag.kernels.gather import gathered_dot


def test_equals_materialized_product_and_ignores_padding(device):
    g = torch.Generator().manual_seed(0)
    table, q = torch.randn(500, 48, generator=g), torch.randn(9, 48, generator=g)
    ids = torch.randint(0, 500, (9, 31), generator=g)
    ids[3, -6:] = -1
    got = gathered_dot(table.to(device), ids.to(device), q.to(device)).cpu()
    want = (table[ids.clamp(min=0)] * q[:, None, :]).sum(2).masked_fill(ids < 0, 0.0)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert torch.all(got[3, -6:] == 0)


def test_tiles_and_batches_give_the_same_bits(device):
    g = torch.Generator().manual_seed(1)
    table, q = torch.randn(300, 384, generator=g).to(device), torch.randn(40, 384, generator=g).to(device)
    ids = torch.randint(0, 300, (40, 50), generator=g).to(device)
    full = gathered_dot(table, ids, q)
    assert torch.equal(full, gathered_dot(table, ids, q, tile=7))
    for b in (0, 17, 39):
        assert torch.equal(full[b : b + 1], gathered_dot(table, ids[b : b + 1], q[b : b + 1]))
