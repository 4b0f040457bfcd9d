"""Exact dense search over embedding shards held by separate actors: an index larger than one
device's memory, split by chunk range (one GPU per shard where the cluster has GPUs).

Each shard is a :class:`spectrag.index.dense.DenseIndex` over its rows of the memory-mapped
``embeddings.npy`` (FAISS ``IndexFlatIP``, or faiss-gpu on the shard's GPU) and returns its own
float64-re-scored top-k (:meth:`DenseIndex.candidates`); :func:`spectrag.index.dense.merge_topk`
merges them by score, then by smaller id: the unsharded search's result, ties included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spectrag.distributed.cluster import actor_options, require_ray
from spectrag.errors import SpectragError
from spectrag.index.dense import DenseIndex, merge_topk
from spectrag.store import EMBEDDINGS


class DenseShard:
    """Rows ``[lo, hi)`` of an embedding matrix (a path to an ``.npy``, memory-mapped, or an
    array) as one exact index; ids in results are global."""

    def __init__(self, vectors: str | np.ndarray, lo: int, hi: int, device: str = "cpu") -> None:
        rows = np.load(vectors, mmap_mode="r") if isinstance(vectors, str) else vectors
        self.lo = lo
        backend = "faiss-gpu" if device.startswith("cuda") else "faiss"
        self.index = DenseIndex(np.ascontiguousarray(rows[lo:hi], dtype=np.float32), backend=backend, device=device)

    def candidates(self, xq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, ids = self.index.candidates(xq, k)
        return scores, ids + self.lo


class RayDenseShards:
    """``search(xq, k)`` as :meth:`DenseIndex.search` over ``vectors`` (an index folder, an
    ``.npy`` path or an array ``[n, d]``), split into ``shards`` contiguous row ranges, each in
    its own actor. Call inside :func:`spectrag.distributed.ray_cluster` (or after ``ray.init``).
    Shapes: ``xq [B, d]`` -> float32 scores, int64 ids ``[B, min(k, n)]``."""

    def __init__(self, vectors: str | Path | np.ndarray, shards: int = 2) -> None:
        ray = require_ray()
        if not ray.is_initialized():
            raise SpectragError("RayDenseShards needs a connected Ray (spectrag.distributed.ray_cluster or ray.init)")
        if isinstance(vectors, (str, Path)):
            path = Path(vectors)
            path = path / EMBEDDINGS if path.is_dir() else path
            source: str | object = str(path)
            n, self.dim = np.load(path, mmap_mode="r").shape
        else:
            n, self.dim = vectors.shape
            source = ray.put(np.ascontiguousarray(vectors, dtype=np.float32))
        if not 1 <= shards <= max(1, n):
            raise SpectragError(f"shards must be in [1, {n}] for {n} vectors, got {shards}")
        self.n = n
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        if gpus and shards > gpus:
            raise SpectragError(f"{shards} shards need {shards} GPUs (one each); the cluster has {gpus}")
        # one GPU per shard; on CPUs a share of them, so any number of shards can be placed
        cpus = min(1.0, float(resources.get("CPU", 1)) / shards)
        actor = ray.remote(DenseShard).options(num_cpus=0 if gpus else cpus, **actor_options(gpus))
        bounds = np.linspace(0, n, shards + 1).astype(int)
        self.shards = [actor.remote(source, int(lo), int(hi), "cuda" if gpus else "cpu")
                       for lo, hi in zip(bounds[:-1], bounds[1:])]

    def search(self, xq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ray = require_ray()
        xq = np.ascontiguousarray(xq, dtype=np.float32)
        if xq.ndim != 2 or xq.shape[1] != self.dim:
            raise ValueError(f"queries must be [B, {self.dim}], got shape {xq.shape}")
        xq_ref = ray.put(xq)
        return merge_topk(ray.get([s.candidates.remote(xq_ref, k) for s in self.shards]), min(k, self.n))
