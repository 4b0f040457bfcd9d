"""The candidate pools of spectrag.expand.pool: the compiled CPU kernel against the torch
expansion (its reference) on the ``device`` fixture's devices, and both against a plain Python
walk. (The blocks: tests/expand/test_expand_blocks.py. Named test_expand_pool: tests/util/
holds a test_util_pool, and the test folders are not packages, so basenames must differ.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spectrag.expand.pool import expand, expand_torch
from spectrag.kernels.csr import TorchCSR

from random_pools import random_graph, random_seeds


def python_expand(graph, ids, w, p, hops, allowed=None):
    """The pool rules written out per query with float64 dicts (module docstring of
    spectrag.expand.pool): reach rounded to float32, float32 reciprocal of its peak, seeds 2 + weight;
    ``allowed [B, n]``: the walk steps only onto allowed nodes."""
    out_ids, out_pri = [], []
    for b in range(ids.shape[0]):
        seed = {}
        for v, x in zip(ids[b].tolist(), w[b].tolist()):
            if v >= 0:
                seed[v] = seed.get(v, 0.0) + float(np.float32(x))
        front, reach = dict(seed), {}
        for hop in range(hops):
            nxt = {}
            for u in sorted(front):
                for e in range(graph.indptr[u], graph.indptr[u + 1]):
                    v = int(graph.indices[e])
                    if allowed is not None and not allowed[b, v]:
                        continue
                    nxt[v] = nxt.get(v, 0.0) + float(graph.data[e]) * front[u]
            for v, x in nxt.items():
                reach[v] = reach.get(v, 0.0) + 0.5**hop * x
            front = nxt
        r32 = {v: np.float32(x) for v, x in reach.items()}
        peak = max(r32.values(), default=np.float32(0))
        inv = np.float32(1.0 / np.float64(peak)) if peak > 0 else np.float32(1)
        pri = {v: r32[v] * inv for v in reach}
        pri.update({v: np.float32(x) + np.float32(2) for v, x in seed.items()})
        items = sorted(((v, x) for v, x in pri.items() if x != 0), key=lambda t: (-t[1], t[0]))[:p]
        width = min(p, graph.shape[0])
        out_ids.append([v for v, _ in items] + [-1] * (width - len(items)))
        out_pri.append([float(x) for _, x in items] + [0.0] * (width - len(items)))
    return out_ids, out_pri


@pytest.mark.parametrize("trial", range(16))
def test_compiled_equals_torch_bitwise(trial, device):
    """Both sum in float64 in ascending source order: the same pools and priorities, bit for
    bit on the CPU (on a GPU, scattered additions may order a sum otherwise: then equal to 1 ulp)."""
    rng = np.random.default_rng(trial)
    n = int(rng.integers(5, 400))
    # odd trials: a directed graph (the walk pushes along rows, F W, whatever W's symmetry)
    graph = random_graph(rng, n, float(rng.choice([0.005, 0.02, 0.1])), dyadic=False, symmetric=trial % 2 == 0)
    ids, w = random_seeds(rng, int(rng.integers(1, 9)), n, int(rng.integers(1, 21)), dyadic=False)
    if trial % 3 == 0:  # seeds of negative weight (a negative cosine): negative walk mass, ranked last
        w = -w
    p, hops = int(rng.integers(1, 80)), int(rng.integers(0, 4))
    want_ids, want_pri = expand(ids, w, graph, max_candidates=p, hops=hops)
    got_ids, got_pri = expand_torch(ids.to(device), w.to(device), TorchCSR.from_scipy(graph, device),
                                    max_candidates=p, hops=hops)
    got_ids, got_pri = got_ids.cpu(), got_pri.cpu()
    if device.type == "cpu":
        assert torch.equal(got_ids, want_ids) and torch.equal(got_pri, want_pri)
    else:
        torch.testing.assert_close(got_pri, want_pri, rtol=2e-7, atol=0)
    py_ids, py_pri = python_expand(graph, ids, w, p, hops)
    assert want_ids.tolist() == py_ids
    assert want_pri.tolist() == py_pri


@pytest.mark.parametrize("seeds", [2, 40])
def test_compiled_equals_the_walk_whichever_way_it_orders_a_frontier(seeds):
    """The compiled walk visits a frontier in ascending node order by a sort (a small frontier
    of a large graph) or by one pass over the nodes (a frontier over n / 32): 2 seeds of 2,000
    nodes take the sort at hop 1 and the pass later; 40 seeds the pass throughout. Both give
    the plain walk's pools, bit for bit."""
    rng = np.random.default_rng(seeds)
    n = 2000
    graph = random_graph(rng, n, 0.01, dyadic=False)
    ids = torch.from_numpy(np.stack([rng.permutation(n)[:seeds] for _ in range(3)]))
    w = torch.from_numpy(rng.random((3, seeds)).astype(np.float32))
    got_ids, got_pri = expand(ids, w, graph, max_candidates=150, hops=3)
    py_ids, py_pri = python_expand(graph, ids, w, 150, 3)
    assert got_ids.tolist() == py_ids and got_pri.tolist() == py_pri
    want_ids, want_pri = expand_torch(ids, w, TorchCSR.from_scipy(graph, torch.device("cpu")), max_candidates=150, hops=3)
    assert torch.equal(got_ids, want_ids) and torch.equal(got_pri, want_pri)


def test_pools_do_not_depend_on_the_batch():
    """A query's pool is the same alone and in any batch, and at any thread count."""
    rng = np.random.default_rng(7)
    graph = random_graph(rng, 2000, 0.004, dyadic=False)
    ids, w = random_seeds(rng, 40, 2000, 20, dyadic=False)
    before = torch.get_num_threads()
    try:
        batches = {}
        for threads in (1, 2):  # the compiled kernel splits a batch of 40 rows over the threads
            torch.set_num_threads(threads)
            batches[threads] = expand(ids, w, graph, max_candidates=200)
        full_ids, full_pri = batches[2]
        assert torch.equal(batches[1][0], full_ids) and torch.equal(batches[1][1], full_pri)
        for b in (0, 13, 39):
            one_ids, one_pri = expand(ids[b : b + 1], w[b : b + 1], graph, max_candidates=200)
            assert torch.equal(one_ids[0], full_ids[b]) and torch.equal(one_pri[0], full_pri[b])
    finally:
        torch.set_num_threads(before)


def test_rows_without_seeds_are_empty(device):
    graph = random_graph(np.random.default_rng(3), 30, 0.1, dyadic=True)
    ids = torch.tensor([[-1, -1], [4, -1]])
    for got_ids, got_pri in (expand(ids, torch.ones(2, 2), graph, max_candidates=10),
                             expand_torch(ids.to(device), torch.ones(2, 2, device=device),
                                          TorchCSR.from_scipy(graph, device), max_candidates=10)):
        assert (got_ids[0] == -1).all() and (got_pri[0] == 0).all()
        assert got_ids[1, 0] == 4 and got_pri[1, 0] == 3.0  # the seed first: 2 + weight


@pytest.mark.parametrize("trial", range(8))
def test_a_filter_mask_keeps_the_walk_on_allowed_nodes(trial, device):
    """``allowed [B, n]`` (a metadata filter per query): compiled = torch bit for bit, both = the
    per-query reference that steps only onto allowed nodes; no disallowed node is a candidate."""
    rng = np.random.default_rng(100 + trial)
    n = int(rng.integers(20, 300))
    graph = random_graph(rng, n, float(rng.choice([0.02, 0.1])), dyadic=False, symmetric=trial % 2 == 0)
    batch = int(rng.integers(1, 7))
    allowed = torch.from_numpy(rng.random((batch, n)) < rng.choice([0.05, 0.3, 0.8]))
    ids, w = random_seeds(rng, batch, n, int(rng.integers(1, 12)), dyadic=False)
    ids = torch.where(allowed.gather(1, ids.clamp(min=0)) & (ids >= 0), ids, torch.full_like(ids, -1))  # allowed seeds
    p, hops = int(rng.integers(1, 60)), int(rng.integers(1, 4))
    want_ids, want_pri = expand(ids, w, graph, max_candidates=p, hops=hops, allowed=allowed)
    got_ids, got_pri = expand_torch(ids.to(device), w.to(device), TorchCSR.from_scipy(graph, device),
                                    max_candidates=p, hops=hops, allowed=allowed.to(device))
    if device.type == "cpu":
        assert torch.equal(got_ids.cpu(), want_ids) and torch.equal(got_pri.cpu(), want_pri)
    py_ids, py_pri = python_expand(graph, ids, w, p, hops, allowed=allowed.numpy())
    assert want_ids.tolist() == py_ids and want_pri.tolist() == py_pri
    real = want_ids >= 0
    assert allowed.gather(1, want_ids.clamp(min=0))[real].all()
    unfiltered, _ = expand(ids, w, graph, max_candidates=p, hops=hops)
    assert trial > 0 or not torch.equal(unfiltered, want_ids) or not real.any()


def test_a_frontier_of_every_node_stays_inside_the_kernels_buffers(tmp_path):
    """A hop whose frontier reaches every node, then visits one again (a complete graph): the
    compiled expansion writes each visit's slot before it knows whether the visit is new, so
    its buffer must hold n + 1 slots. Run with numba's bounds checking on (a fresh cache, in a
    child process: the flag is read at compile time), where one slot short raises IndexError."""
    pytest.importorskip("numba")
    import subprocess
    import sys

    code = (
        "import numpy as np, scipy.sparse as sp\n"
        "from spectrag.kernels.compiled.expand import expand_compiled\n"
        "for n in (2, 4, 9):\n"
        "    W = sp.csr_matrix(np.ones((n, n), np.float32) - np.eye(n, dtype=np.float32))\n"
        "    ids, pri = expand_compiled(np.array([[0, -1], [1, 0]]), np.ones((2, 2), np.float32), W.indptr,\n"
        "                               W.indices, W.data, max_candidates=n, hops=3)\n"
        "    assert (np.sort(ids, axis=1) == np.arange(n)).all(), ids\n"
    )
    env = {**__import__("os").environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
