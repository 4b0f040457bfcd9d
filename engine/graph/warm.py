"""The spectrum of an edited chunk graph, warm-started from the previous one
(:func:`warm_spectrum`), and k-means started from the previous clusters.

**Start block.** The previous coordinates restricted to the chunks that remain; a new chunk
gets the weighted mean of its old neighbours' rows (:func:`extend_rows`); plus :data:`GUARD`
random columns, and as many supported on the new chunks, so that low modes the old block
lacks (a new topic, a new component) can enter.

**Solve.** :func:`spectrag.kernels.subspace.subspace_eigsh` on the deflated Laplacian
(:mod:`spectrag.graph.spectrum`), in float32: Rayleigh--Ritz on the start block ``X`` (when no
node is new), then, if that is not enough, on ``[X, L'X]``, restarted at most
:data:`MAX_ITER` times, until every eigen-residual ``||L x_i - theta_i x_i||_2 <=``
:data:`WARM_TOL`. That is a backward error: the coordinates are the exact eigenvectors of a
Laplacian within ``WARM_TOL`` (spectral norm) of the current one (``||L|| <= 2``), closer than a
1 % edit moves it (a chunk losing one of its ~20 neighbours changes its row of ``L`` by about
5 %). When the tolerance is not reached the caller solves from scratch (Lanczos to
``graph.lanczos_tol``, started from the same block). ``spectrag compact`` always does.
The tests hold the warm pairs to scipy's ``eigsh`` (``tests/graph/test_warm.py``).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.config import GraphConfig
from spectrag.graph.spectrum import Spectrum, _deflated_operator, _fix_signs
from spectrag.index.dense import load_faiss
from spectrag.kernels.subspace import subspace_eigsh

#: the largest eigen-residual a warm-started coordinate may keep (backward error, ``||L|| <= 2``)
WARM_TOL = 2e-2
#: Rayleigh--Ritz restarts before the solve falls back to a cold one
MAX_ITER = 3
#: random guard columns of the start block (and as many on the new chunks, when there are any)
GUARD = 8
#: k-means iterations from the previous centroids when the cluster count changes (a cold start runs 50)
KMEANS_ITER = 10
#: the share by which the cluster count may differ from the build's before k-means runs again
KEEP_CLUSTERS = 0.05


def extend_rows(weights: sp.csr_matrix, previous: np.ndarray) -> np.ndarray:
    """The previous coordinates ``[n_old, m]`` (of the first ``n_old`` chunks) extended to all
    ``n`` nodes: a new node gets the weighted mean of its old neighbours' rows (zero without
    any). Shapes: -> ``[n, m]`` float64."""
    n_old = previous.shape[0]
    block = weights[n_old:, :n_old]  # (m_new, n_old)
    degree = np.asarray(block.sum(axis=1)).ravel()
    new = (block @ previous.astype(np.float64)) / np.where(degree > 0, degree, 1.0)[:, None]
    return np.vstack([previous.astype(np.float64), new])


def start_block(weights: sp.csr_matrix, previous: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """The start block ``[n, m + guards]``: :func:`extend_rows` of ``previous``, :data:`GUARD`
    random columns and, when there are new nodes, :data:`GUARD` random columns on them."""
    n, n_old = weights.shape[0], previous.shape[0]
    rng = np.random.default_rng(seed)
    parts = [extend_rows(weights, previous), rng.standard_normal((n, GUARD))]
    if n > n_old:
        local = np.zeros((n, GUARD))
        local[n_old:] = rng.standard_normal((n - n_old, GUARD))
        parts.append(local)
    return np.hstack(parts)


def warm_spectrum(weights: sp.csr_matrix, previous: np.ndarray, previous_labels: np.ndarray,
                  config: GraphConfig) -> Spectrum | None:
    """The spectrum of ``weights [n, n]`` from the previous coordinates ``[n_old, m]`` and
    k-means labels ``[n_old]`` of its first ``n_old`` nodes (the kept chunks; the rest are new),
    or None when the residuals stay above :data:`WARM_TOL` (then solve from scratch)."""
    n, m = weights.shape[0], previous.shape[1]
    work = torch.float32  # the tolerance is far above float32's rounding, and the block products run 2x faster
    tick = time.perf_counter()
    matvec, n_comp, isolated = _deflated_operator(sp.csr_matrix(weights), work)
    m_eff = max(0, min(config.spectral_dim, n - n_comp - 1))
    if m == 0 or m_eff != m:  # the dimension changes (a tiny graph): solve from scratch
        return None
    x0 = torch.from_numpy(start_block(weights, previous, seed=config.seed)).to(work)
    result = None
    if n == previous.shape[0]:  # no new node: Rayleigh-Ritz on the block alone is often enough
        result = subspace_eigsh(matvec, x0, m, tol=WARM_TOL, max_iter=1, depth=0)
    if result is None or not result.converged:
        result = subspace_eigsh(matvec, x0, m, tol=WARM_TOL, max_iter=MAX_ITER, depth=1)
    if not result.converged:
        return None
    solved = time.perf_counter() - tick
    coords = _fix_signs(result.eigenvectors.double().numpy())
    values = result.eigenvalues.double().numpy()
    labels, k = warm_kmeans(coords, previous_labels, config)
    report = {
        "requested_dim": config.spectral_dim, "dim": m, "components": n_comp, "isolated_nodes": isolated,
        "dtype": str(work).replace("torch.", ""), "reordered": False, "method": "warm block Rayleigh-Ritz",
        "warm_start": True, "converged": True, "n_iter": result.n_iter, "n_matvec": result.n_matvec,
        "max_residual": float(result.residual_norms.max()), "tol": WARM_TOL,
        "eigenvalue_range": [float(values.min()), float(values.max())], "clusters": int(len(np.unique(labels))),
        "seconds": {"warm_solve": round(solved, 3), "kmeans": round(time.perf_counter() - tick - solved, 3)},
    }
    return Spectrum(coords.astype(np.float32), values, labels, n_comp, isolated, report, None)


def cluster_count(n: int, config: GraphConfig) -> int:
    """The k of k-means for ``n`` nodes, as :func:`spectrag.graph.spectrum.spectral_coordinates` sets it."""
    k = config.clusters or int(round(np.sqrt(n / 2)))
    return max(1, min(k, 1024, n))


def warm_kmeans(coords: np.ndarray, previous_labels: np.ndarray, config: GraphConfig) -> tuple[np.ndarray, int]:
    """Cluster labels ``[n]`` of the row-normalized ``coords [n, m]`` (Ng-Jordan-Weiss, as the
    build clusters) given the previous labels of the first ``len(previous_labels)`` nodes: while
    there are about as many clusters as the build makes for ``n`` nodes, the kept nodes keep
    their clusters and each new node joins the nearest centroid (a small edit moves the clusters
    little; ``spectrag compact`` runs k-means again); when the count is more than
    :data:`KEEP_CLUSTERS` away from the build's count for ``n`` nodes, :data:`KMEANS_ITER`
    Lloyd iterations start from the previous centroids (clusters left empty, or wanted beyond the
    previous count, start at random nodes; surplus ones are the smallest)."""
    n = coords.shape[0]
    k = cluster_count(n, config)
    points = coords / np.maximum(np.linalg.norm(coords, axis=1, keepdims=True), 1e-12)
    points = np.ascontiguousarray(points, dtype=np.float32)
    if k == 1:
        return np.zeros(n, dtype=np.int32), 1
    prev = np.asarray(previous_labels, dtype=np.int64)
    sizes = np.bincount(prev, minlength=1)
    sums = np.zeros((len(sizes), points.shape[1]), dtype=np.float64)
    np.add.at(sums, prev, points[: len(prev)])
    alive = np.flatnonzero(sizes > 0)
    if abs(len(alive) - k) <= KEEP_CLUSTERS * k:  # about the build's count: keep the clusters
        centroids = np.ascontiguousarray(sums[alive] / sizes[alive, None], dtype=np.float32)
        labels = np.empty(n, dtype=np.int32)
        labels[: len(prev)] = np.searchsorted(alive, prev)  # numbered 0 .. len(alive) - 1
        if n > len(prev):
            index = load_faiss().IndexFlatL2(points.shape[1])
            index.add(centroids)
            labels[len(prev):] = index.search(points[len(prev):], 1)[1][:, 0]
        return labels, len(alive)
    alive = alive[np.argsort(-sizes[alive], kind="stable")][:k]  # the largest first
    centroids = sums[alive] / sizes[alive, None]
    if len(centroids) < k:
        rng = np.random.default_rng(config.seed)
        extra = points[rng.choice(n, k - len(centroids), replace=False)]
        centroids = np.vstack([centroids, extra])
    km = load_faiss().Kmeans(points.shape[1], k, niter=KMEANS_ITER, seed=config.seed + 1,
                             max_points_per_centroid=256, min_points_per_centroid=1, verbose=False)  # no "please provide at least" warning
    km.train(points, init_centroids=np.ascontiguousarray(centroids, dtype=np.float32))
    _, labels = km.index.search(points, 1)
    return labels.ravel().astype(np.int32), k
