"""The semantic kNN graph searched on a device (spectrag.graph.signals.knn_index with a
``device``: a tiled torch top-k, spectrag.index.dense.TorchScan) against FAISS's flat search on
the CPU and a brute-force numpy reference, on random data with exact ties (duplicated vectors):
the same neighbour lists and the same signal, bit for bit, since every row's hits are re-scored
exactly in float64 and ties go to the smaller id."""

from __future__ import annotations

import numpy as np
import pytest

from spectrag.graph import signals
from spectrag.graph.lists import semantic_lists
from spectrag.graph.signals import knn_index, semantic_edges


def vectors(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    x[n // 2 : n // 2 + 40] = x[:40]  # duplicates: exact ties in every list that reaches them
    x = np.round(x, 1)  # coarse coordinates: more equal scores
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def brute_force(x: np.ndarray, k: int) -> list[list[int]]:
    """Each row's k nearest other rows by float64 cosine, ties to the smaller id (cosine > 0)."""
    s = x.astype(np.float64) @ x.astype(np.float64).T
    out = []
    for i in range(len(x)):
        order = sorted((j for j in range(len(x)) if j != i and np.float32(s[i, j]) > 0), key=lambda j: (-s[i, j], j))
        out.append(order[:k])
    return out


@pytest.mark.parametrize("n", [300, 2100])  # one product, and the tiled scan
def test_device_knn_equals_faiss_and_brute_force(n, device, monkeypatch):
    """The device's tiled top-k, FAISS (the CPU without native bfloat16) and the bfloat16 screen
    (the CPU with it; in blocks past ONE_SHOT_ROWS, here 1,000) give the same lists and signal."""
    pytest.importorskip("faiss")
    from spectrag.kernels import screen

    x = vectors(n, 24, n)
    k = 10
    on_device = semantic_edges(x, k, device=device, tile=512)
    sig_d, lists_d = semantic_lists(x, k, device=device, tile=512)
    monkeypatch.setattr(screen, "ONE_SHOT_ROWS", 1000)
    for native in (False, True):
        monkeypatch.setattr(signals, "native_bf16", lambda native=native: native)
        cpu = semantic_edges(x, k, tile=512)
        assert (on_device != cpu).nnz == 0 and np.array_equal(on_device.indptr, cpu.indptr)
        sig_c, lists_c = semantic_lists(x, k, tile=512)
        assert np.array_equal(lists_d.ids, lists_c.ids) and np.array_equal(lists_d.scores, lists_c.scores)
        assert type(knn_index(x, "exact")).__name__ == ("ScreenedSearch" if native else "IndexFlatIP")
    if n == 300:
        want = brute_force(x, lists_d.ids.shape[1])  # k + the lists' reserve
        assert [[int(j) for j in row if j >= 0] for row in lists_d.ids] == want


def test_without_faiss_the_exact_search_runs_on_torch(monkeypatch):
    monkeypatch.setattr(signals, "faiss_installed", lambda: False)
    monkeypatch.setattr(signals, "native_bf16", lambda: False)
    x = vectors(200, 16, 1)
    index = knn_index(x, "exact")
    assert type(index).__name__ == "TorchScan" and index.ntotal == 200
    got = semantic_edges(x, 5)
    monkeypatch.undo()
    pytest.importorskip("faiss")
    assert (got != semantic_edges(x, 5)).nnz == 0
