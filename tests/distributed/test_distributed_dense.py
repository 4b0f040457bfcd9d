"""Sharded exact dense search (spectrag.distributed.dense): shards in separate actors, merged,
equal the unsharded DenseIndex.search, ties (duplicate vectors) included."""

from __future__ import annotations

import numpy as np
import pytest

from spectrag.errors import SpectragError
from spectrag.index.dense import DenseIndex


def _vectors_with_ties(n: int = 600, d: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[::7] = x[3]  # 86 copies of one vector across every shard: exact ties at the top for queries near it
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize(("shards", "source"), [(2, "file"), (3, "array")])
def test_sharded_search_equals_unsharded_with_ties(ray_local, shards, source, tmp_path):
    from spectrag.distributed import RayDenseShards

    x = _vectors_with_ties()
    xq = np.concatenate([x[[3, 10, 11]], np.random.default_rng(1).standard_normal((30, 32)).astype(np.float32)])
    want_s, want_i = DenseIndex(x).search(xq, 20)
    # the 87 equal vectors tie for the top 20 of x[3]: the engine takes the smallest ids
    assert want_i[0].tolist() == sorted({3, *range(0, 600, 7)})[:20]
    np.save(tmp_path / "embeddings.npy", x)
    shards_ = RayDenseShards(tmp_path if source == "file" else x, shards=shards)  # an index folder, or an array
    got_s, got_i = shards_.search(xq, 20)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_s, want_s)
    with pytest.raises(SpectragError, match="shards must be"):
        RayDenseShards(x, shards=0)
