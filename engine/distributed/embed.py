"""Embedding on an actor pool: the model loaded once per actor (one GPU each where the cluster
has GPUs), the texts sent as the windows a single-process :class:`~spectrag.index.embed.Embedder`
would embed them in, so every vector equals the single-process one bit for bit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from spectrag.config import EmbedConfig
from spectrag.distributed.cluster import quiet_data_context, require_ray
from spectrag.index.embed import Embedder


class EmbedWindows:
    """Ray Data callable class: one window of texts per call -> their vectors by position."""

    def __init__(self, config: EmbedConfig) -> None:
        self.embedder = Embedder(replace(config, cache_dir=""))  # the driver owns the cache

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        ids, vectors = [], []
        for lo, texts in zip(batch["lo"], batch["texts"]):
            texts = [str(t) for t in texts]
            ids.append(np.arange(int(lo), int(lo) + len(texts), dtype=np.int64))
            vectors.append(self.embedder.encode_window(texts))
        return {"id": np.concatenate(ids), "vector": np.concatenate(vectors)}


class RayEmbedder:
    """:class:`~spectrag.index.embed.Embedder`'s interface (``encode``, ``fingerprint``, ``dim``,
    ``last_cache_hits``, ``close``) with the uncached texts embedded by ``workers`` actors.

    The driver keeps an embedder on the CPU for the content-hash cache and the model's identity
    (it embeds nothing); the texts missing from the cache are cut into
    :meth:`Embedder.windows` and each window goes to an actor whole. Shapes: ``[T]`` -> float32 ``[T, dim]``.
    """

    def __init__(self, config: EmbedConfig, *, workers: int, gpus: int = 0) -> None:
        self.config = config
        self.workers = workers
        self.gpus = gpus
        self.local = Embedder(replace(config, device="cpu"))
        self.fingerprint, self.dim = self.local.fingerprint, self.local.dim
        self.max_input_tokens = self.local.max_input_tokens
        self.last_cache_hits = self.last_long = 0

    def encode(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        out, todo, hashes = self.local.lookup(texts)
        self.last_cache_hits, self.last_long = self.local.last_cache_hits, self.local.last_long
        if todo:
            self.local.store(out, todo, hashes, self.encode_uncached([texts[i] for i in todo]))
        return out

    def encode_uncached(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts`` (no cache), window by window on the actor pool."""
        ray = require_ray()
        quiet_data_context(ray)
        windows = Embedder.windows(len(texts))
        rows = [{"lo": lo, "texts": texts[lo:hi]} for lo, hi in windows]
        gpus = min(self.gpus, self.workers)
        pool = max(1, min(gpus or self.workers, len(windows)))
        ds = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            EmbedWindows,
            fn_constructor_kwargs={"config": self.config},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=pool),
            num_gpus=1 if gpus else 0,  # Ray Data restarts dead actors and retries their batches
        )
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        seen = np.zeros(len(texts), dtype=bool)
        for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
            out[batch["id"]] = batch["vector"]
            seen[batch["id"]] = True
        if not seen.all():  # Ray returns every window or raises; this guards the bookkeeping
            raise RuntimeError(f"the embedding pool returned {int(seen.sum())} of {len(texts)} vectors")
        return out

    def close(self) -> None:
        self.local.close()
