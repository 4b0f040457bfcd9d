"""The compiled CPU kernels (spectrag.kernels.compiled) held to their torch versions, the
references and GPU path, on random inputs: identical ids, orders, selections and iteration
counts; scores within 1e-6 relative (README, "Batch invariance"; in practice bitwise, since
both sum in float64 and round); and every kernel independent of how a batch is split over
threads."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.compiled.bridge import bridge_compiled
from spectrag.kernels.compiled.gather import gathered_dot_compiled, max_cosine_compiled, rescore_compiled
from spectrag.kernels.compiled.pagerank import personalized_pagerank_blocks_compiled
from spectrag.kernels.compiled.runtime import parallel_rows
from spectrag.kernels.compiled.select import budget_select_compiled
from spectrag.kernels.gather import gathered_dot
from spectrag.kernels.pagerank import PageRankNotConverged, personalized_pagerank_blocks
from spectrag.kernels.select import SelectParams, budget_select
from spectrag.propagate.proximity import spectral_proximity
from spectrag.rescore.bridge import bridge_relevance

from test_select import make_case, random_config

RTOL = 1e-6


def random_ids(g: torch.Generator, batch: int, width: int, n: int) -> torch.Tensor:
    ids = torch.stack([torch.randperm(n, generator=g)[:width] for _ in range(batch)])
    ids[1, -5:] = -1  # padding
    return ids


def test_gathered_dot_equals_torch():
    g = torch.Generator().manual_seed(0)
    table, q = torch.randn(700, 384, generator=g), torch.randn(30, 384, generator=g)
    ids = random_ids(g, 30, 60, 700)
    want = gathered_dot(table, ids, q)
    got = torch.from_numpy(gathered_dot_compiled(table.numpy(), ids.numpy(), q.numpy()))
    torch.testing.assert_close(got, want, rtol=RTOL, atol=0)
    assert torch.all(got[1, -5:] == 0)
    # the order of each query's candidates by relevance is the same
    assert torch.equal(torch.argsort(got, dim=1, stable=True), torch.argsort(want, dim=1, stable=True))


def test_max_cosine_equals_spectral_proximity():
    g = torch.Generator().manual_seed(1)
    coords = torch.randn(500, 32, generator=g)
    coords = coords / coords.norm(dim=1, keepdim=True)
    cand, seeds = random_ids(g, 12, 80, 500), random_ids(g, 12, 20, 500)
    seeds[4] = -1  # no seeds: 0
    mask = cand >= 0
    want = spectral_proximity(coords, cand, seeds, mask)
    got = spectral_proximity(coords, cand, seeds, mask, compiled=True)
    torch.testing.assert_close(got, want, rtol=RTOL, atol=0)
    assert torch.all(got[4] == 0) and torch.all(got[1, -5:] == 0)
    assert torch.equal(got, torch.from_numpy(max_cosine_compiled(coords.numpy(), cand.numpy(), seeds.numpy())))


def test_rescore_equals_numpy_rescore():
    from spectrag.index.dense import rescore

    rng = np.random.default_rng(2)
    table = rng.standard_normal((400, 64)).astype(np.float32)
    table[7] = table[9]  # duplicate rows: exact ties, broken by the smaller id
    q = rng.standard_normal((9, 64)).astype(np.float32)
    ids = np.stack([rng.permutation(400)[:40] for _ in range(9)])
    ids[0, :2] = [9, 7]
    ids[3, -4:] = -1
    want_s, want_i = rescore(table, q, ids, 25)
    got_s, got_i = rescore_compiled(table, q, ids, 25)
    assert np.array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-12)


def random_blocks(seed: int, batch: int = 7, p: int = 60, density: float = 0.1):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(batch, p, p, generator=g) * (torch.rand(batch, p, p, generator=g) < density)
    w = torch.maximum(w, w.transpose(1, 2))
    w.diagonal(dim1=1, dim2=2).zero_()
    mask = torch.ones(batch, p, dtype=torch.bool)
    mask[1, -9:] = False
    mask[5, 3:] = False  # a tiny pool
    w = w.masked_fill(~(mask[:, :, None] & mask[:, None, :]), 0.0)
    if seed % 2:  # an edge to padding (the kernels must ignore it)
        w[1, 0, -1] = w[1, -1, 0] = 0.5
    restart = torch.zeros(batch, p, dtype=torch.float64)
    restart[:, :5] = torch.rand(batch, 5, generator=g, dtype=torch.float64)
    return BlockGraph.from_dense(w), restart, mask


@pytest.mark.parametrize("seed", range(4))
def test_ppr_blocks_equal_torch(seed):
    blocks, restart, mask = random_blocks(seed)
    want = personalized_pagerank_blocks(blocks, restart, mask=mask, tol=1e-8, max_iter=200)
    got = personalized_pagerank_blocks_compiled(blocks, restart, mask=mask, tol=1e-8, max_iter=200)
    torch.testing.assert_close(got.scores, want.scores, rtol=1e-9, atol=1e-15)
    assert torch.equal(got.column_iters, want.column_iters)  # each block stops where it would alone
    assert got.converged and torch.all(got.column_converged)
    with pytest.raises(PageRankNotConverged, match="did not converge in max_iter=2"):
        personalized_pagerank_blocks_compiled(blocks, restart, mask=mask, tol=1e-12, max_iter=2)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sources,rounds", [(1, 1), (5, 1), (5, 2), (100, 3)])
def test_bridge_equals_torch(seed, sources, rounds):
    blocks, _, mask = random_blocks(seed)
    g = torch.Generator().manual_seed(100 + seed)
    relevance = torch.rand(mask.shape, generator=g).masked_fill(~mask, 0.0)
    relevance[3, :4] = relevance[3, 4]  # ties: broken by the smaller chunk id
    cand = torch.stack([torch.randperm(1000, generator=g)[: mask.shape[1]] for _ in range(mask.shape[0])])
    cand = cand.masked_fill(~mask, -1)
    start = relevance.clone()
    start[0, 7] = 2.0  # a lifted source
    kw = dict(sources=sources, lam=0.3, gamma=0.05, rounds=rounds)
    for s in (None, start):
        want = bridge_relevance(blocks, relevance, cand, start=s, **kw)
        got = bridge_relevance(blocks, relevance, cand, start=s, compiled=True, **kw)
        assert torch.equal(got, want)  # the same float32 operations in the same order


@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
def test_select_equals_torch(ties):
    rng = np.random.default_rng(5)
    for trial in range(40):
        case = make_case(200 + trial, 6, int(rng.integers(1, 30)), ties=ties)
        cfg, budget = random_config(rng, case)
        cfg.pop("budget")
        b, p, d = case["embeddings"].shape
        table = case["embeddings"].reshape(b * p, d).float()
        ids = torch.arange(b * p).reshape(b, p)
        args = [case[k] for k in ("scores", "prox", "tokens", "mask")]
        want = budget_select(*args, table, case["clusters"], case["docs"], budget=budget, ids=ids, **cfg)
        got = budget_select_compiled(*args, table, ids, case["clusters"], case["docs"], budget=budget,
                                     params=SelectParams(**cfg))
        assert torch.equal(got.order, want.order), (trial, cfg)
        assert torch.equal(got.phase, want.phase) and torch.equal(got.selected, want.selected)
        assert torch.equal(got.used_tokens, want.used_tokens) and got.n_steps == want.n_steps
        torch.testing.assert_close(got.utility, want.utility, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_select_refuses_non_finite_rows_it_reads():
    case = make_case(3, 2, 8, garbage=False)
    b, p, d = case["embeddings"].shape
    table = case["embeddings"].reshape(b * p, d).float().clone()
    ids = torch.arange(b * p).reshape(b, p)
    table[int(case["scores"][0].argmax())] = float("nan")
    args = [case[k] for k in ("scores", "prox", "tokens", "mask")]
    with pytest.raises(ValueError, match="embeddings must be finite"):
        budget_select_compiled(*args, table, ids, case["clusters"], case["docs"], budget=100,
                               params=SelectParams(core_size=1, lam=0.5))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_any_split_over_threads_gives_the_same_result(threads):
    g = torch.Generator().manual_seed(9)
    table, q = torch.randn(300, 48, generator=g), torch.randn(50, 48, generator=g)
    ids = random_ids(g, 50, 40, 300)
    one = gathered_dot_compiled(table.numpy(), ids.numpy(), q.numpy(), threads=1)
    assert np.array_equal(gathered_dot_compiled(table.numpy(), ids.numpy(), q.numpy(), threads=threads), one)
    seen = []
    parallel_rows(lambda lo, hi: seen.append((lo, hi)), 50, threads=threads, min_rows=1)
    assert sorted(seen)[0][0] == 0 and sorted(seen)[-1][1] == 50
    assert sum(hi - lo for lo, hi in seen) == 50 and len(seen) == min(threads, os.cpu_count())
    with pytest.raises(ZeroDivisionError):  # a worker's exception reaches the caller
        parallel_rows(lambda lo, hi: 1 / 0, 50, threads=threads, min_rows=1)
