"""Batched personalized PageRank (PPR) by power iteration, one SpMM per iteration.

Queries are columns: ``X`` is ``[n, B]``; column ``b`` is the (unnormalised) restart
distribution of query ``b``.  All columns are iterated together with one sparse
matrix-matrix product per iteration; there is no per-column Python loop.  Work happens on the
device of the inputs and in the floating dtype of ``X``.

Model (identical to ``networkx.pagerank(G, alpha=damping, personalization=p, dangling=None)``)
-------------------------------------------------------------------------------------------
``A[i, j] >= 0`` is the weight of the edge ``i -> j``.  The walk uses the row-normalised matrix
``P = D^{-1} A`` with ``D = diag(A 1)``.  Nodes with zero out-weight (``sum_j A[i, j] == 0``) are
*dangling*; as in networkx with ``dangling=None`` their mass is redistributed according to the
personalization vector.  With ``p = x_b / sum(x_b)`` the iteration is

    x_{k+1} = damping * (P^T x_k + (sum_{i dangling} x_k[i]) * p) + (1 - damping) * p,

started from the uniform vector ``x_0 = 1/n`` (networkx's default ``nstart``).  Every iterate
sums to 1.

Convergence (networkx's test)
-----------------------------
Column ``b`` has converged at iteration ``k`` when ``||x_k - x_{k-1}||_1 < n * tol`` (the L1
change, compared with ``n * tol``, exactly as networkx does).  A converged column is frozen at
that iterate (so batched results equal a loop of single-column calls) and dropped from further
SpMMs; the loop stops when every column has converged.  After ``max_iter`` iterations with some
column still unconverged, :class:`PageRankNotConverged` is raised (carrying the partial
result), or, with ``raise_on_failure=False``, the result is returned with ``converged=False``.
Because ``||x_{k} - x*||_1 <= damping / (1 - damping) * ||x_k - x_{k-1}||_1``, the final L1
error per column is below ``damping / (1 - damping) * n * tol``.

Note for float32: rounding of the L1 change is about ``n * 1e-7``, so ``tol`` below ~1e-7 may
never be reached in float32.

Chebyshev (the block kernels' ``method="chebyshev"``, the pipeline's default)
--------------------------------------------------------------------------------
On symmetric blocks the walk's spectrum is real, so the same fixed point is reached by the
Chebyshev semi-iterative method (:func:`chebyshev_weights`) to the same test, in about half the
products on the dev sets' pools (22 instead of 40-50: bench/results/ppr_chebyshev_cpu.md).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Optional, Union

import torch

from spectrag.kernels._checks import check_dense_blocks
from spectrag.kernels.blocks import BlockGraph
from spectrag.kernels.csr import (
    block_diagonal_csr,
    check_sparse_dtype,
    csr_int32,
    use_sparse_blocks,
)

__all__ = [
    "PageRankNotConverged",
    "PageRankResult",
    "RandomWalkOperator",
    "PageRankMatrix",
    "personalized_pagerank",
    "personalized_pagerank_blocks",
    "personalized_pagerank_dense_batched",
    "random_walk_operator",
]


@dataclass(frozen=True)
class PageRankResult:
    """Result of a (batched) personalized PageRank run.

    Attributes:
        scores: ``[n, B]`` PPR vectors (columns sum to 1); ``[n]`` for a 1-D ``X``; ``[B, P]`` or
            ``[B, P, C]`` for the dense-batched variant.
        n_iter: number of power iterations performed (max over columns).
        converged: ``True`` iff every column met the tolerance.
        residual: ``[B]`` L1 change ``||x_k - x_{k-1}||_1`` at each column's last iteration
            (``[B, C]`` for a 3-D dense-batched ``X``).
        column_converged: per-column convergence flags, shaped like ``residual``.
        column_iters: iterations performed per column, shaped like ``residual``.
    """

    scores: torch.Tensor
    n_iter: int
    converged: bool
    residual: torch.Tensor
    column_converged: torch.Tensor
    column_iters: torch.Tensor


class PageRankNotConverged(RuntimeError):
    """Raised when some column did not converge within ``max_iter``; ``.result`` is partial."""

    def __init__(self, result: PageRankResult, max_iter: int, tol: float):
        self.result = result
        bad = (~result.column_converged).nonzero().flatten().tolist()
        shown = bad[:10]
        more = "" if len(bad) <= 10 else f" (+{len(bad) - 10} more)"
        worst = float(result.residual.max()) if result.residual.numel() else float("nan")
        super().__init__(
            f"personalized PageRank did not converge in max_iter={max_iter} iterations "
            f"(tol={tol!r}); unconverged column(s) {shown}{more}, largest L1 residual {worst:.3e}"
        )


@dataclass(frozen=True)
class RandomWalkOperator:
    """Preprocessed walk on ``A``: reuse it across calls to skip the normalisation.

    Attributes:
        PT: ``[n, n]`` sparse CSR, ``PT[j, i] = A[i, j] / sum_j' A[i, j']`` (transpose of the
            row-normalised ``A``), in the dtype it was built for.
        dangling: ``[n]`` bool, ``True`` for nodes with zero out-weight.
    """

    PT: torch.Tensor
    dangling: torch.Tensor

    @property
    def n(self) -> int:
        return int(self.PT.shape[0])


# ---------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------


def _first_nonfinite(name: str, T: torch.Tensor, index=None) -> ValueError:
    bad = (~torch.isfinite(T)).nonzero()[0].tolist()
    value = T[tuple(bad)].item()
    where = list(index(bad[0])) if index is not None else bad
    return ValueError(f"{name} contains NaN or infinite values; first at {name}{where} = {value!r}")


def check_params(damping, tol, max_iter) -> tuple[float, float, int]:
    try:
        d = float(damping)
    except (TypeError, ValueError):
        raise TypeError(f"damping must be a real scalar, got {damping!r}") from None
    if not (0.0 < d < 1.0):
        raise ValueError(f"damping must be in the open interval (0, 1), got {damping!r}")
    try:
        tl = float(tol)
    except (TypeError, ValueError):
        raise TypeError(f"tol must be a real scalar, got {tol!r}") from None
    if not (math.isfinite(tl) and tl > 0):
        raise ValueError(f"tol must be a finite number > 0, got {tol!r}")
    if isinstance(max_iter, bool):
        raise TypeError(f"max_iter must be an integer, got {max_iter!r}")
    try:
        mi = operator.index(max_iter)
    except TypeError:
        raise TypeError(f"max_iter must be an integer, got {max_iter!r}") from None
    if mi < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    return d, tl, mi


def check_restart(X: torch.Tensor, reduce_dim: int, what: str) -> None:
    """Finite, non-negative, and no all-zero restart column."""
    if not bool(torch.isfinite(X).all()):
        raise _first_nonfinite("X", X)
    if bool((X < 0).any()):
        idx = (X < 0).nonzero()[0].tolist()
        raise ValueError(f"X must be non-negative (restart distributions); X{idx} = {X[tuple(idx)].item()!r}")
    zero = X.sum(dim=reduce_dim) == 0
    if bool(zero.any()):
        idx = zero.nonzero()[0].tolist()
        raise ValueError(
            f"X {what} {idx[0] if len(idx) == 1 else tuple(idx)} sums to zero: a restart "
            f"distribution needs positive mass"
        )


def _as_sparse_coo(A, n_expected: int, device) -> torch.Tensor:
    if not isinstance(A, torch.Tensor):
        raise TypeError(f"A must be a torch sparse CSR/COO or dense tensor, got {type(A).__name__}")
    if A.dim() != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square [n, n] matrix, got shape {tuple(A.shape)}")
    if n_expected is not None and A.shape[0] != n_expected:
        raise ValueError(f"shape mismatch: A is {tuple(A.shape)} but X has {n_expected} rows")
    if A.device != device:
        raise ValueError(f"A is on {A.device} but X is on {device}")
    if A.is_complex():
        raise TypeError(f"A must be real, got {A.dtype}")
    return A


def random_walk_operator(A: torch.Tensor, dtype: torch.dtype = torch.float64) -> RandomWalkOperator:
    """Build the transposed row-normalised walk matrix of ``A`` (``A[i, j]`` = weight ``i -> j``).

    Accepts sparse CSR (preferred), sparse COO (duplicates are summed) or dense ``A``.  Weights
    must be finite and non-negative.  Row sums are accumulated in float64; ``PT`` is stored in
    ``dtype``.
    """
    A = _as_sparse_coo(A, None, A.device if isinstance(A, torch.Tensor) else None)
    n = A.shape[0]
    dev = A.device
    if A.layout == torch.sparse_csr:
        crow, col, val = A.crow_indices(), A.col_indices(), A.values()
        row = torch.repeat_interleave(
            torch.arange(n, device=dev, dtype=col.dtype), crow[1:] - crow[:-1], output_size=col.numel()
        )
    elif A.layout == torch.sparse_coo:
        A = A.coalesce()
        row, col = A.indices()
        val = A.values()
    elif A.layout == torch.strided:
        nz = A.nonzero(as_tuple=True)
        row, col = nz
        val = A[nz]
        if A.is_floating_point() and not bool(torch.isfinite(A).all()):
            raise _first_nonfinite("A", A)
    else:
        raise TypeError(f"A must be sparse CSR, sparse COO or dense, got layout {A.layout}")
    if val.numel():
        if val.is_floating_point() and not bool(torch.isfinite(val).all()):
            raise _first_nonfinite("A", val, lambda k: (int(row[k]), int(col[k])))
        if bool((val < 0).any()):
            k = int((val < 0).nonzero()[0])
            raise ValueError(
                f"A must have non-negative edge weights; A[{int(row[k])}, {int(col[k])}] = {val[k].item()!r}"
            )
    v64 = val.to(torch.float64)
    deg = torch.zeros(n, dtype=torch.float64, device=dev).index_add_(0, row.long(), v64)
    dangling = deg == 0
    inv = torch.where(dangling, torch.zeros_like(deg), 1.0 / torch.where(dangling, torch.ones_like(deg), deg))
    w = (v64 * inv[row.long()]).to(dtype)
    PT = torch.sparse_coo_tensor(
        torch.stack([col.long(), row.long()]), w, (n, n), device=dev, check_invariants=False
    ).coalesce().to_sparse_csr()
    return RandomWalkOperator(PT=csr_int32(PT), dangling=dangling)


# ---------------------------------------------------------------------------------------------
# Sparse (global graph) variant
# ---------------------------------------------------------------------------------------------


def personalized_pagerank(
    A: Union[torch.Tensor, RandomWalkOperator],
    X: torch.Tensor,
    *,
    damping: float = 0.85,
    tol: float = 1e-8,
    max_iter: int = 100,
    raise_on_failure: bool = True,
) -> PageRankResult:
    """Personalized PageRank for every column of ``X`` at once (see module docstring).

    Args:
        A: ``[n, n]`` non-negative weights, ``A[i, j]`` = weight of edge ``i -> j`` (torch sparse
            CSR preferred, COO or dense accepted), or a :class:`RandomWalkOperator` built once
            with :func:`random_walk_operator`.
        X: ``[n, B]`` non-negative restart weights, one query per column (normalised to sum 1
            per column; an all-zero column raises ``ValueError``).  ``[n]`` is accepted.
        damping: probability of following an edge, in ``(0, 1)`` (networkx's ``alpha``).
        tol: convergence when the per-column L1 change is ``< n * tol`` (networkx's rule).
        max_iter: maximum number of power iterations (``>= 1``).
        raise_on_failure: raise :class:`PageRankNotConverged` if some column is unconverged
            after ``max_iter`` (default); otherwise return with ``converged=False``.

    Returns:
        :class:`PageRankResult` with ``scores`` ``[n, B]`` in ``X``'s dtype/device.
    """
    damping, tol, max_iter = check_params(damping, tol, max_iter)
    if not isinstance(X, torch.Tensor) or X.layout != torch.strided:
        raise TypeError("X must be a dense [n, B] torch.Tensor")
    if not X.is_floating_point():
        raise TypeError(f"X must have a floating dtype, got {X.dtype}")
    if X.dim() not in (1, 2):
        raise ValueError(f"X must be [n, B] (or [n]), got shape {tuple(X.shape)}")
    squeeze = X.dim() == 1
    X2 = X.unsqueeze(1) if squeeze else X
    n, B = X2.shape

    if isinstance(A, RandomWalkOperator):
        if A.n != n:
            raise ValueError(f"shape mismatch: A is [{A.n}, {A.n}] but X has {n} rows")
        if A.PT.device != X.device:
            raise ValueError(f"A is on {A.PT.device} but X is on {X.device}")
        op = A
    else:
        _as_sparse_coo(A, n, X.device)
        op = None
    check_restart(X2, 0, "column")
    if op is None:
        op = random_walk_operator(A, dtype=X.dtype)
    PT = op.PT if op.PT.dtype == X.dtype else op.PT.to(X.dtype)
    check_sparse_dtype(PT, "A")
    PT = csr_int32(PT)  # no-op for an operator from random_walk_operator
    dang_idx = op.dangling.nonzero().flatten()
    has_dangling = dang_idx.numel() > 0

    dev, dt = X.device, X.dtype
    p = X2 / X2.sum(dim=0, keepdim=True)  # restart distributions of the working columns
    x = torch.full((n, B), 1.0 / n, dtype=dt, device=dev)  # iterate of the working columns
    buf = torch.empty_like(x)  # recycled output buffer (no allocation per iteration)
    residual = torch.full((B,), math.inf, dtype=dt, device=dev)
    col_iters = torch.zeros(B, dtype=torch.long, device=dev)
    idx = torch.arange(B, device=dev)  # global column ids of the working columns
    scores: Optional[torch.Tensor] = None  # only needed once columns converge at different times
    threshold = n * tol
    n_iter = 0

    for it in range(1, max_iter + 1):
        n_iter = it
        # buf <- damping * PT @ x + (damping * dangling_mass + 1 - damping) * p
        if has_dangling:
            scale = x.index_select(0, dang_idx).sum(dim=0).mul_(damping).add_(1.0 - damping)
            torch.mul(p, scale, out=buf)
        else:
            torch.mul(p, 1.0 - damping, out=buf)
        torch.addmm(buf, PT, x, beta=1.0, alpha=damping, out=buf)
        # per-column L1 change; the previous iterate is not needed afterwards
        err = torch.linalg.vector_norm(x.sub_(buf), ord=1, dim=0)
        x, buf = buf, x
        residual[idx] = err
        col_iters[idx] = it
        still = err >= threshold
        n_still = int(still.sum())
        if n_still == idx.numel():
            continue
        if scores is None and n_still == 0 and idx.numel() == B:
            scores = x  # every column converged at once: x already is the result
            idx = idx[:0]
            break
        # freeze the columns that converged now and drop them from further SpMMs
        if scores is None:
            scores = torch.empty((n, B), dtype=dt, device=dev)
        done = ~still
        scores[:, idx[done]] = x[:, done]
        idx = idx[still]
        if n_still == 0:
            break
        x = x[:, still]
        p = p[:, still]
        buf = torch.empty_like(x)

    if idx.numel() > 0:  # unconverged columns keep their last iterate
        if scores is None:
            scores = x  # idx is still arange(B)
        else:
            scores[:, idx] = x
    x = scores
    active_idx = idx

    converged = active_idx.numel() == 0
    col_conv = torch.ones(B, dtype=torch.bool, device=X.device)
    col_conv[active_idx] = False
    result = PageRankResult(
        scores=x.squeeze(1) if squeeze else x,
        n_iter=n_iter,
        converged=converged,
        residual=residual,
        column_converged=col_conv,
        column_iters=col_iters,
    )
    if not converged and raise_on_failure:
        raise PageRankNotConverged(result, max_iter, tol)
    return result


# ---------------------------------------------------------------------------------------------
# Dense batched variant (one small induced subgraph per query)
# ---------------------------------------------------------------------------------------------


def personalized_pagerank_dense_batched(
    A_blocks: torch.Tensor,
    X: torch.Tensor,
    *,
    mask: Optional[torch.Tensor] = None,
    damping: float = 0.85,
    tol: float = 1e-8,
    max_iter: int = 100,
    raise_on_failure: bool = True,
    spmm: str = "auto",
    method: str = "power",
) -> PageRankResult:
    """Personalized PageRank on ``B`` padded induced subgraphs at once with ``bmm``.

    Args:
        A_blocks: ``[B, P, P]`` dense non-negative weights, ``A_blocks[b, i, j]`` = weight of
            ``i -> j`` inside block ``b``.
        X: ``[B, P]`` restart weights (or ``[B, P, C]`` for ``C`` queries per block).
        mask: optional ``[B, P]`` bool, ``True`` for real nodes.  Padded nodes are masked out
            completely: their rows/columns of ``A`` and entries of ``X`` are ignored (may hold
            garbage), they start with 0 mass, are not dangling, receive no mass and their score
            is 0.  Block ``b`` is treated as a graph with ``n_b = mask[b].sum()`` nodes, so
            its result equals :func:`personalized_pagerank` on the induced subgraph (uniform
            start ``1/n_b``, convergence threshold ``n_b * tol``).  Without ``mask`` all ``P``
            nodes are real.
        damping, tol, max_iter, raise_on_failure: as in :func:`personalized_pagerank`.
        spmm: ``dense`` (``bmm``), ``sparse`` (one block-diagonal CSR) or ``auto`` (sparse on
            the CPU for blocks at most 25% nonzero; :func:`spectrag.kernels.csr.use_sparse_blocks`)
            (default: auto). Same result up to rounding.
        method: ``power`` (networkx's iteration) or ``chebyshev`` (the same fixed point in about
            half the products, :func:`_chebyshev_blocks`; symmetric blocks only)
            (default: power).

    Returns:
        :class:`PageRankResult` with ``scores`` shaped like ``X``; ``residual``,
        ``column_converged`` and ``column_iters`` are ``[B]`` (or ``[B, C]``).
    """
    damping, tol, max_iter = check_params(damping, tol, max_iter)
    check_method(method)
    Bn, P = check_dense_blocks(A_blocks, X, "A_blocks")
    dev, dt = X.device, X.dtype
    squeeze = X.dim() == 2
    X3 = X.unsqueeze(2) if squeeze else X
    if mask is None:
        m = torch.ones(Bn, P, dtype=torch.bool, device=dev)
    else:
        if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (Bn, P):
            raise ValueError(
                f"mask must be a [{Bn}, {P}] bool tensor, got "
                f"{tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__}"
            )
        if mask.device != dev:
            raise ValueError(f"mask is on {mask.device} but X is on {dev}")
        m = mask.to(torch.bool)
    zero = torch.zeros((), dtype=dt, device=dev)
    A = torch.where(m.unsqueeze(2) & m.unsqueeze(1), A_blocks.to(dt), zero)
    X3 = torch.where(m.unsqueeze(2), X3, zero)
    if not bool(torch.isfinite(A).all()):
        raise _first_nonfinite("A_blocks", A)
    if bool((A < 0).any()):
        idx = (A < 0).nonzero()[0].tolist()
        raise ValueError(
            f"A_blocks must have non-negative edge weights; A_blocks{idx} = {A[tuple(idx)].item()!r}"
        )
    if squeeze:
        check_restart(X3.squeeze(2), 1, "block")
    else:
        check_restart(X3, 1, "[block, column]")

    deg = A.sum(dim=2, dtype=torch.float64)  # [B, P]
    dangling = (deg == 0) & m
    inv = torch.where(deg > 0, 1.0 / torch.where(deg > 0, deg, torch.ones_like(deg)), torch.zeros_like(deg))
    PT = (A * inv.to(dt).unsqueeze(2)).transpose(1, 2).contiguous()  # [B, P, P]
    if use_sparse_blocks(PT, spmm):
        check_sparse_dtype(PT, "A_blocks")
        PTs = block_diagonal_csr(PT)  # [B P, B P]

        def walk(v: torch.Tensor) -> torch.Tensor:
            return torch.sparse.mm(PTs, v.reshape(Bn * P, -1)).reshape(v.shape)
    else:

        def walk(v: torch.Tensor) -> torch.Tensor:
            return torch.bmm(PT, v)
    if method == "chebyshev":
        result = _chebyshev_blocks(walk, m, X3, squeeze, damping, tol, max_iter)
    else:
        result = _iterate_blocks(walk, dangling, m, X3, squeeze, damping, tol, max_iter)
    if not result.converged and raise_on_failure:
        raise PageRankNotConverged(result, max_iter, tol)
    return result


PPR_METHODS = ("power", "chebyshev")


def chebyshev_weights(damping: float, count: int) -> list[float]:
    """The extrapolation weights ``omega_1 .. omega_count`` of the Chebyshev semi-iterative
    method for ``y = damping P^T y + p`` (Golub and Varga), the spectrum of ``damping P^T``
    within ``[-damping, damping]`` (a symmetric graph's walk): ``omega_1 = 1``, ``omega_2 =
    1 / (1 - d^2 / 2)``, ``omega_k = 1 / (1 - d^2 omega_{k-1} / 4)``. The error then shrinks by
    about ``d / (1 + sqrt(1 - d^2))`` an iteration (0.56 at d = 0.85) instead of ``d`` at worst
    (the dev sets' pools: 22 products instead of 40-50). One list for every column, so a
    column's iterates never depend on its batch."""
    out, d2 = [], damping * damping
    for k in range(1, count + 1):
        out.append(1.0 if k == 1 else 1.0 / (1.0 - d2 / 2.0) if k == 2 else 1.0 / (1.0 - d2 * out[-1] / 4.0))
    return out


def check_method(method: str) -> str:
    if method not in PPR_METHODS:
        raise ValueError(f"method must be one of {PPR_METHODS}, got {method!r}")
    return method


# the block power iteration asks the device whether every column converged once per this many
# iterations (each ask is a host synchronization on a GPU)
CHECK_EVERY = 4


def _block_result(scores: torch.Tensor, residual: torch.Tensor, col_iters: torch.Tensor, active: torch.Tensor,
                  n_iter: int, squeeze: bool) -> PageRankResult:
    """The block iterations' result: ``scores [B, P, C]``, per-column ``[B, C]`` tensors (the
    ``C`` axis dropped when ``squeeze``)."""
    def cut(t: torch.Tensor, dim: int) -> torch.Tensor:
        return t.squeeze(dim) if squeeze else t

    return PageRankResult(scores=cut(scores, 2), n_iter=int(col_iters.max()) if col_iters.numel() else n_iter,
                          converged=not bool(active.any()), residual=cut(residual, 1),
                          column_converged=cut(~active, 1), column_iters=cut(col_iters, 1))


def _iterate_blocks(walk, dangling: torch.Tensor, m: torch.Tensor, X3: torch.Tensor, squeeze: bool,
                    damping: float, tol: float, max_iter: int) -> PageRankResult:
    """The power iteration of every block at once (networkx's model, see the module docstring):
    ``walk(x)`` applies ``P^T`` block by block to ``x [B, P, C]``."""
    Bn, P, C = X3.shape
    dev, dt = X3.device, X3.dtype
    dang = dangling.to(dt).unsqueeze(1)  # [B, 1, P]
    nb = m.sum(dim=1)  # [B]
    p = X3 / X3.sum(dim=1, keepdim=True)
    x = (m.to(dt) / nb.clamp_min(1).to(dt).unsqueeze(1)).unsqueeze(2).expand(Bn, P, C).contiguous()
    threshold = (nb.to(dt) * tol).unsqueeze(1)  # [B, 1]
    residual = torch.full((Bn, C), math.inf, dtype=dt, device=dev)
    col_iters = torch.zeros(Bn, C, dtype=torch.long, device=dev)
    active = torch.ones(Bn, C, dtype=torch.bool, device=dev)
    n_iter = 0
    for it in range(1, max_iter + 1):
        n_iter = it
        scale = torch.bmm(dang, x).mul_(damping).add_(1.0 - damping)  # [B, 1, C]
        xn = walk(x).mul_(damping).addcmul_(p, scale)
        err = (xn - x).abs_().sum(dim=1)  # [B, C]
        residual = torch.where(active, err, residual)
        col_iters = torch.where(active, torch.full_like(col_iters, it), col_iters)
        x = torch.where(active.unsqueeze(1), xn, x)
        active = active & (err >= threshold)
        # the host reads the flags every CHECK_EVERY iterations only: a converged column is
        # frozen, so the iterations past its convergence change nothing it returns
        if it % CHECK_EVERY == 0 and not bool(active.any()):
            break

    return _block_result(x, residual, col_iters, active, n_iter, squeeze)


def _chebyshev_blocks(walk, m: torch.Tensor, X3: torch.Tensor, squeeze: bool, damping: float, tol: float,
                      max_iter: int) -> PageRankResult:
    """The same PPR vectors as :func:`_iterate_blocks`, by the Chebyshev semi-iterative method
    (:func:`chebyshev_weights`) on ``y = d P^T y + p``, where ``P^T`` leaves a dangling node's
    mass out, and ``x = y / sum(y)``: that is networkx's fixed point, whose dangling mass goes
    back along ``p``, since the model is linear in ``p`` and keeps every iterate's sum at 1.
    Needs symmetric blocks (a real spectrum). Column ``b`` has converged when one power step
    moves its iterate by less than ``n_b * tol`` in L1 relative to its mass (networkx's test,
    scale-free); it returns that step, normalized, clipped at 0 (an extrapolated iterate may
    undershoot a true 0 by rounding), and is frozen, as in :func:`_iterate_blocks`."""
    Bn, P, C = X3.shape
    dev, dt = X3.device, X3.dtype
    nb = m.sum(dim=1)  # [B]
    p = X3 / X3.sum(dim=1, keepdim=True)
    threshold = (nb.to(dt) * tol).unsqueeze(1)  # [B, 1]
    residual = torch.full((Bn, C), math.inf, dtype=dt, device=dev)
    col_iters = torch.zeros(Bn, C, dtype=torch.long, device=dev)
    active = torch.ones(Bn, C, dtype=torch.bool, device=dev)
    out = torch.zeros_like(p)
    y, y_prev = p, p
    n_iter = 0
    for it, omega in enumerate(chebyshev_weights(damping, max_iter), start=1):
        n_iter = it
        g = walk(y).mul_(damping).add_(p)  # one power step of y
        err = (g - y).abs_().sum(dim=1) / y.sum(dim=1)  # [B, C]
        finished = active & (err < threshold)
        last = finished | (active & (it == max_iter))
        x = g.clamp(min=0)
        out = torch.where(last.unsqueeze(1), x / x.sum(dim=1, keepdim=True), out)
        residual = torch.where(active, err, residual)
        col_iters = torch.where(active, torch.full_like(col_iters, it), col_iters)
        active = active & ~finished
        y, y_prev = (g if it == 1 else (g - y_prev).mul_(omega).add_(y_prev)), y
        if it % CHECK_EVERY == 0 and not bool(active.any()):
            break

    return _block_result(out, residual, col_iters, active, n_iter, squeeze)


def personalized_pagerank_blocks(
    blocks: BlockGraph,
    X: torch.Tensor,
    *,
    mask: Optional[torch.Tensor] = None,
    damping: float = 0.85,
    tol: float = 1e-8,
    max_iter: int = 100,
    raise_on_failure: bool = True,
    method: str = "power",
) -> PageRankResult:
    """:func:`personalized_pagerank_dense_batched` on sparse blocks: ``B`` symmetric induced
    subgraphs as one block-diagonal CSR (:class:`spectrag.kernels.blocks.BlockGraph`), so an
    iteration costs the blocks' edges, not ``B P^2``. The blocks must be symmetric (undirected
    graphs, as the engine's): then ``P^T = A D^{-1}`` has the sparsity of ``A``.

    Args:
        blocks: ``B`` blocks of ``P x P`` non-negative weights.
        X: ``[B, P]`` restart weights, in the working dtype (float64 reaches ``tol = 1e-8``).
        mask, damping, tol, max_iter, raise_on_failure, method: as in
            :func:`personalized_pagerank_dense_batched`.

    Returns:
        :class:`PageRankResult` with ``scores [B, P]``.
    """
    damping, tol, max_iter = check_params(damping, tol, max_iter)
    check_method(method)
    Bn, P = blocks.batch, blocks.width
    if not isinstance(X, torch.Tensor) or tuple(X.shape) != (Bn, P) or not X.is_floating_point():
        raise ValueError(f"X must be a floating [{Bn}, {P}] tensor, got "
                         f"{tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__}")
    dev, dt = X.device, X.dtype
    m = torch.ones(Bn, P, dtype=torch.bool, device=dev) if mask is None else mask.to(torch.bool)
    if tuple(m.shape) != (Bn, P):
        raise ValueError(f"mask must be a [{Bn}, {P}] bool tensor, got {tuple(m.shape)}")
    if blocks.nnz and (not bool(torch.isfinite(blocks.val).all()) or bool((blocks.val < 0).any())):
        raise ValueError("blocks must have finite, non-negative edge weights")
    live = m.reshape(-1)
    keep = live[blocks.src] & live[blocks.col]  # edges between real nodes only
    vals = torch.where(keep, blocks.val.to(torch.float64), torch.zeros((), dtype=torch.float64, device=dev))
    deg = torch.zeros(Bn * P, dtype=torch.float64, device=dev).index_add_(0, blocks.src, vals)
    dangling = ((deg == 0).reshape(Bn, P)) & m
    inv = torch.where(deg > 0, 1.0 / torch.where(deg > 0, deg, torch.ones_like(deg)), torch.zeros_like(deg))
    op = blocks.operator((vals * inv[blocks.col]).to(dt))  # P^T[j, i] = A[j, i] / d_i, A symmetric
    X3 = torch.where(m, X, torch.zeros((), dtype=dt, device=dev)).unsqueeze(2)
    check_restart(X3.squeeze(2), 1, "block")

    def walk(v: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(op, v.reshape(Bn * P, -1)).reshape(v.shape)

    if method == "chebyshev":
        result = _chebyshev_blocks(walk, m, X3, True, damping, tol, max_iter)
    else:
        result = _iterate_blocks(walk, dangling, m, X3, True, damping, tol, max_iter)
    if not result.converged and raise_on_failure:
        raise PageRankNotConverged(result, max_iter, tol)
    return result


# ---------------------------------------------------------------------------------------------
# Direct solve for small graphs: the PPR matrix once, then every query is a gather
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageRankMatrix:
    r"""The exact personalized PageRank of every restart vector of a small graph, from one
    dense solve: with networkx's model (dangling mass returned along the restart vector ``p``)
    the fixed point is

    .. math::
        x = \frac{M p}{\mathbf{1}^\top M p}, \qquad M = (I - d\, P^\top)^{-1},

    so ``M`` (``[n, n]``, built once in O(n^3)) turns each query into a weighted sum of the
    columns of its restart nodes: O(S n) for ``S`` restart nodes, or O(S P) read at ``P``
    candidates. Exact to rounding, where power iteration stops within ``n * tol`` (L1) of it.

    Attributes:
        MT: ``[n, n]`` float64, ``MT[s] = M[:, s]`` (column ``s`` of ``M`` as a row).
        mass: ``[n]`` column sums ``1^T M``.
        damping: the ``d`` it was built for.
    """

    MT: torch.Tensor
    mass: torch.Tensor
    damping: float

    @property
    def n(self) -> int:
        return int(self.MT.shape[0])

    @classmethod
    def build(cls, walk: RandomWalkOperator, damping: float) -> "PageRankMatrix":
        """``M`` of a walk operator (``PT``, ``[n, n]``) by one LU solve in float64."""
        damping, _, _ = check_params(damping, 1e-8, 1)
        PT = walk.PT.to_dense().to(torch.float64)
        n = PT.shape[0]
        eye = torch.eye(n, dtype=torch.float64, device=PT.device)
        M = torch.linalg.solve(eye - damping * PT, eye)  # (n, n)
        return cls(MT=M.T.contiguous(), mass=M.sum(dim=0), damping=damping)

    def scores(self, nodes: torch.Tensor, weights: torch.Tensor, at: torch.Tensor | None = None) -> torch.Tensor:
        """PPR of the restart vectors ``sum_s weights[b, s] e_{nodes[b, s]}`` (``nodes`` -1
        padded, weights >= 0, at least one positive per row), read at ``at [B, P]`` (-1: 0), or
        at every node. Shapes: ``[B, S]`` -> ``[B, P]`` or ``[B, n]`` float64."""
        ok = (nodes >= 0) & (weights > 0)
        w = torch.where(ok, weights.to(torch.float64), torch.zeros((), dtype=torch.float64, device=weights.device))
        safe = nodes.clamp(min=0)
        total = (w * self.mass[safe]).sum(dim=1, keepdim=True)  # 1^T M p
        if at is None:
            x = (w.unsqueeze(2) * self.MT[safe]).sum(dim=1)  # (B, n)
        else:
            entries = self.MT[safe.unsqueeze(2), at.clamp(min=0).unsqueeze(1)]  # (B, S, P): only the candidates'
            x = (w.unsqueeze(2) * entries).sum(dim=1).masked_fill(at < 0, 0.0)
        return x / total.clamp(min=1e-300)
