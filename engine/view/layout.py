"""A 2-D drawing position for every node of the chunk graph: spectral start, force-directed finish.

Start: the first two principal components of the row-normalized spectral coordinates (the space
the clusters are found in), so clusters start apart. Finish: Fruchterman-Reingold, repulsion
``k^2 / d`` between every pair and attraction ``w d^2 / k`` along the edges, plus a pull
``g |x - c| / k`` toward the centroid ``c`` of the node's spectral cluster (without it a dense
kNN graph such as MuSiQue's draws as one undifferentiated ball), with a cooling step limit, on the
whole ``[n, n]`` block at once (``n`` is at most a few thousand here: the view samples beyond that).

Shapes: ``coords [n, m]``, edges ``src, dst [E]`` (both directions or one), ``weight [E]`` ->
positions ``[n, 2]`` in ``[0, 1]^2``. Deterministic for a given ``seed``.
"""

# Ours, not networkx's spring_layout: networkx is a test dependency only, and this runs the whole
# [n, n] step as one torch operation with the spectral-cluster pull the view needs.
from __future__ import annotations

import numpy as np
import torch

from spectrag.util.console import bar


def spectral_start(coords: np.ndarray, seed: int = 0) -> np.ndarray:
    """``[n, 2]``: the top two principal components of the row-normalized coordinates, plus a
    little seeded jitter (isolated chunks have all-zero rows)."""
    rng = np.random.default_rng(seed)
    n = coords.shape[0]
    z = np.asarray(coords, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] < 2:
        return rng.random((n, 2))
    z = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    z = z - z.mean(axis=0)
    _, _, vt = np.linalg.svd(z, full_matrices=False)
    start = z @ vt[:2].T  # (n, 2)
    span = np.ptp(start, axis=0)
    start = (start - start.min(axis=0)) / np.where(span > 0, span, 1.0)
    return start + rng.normal(scale=0.01, size=(n, 2))


def force_layout(start: np.ndarray, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, *,
                 groups: np.ndarray | None = None, gravity: float = 0.5, iterations: int = 120) -> np.ndarray:
    """Fruchterman-Reingold from ``start [n, 2]``, each node pulled toward its group's centroid
    (``groups [n]`` int, e.g. the spectral clusters; none: no pull); returns ``[n, 2]`` in ``[0, 1]^2``."""
    pos = torch.as_tensor(start, dtype=torch.float32).clone()
    n = pos.shape[0]
    if n < 2:
        return np.full((n, 2), 0.5)
    k = 1.0 / np.sqrt(n)
    s, d = torch.as_tensor(src, dtype=torch.int64), torch.as_tensor(dst, dtype=torch.int64)
    w = torch.as_tensor(weight, dtype=torch.float32)
    g = torch.as_tensor(np.unique(groups, return_inverse=True)[1].reshape(-1), dtype=torch.int64) if groups is not None else None
    sizes = torch.bincount(g).clamp(min=1)[:, None] if g is not None else None
    step = 0.1
    for it in bar(range(iterations), desc="layout", unit=" steps"):
        delta = pos[:, None, :] - pos[None, :, :]  # (n, n, 2)
        dist2 = (delta * delta).sum(-1).clamp(min=1e-6)  # (n, n)
        disp = (delta * (k * k / dist2)[..., None]).sum(1)  # repulsion: k^2 / d along the unit vector
        e = pos[s] - pos[d]  # (E, 2)
        pull = e * (w * e.norm(dim=1) / k)[:, None]  # attraction: w d^2 / k along the unit vector
        disp.index_add_(0, s, -pull)
        disp.index_add_(0, d, pull)
        if g is not None:
            centroid = torch.zeros(len(sizes), 2).index_add_(0, g, pos) / sizes  # (G, 2)
            disp -= gravity * (pos - centroid[g]) / k
        length = disp.norm(dim=1, keepdim=True).clamp(min=1e-9)
        pos += disp / length * torch.minimum(length, torch.tensor(step * (1 - it / iterations) + 1e-3))
    out = pos.numpy().astype(np.float64)
    span = np.ptp(out, axis=0)
    return (out - out.min(axis=0)) / np.where(span > 0, span, 1.0)
