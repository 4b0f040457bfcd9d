"""Spectral coordinates of the chunk graph (SpectRAG paper eq. 11-13) and their k-means clusters.

The null space of :math:`L_{sym} = I - D^{-1/2} W D^{-1/2}` is known in closed form: one vector
:math:`D^{1/2} \\mathbf{1}_C` per connected component :math:`C` with at least one edge
(an isolated node has an identity row, eigenvalue 1). Instead of asking Lanczos for
``m + #components`` eigenpairs and discarding the trivial ones, the solver runs on the deflated
operator

.. math::
    L' = L_{sym} + \\sigma N N^\\top, \\qquad N = [\\, D^{1/2}\\mathbf{1}_C / \\|D^{1/2}\\mathbf{1}_C\\| \\,]_C,
    \\ \\sigma = 3,

which moves every trivial eigenvalue to 3, above the spectrum of :math:`L_{sym}` (within
[0, 2]); its ``m`` smallest eigenpairs are exactly the ``m`` smallest non-trivial ones, however
many components the graph has. ``N^T x`` is a segment sum over component labels: the operator
costs one SpMM plus O(n b).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components

from kernels.lanczos import lanczos_eigsh
from kernels.laplacian import normalized_laplacian

SIGMA = 3.0


@dataclass(frozen=True)
class Spectrum:
    """Shapes: ``coordinates [n, m]`` float32, ``eigenvalues [m]``, ``clusters [n]`` int32."""

    coordinates: np.ndarray
    eigenvalues: np.ndarray
    clusters: np.ndarray
    components: int  # connected components with at least one edge
    isolated: int  # nodes without edges
    report: dict


def scipy_to_torch_csr(matrix: sp.csr_matrix, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    matrix = matrix.tocsr()
    return torch.sparse_csr_tensor(
        torch.from_numpy(matrix.indptr.astype(np.int64)),
        torch.from_numpy(matrix.indices.astype(np.int64)),
        torch.from_numpy(matrix.data.astype(np.float64)).to(dtype),
        size=matrix.shape,
    )


def _deflated_operator(weights: sp.csr_matrix, dtype: torch.dtype):
    """The matvec of ``L + sigma N N^T`` and the component counts."""
    lap = normalized_laplacian(scipy_to_torch_csr(weights, dtype))
    n_comp, labels = connected_components(weights, directed=False)
    degree = np.asarray(weights.sum(axis=1)).ravel()
    sizes = np.bincount(labels, minlength=n_comp)
    nontrivial = (sizes > 1) & (np.bincount(labels, weights=degree, minlength=n_comp) > 0)
    sqrt_d = torch.from_numpy(np.sqrt(degree)).to(dtype)
    label_t = torch.from_numpy(labels.astype(np.int64))
    norm = torch.zeros(n_comp, dtype=dtype).index_add_(0, label_t, sqrt_d**2).sqrt()
    norm = torch.where(norm > 0, norm, torch.ones_like(norm))
    mask = torch.from_numpy(nontrivial)[label_t].to(dtype)  # nodes of non-trivial components
    basis = sqrt_d * mask / norm[label_t]  # column entries of N, one component per node

    def matvec(x: torch.Tensor) -> torch.Tensor:  # x (n, b)
        proj = torch.zeros(n_comp, x.shape[1], dtype=x.dtype).index_add_(0, label_t, basis[:, None] * x)
        return torch.sparse.mm(lap, x) + SIGMA * basis[:, None] * proj[label_t]

    isolated = int((degree == 0).sum())
    return matvec, int(nontrivial.sum()), isolated


def _fix_signs(vectors: np.ndarray) -> np.ndarray:
    """Make each column's largest-magnitude entry positive, so the output is deterministic."""
    idx = np.abs(vectors).argmax(axis=0)
    signs = np.sign(vectors[idx, np.arange(vectors.shape[1])])
    return vectors * np.where(signs == 0, 1.0, signs)


def _nearest(points: torch.Tensor, centers: torch.Tensor, tile: int = 65_536) -> torch.Tensor:
    """Index of the nearest center per point, in row tiles (memory ``tile * k``)."""
    return torch.cat([torch.cdist(points[lo : lo + tile], centers).argmin(dim=1) for lo in range(0, len(points), tile)])


def kmeans(points: torch.Tensor, k: int, *, seed: int = 0, iters: int = 50) -> torch.Tensor:
    """Lloyd's k-means with k-means++ seeding from a fixed generator.

    Shapes: points ``[n, m]`` -> labels ``[n]`` (int64).
    """
    n = points.shape[0]
    k = max(1, min(k, n))
    gen = torch.Generator().manual_seed(seed)
    centers = points[torch.randint(n, (1,), generator=gen)]
    dist = torch.cdist(points, centers).squeeze(1) ** 2
    for _ in range(1, k):
        probs = dist / dist.sum() if dist.sum() > 0 else torch.full_like(dist, 1.0 / n)
        nxt = points[torch.multinomial(probs, 1, generator=gen)]
        centers = torch.cat([centers, nxt])
        dist = torch.minimum(dist, (torch.cdist(points, nxt).squeeze(1)) ** 2)
    labels = _nearest(points, centers)
    for _ in range(iters):
        sums = torch.zeros_like(centers).index_add_(0, labels, points)
        counts = torch.bincount(labels, minlength=k).to(points.dtype)
        centers = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], centers)
        new = _nearest(points, centers)
        if torch.equal(new, labels):
            break
        labels = new
    return labels


def spectral_coordinates(
    weights: sp.csr_matrix, m: int = 32, *, tol: float = 1e-6, clusters: int = 0, seed: int = 0
) -> Spectrum:
    """The ``m`` smallest non-trivial eigenvectors of ``L_sym`` of ``weights`` and k-means labels.

    Shapes: weights ``[n, n]`` symmetric -> see :class:`Spectrum`. ``m`` is capped at the number
    of non-trivial eigenpairs (``n - components``).
    """
    n = weights.shape[0]
    matvec, n_comp, isolated = _deflated_operator(weights, torch.float64)
    m_eff = max(0, min(m, n - n_comp - 1))
    report: dict = {"requested_dim": m, "dim": m_eff, "components": n_comp, "isolated_nodes": isolated}
    if m_eff == 0:
        coords, values = np.zeros((n, 0), np.float32), np.zeros(0)
    else:
        result = lanczos_eigsh(matvec, m_eff, which="SA", tol=tol, seed=seed, n=n, dtype=torch.float64, device="cpu")
        coords = _fix_signs(result.eigenvectors.numpy())
        values = result.eigenvalues.numpy()
        report.update(
            method=result.method, converged=bool(result.converged), n_iter=int(result.n_iter),
            n_matvec=int(result.n_matvec), max_residual=float(result.residual_norms.max()), tol=tol,
            eigenvalue_range=[float(values.min()), float(values.max())],
        )
    k = clusters or int(round(np.sqrt(n / 2)))
    k = max(1, min(k, 1024, n))
    points = torch.from_numpy(coords).to(torch.float64)
    # Ng-Jordan-Weiss: cluster the row-normalized coordinates
    points = points / points.norm(dim=1, keepdim=True).clamp(min=1e-12)
    labels = kmeans(points, k, seed=seed).numpy().astype(np.int32) if m_eff else np.zeros(n, np.int32)
    report["clusters"] = int(len(np.unique(labels)))
    return Spectrum(coords.astype(np.float32), values, labels, n_comp, isolated, report)
