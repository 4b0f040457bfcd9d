"""Neighbour lists with a reserve (spectrag.graph.lists): their signal is the semantic kNN
signal; after any sequence of removals and additions the updated lists are a prefix of the
lists a build of the final vectors finds, and their signal is that build's, exactly."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spectrag.graph.lists import (
    NeighbourLists,
    lists_from_signal,
    lists_signal,
    semantic_lists,
    update_lists,
)
from spectrag.graph.signals import knn_index, semantic_edges


def vectors(n: int, seed: int, d: int = 16, duplicates: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[: n // 3] += 2.0  # some cluster structure
    if duplicates:
        x[1 : 1 + duplicates] = x[0]  # exact ties
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def assert_same_signal(a: sp.csr_matrix, b: sp.csr_matrix) -> None:
    np.testing.assert_array_equal((a != 0).toarray(), (b != 0).toarray())
    assert abs(a - b).max() == 0 if a.nnz else b.nnz == 0


def assert_prefix(got: NeighbourLists, want: NeighbourLists) -> None:
    """Each updated row lists the first entries of the fresh row, in order."""
    length = got.lengths
    for i in range(len(got)):
        np.testing.assert_array_equal(got.ids[i, : length[i]], want.ids[i, : length[i]], err_msg=f"row {i}")
        np.testing.assert_array_equal(got.scores[i, : length[i]], want.scores[i, : length[i]], err_msg=f"row {i}")


@pytest.mark.parametrize(("n", "k", "min_cos", "dup"), [(150, 10, 0.0, 0), (90, 4, 0.2, 3), (12, 10, 0.0, 0)])
def test_lists_signal_is_the_semantic_signal(n, k, min_cos, dup):
    x = vectors(n, n + k, duplicates=dup)
    signal, lists = semantic_lists(x, k, min_cos=min_cos)
    assert_same_signal(signal, semantic_edges(x, k, min_cos=min_cos))
    assert lists.ids.shape == (n, k + 8)
    ordered = np.where(lists.ids >= 0, lists.scores, -1.0)
    assert (np.diff(ordered, axis=1) <= 0).all()  # sorted by score
    assert not (lists.ids == np.arange(n)[:, None]).any()  # no self


def remove_and_add(x_old: np.ndarray, keep: np.ndarray, x_new: np.ndarray):
    remap = np.where(keep, np.cumsum(keep) - 1, -1)
    x = np.concatenate([x_old[keep], x_new]).astype(np.float32)
    return remap, x


@pytest.mark.parametrize(("k", "min_cos"), [(10, 0.0), (4, 0.2)])
def test_a_sequence_of_edits_equals_a_build_of_the_final_vectors(k, min_cos):
    rng = np.random.default_rng(7)
    x = vectors(200, 1)
    _, lists = semantic_lists(x, k, min_cos=min_cos)
    searched = 0
    for step, (drop, add) in enumerate([(0.02, 0), (0.0, 15), (0.1, 20), (0.3, 0), (0.05, 60)]):
        keep = rng.random(len(x)) > drop
        remap, x = remove_and_add(x, keep, vectors(add, 100 + step) if add else np.zeros((0, x.shape[1]), np.float32))
        lists, redo = update_lists(lists, remap, x, knn_index(x), k, min_cos=min_cos)
        searched += redo
        signal, fresh = semantic_lists(x, k, min_cos=min_cos)
        assert_same_signal(lists_signal(lists, k), signal)
        assert_same_signal(lists_signal(lists, k), semantic_edges(x, k, min_cos=min_cos))
        assert_prefix(lists, fresh)
    assert searched > 0  # the 30 % removal emptied some reserves: those rows were searched again


def test_a_small_removal_searches_no_row():
    x = vectors(300, 2)
    _, lists = semantic_lists(x, 10)
    keep = np.ones(len(x), dtype=bool)
    keep[::100] = False  # 1 %
    remap, x2 = remove_and_add(x, keep, np.zeros((0, x.shape[1]), np.float32))
    updated, redo = update_lists(lists, remap, x2, knn_index(x2), 10)
    assert redo == 0
    assert_same_signal(lists_signal(updated, 10), semantic_edges(x2, 10))


def test_lists_from_a_stored_signal_without_reserve():
    """An index written before the lists were stored: each row's own list from the symmetrized
    signal; edits then search the rows that lose an entry."""
    x = vectors(120, 3)
    sym = semantic_edges(x, 6)
    sym = sym.maximum(sym.T).tocsr()
    own = lists_from_signal(sym, 6)
    _, fresh = semantic_lists(x, 6, reserve=0)
    np.testing.assert_array_equal(own.ids, fresh.ids)
    keep = np.random.default_rng(4).random(len(x)) > 0.1
    remap, x2 = remove_and_add(x, keep, vectors(10, 5))
    updated, redo = update_lists(own, remap, x2, knn_index(x2), 6)
    assert redo > 0
    assert_same_signal(lists_signal(updated, 6), semantic_edges(x2, 6))
