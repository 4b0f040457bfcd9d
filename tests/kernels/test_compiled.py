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

from spectrag.kernels.compiled.gather import gathered_dot_compiled, max_cosine_compiled, rescore_compiled
from spectrag.kernels.compiled.pagerank import personalized_pagerank_pools
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


def test_seed_restart_equals_torch():
    """The PPR restart of the compiled path is the torch one's, bit for bit: seeds found in the
    pool carry their clipped weights, padding as there."""
    from spectrag.propagate.proximity import seed_restart

    g = torch.Generator().manual_seed(3)
    cand = random_ids(g, 9, 70, 300)
    seeds = torch.where(torch.rand(9, 20, generator=g) < 0.7, cand[:, torch.randperm(70, generator=g)[:20]],
                        torch.randint(0, 300, (9, 20), generator=g))  # most in the pool, some not
    seeds[2, 5:] = -1  # seed padding (padding candidates equal it, as in the torch version)
    weights = torch.rand(9, 20, generator=g) - 0.1  # some negative: clipped at 0
    want = seed_restart(cand, seeds, weights)
    got = seed_restart(cand, seeds, weights, compiled=True)
    assert torch.equal(got, want) and got.dtype == want.dtype
    assert (got > 0).sum() > 50


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


@pytest.mark.parametrize("threads", [1, 2])
def test_pairs_grouped_by_table_row_give_the_same_bits(threads):
    """The gather and the re-scoring visit a batch's pairs query by query, or grouped by table
    row when they are many for the table: every score the same bits, padding and repeated ids
    included, and the default picks the grouping for pools as large as the dev corpora's."""
    from spectrag.kernels.compiled.gather import BY_ROW_SHARE, by_table_row

    rng = np.random.default_rng(5)
    table = rng.standard_normal((300, 96)).astype(np.float32)
    q = rng.standard_normal((40, 96)).astype(np.float32)
    ids = rng.integers(0, 300, (40, 50))  # many queries share rows
    ids[3, -7:] = -1
    ids[5, :] = -1  # a query without candidates
    ids[6, :4] = 17  # one row four times in a query
    by_query = gathered_dot_compiled(table, ids, q, threads=threads, by_row=False)
    grouped = gathered_dot_compiled(table, ids, q, threads=threads, by_row=True)
    assert np.array_equal(by_query.view(np.int32), grouped.view(np.int32))
    assert np.all(grouped[5] == 0) and np.all(grouped[3, -7:] == 0) and np.all(grouped[6, :4] == grouped[6, 0])
    want_s, want_i = rescore_compiled(table, q, ids, 30, threads=threads, by_row=False)
    got_s, got_i = rescore_compiled(table, q, ids, 30, threads=threads, by_row=True)
    assert np.array_equal(got_i, want_i) and np.array_equal(got_s.view(np.int64), want_s.view(np.int64))
    assert by_table_row(256 * 200, 6_834) and not by_table_row(256 * 200, 1_000_000)
    assert BY_ROW_SHARE == 0.125 and by_table_row(50, 400) and not by_table_row(49, 400)


def random_pools(seed: int, batch: int = 7, p: int = 60, n: int = 300, density: float = 0.05):
    """A random symmetric graph (scipy CSR, float32) and padded pools over it, with restart
    weights on the first members: the pools as the compiled kernels read them (PoolGraphs) and
    as the torch kernels do (BlockGraph)."""
    import scipy.sparse as sp

    from spectrag.kernels.blocks import induced_blocks
    from spectrag.kernels.compiled.blocks import pool_graphs

    rng = np.random.default_rng(seed)
    m = sp.random(n, n, density=density, random_state=seed, format="csr", dtype=np.float32)
    m = (m + m.T).tocsr()
    m.setdiag(0)
    m.eliminate_zeros()
    cand = np.stack([rng.permutation(n)[:p] for _ in range(batch)])
    cand[1, -9:] = -1  # padding
    cand[5, 3:] = -1  # a tiny pool
    restart = torch.zeros(batch, p, dtype=torch.float64)
    restart[:, :5] = torch.from_numpy(rng.random((batch, 5)))
    pools = pool_graphs(cand, [(m.indptr, m.indices, m.data)])[0]
    blocks = induced_blocks(torch.from_numpy(cand), [(m.indptr, m.indices, m.data)], n)[0]
    return pools, blocks, restart, torch.from_numpy(cand)


@pytest.mark.parametrize("seed", range(4))
def test_pool_graphs_materialize_the_torch_blocks(seed):
    pools, blocks, _, _ = random_pools(seed)
    got = pools.materialize()
    for name in ("crow", "col", "val", "src"):
        assert torch.equal(getattr(got, name), getattr(blocks, name)), name


@pytest.mark.parametrize("method", ["power", "chebyshev"])
@pytest.mark.parametrize("seed", range(4))
def test_ppr_pools_equal_torch_blocks(seed, method):
    pools, blocks, restart, cand = random_pools(seed)
    mask = cand >= 0
    want = personalized_pagerank_blocks(blocks, restart, mask=mask, tol=1e-8, max_iter=200, method=method)
    got = personalized_pagerank_pools(pools, restart, tol=1e-8, max_iter=200, method=method)
    torch.testing.assert_close(got.scores, want.scores, rtol=1e-9, atol=1e-15)
    assert torch.equal(got.column_iters, want.column_iters)  # each pool stops where it would alone
    assert got.converged and torch.all(got.column_converged)
    with pytest.raises(PageRankNotConverged, match="did not converge in max_iter=2"):
        personalized_pagerank_pools(pools, restart, tol=1e-12, max_iter=2, method=method)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sources,rounds", [(1, 1), (5, 1), (5, 2), (100, 3)])
def test_bridge_equals_torch(seed, sources, rounds):
    pools, blocks, _, cand = random_pools(seed)
    g = torch.Generator().manual_seed(100 + seed)
    mask = cand >= 0
    relevance = torch.rand(cand.shape, generator=g).masked_fill(~mask, 0.0)
    relevance[3, :4] = relevance[3, 4]  # ties: broken by the smaller chunk id
    start = relevance.clone()
    start[0, 7] = 2.0  # a lifted source
    kw = dict(sources=sources, lam=0.3, gamma=0.05, rounds=rounds)
    anchors = torch.rand(cand.shape, generator=g) < 0.3  # some queries' anchors, others' none
    anchors[2] = False
    docs = torch.randint(0, 12, cand.shape, generator=g).masked_fill(~mask, -1)  # many chunks per document
    relevance[4, 1:6] = relevance[4, 0]  # ties within a document: the smaller id keeps the bridged score
    docs[4, :6] = 3
    for s in (None, start):
        for a, d in ((None, None), (anchors, None), (None, docs), (anchors, docs)):
            want = bridge_relevance(blocks, relevance, cand, start=s, anchors=a, docs=d, **kw)
            got = bridge_relevance(pools, relevance, cand, start=s, anchors=a, docs=d, **kw)
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
        keep = torch.from_numpy(rng.random((b, p)) < 0.2) if trial % 2 else None  # past the evidence cut
        args = [case[k] for k in ("scores", "prox", "tokens", "mask")]
        want = budget_select(*args, table, case["clusters"], case["docs"], budget=budget, ids=ids, keep=keep, **cfg)
        got = budget_select_compiled(*args, table, ids, case["clusters"], case["docs"], budget=budget,
                                     params=SelectParams(**cfg), keep=keep)
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


def _rows_in_child(queue) -> None:
    seen = []
    parallel_rows(lambda lo, hi: seen.append((lo, hi)), 50, threads=2, min_rows=1)
    queue.put(sum(hi - lo for lo, hi in seen))


@pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2, reason="needs fork and 2 CPUs")
def test_a_forked_child_runs_rows_on_pools_of_its_own():
    """A forked child inherits the parent's pool objects but not their threads: work queued on
    the parent's pool would never run. The child makes its own pool and finishes."""
    import threading

    from conftest import forked_result

    both = threading.Barrier(2)  # both ranges at once: the parent's pool has both of its threads
    parallel_rows(lambda lo, hi: both.wait(timeout=10), 50, threads=2, min_rows=1)
    assert forked_result(_rows_in_child, timeout=30) == 50
