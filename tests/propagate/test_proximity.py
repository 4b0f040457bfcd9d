"""ppr_proximity (spectrag.propagate.proximity): its float32 path, on the ``device`` fixture's
devices, against float64 PPR on the CPU, and its float64 redo of columns that do not converge
in float32."""

from __future__ import annotations

import torch

import spectrag.propagate.proximity as propagate
from spectrag.kernels.pagerank import personalized_pagerank_dense_batched


def random_blocks(seed: int, batch: int = 6, p: int = 50):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(batch, p, p, generator=g) * (torch.rand(batch, p, p, generator=g) < 0.1)
    w = torch.maximum(w, w.transpose(1, 2))
    mask = torch.ones(batch, p, dtype=torch.bool)
    mask[1, -9:] = False
    restart = torch.zeros(batch, p)
    restart[:, :5] = torch.rand(batch, 5, generator=g)
    return w, restart, mask


def float64_proximity(w, restart, mask):
    res = personalized_pagerank_dense_batched(w.double(), restart.double(), mask=mask, tol=1e-8, max_iter=200)
    x = res.scores.masked_fill(~mask, 0.0)
    return x / x.amax(dim=1, keepdim=True)


def test_float32_path_matches_float64(device):
    for seed in range(3):
        w, restart, mask = random_blocks(seed)
        got = propagate.ppr_proximity(w.to(device), restart.to(device), mask.to(device)).cpu()
        torch.testing.assert_close(got.double(), float64_proximity(w, restart, mask), rtol=0, atol=1e-5)


def test_unconverged_float32_columns_are_redone_in_float64(monkeypatch, device):
    w, restart, mask = random_blocks(5)
    calls = []

    def flaky(blocks, x, **kw):
        calls.append(blocks.dtype)
        if blocks.dtype == torch.float32:  # pretend column 2 stalled in float32
            res = personalized_pagerank_dense_batched(blocks, x, **{**kw, "raise_on_failure": False})
            flags = res.column_converged.clone()
            flags[2] = False
            scores = res.scores.clone()
            scores[2] = 0.0
            return type(res)(scores, res.n_iter, False, res.residual, flags, res.column_iters)
        return personalized_pagerank_dense_batched(blocks, x, **kw)

    monkeypatch.setattr(propagate, "personalized_pagerank_dense_batched", flaky)
    got = propagate.ppr_proximity(w.to(device), restart.to(device), mask.to(device)).cpu()
    assert calls == [torch.float32, torch.float64]
    torch.testing.assert_close(got.double(), float64_proximity(w, restart, mask), rtol=0, atol=1e-5)
