"""Tiled exact top-k: equal to a numpy brute force, ties by smaller id, any tile size; on the
``device`` fixture's devices (results compared on the CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import to_cpu

from spectrag.kernels import tiled_topk_ip


def _brute(xq: np.ndarray, xb: np.ndarray, k: int) -> np.ndarray:
    scores = xq @ xb.T
    # lexsort: last key is primary -> score descending, then id ascending
    return np.stack([np.lexsort((np.arange(len(xb)), -row))[:k] for row in scores])


METHODS = ["scan", "merge"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("tile", [7, 64, 10_000])
def test_equals_brute_force(tile, method, device):
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((500, 16)).astype(np.float64)
    xq = rng.standard_normal((9, 16))
    s, i = to_cpu(tiled_topk_ip(torch.from_numpy(xq).to(device), torch.from_numpy(xb).to(device), 20, tile=tile, method=method))
    np.testing.assert_array_equal(i.numpy(), _brute(xq, xb, 20))
    np.testing.assert_allclose(s.numpy(), np.take_along_axis(xq @ xb.T, i.numpy(), 1))


@pytest.mark.parametrize("method", METHODS)
def test_ties_break_by_smaller_id_across_tiles(method, device):
    xb = torch.tensor([[1.0, 0.0]] * 10 + [[0.0, 1.0]] * 5, device=device)
    xq = torch.tensor([[1.0, 0.0]], device=device)
    _, i = tiled_topk_ip(xq, xb, 4, tile=3, method=method)
    assert i.tolist() == [[0, 1, 2, 3]]


@pytest.mark.parametrize("k", [1, 3, 10])
def test_scan_equals_merge_and_brute_force_with_ties(k, device):
    """The two methods agree with each other and with numpy: many exact ties (integer rows, so
    the sampled threshold ties too), tiles that do not divide n, and scores rising with the id
    for some queries (every tile beats the stale threshold: the buffer overflows and merges on
    most tiles) and falling for the others."""
    rng = np.random.default_rng(k)
    xb = rng.integers(-3, 4, (5003, 4)).astype(np.float32)
    xq = rng.integers(-2, 3, (9, 4)).astype(np.float32)
    for tile in (700, 4096, 1 << 16):
        scan = to_cpu(tiled_topk_ip(torch.from_numpy(xq).to(device), torch.from_numpy(xb).to(device), k, tile=tile, method="scan"))
        merge = to_cpu(tiled_topk_ip(torch.from_numpy(xq).to(device), torch.from_numpy(xb).to(device), k, tile=tile, method="merge"))
        assert torch.equal(scan[0], merge[0]) and torch.equal(scan[1], merge[1])
        np.testing.assert_array_equal(scan[1].numpy(), _brute(xq, xb, k))
    rise = np.linspace(0.1, 10.0, 20000, dtype=np.float32)[:, None]
    direction = rng.standard_normal((1, 16)).astype(np.float32)
    xb = 0.01 * rng.standard_normal((20000, 16)).astype(np.float32) + rise * direction
    xq = rng.standard_normal((7, 16)).astype(np.float32)
    xq = np.concatenate([xq, -xq])
    for tile in (500, 3000):
        scan = tiled_topk_ip(torch.from_numpy(xq).to(device), torch.from_numpy(xb).to(device), k, tile=tile, method="scan")
        merge = tiled_topk_ip(torch.from_numpy(xq).to(device), torch.from_numpy(xb).to(device), k, method="merge")
        assert torch.equal(scan[1], merge[1]) and torch.allclose(scan[0], merge[0])


def test_k_larger_than_n_and_bad_shapes(device):
    xb = torch.randn(5, 3).to(device)
    s, i = tiled_topk_ip(torch.randn(2, 3).to(device), xb, 10)
    assert i.shape == (2, 5) and sorted(i[0].tolist()) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="same d"):
        tiled_topk_ip(torch.randn(2, 4).to(device), xb, 2)
    with pytest.raises(ValueError, match="k must be >= 1"):
        tiled_topk_ip(torch.randn(2, 3).to(device), xb, 0)
    with pytest.raises(ValueError, match="method must be"):
        tiled_topk_ip(torch.randn(2, 3).to(device), xb, 2, method="heap")


def test_ties_at_the_cut_go_to_the_smaller_id(device):
    from spectrag.kernels.topk import topk_smallest_id_ties

    scores = torch.tensor([[0.5, 0.9, 0.5, 0.5, 0.1], [1.0, 1.0, 1.0, 1.0, 1.0]])
    s, i = to_cpu(topk_smallest_id_ties(scores.to(device), 3))
    assert i.tolist() == [[1, 0, 2], [0, 1, 2]]
    assert torch.equal(s, torch.tensor([[0.9, 0.5, 0.5], [1.0, 1.0, 1.0]]))
    rng = torch.Generator().manual_seed(0)
    for _ in range(20):  # many ties: integer scores; compare with a full stable sort
        x = torch.randint(0, 4, (6, 40), generator=rng).float()
        s, i = to_cpu(topk_smallest_id_ties(x.to(device), 7))
        order = torch.argsort(-x, dim=1, stable=True)[:, :7]
        assert torch.equal(i, order)


def _sparse_rows_reference(rows: list[list[tuple[int, float]]], k: int):
    """Per row: (column, value) pairs sorted by value descending then column, cut to k."""
    out = []
    for row in rows:
        best = sorted(row, key=lambda cv: (-cv[1], cv[0]))[:k]
        out.append(best)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_topk_sparse_rows_matches_sorted_python(seed, device):
    from spectrag.kernels.topk import topk_sparse_rows

    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 12))
    # rows of very different lengths (empty; shorter than k yet padded beside longer rows in one
    # length bucket; a few long ones), coarse values so ties at the cut are common, and column
    # indices left unsorted as a sparse product leaves them
    lengths = rng.choice([0, 1, 3, max(k - 1, 0), k, k + 1, 40, 300, 2000], size=30)
    rows, indptr, cols, vals = [], [0], [], []
    for length in lengths:
        c = rng.permutation(5000)[:length]
        v = rng.integers(0, 6, size=length).astype(np.float32) / 4
        rows.append(list(zip(c.tolist(), v.tolist())))
        cols.extend(c.tolist())
        vals.extend(v.tolist())
        indptr.append(len(cols))
    scores, ids = to_cpu(topk_sparse_rows(torch.tensor(indptr, device=device), torch.tensor(cols, device=device),
                                          torch.tensor(vals, dtype=torch.float32, device=device), k))
    for b, want in enumerate(_sparse_rows_reference(rows, k)):
        got_ids = ids[b].tolist()
        assert got_ids[: len(want)] == [c for c, _ in want]
        assert scores[b, : len(want)].tolist() == [v for _, v in want]
        assert got_ids[len(want):] == [-1] * (k - len(want))
        assert scores[b, len(want):].tolist() == [0.0] * (k - len(want))


def test_topk_sparse_rows_empty_and_bad_k(device):
    from spectrag.kernels.topk import topk_sparse_rows

    s, i = topk_sparse_rows(torch.tensor([0, 0, 0], device=device), torch.empty(0, dtype=torch.int64, device=device),
                            torch.empty(0, device=device), 3)
    assert i.tolist() == [[-1] * 3] * 2 and s.abs().sum() == 0
    with pytest.raises(ValueError, match="k must be >= 1"):
        topk_sparse_rows(torch.tensor([0, 1], device=device), torch.tensor([0], device=device), torch.tensor([1.0], device=device), 0)


def test_topk_by_row_equals_topk_sparse_rows_and_allows_k_zero(device):
    from spectrag.kernels.topk import topk_by_row, topk_sparse_rows

    row = torch.tensor([0, 0, 0, 2, 2, 3], device=device)
    ids = torch.tensor([5, 1, 3, 9, 2, 4], device=device)
    vals = torch.tensor([0.5, 0.9, 0.5, 0.1, 0.3, 0.7], device=device)
    got = topk_by_row(row, ids, vals, 4, 2)
    want = topk_sparse_rows(torch.tensor([0, 3, 3, 5, 6], device=device), ids, vals, 2)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[1].tolist() == [[1, 3], [-1, -1], [2, 9], [4, -1]]
    assert topk_by_row(row, ids, vals, 4, 0)[1].shape == (4, 0)


@pytest.mark.parametrize("seed", range(4))
def test_topk_by_row_random_rows_with_ties_and_one_host_read(seed, device):
    """Random rows (empty, shorter than k, long) of coarse values (ties at the cut): the padded
    top-k equals topk_sparse_rows (the bucketed one), and makes one host read whatever the rows."""
    from spectrag.kernels.topk import topk_by_row, topk_sparse_rows
    from spectrag.util.syncs import SyncCounter

    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 12))
    lengths = rng.choice([0, 1, k, k + 1, 50, 700], size=40)
    row = torch.from_numpy(np.repeat(np.arange(40), lengths)).to(device)
    ids = torch.from_numpy(np.concatenate([rng.permutation(3000)[:m] for m in lengths])).to(device)
    vals = torch.from_numpy(rng.integers(0, 5, size=int(lengths.sum())).astype(np.float32) / 4).to(device)
    indptr = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)])).to(device)
    with SyncCounter() as syncs:
        got = topk_by_row(row, ids, vals, 40, k)
    want = topk_sparse_rows(indptr, ids, vals, k)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert syncs.total == 1, syncs.report()  # the widest row's length
@pytest.mark.parametrize("method", ["scan", "merge"])
def test_allowed_rows_equal_a_brute_force_over_them(method, device):
    """``allowed [B, n]`` (a metadata filter per query): the top-k among each row's allowed rows,
    ties to the smaller id; a row allowing fewer than k ends in ids -1, scores -inf."""
    g = torch.Generator().manual_seed(4)
    xq, xb = torch.randn(9, 16, generator=g), torch.randn(3000, 16, generator=g)
    xb[1500:1510] = xb[20]  # ties across tiles
    share = torch.tensor([0.5, 0.05, 0.002, 1.0, 0.0, 0.3, 0.001, 0.9, 0.1])[:, None]
    allowed = torch.rand(9, 3000, generator=g) < share
    allowed[3, 20] = allowed[3, 1500:1510] = True
    s, i = tiled_topk_ip(xq.to(device), xb.to(device), 40, tile=512, method=method, allowed=allowed.to(device))
    s, i = s.cpu(), i.cpu()
    full = (xq.double() @ xb.double().T).float()
    for b in range(9):
        ok = torch.nonzero(allowed[b]).squeeze(1).tolist()
        want = sorted(ok, key=lambda c: (-float(full[b, c]), c))[:40]
        got = [c for c in i[b].tolist() if c >= 0]
        assert len(got) == len(want) and set(got) == set(want) or got == want, f"row {b}"
        assert (s[b, len(got):] == float("-inf")).all() and (i[b, len(got):] == -1).all()
    with pytest.raises(ValueError, match="allowed must be"):
        tiled_topk_ip(xq, xb, 5, allowed=allowed[:, :10])
