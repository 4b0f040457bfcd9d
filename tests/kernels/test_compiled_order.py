"""The compiled kernels' shared top-k (spectrag.kernels.compiled.order.top_by_value_then_id)
against a plain sort by (value descending, id ascending; +0.0 above -0.0, as the keys' bits
order them): ties, signed zeros and -inf, on both
sides of the count at which it keys only the values above a floor from group maxima."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spectrag.kernels.compiled.order import U32, top_by_value_then_id


def _reference(values: np.ndarray, ids: np.ndarray, k: int) -> list[tuple[float, int]]:
    # the keys order the bits: +0.0 above -0.0, then the smaller id
    pairs = sorted(zip(values.tolist(), ids.tolist()), key=lambda p: (-p[0], math.copysign(1.0, p[0]) < 0, p[1]))
    return pairs[:k]


def _draw(rng, kind: int, count: int) -> np.ndarray:
    if kind == 0:
        return rng.standard_normal(count).astype(np.float32)
    if kind == 1:  # many ties, across the cut
        return rng.integers(0, 4, count).astype(np.float32)
    if kind == 2:  # signed zeros and -inf (a filtered-out score)
        return rng.choice(np.array([-0.0, 0.0, -np.inf, 1.0], np.float32), count)
    return np.sort(rng.standard_normal(count).astype(np.float32))  # ascending: the best last


@pytest.mark.parametrize("kind", range(4))
def test_equals_a_plain_sort(kind):
    rng = np.random.default_rng(kind)
    floors = 0
    for _ in range(300):
        count = int(rng.integers(0, 2500))
        k = int(rng.integers(1, 120))
        values = _draw(rng, kind, count)
        ids = rng.permutation(count).astype(np.int64)
        keys = top_by_value_then_id(values, ids, count, k, np.empty(count, np.uint64))
        got_ids = (keys & U32).astype(np.int64)
        order = {int(i): j for j, i in enumerate(ids)}
        got = [(float(values[order[int(i)]]), int(i)) for i in got_ids]
        assert got == _reference(values, ids, k)
        floors += count >= 32 * k
    assert floors > 20  # the floor's branch ran
