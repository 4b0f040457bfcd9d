"""Batched heat-kernel diffusion ``expm(-t L) X`` by Chebyshev expansion.

Queries are columns: ``X`` is ``[n, B]`` and every column is diffused at once with one sparse
matrix-matrix product (SpMM) per Chebyshev term; there is no per-column Python loop.  All work
happens on the device of the inputs and in the floating dtype of ``X`` (``L`` is cast to it).

Mathematics
-----------
Let ``L`` be symmetric with spectrum in ``[0, lambda_max]`` (the symmetric normalised Laplacian
``I - D^{-1/2} W D^{-1/2}`` has ``lambda_max = 2``).  With ``a = lambda_max / 2`` the shifted
operator ``S = (L - a I) / a`` has spectrum in ``[-1, 1]`` and, with ``tau = t * a``,

    expm(-t L) = e^{-tau} expm(-tau S) = sum_{k>=0} c_k T_k(S),
    c_0 = ive(0, tau),   c_k = 2 (-1)^k ive(k, tau)   (k >= 1),

where ``T_k`` are the Chebyshev polynomials of the first kind and ``ive(k, x) = e^{-x} I_k(x)`` is
the exponentially scaled modified Bessel function (computed in float64 with
``scipy.special.ive``).  ``T_k(S)`` is applied with the three-term recurrence
``T_{k+1}(S) X = 2 S T_k(S) X - T_{k-1}(S) X``.

Truncation bound (used to pick the number of terms)
---------------------------------------------------
Because ``||T_k(S)||_2 <= 1`` when the spectrum of ``S`` lies in ``[-1, 1]``, keeping the terms
``k = 0..K`` gives, for every column ``x`` of ``X``,

    || expm(-t L) x - sum_{k<=K} c_k T_k(S) x ||_2  <=  R_K ||x||_2,   R_K = sum_{k>K} |c_k|.

The Bessel recurrence ``I_{k-1}(x) - I_{k+1}(x) = (2k/x) I_k(x)`` with all ``I_k(x) > 0`` gives
``I_{k}(x) / I_{k-1}(x) < x / (2k)``.  Hence for ``q = tau / (2 (K + 2)) < 1`` every ratio
``I_{k+1}/I_k`` with ``k >= K + 1`` is below ``q`` and the tail is dominated by a geometric series:

    R_K = 2 sum_{k>K} ive(k, tau)  <=  2 ive(K + 1, tau) / (1 - tau / (2 (K + 2))).

``K`` is the smallest integer for which this certified bound is ``<= tol`` (so ``K + 1`` terms
and ``K`` SpMMs are used).  The bound covers truncation only; floating-point rounding adds about
``K * eps(dtype)`` relative error (noticeable in float32: ~1e-6 .. 1e-5).

If the spectrum of ``L`` is *not* inside ``[0, lambda_max]`` the Chebyshev polynomials grow
exponentially outside ``[-1, 1]`` and the result is wrong: pass a valid upper bound.  Symmetry and
the spectral bound are not checked (that would cost more than the diffusion itself).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
import torch
from scipy.special import ive

from spectrag.kernels._checks import check_dense_blocks
from spectrag.kernels.blocks import BlockGraph, block_laplacian_csr
from spectrag.kernels.csr import (
    block_diagonal_csr,
    check_sparse_dtype,
    csr_int32,
    use_sparse_blocks,
)

__all__ = [
    "chebyshev_heat",
    "chebyshev_heat_blocks",
    "chebyshev_heat_dense_batched",
    "heat_coefficients",
    "heat_num_terms",
]

# Safety valve against absurd requests (t * lambda_max ~ 1e6 would need ~1e6 SpMMs).
_MAX_TERMS = 1_000_000


# ---------------------------------------------------------------------------------------------
# Coefficients
# ---------------------------------------------------------------------------------------------


def _check_scalar(name: str, value, *, positive: bool, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real scalar, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive:
        if v < 0 or (v == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise ValueError(f"{name} must be {bound}, got {value!r}")
    return v


def _tail_bound(ive_next: float, tau: float, K: int) -> float:
    """Certified bound on ``sum_{k>K} |c_k|`` given ``ive_next = ive(K + 1, tau)``."""
    q = tau / (2.0 * (K + 2))
    if q >= 1.0:
        return math.inf
    return 2.0 * ive_next / (1.0 - q)


def heat_coefficients(
    t: float,
    *,
    tol: float = 1e-6,
    lambda_max: float = 2.0,
    num_terms: Optional[int] = None,
) -> np.ndarray:
    """Chebyshev coefficients ``c_0..c_K`` (float64 numpy array) of ``expm(-t L)``.

    ``K`` is chosen from the certified tail bound in the module docstring unless ``num_terms`` is
    given, in which case exactly ``num_terms`` coefficients are returned.
    """
    t = _check_scalar("t", t, positive=True, allow_zero=True)
    lambda_max = _check_scalar("lambda_max", lambda_max, positive=True)
    tau = t * lambda_max / 2.0

    if num_terms is not None:
        if isinstance(num_terms, bool) or int(num_terms) != num_terms or num_terms < 1:
            raise ValueError(f"num_terms must be a positive integer, got {num_terms!r}")
        num_terms = int(num_terms)
        if num_terms > _MAX_TERMS:
            raise ValueError(f"num_terms={num_terms} exceeds the limit of {_MAX_TERMS}")
    else:
        tol = _check_scalar("tol", tol, positive=True)
        num_terms = _select_num_terms(tau, tol)

    k = np.arange(num_terms, dtype=np.float64)
    c = ive(k, tau)
    c[1:] *= 2.0
    c[1::2] *= -1.0
    return c


def _select_num_terms(tau: float, tol: float) -> int:
    """Smallest ``K + 1`` such that the certified tail bound ``R_K <= tol``."""
    start = 0
    chunk = max(64, int(2 * tau) + 64)
    while start < _MAX_TERMS:
        ks = np.arange(start, start + chunk + 1, dtype=np.float64)
        vals = ive(ks, tau)  # vals[j] = ive(start + j, tau)
        for j in range(chunk):
            K = start + j
            if _tail_bound(float(vals[j + 1]), tau, K) <= tol:
                return K + 1
        start += chunk
    raise ValueError(
        f"heat kernel with t*lambda_max/2={tau!r} and tol={tol!r} needs more than "
        f"{_MAX_TERMS} Chebyshev terms"
    )


def heat_num_terms(t: float, tol: float = 1e-6, lambda_max: float = 2.0) -> int:
    """Number of Chebyshev terms (``K + 1``; ``K`` SpMMs) used by :func:`chebyshev_heat`.

    Non-decreasing in ``t`` and in ``lambda_max``, non-increasing in ``tol``.
    """
    t = _check_scalar("t", t, positive=True, allow_zero=True)
    tol = _check_scalar("tol", tol, positive=True)
    lambda_max = _check_scalar("lambda_max", lambda_max, positive=True)
    return _select_num_terms(t * lambda_max / 2.0, tol)


# ---------------------------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------------------------


def _first_nonfinite(name: str, T: torch.Tensor, index=None) -> ValueError:
    """ValueError naming the first non-finite entry of ``T`` (``index(k)`` maps a flat position
    of ``T`` to a display index, e.g. a sparse value position to ``(row, col)``)."""
    bad = (~torch.isfinite(T)).nonzero()[0].tolist()
    value = T[tuple(bad)].item()
    where = list(index(bad[0])) if index is not None else bad
    return ValueError(f"{name} contains NaN or infinite values; first at {name}{where} = {value!r}")


def _sparse_position(M: torch.Tensor):
    """Map a position in ``M.values()`` to ``(row, col)`` for CSR / coalesced COO ``M``."""
    if M.layout == torch.sparse_csr:
        crow, col = M.crow_indices(), M.col_indices()
        def pos(k):
            kk = torch.tensor([k], dtype=crow.dtype, device=crow.device)
            return int(torch.searchsorted(crow, kk, right=True)[0]) - 1, int(col[k])

        return pos
    idx = M.indices()
    return lambda k: (int(idx[0, k]), int(idx[1, k]))


def _as_columns(X, name: str = "X") -> tuple[torch.Tensor, bool]:
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(X).__name__}")
    if X.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {X.layout}")
    if not X.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype, got {X.dtype}")
    if X.dim() == 1:
        X, squeeze = X.unsqueeze(1), True
    elif X.dim() == 2:
        squeeze = False
    else:
        raise ValueError(f"{name} must be [n, B] (or [n]), got shape {tuple(X.shape)}")
    if not bool(torch.isfinite(X).all()):
        raise _first_nonfinite(name, X)
    return X.contiguous(), squeeze


def _prepare_operator(M, name: str, n: int, like: torch.Tensor) -> torch.Tensor:
    """Validate a square ``[n, n]`` CSR / COO / dense matrix and bring it to ``like``'s dtype."""
    if not isinstance(M, torch.Tensor):
        raise TypeError(f"{name} must be a torch sparse CSR/COO or dense tensor, got {type(M).__name__}")
    if M.dim() != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be a square [n, n] matrix, got shape {tuple(M.shape)}")
    if M.shape[0] != n:
        raise ValueError(
            f"shape mismatch: {name} is {tuple(M.shape)} but X has {n} rows"
        )
    if M.device != like.device:
        raise ValueError(f"{name} is on {M.device} but X is on {like.device}")
    if M.layout == torch.sparse_coo:
        M = M.coalesce()
        values = M.values()
    elif M.layout == torch.sparse_csr:
        values = M.values()
    elif M.layout == torch.strided:
        values = M
    else:
        raise TypeError(f"{name} must be sparse CSR, sparse COO or dense, got layout {M.layout}")
    if values.is_complex():
        raise TypeError(f"{name} must be real, got {M.dtype}")
    if values.numel() and not bool(torch.isfinite(values).all()):
        if M.layout == torch.strided:
            raise _first_nonfinite(name, M)
        raise _first_nonfinite(name, values, _sparse_position(M))
    if M.layout == torch.sparse_coo:
        M = M.to_sparse_csr()
    if M.dtype != like.dtype:
        M = M.to(like.dtype)
    if M.layout == torch.sparse_csr:
        check_sparse_dtype(M, name)
        M = csr_int32(M)
    return M


# ---------------------------------------------------------------------------------------------
# Chebyshev recurrence (shared by the sparse and the dense-batched variants)
# ---------------------------------------------------------------------------------------------


def _chebyshev_apply(
    axpm: Callable[[torch.Tensor, torch.Tensor, float], None],
    X: torch.Tensor,
    coeffs: np.ndarray,
    half: float,
) -> torch.Tensor:
    """``sum_k coeffs[k] T_k(S) X`` with ``S = L / half - I``.

    ``axpm(C, V, alpha)`` must overwrite ``C`` in place with ``alpha * (L @ V) - C`` (a fused
    ``addmm`` with ``beta = -1``).  Two work buffers are allocated up front and recycled, so the
    loop performs one fused SpMM and two AXPY-type passes per term and no allocations.
    """
    Y = X * float(coeffs[0])
    if len(coeffs) == 1:
        return Y
    # T_1 = S X = L X / half - X
    T = X.clone()
    axpm(T, X, 1.0 / half)
    Y.add_(T, alpha=float(coeffs[1]))
    if len(coeffs) == 2:
        return Y
    two_over = 2.0 / half
    # T_2 = 2 S T_1 - T_0 = (2/half) L T_1 - 2 T_1 - X   (X itself must not be overwritten)
    T_prev = X.clone()
    axpm(T_prev, T, two_over)
    T_prev.sub_(T, alpha=2.0)
    T_prev, T = T, T_prev
    Y.add_(T, alpha=float(coeffs[2]))
    for c in coeffs[3:]:
        # T_{k+1} = (2/half) L T_k - 2 T_k - T_{k-1}, written into T_{k-1}'s buffer
        axpm(T_prev, T, two_over)
        T_prev.sub_(T, alpha=2.0)
        T_prev, T = T, T_prev
        Y.add_(T, alpha=float(c))
    return Y


# ---------------------------------------------------------------------------------------------
# Public kernels
# ---------------------------------------------------------------------------------------------


def chebyshev_heat(
    L,
    X,
    t: float,
    *,
    tol: float = 1e-6,
    lambda_max: float = 2.0,
    num_terms: Optional[int] = None,
) -> torch.Tensor:
    """Approximate ``expm(-t L) X`` for all columns of ``X`` at once.

    Args:
        L: symmetric ``[n, n]`` matrix with spectrum in ``[0, lambda_max]`` (torch sparse CSR
            preferred; sparse COO and dense tensors are accepted).  Cast to ``X.dtype``.
        X: ``[n, B]`` floating tensor, one query per column (``[n]`` is accepted and returns
            ``[n]``).
        t: diffusion time, ``t >= 0``.
        tol: target for the certified truncation bound ``R_K`` (see module docstring): every
            output column satisfies ``||y - expm(-t L) x||_2 <= tol * ||x||_2`` in exact
            arithmetic; rounding adds ``~K * eps(dtype)``.
        lambda_max: upper bound of the spectrum of ``L`` (2 for the normalised Laplacian).
        num_terms: force this many Chebyshev terms (ignores ``tol``).

    Returns:
        ``[n, B]`` tensor on ``X``'s device and dtype.
    """
    X2, squeeze = _as_columns(X)
    Lop = _prepare_operator(L, "L", X2.shape[0], X2)
    coeffs = heat_coefficients(t, tol=tol, lambda_max=lambda_max, num_terms=num_terms)

    def axpm(C: torch.Tensor, V: torch.Tensor, alpha: float) -> None:
        torch.addmm(C, Lop, V, beta=-1.0, alpha=alpha, out=C)

    Y = _chebyshev_apply(axpm, X2, coeffs, float(lambda_max) / 2.0)
    return Y.squeeze(1) if squeeze else Y


def chebyshev_heat_dense_batched(
    L_blocks: torch.Tensor,
    X: torch.Tensor,
    t: float,
    *,
    mask: Optional[torch.Tensor] = None,
    tol: float = 1e-6,
    lambda_max: float = 2.0,
    num_terms: Optional[int] = None,
    spmm: str = "auto",
) -> torch.Tensor:
    """Heat diffusion on a batch of small induced subgraphs with dense ``bmm``.

    Args:
        L_blocks: ``[B, P, P]`` dense symmetric matrices (e.g. the normalised Laplacian of each
            candidate subgraph, zero-padded to ``P`` nodes), spectrum in ``[0, lambda_max]``.
        X: ``[B, P]`` (one signal per block) or ``[B, P, C]`` (``C`` signals per block).
        t, tol, lambda_max, num_terms: as in :func:`chebyshev_heat`.
        mask: optional ``[B, P]`` bool, ``True`` for real nodes.
        spmm: ``dense`` (``baddbmm``), ``sparse`` (the blocks as one block-diagonal CSR) or
            ``auto`` (sparse on the CPU for blocks at most 25% nonzero, see
            :func:`spectrag.kernels.csr.use_sparse_blocks`) (default: auto). Same result up to rounding.

    Padding: padded nodes must be *isolated rows*, i.e. their rows and columns of ``L_blocks``
    are zero (then they are decoupled eigenvectors with eigenvalue 0 and cannot exchange mass
    with real nodes) and their entries of ``X`` are zero.  If ``mask`` is given this is enforced
    here (padded rows/cols of ``L`` and entries of ``X`` are zeroed, so padding may contain
    garbage) and padded outputs are exactly 0; without ``mask`` the caller must guarantee it.

    Returns a tensor shaped like ``X``.
    """
    Bn, P = check_dense_blocks(L_blocks, X, "L_blocks")
    squeeze = X.dim() == 2
    X3 = X.unsqueeze(2) if squeeze else X
    Lb = L_blocks.to(X.dtype)
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != (Bn, P):
            raise ValueError(
                f"mask must be a [{Bn}, {P}] bool tensor, got "
                f"{tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__}"
            )
        if mask.device != X.device:
            raise ValueError(f"mask is on {mask.device} but X is on {X.device}")
        m = mask.to(torch.bool)
        pair = m.unsqueeze(2) & m.unsqueeze(1)
        Lb = torch.where(pair, Lb, torch.zeros((), dtype=Lb.dtype, device=Lb.device))
        X3 = torch.where(m.unsqueeze(2), X3, torch.zeros((), dtype=X3.dtype, device=X3.device))
    if not bool(torch.isfinite(Lb).all()):
        raise _first_nonfinite("L_blocks", Lb)
    if not bool(torch.isfinite(X3).all()):
        raise _first_nonfinite("X", X3 if not squeeze else X3.squeeze(2))
    coeffs = heat_coefficients(t, tol=tol, lambda_max=lambda_max, num_terms=num_terms)

    if use_sparse_blocks(Lb, spmm):
        check_sparse_dtype(Lb, "L_blocks")
        Ls = block_diagonal_csr(Lb)  # [B P, B P]

        def axpm(C: torch.Tensor, V: torch.Tensor, alpha: float) -> None:
            C2 = C.view(Bn * P, -1)  # the recurrence's buffers are contiguous [B, P, C]
            torch.addmm(C2, Ls, V.reshape(Bn * P, -1), beta=-1.0, alpha=alpha, out=C2)
    else:

        def axpm(C: torch.Tensor, V: torch.Tensor, alpha: float) -> None:
            C.baddbmm_(Lb, V, beta=-1.0, alpha=alpha)

    Y = _chebyshev_apply(axpm, X3.contiguous(), coeffs, float(lambda_max) / 2.0)
    return Y.squeeze(2) if squeeze else Y


def chebyshev_heat_blocks(
    blocks: BlockGraph,
    X: torch.Tensor,
    t: float,
    *,
    mask: Optional[torch.Tensor] = None,
    tol: float = 1e-6,
    num_terms: Optional[int] = None,
) -> torch.Tensor:
    """:func:`chebyshev_heat_dense_batched` on sparse blocks: ``exp(-t L_b) x_b`` for ``B``
    symmetric induced subgraphs at once, ``L_b = I - D^{-1/2} A_b D^{-1/2}`` (an isolated or
    padded node keeps ``L_ii = 1``), applied as one block-diagonal CSR
    (:func:`spectrag.kernels.blocks.block_laplacian_csr`): an application costs the blocks'
    edges, not ``B P^2``.

    Shapes: ``X [B, P]`` (padded entries, ``mask`` False, are ignored) -> ``[B, P]`` in
    ``X``'s dtype.
    """
    Bn, P = blocks.batch, blocks.width
    if not isinstance(X, torch.Tensor) or tuple(X.shape) != (Bn, P) or not X.is_floating_point():
        raise ValueError(f"X must be a floating [{Bn}, {P}] tensor, got "
                         f"{tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__}")
    if mask is not None:
        X = torch.where(mask.to(torch.bool), X, torch.zeros((), dtype=X.dtype, device=X.device))
    if not bool(torch.isfinite(X).all()):
        raise _first_nonfinite("X", X)
    L = block_laplacian_csr(blocks, X.dtype)
    coeffs = heat_coefficients(t, tol=tol, lambda_max=2.0, num_terms=num_terms)

    def axpm(C: torch.Tensor, V: torch.Tensor, alpha: float) -> None:
        torch.addmm(C, L, V, beta=-1.0, alpha=alpha, out=C)

    return _chebyshev_apply(axpm, X.reshape(Bn * P, 1).contiguous(), coeffs, 1.0).reshape(Bn, P)
