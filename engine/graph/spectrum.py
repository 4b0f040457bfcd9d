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

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components, reverse_cuthill_mckee

from spectrag.index.dense import load_faiss
from spectrag.kernels.csr import torch_csr
from spectrag.kernels.lanczos import lanczos_eigsh
from spectrag.util.console import bar

SIGMA = 3.0
DTYPES = ("auto", "float64", "float32")
#: ``dtype="auto"`` solves in float32 from this many nodes on (float64 below)
FLOAT32_MIN_N = 200_000
#: smallest tolerance used in float32: its residual floor is a few eps_32 ||L|| (about 1.4e-6
#: at 10^5 nodes, growing slowly with n), so 1e-6 would stall (kernels/lanczos.py)
FLOAT32_MIN_TOL = 1e-5


@dataclass(frozen=True)
class Spectrum:
    """Shapes: ``coordinates [n, m]`` float32, ``eigenvalues [m]``, ``clusters [n]`` int32,
    ``order [n]`` int64 (the reverse Cuthill-McKee order the solve ran in, or None)."""

    coordinates: np.ndarray
    eigenvalues: np.ndarray
    clusters: np.ndarray
    components: int  # connected components with at least one edge
    isolated: int  # nodes without edges
    report: dict
    order: np.ndarray | None = None


def scipy_to_torch_csr(matrix: sp.csr_matrix, dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
    """CSR tensor of a scipy matrix on the CPU (int32 indices when they fit)."""
    matrix = matrix.tocsr()
    return torch_csr(matrix.indptr, matrix.indices, matrix.data.astype(np.float64), matrix.shape, dtype=dtype,
                     device=device)


def laplacian_csr(weights: sp.spmatrix) -> sp.csr_matrix:
    """``L_sym = I - D^{-1/2} W D^{-1/2}`` in float64 as scipy CSR, with the conventions of
    :func:`spectrag.kernels.laplacian.normalized_laplacian` (an isolated node has an identity row; a
    self-loop counts once in the degree and gives ``L_ii = 1 - W_ii / d_i``). Built with scipy
    in O(nnz) passes (the torch kernel's coalesce steps dominated at 10^6 nodes).
    Shapes: ``[n, n]`` -> ``[n, n]``."""
    return _laplacian_and_degree(weights)[0]


def _laplacian_and_degree(weights: sp.spmatrix) -> tuple[sp.csr_matrix, np.ndarray]:
    """:func:`laplacian_csr` and the float64 degree ``[n]`` it was built from."""
    # a copy, never a view: a dtype change copies only the data, and sorting the shared index
    # arrays in place would corrupt the caller's matrix
    w = sp.csr_matrix(weights, dtype=np.float64, copy=True)
    w.sum_duplicates()
    if w.nnz:
        bad = ~np.isfinite(w.data) | (w.data < 0)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            row = int(np.searchsorted(w.indptr, pos, side="right") - 1)
            raise ValueError(f"weights must be finite and non-negative, got weights[{row}, {int(w.indices[pos])}]={w.data[pos]!r}")
    w.eliminate_zeros()
    n = w.shape[0]
    deg = np.asarray(w.sum(axis=1)).ravel()
    inv_sqrt = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, np.finfo(np.float64).tiny)), 0.0)
    rows = np.repeat(np.arange(n), np.diff(w.indptr))
    loop = rows == w.indices
    diag = np.ones(n)
    diag[rows[loop]] -= w.data[loop] / deg[rows[loop]]
    w.data = -w.data * (inv_sqrt[rows] * inv_sqrt[w.indices])  # in place (a private copy); s_i s_j first: bitwise symmetric
    w.data[loop] = 0.0
    w.eliminate_zeros()
    lap = (w + sp.diags(diag, format="csr")).tocsr()
    lap.sort_indices()
    return lap, deg


def _deflation(weights: sp.csr_matrix) -> tuple[sp.csr_matrix, int, np.ndarray, np.ndarray]:
    """What the deflated operator needs, whatever its dtype: ``L_sym`` (float64 CSR), the number of
    connected components, each node's component label and degree."""
    n_comp, labels = connected_components(weights, directed=False)
    lap, degree = _laplacian_and_degree(weights)
    return lap, n_comp, labels, degree


def _deflated_operator(weights: sp.csr_matrix, dtype: torch.dtype, *, prepared=None, device="cpu"):
    """The matvec of ``L + sigma N N^T`` (``x [n, b] -> [n, b]``, on ``device``) and the
    component counts. ``prepared``: :func:`_deflation` of ``weights`` when already computed (a
    second dtype)."""
    lap64, n_comp, labels, degree = prepared if prepared is not None else _deflation(weights)
    lap = scipy_to_torch_csr(lap64, dtype, device)
    sizes = np.bincount(labels, minlength=n_comp)
    nontrivial = (sizes > 1) & (np.bincount(labels, weights=degree, minlength=n_comp) > 0)
    sqrt_d = torch.from_numpy(np.sqrt(degree)).to(device)
    label_t = torch.from_numpy(labels.astype(np.int64)).to(device)
    norm = torch.zeros(n_comp, dtype=torch.float64, device=device).index_add_(0, label_t, sqrt_d**2).sqrt()
    norm = torch.where(norm > 0, norm, torch.ones_like(norm))
    mask = torch.from_numpy(nontrivial).to(device)[label_t].to(torch.float64)  # nodes of non-trivial components
    basis = (sqrt_d * mask / norm[label_t]).to(dtype)  # column entries of N, one component per node
    single = n_comp == 1

    def matvec(x: torch.Tensor) -> torch.Tensor:  # x (n, b)
        # one column: SpMV (torch.mv) is much faster than SpMM on the CPU
        y = torch.mv(lap, x[:, 0]).unsqueeze(1) if x.shape[1] == 1 else torch.sparse.mm(lap, x)
        if single:  # N N^T x is a rank-one update: no segment sums needed
            return y.add_(basis[:, None] * (SIGMA * (basis @ x))[None, :])
        proj = torch.zeros(n_comp, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, label_t, basis[:, None] * x)
        return y.add_(SIGMA * basis[:, None] * proj[label_t])

    isolated = int((degree == 0).sum())
    return matvec, int(nontrivial.sum()), isolated


def _resolve_dtype(dtype: str, n: int) -> torch.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype == "auto":
        dtype = "float32" if n >= FLOAT32_MIN_N else "float64"
    return torch.float32 if dtype == "float32" else torch.float64


def _fix_signs(vectors: np.ndarray) -> np.ndarray:
    """Make each column's largest-magnitude entry positive, so the output is deterministic."""
    idx = np.abs(vectors).argmax(axis=0)
    signs = np.sign(vectors[idx, np.arange(vectors.shape[1])])
    return vectors * np.where(signs == 0, 1.0, signs)


def kmeans(points: torch.Tensor, k: int, *, seed: int = 0, iters: int = 50) -> torch.Tensor:
    """Lloyd's k-means by ``faiss.Kmeans`` (FAISS's random initialization from ``seed``; centres
    fitted on at most 256 points each, then every point gets its nearest centre). Chosen over
    an own torch version by bench/results/kmeans_cpu.md (same objective, much faster).

    Shapes: points ``[n, m]`` -> labels ``[n]`` (int64).
    """
    n = points.shape[0]
    k = max(1, min(k, n))
    x = np.ascontiguousarray(points.cpu().numpy(), dtype=np.float32)
    if k == 1:
        return torch.zeros(n, dtype=torch.int64)
    # min_points_per_centroid=1: FAISS only warns (on stderr, from C++) below it, the centres are the same
    km = load_faiss().Kmeans(x.shape[1], k, niter=iters, seed=seed + 1, max_points_per_centroid=256,
                             min_points_per_centroid=1, verbose=False)
    km.train(x)
    _, labels = km.index.search(x, 1)
    return torch.from_numpy(labels.ravel().astype(np.int64))


def spectral_coordinates(
    weights: sp.csr_matrix,
    m: int = 32,
    *,
    tol: float = 1e-6,
    clusters: int = 0,
    seed: int = 0,
    dtype: str = "float64",
    reorder: bool = False,
    v0: np.ndarray | None = None,
    device: str | torch.device = "cpu",
) -> Spectrum:
    """The ``m`` smallest non-trivial eigenvectors of ``L_sym`` of ``weights`` and k-means labels.

    ``dtype``: ``float64``, ``float32`` (the operator and Krylov basis; ``tol`` is raised to at
    least :data:`FLOAT32_MIN_TOL` and the residuals are re-checked in float64 for the report),
    or ``auto`` (float32 from :data:`FLOAT32_MIN_N` nodes on). ``reorder``: solve on the graph
    relabelled by its reverse Cuthill-McKee order and map the eigenvectors back: the same
    eigenpairs up to sign and rounding, with the SpMV reading the vector more nearly in order.
    (No gain for the single-vector SpMV Lanczos uses, whose vector stays in cache, on the
    10^6-chunk synthetic graph; see bench/results/scale_cpu.md.) ``v0``: a warm start ``[n]`` or ``[n, p]`` in the
    original node order (e.g. earlier coordinates). ``device``: where the operator and the
    Lanczos basis live (a GPU: ``graph.device``); the result comes back to the host, k-means
    runs there.

    The report has the solver's facts (``converged``, ``n_matvec``, ``max_residual`` in the
    working dtype, ``max_residual_float64`` for float32 solves) and ``seconds`` of its parts.

    Shapes: weights ``[n, n]`` symmetric -> see :class:`Spectrum`. ``m`` is capped at the number
    of non-trivial eigenpairs (``n - components``).
    """
    n = weights.shape[0]
    work = _resolve_dtype(dtype, n)
    if work == torch.float32:
        tol = max(tol, FLOAT32_MIN_TOL)
    seconds: dict[str, float] = {}
    tick = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal tick
        now = time.perf_counter()
        seconds[name] = round(now - tick, 3)
        tick = now

    weights = sp.csr_matrix(weights)
    order, solve_w = None, weights
    if reorder:
        order = reverse_cuthill_mckee(weights, symmetric_mode=True).astype(np.int64)
        solve_w = weights[order][:, order].tocsr()
        solve_w.sort_indices()
    prepared = _deflation(solve_w)
    matvec, n_comp, isolated = _deflated_operator(solve_w, work, prepared=prepared, device=device)
    lap("operator")
    m_eff = max(0, min(m, n - n_comp - 1))
    report: dict = {"requested_dim": m, "dim": m_eff, "components": n_comp, "isolated_nodes": isolated,
                    "dtype": str(work).replace("torch.", ""), "reordered": order is not None,
                    "device": str(torch.device(device))}
    if m_eff == 0:
        coords, values = np.zeros((n, 0), np.float32), np.zeros(0)
    else:
        start = None
        if v0 is not None:
            start = torch.from_numpy(np.asarray(v0, dtype=np.float64)[order] if order is not None else np.asarray(v0, dtype=np.float64))
        with bar(desc="spectrum (Lanczos)", unit=" vectors") as shown:  # no total: convergence decides

            def counted(x: torch.Tensor) -> torch.Tensor:  # x (n, b)
                shown.update(x.shape[1] if x.ndim == 2 else 1)
                return matvec(x)

            result = lanczos_eigsh(counted, m_eff, which="SA", tol=tol, seed=seed, n=n, dtype=work, device=device,
                                   v0=None if start is None else start.to(device))
        lap("lanczos")
        vectors = result.eigenvectors.cpu().numpy()  # (n, m) in solve order
        values = result.eigenvalues.cpu().numpy().astype(np.float64)
        report.update(
            method=result.method, converged=bool(result.converged), n_iter=int(result.n_iter),
            n_matvec=int(result.n_matvec), max_residual=float(result.residual_norms.max()), tol=tol,
            eigenvalue_range=[float(values.min()), float(values.max())],
        )
        if work != torch.float64:  # the float32 residuals are only as good as float32 arithmetic
            check, _, _ = _deflated_operator(solve_w, torch.float64, prepared=prepared, device=device)
            v64 = torch.from_numpy(vectors.astype(np.float64)).to(device)
            res = torch.linalg.vector_norm(check(v64) - v64 * torch.from_numpy(values).to(device), dim=0)
            report["max_residual_float64"] = float(res.max())
            lap("float64_check")
        if order is not None:
            unpermuted = np.empty_like(vectors)
            unpermuted[order] = vectors
            vectors = unpermuted
        coords = _fix_signs(vectors.astype(np.float64))
    k = clusters or int(round(np.sqrt(n / 2)))
    k = max(1, min(k, 1024, n))
    points = torch.from_numpy(coords).to(torch.float64 if work == torch.float64 else torch.float32)
    # Ng-Jordan-Weiss: cluster the row-normalized coordinates
    points = points / points.norm(dim=1, keepdim=True).clamp(min=1e-12)
    labels = kmeans(points, k, seed=seed).numpy().astype(np.int32) if m_eff else np.zeros(n, np.int32)
    report["clusters"] = int(len(np.unique(labels)))
    lap("kmeans")
    report["seconds"] = seconds
    return Spectrum(coords.astype(np.float32), values, labels, n_comp, isolated, report, order)
