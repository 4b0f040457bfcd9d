"""The embedding actor pool (spectrag.distributed.embed): the same vectors, bit for bit, as an
in-process Embedder with the same windows, also when an actor is killed mid-run (Ray Data
restarts it and re-runs its window); the content-hash cache is read and filled on the driver."""

from __future__ import annotations

import numpy as np

from conftest import kill_once
from spectrag.config import EmbedConfig
from spectrag.index.embed import Embedder

WINDOW = 6  # several windows from a few dozen texts (the default is 4,096)


def test_ray_embedder_equals_embedder_even_when_an_actor_is_killed(ray_local, sample_index, tmp_path, monkeypatch):
    from spectrag.distributed import RayEmbedder

    texts = [c.text for c in sample_index.chunks[:36]]
    monkeypatch.setattr(Embedder, "_WINDOW", WINDOW)  # the driver cuts the windows; actors embed each whole
    want = Embedder(EmbedConfig(cache_dir="")).encode(texts)
    cache = str(tmp_path / "cache")
    embedder = RayEmbedder(EmbedConfig(cache_dir=cache), workers=2)
    killer = kill_once("MapBatches(EmbedWindows)", after=2.0)
    got = embedder.encode(texts)
    killer.join(timeout=1)
    assert killer.killed, "no embedding actor was found to kill"
    np.testing.assert_array_equal(got, want)
    assert embedder.last_cache_hits == 0
    # the vectors went into the driver's cache: a second call embeds nothing
    again = embedder.encode(texts[:10])
    assert embedder.last_cache_hits == 10
    np.testing.assert_array_equal(again, want[:10])
    embedder.close()
