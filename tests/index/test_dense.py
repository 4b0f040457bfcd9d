"""The dense index (spectrag.index.dense): the CPU default (the torch scan) against a numpy brute
force (tie-aware), against FAISS's flat search and the torch backend on the ``device`` fixture's
devices, results that do not depend on the batch size, and the scan's unordered selection."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spectrag.index.dense import DenseIndex

QUESTIONS = ["In which town was the designer of the Veltra Bridge born?", "Who founded the Greywater Shipping Company?"]


def test_dense_search_equals_numpy_brute_force(sample_index):
    xq = sample_index.embed_queries(QUESTIONS)
    scores, ids = sample_index.dense_search(xq, 10)
    brute = xq @ np.asarray(sample_index.embeddings).T
    for b in range(len(QUESTIONS)):
        expected = np.sort(brute[b])[::-1][:10]
        np.testing.assert_allclose(scores[b], expected, atol=1e-5)
        # tie-aware: every returned id scores at least the 10th best
        assert np.all(brute[b][ids[b]] >= expected[-1] - 1e-5)


def test_the_scan_faiss_and_torch_backends_agree(sample_index, device):
    """The CPU default (``auto``: the bfloat16 screen where the CPU multiplies bfloat16
    natively, else the torch scan), the scan, the screen in bfloat16 and in float32, FAISS's flat
    search and the torch backend on the ``device`` fixture's devices give the same hits (exact
    float64 re-scoring; the CPU backends the same float64 scores, bit for bit)."""
    from spectrag.kernels.screen import ScreenedSearch, native_bf16

    xq = sample_index.embed_queries(QUESTIONS)
    assert sample_index.dense.backend == ("screen" if native_bf16() else "scan")
    s1, i1 = sample_index.dense.search(xq, 15)
    x = np.asarray(sample_index.embeddings)
    scan = DenseIndex(x, backend="scan")
    e1 = scan.candidates(xq, 15)[0]
    for screen in (ScreenedSearch(x, bf16=True), ScreenedSearch(x, bf16=False)):
        e2, i2 = screen.topk(torch.from_numpy(xq), 15)
        np.testing.assert_array_equal(i1, i2)
        assert np.array_equal(e1.view(np.int64), e2.view(np.int64))
    for other in (scan, DenseIndex(x, backend="screen"), DenseIndex(x, backend="faiss"),
                  DenseIndex(x, backend="torch", device=str(device))):
        s2, i2 = other.search(xq, 15)
        np.testing.assert_allclose(s1, s2, atol=1e-5)
        np.testing.assert_array_equal(i1, i2)


@pytest.mark.parametrize("backend", ["scan", "screen", "faiss"])
def test_dense_results_do_not_depend_on_batch_size(backend):
    # FAISS and torch use another BLAS kernel once B * d is large; its rounding must not reorder near-ties
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2000, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[7] = x[3]  # an exact tie
    index = DenseIndex(x, backend=backend)
    queries = np.tile(x[3:4] + 0.001, (2500, 1)).astype(np.float32)
    _, big = index.search(queries, 12)
    _, one = index.search(queries[:1], 12)
    assert (big == one[0]).all()
    assert one[0][:2].tolist() == [3, 7]


def test_merged_shard_candidates_equal_the_unsharded_search_with_ties():
    from spectrag.index.dense import merge_topk

    rng = np.random.default_rng(5)
    x = rng.standard_normal((500, 16)).astype(np.float32)
    x[::9] = x[4]  # 56 identical vectors in every shard
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    xq = np.concatenate([x[[4, 5]], rng.standard_normal((40, 16)).astype(np.float32)])
    want = DenseIndex(x).search(xq, 25)
    for bounds in ([0, 250, 500], [0, 7, 333, 500], [0, 500]):
        parts = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            scores, ids = DenseIndex(x[lo:hi]).candidates(xq, 25)
            parts.append((scores, ids + lo))
        got = merge_topk(parts, 25)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def _ordered_only(scan):
    """``scan``'s sorted search alone (as FAISS offers): what exact_search used before search_unordered."""

    class Ordered:
        ntotal = scan.ntotal
        search = scan.search

    return Ordered()


def test_the_unordered_scan_finds_the_sorted_scans_hits_and_the_same_exact_top_k():
    """TorchScan.search_unordered (numpy's introselect) keeps the same hits as the sorted
    search's top-k in another order, and exact_search gives the same ids and float64 scores
    with either, also where duplicate vectors tie across the k-th place and with a filter that
    leaves fewer rows than asked for."""
    import torch

    from spectrag.index.dense import TorchScan, exact_search

    rng = np.random.default_rng(11)
    x = rng.standard_normal((700, 24)).astype(np.float32)
    x[::13] = x[5]  # 54 identical vectors: ties past any k below 54
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    xq = np.concatenate([x[[5, 6]], rng.standard_normal((60, 24)).astype(np.float32)])
    scan = TorchScan(x)
    product = (torch.from_numpy(xq) @ torch.from_numpy(x).T).numpy()  # the scan's own product, the same bits
    allowed = rng.random((len(xq), len(x))) < 0.5
    allowed[1] = False
    allowed[1, :9] = True  # fewer allowed rows than any k below
    for k in (1, 10, 40):
        for mask in (None, allowed):
            s_sorted, i_sorted = scan.search(xq, k + 16, allowed=mask)
            s_any, i_any = scan.search_unordered(xq, k + 16, allowed=mask)
            assert s_any.shape == s_sorted.shape and i_any.dtype == np.int64
            # the same scores per row as multisets, each hit's score its own
            np.testing.assert_array_equal(np.sort(s_any, axis=1), np.sort(s_sorted, axis=1))
            real = i_any >= 0
            np.testing.assert_array_equal(s_any[real], product[np.nonzero(real)[0], i_any[real]])
            assert ((i_any == -1) == np.isneginf(s_any)).all()
            if mask is None:
                assert not (np.diff(s_any, axis=1) <= 0).all()  # not sorted: the fast path ran
            want = exact_search(_ordered_only(scan), x, xq, k, allowed=mask)
            got = exact_search(scan, x, xq, k, allowed=mask)
            np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_array_equal(got[0], want[0])


def test_the_filtered_scan_takes_the_best_allowed_entries_by_score_then_id():
    """With a filter the unordered scan selects among the allowed entries only (compiled): the
    top m of each row's allowed scores by score then smaller id, -1 / -inf past the last allowed
    one; rows that allow nothing, fewer than m, and ties across the m-th place."""
    pytest.importorskip("numba")
    from spectrag.kernels.compiled.topk import allowed_topk

    rng = np.random.default_rng(4)
    scores = rng.integers(0, 6, (40, 300)).astype(np.float32) / 5  # many ties
    allowed = rng.random((40, 300)) < 0.3
    allowed[0] = False
    allowed[1] = False
    allowed[1, [3, 7]] = True
    allowed[2] = True
    for m in (1, 5, 66):
        got_s, got_i = allowed_topk(scores, allowed, m)
        for b in range(40):
            cols = np.flatnonzero(allowed[b])
            order = cols[np.lexsort((cols, -scores[b, cols]))][:m]
            want_i = np.full(m, -1)
            want_i[: len(order)] = order
            np.testing.assert_array_equal(got_i[b], want_i)
            np.testing.assert_array_equal(got_s[b][: len(order)], scores[b, order])
            assert np.isneginf(got_s[b][len(order):]).all()


def test_auto_screens_where_bfloat16_is_native(monkeypatch):
    """``auto`` on the CPU: the bfloat16 screen where the CPU multiplies bfloat16 natively, the
    scan elsewhere; an unknown backend is refused."""
    import spectrag.index.dense as dense

    small = np.ones((10, 4), np.float32)
    for native in (True, False):
        monkeypatch.setattr(dense, "native_bf16", lambda native=native: native)
        assert DenseIndex(small).backend == ("screen" if native else "scan")
        assert DenseIndex(small, backend="screen").backend == "screen"
    with pytest.raises(Exception, match="dense backend must be"):
        DenseIndex(small, backend="bf16")
