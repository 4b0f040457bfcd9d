"""The screened exact top-k (spectrag.kernels.screen, spectrag.kernels.compiled.screen) held to
a brute-force float64 top-k (score descending, then smaller id): the same ids, scores within
1e-12 (float64 sums in another order), with a bfloat16 or a float32 screen, ties, row tiles and any thread split, and with
an adversarial screen that errs by the whole bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import spectrag.kernels.screen as screen
from spectrag.kernels.compiled.screen import screened_topk
from spectrag.kernels.screen import ScreenedSearch, screen_bound_factor


def brute_topk(table: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    exact = q.astype(np.float64) @ table.astype(np.float64).T
    ids = np.broadcast_to(np.arange(table.shape[0]), exact.shape)
    order = np.lexsort((ids, -exact), axis=1)[:, :k]
    return np.take_along_axis(exact, order, 1), order


def unit_rows(rng, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("bf16", [True, False])
@pytest.mark.parametrize("k", [1, 3, 20])
def test_screened_search_is_the_exact_topk(bf16, k, monkeypatch):
    rng = np.random.default_rng(k)
    table = unit_rows(rng, 900, 64)
    table[10] = table[400]  # exact ties: the smaller id first
    table[11] = table[400]
    q = unit_rows(rng, 37, 64)
    q[0] = table[400]  # a query whose best rows tie three ways
    q[1] = -table[5]
    monkeypatch.setattr(screen, "MAX_SCREEN", 900 * 8)  # row tiles of 8 queries
    got_s, got_i = ScreenedSearch(table, bf16=bf16).topk(torch.from_numpy(q), k)
    want_s, want_i = brute_topk(table, q, k)
    assert np.array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-12)  # float64 sums in another order
    if k >= 3:
        assert list(got_i[0, :3]) == [10, 11, 400]


def test_the_bfloat16_screen_errs_within_its_bound():
    rng = np.random.default_rng(1)
    table, q = unit_rows(rng, 2000, 384), unit_rows(rng, 64, 384)
    q[0] = table[3]
    approx = (torch.from_numpy(q).to(torch.bfloat16) @ torch.from_numpy(table).to(torch.bfloat16).T).double().numpy()
    err = np.abs(approx - q.astype(np.float64) @ table.astype(np.float64).T).max()
    assert 0 < err <= screen_bound_factor(384, True)
    assert screen_bound_factor(384, False) < 1e-4 < screen_bound_factor(384, True) < 0.013


@pytest.mark.parametrize("threads", [1, 2])
def test_an_adversarial_screen_within_the_bound_still_gives_the_exact_topk(threads):
    """The screen off by the whole bound, the worst way: the exact best row scored a bound low,
    a rival half a bound below it scored a bound high. The best row is found only with the
    pass's margin of twice the bound (with one bound it is not: checked by hand)."""
    b = 1e-3
    theta = np.arccos(1 - 0.5 * b)
    rng = np.random.default_rng(2)
    others = rng.uniform(0.5, 1.4, 40)  # angles far from the query's
    table = np.array([[1.0, 0.0], [np.cos(theta), np.sin(theta)]] + [[np.cos(t), np.sin(t)] for t in others],
                     dtype=np.float32)
    q = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (6, 1))
    exact = q.astype(np.float64) @ table.astype(np.float64).T
    approx = exact + rng.uniform(-b, b, exact.shape)
    approx[:, 0] = exact[:, 0] - b
    approx[:, 1] = exact[:, 1] + b
    assert (approx[:, 1] > approx[:, 0]).all() and (exact[:, 0] > exact[:, 1]).all()
    bound = np.full(6, b * (1 + 1e-6))
    scores, ids = screened_topk(approx.astype(np.float32), bound, table, q, 1, threads=threads)
    assert (ids[:, 0] == 0).all()
    np.testing.assert_allclose(scores[:, 0], exact[:, 0], rtol=1e-12)


def test_bfloat16_bits_and_float32_screens_agree():
    rng = np.random.default_rng(3)
    table, q = unit_rows(rng, 300, 48), unit_rows(rng, 9, 48)
    approx = torch.from_numpy(q).to(torch.bfloat16) @ torch.from_numpy(table).to(torch.bfloat16).T
    bound = np.full(9, screen_bound_factor(48, True))
    a = screened_topk(approx.view(torch.int16).numpy().view(np.uint16), bound, table, q, 5)
    b = screened_topk(approx.float().numpy(), bound, table, q, 5)
    assert np.array_equal(a[1], b[1]) and np.array_equal(a[1], brute_topk(table, q, 5)[1])
    with pytest.raises(ValueError, match="approx must be"):
        screened_topk(approx.float().numpy()[:, :10], bound, table, q, 5)


@pytest.mark.parametrize("bf16", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_large_table_screened_block_by_block_is_the_exact_topk(bf16, threads, monkeypatch):
    """Tables past ONE_SHOT_ROWS are screened in blocks of rows, each query carrying its
    candidates from block to block (compacted when the buffer fills): the same top-k. A query
    with more rows in reach than the buffer holds (600 copies of itself) is scored exactly over
    every row instead."""
    rng = np.random.default_rng(7)
    table = unit_rows(rng, 3000, 32)
    table[2000:2600] = table[5]  # 600 rows tied with row 5
    q = unit_rows(rng, 40, 32)
    q[3] = table[5]
    monkeypatch.setattr(screen, "ONE_SHOT_ROWS", 100)
    monkeypatch.setattr(screen, "QUERY_TILE", 16)
    monkeypatch.setattr(screen, "GROUP_ROWS", 64)
    monkeypatch.setattr(screen, "BLOCK", 16 * 200)  # blocks of 200 table rows
    monkeypatch.setattr(screen, "SPARE", 60)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    for k in (1, 10, 70):
        got_s, got_i = ScreenedSearch(table, bf16=bf16).topk(torch.from_numpy(q), k)
        want_s, want_i = brute_topk(table, q, k)
        assert np.array_equal(got_i, want_i)
        np.testing.assert_allclose(got_s, want_s, rtol=1e-12)
    assert list(got_i[3, :4]) == [5, 2000, 2001, 2002]


def test_the_blocks_carry_an_adversarial_screen_to_the_exact_topk():
    """The block-by-block pass (spectrag.kernels.compiled.screen.BlockedScreen) with the
    adversarial screen of the one-shot test, the best row and its rival in different blocks and
    a buffer that must be compacted after the rival's block: the best row, screened a bound low,
    survives the compaction (a compaction floor without the margin drops it: checked)."""
    from spectrag.kernels.compiled.screen import BlockedScreen

    b = 1e-3
    cosines = np.full(48, np.cos(1.0))  # far from the query
    cosines[0] = 1.0  # the best row, block 1
    cosines[1:6] = 1 - np.linspace(2.1, 2.9, 5) * b  # kept by block 1's floor, dropped by the rival's
    cosines[16] = 1 - 0.5 * b  # the rival, block 2
    angles = np.arccos(cosines)
    table = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    q = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (3, 1))
    exact = q.astype(np.float64) @ table.astype(np.float64).T
    approx = exact.copy()
    approx[:, 0] -= b
    approx[:, 16] += b
    state = BlockedScreen(table, q, np.full(3, b * (1 + 1e-6)), 1, cap=16 + 6)
    for start in range(0, 48, 16):
        state.add(approx[:, start:start + 16].astype(np.float32))
    scores, ids, overflow = state.finish()
    assert not overflow.any() and (ids[:, 0] == 0).all()
    with pytest.raises(ValueError, match="covered"):
        BlockedScreen(table, q, np.full(3, b), 1, cap=20).finish()


def test_nothing_to_find_gives_empty_results_and_bad_queries_are_refused(monkeypatch):
    rng = np.random.default_rng(8)
    table = unit_rows(rng, 50, 8)
    monkeypatch.setattr(screen, "ONE_SHOT_ROWS", 10)  # the block-by-block path too
    for search in (ScreenedSearch(table), ScreenedSearch(table[:0])):
        s, i = search.topk(torch.from_numpy(unit_rows(rng, 3, 8)), 0)
        assert s.shape == i.shape == (3, 0)
        s, i = search.topk(torch.zeros((0, 8)), 5)
        assert s.shape[0] == i.shape[0] == 0
    assert ScreenedSearch(table[:0]).topk(torch.from_numpy(unit_rows(rng, 2, 8)), 5)[1].shape == (2, 0)
    bad = torch.from_numpy(unit_rows(rng, 2, 8))
    bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match="row 1"):
        ScreenedSearch(table).topk(bad, 3)
    with pytest.raises(ValueError, match=r"queries must be \[B, 8\]"):
        ScreenedSearch(table).topk(torch.zeros((2, 7)), 3)


def test_a_negative_zero_score_is_kept_at_a_zero_floor():
    """-0.0 is one key below +0.0: with a bound of 0 (a zero query) the floor is -0.0, so a
    row screened at -0.0 stays, and ties go to the smaller id."""
    table, q = np.eye(3, dtype=np.float32), np.zeros((1, 3), np.float32)
    approx = np.array([[-0.0, 0.0, 0.0]], np.float32)
    assert screened_topk(approx, np.zeros(1), table, q, 1)[1][0, 0] == 0
    bits = np.array([[0x8000, 0, 0]], np.uint16)  # bfloat16 -0.0, +0.0, +0.0
    assert screened_topk(bits, np.zeros(1), table, q, 1)[1][0, 0] == 0


@pytest.mark.parametrize("bf16", [True, False])
def test_scores_in_the_subnormal_range_are_still_exact(bf16):
    """Subnormal inputs and products are flushed to zero by the matrix units or rounded
    absolutely: the bound's absolute term keeps such rows in reach (a helper's reproducers)."""
    d = 1024
    x = np.zeros((256, d), np.float32)
    if bf16:
        x[0, :], x[1:, 0] = 2e-20, 1e-17  # row 0 scores 2.0e-37, each row after it 1.0e-37
        q = np.full((64, d), 1e-20, np.float32)
    else:
        x[0, :], x[1, 0] = 2.5e-23, 4e-21  # row 0's products underflow one by one
        q = np.full((4, d), 2.5e-23, np.float32)
    ids = ScreenedSearch(x, bf16=bf16).topk(torch.from_numpy(q), 1)[1]
    assert (ids[:, 0] == 0).all() and (ids[:, 0] == brute_topk(x, q, 1)[1][:, 0]).all()


def test_scores_past_the_products_range_and_non_finite_tables_are_refused():
    big = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    with pytest.raises(ValueError, match="past what a float32 or bfloat16 product holds"):
        ScreenedSearch(big).topk(torch.tensor([[3.3e38, 0.0]]), 1)
    bad = big.copy()
    bad[1, 0] = np.inf
    with pytest.raises(ValueError, match="table rows must be finite; row 1"):
        ScreenedSearch(bad)
    from spectrag.kernels.compiled.screen import BlockedScreen

    with pytest.raises(ValueError, match="k >= 1"):
        BlockedScreen(big, big, np.zeros(2), 0, cap=10)


def test_a_float32_product_run_in_lower_precision_is_bounded_as_bfloat16():
    """torch.set_float32_matmul_precision("medium") runs float32 products in bfloat16 on CPUs
    with AMX (errors of 6e-4 on unit vectors): the float32 screen's bound and the scan's tie
    tolerance widen to the bfloat16 bound, and the answers stay exact."""
    from spectrag.index.dense import TIE_TOL, TorchScan, exact_search

    rng = np.random.default_rng(9)
    table, q = unit_rows(rng, 3000, 384), unit_rows(rng, 64, 384)
    search, scan = ScreenedSearch(table, bf16=False), TorchScan(table)
    tight = search.bound(q)
    assert scan.tie_tol == TIE_TOL
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        assert (search.bound(q) > 100 * tight).all() and scan.tie_tol > 100 * TIE_TOL
        want = brute_topk(table, q, 10)[1]
        assert np.array_equal(search.topk(torch.from_numpy(q), 10)[1], want)
        assert np.array_equal(exact_search(scan, table, q, 10)[1], want)
    finally:
        torch.set_float32_matmul_precision(before)
