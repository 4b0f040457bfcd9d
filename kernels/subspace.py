"""Warm-started block eigensolver: a few smallest eigenpairs of a symmetric operator, refined
from a block that already nearly spans them (e.g. an earlier graph's eigenvectors).

**Algorithm.** Rayleigh--Ritz on the block Krylov space

.. math::
    \\mathcal{K} = \\operatorname{span}[\\,X,\\ AX,\\ \\dots,\\ A^{s} X\\,], \\qquad X \\in \\mathbb{R}^{n \\times b},

built block by block with full re-orthogonalization (classical Gram--Schmidt and a Cholesky
QR of the block, twice), restarted from the ``b`` lowest Ritz vectors until the ``k`` wanted ones
have residuals :math:`\\|A x_i - \\theta_i x_i\\|_2 \\le` ``tol`` or ``max_iter`` restarts are
spent. Each restart costs ``(s + 1) b`` operator applications (as ``s + 1`` block products,
which a sparse matrix serves faster than single vectors) and ``O(n (s + 1)^2 b^2)`` for the
orthogonalization. Started from a good block, the first Rayleigh--Ritz step already resolves
the well-separated part of the spectrum; single-vector Lanczos
(:func:`spectrag.kernels.lanczos.lanczos_eigsh`) can use none of the block.

**Guarantee.** The residuals are computed explicitly (``A X - X \\Theta`` from the stored
products). With orthonormal Ritz vectors :math:`X` and :math:`R = AX - X\\Theta`,
:math:`X^\\top R = 0`, so the pairs are exact eigenpairs of :math:`A - (R X^\\top + X R^\\top)`,
a perturbation of spectral norm :math:`\\|R\\|_2` (the backward error); each :math:`\\theta_i`
lies within :math:`\\|r_i\\|` of an eigenvalue of :math:`A`. Whether they are the ``k``
*smallest* depends on the start block spanning every low mode (add guard columns).

Shapes: ``X0 [n, b]`` with ``b >= k`` -> eigenvalues ``[k]``, eigenvectors ``[n, k]``.
"""

from __future__ import annotations

from collections.abc import Callable
import torch
from torch import Tensor

from spectrag.kernels.lanczos import LanczosResult

__all__ = ["subspace_eigsh"]


def _cholesky_qr(block: Tensor) -> Tensor:
    """The Q of ``block [n, b]`` by Cholesky QR (a b x b Gram matrix: 3x faster than Householder
    QR on tall blocks); Householder QR where the Gram matrix is not positive definite."""
    factor, info = torch.linalg.cholesky_ex(block.T @ block)
    if int(info) != 0:
        return torch.linalg.qr(block)[0]
    return torch.linalg.solve_triangular(factor, block.T, upper=False).T


def _orthonormalize(basis: Tensor | None, block: Tensor) -> Tensor:
    """``block`` made orthonormal and orthogonal to the orthonormal ``basis`` ``[n, p]``
    (projection and Cholesky QR, twice: CholeskyQR2's accuracy)."""
    for _ in range(2):
        if basis is not None:
            block = block - basis @ (basis.T @ block)
        block = _cholesky_qr(block)
    return block


def subspace_eigsh(
    A: Callable[[Tensor], Tensor],
    X0: Tensor,
    k: int,
    *,
    tol: float,
    max_iter: int = 4,
    depth: int = 2,
) -> LanczosResult:
    """The ``k`` smallest eigenpairs of the symmetric operator ``A`` (``[n, b] -> [n, b]``)
    reachable from the block ``X0 [n, b]`` (see the module docstring), in ``X0``'s dtype, as a
    :class:`~spectrag.kernels.lanczos.LanczosResult` (``n_iter``: restarts; ``method``:
    ``"subspace"``).

    ``depth``: block Krylov steps per restart (0: plain Rayleigh--Ritz on ``X0``); ``max_iter``:
    restarts (at least one). Does not raise when ``tol`` is not reached: ``converged`` says so.
    """
    if X0.dim() != 2 or X0.shape[1] < k or k < 1:
        raise ValueError(f"X0 must be [n, b] with b >= k >= 1, got shape {tuple(X0.shape)} and k={k}")
    if not torch.isfinite(X0).all():
        raise ValueError("X0 has NaN or infinite entries")
    if depth < 0 or max_iter < 1:
        raise ValueError(f"depth must be >= 0 and max_iter >= 1, got depth={depth}, max_iter={max_iter}")
    b = X0.shape[1]
    X = _orthonormalize(None, X0)
    n_matvec = 0
    for it in range(1, max_iter + 1):
        blocks, products = [X], []
        for _ in range(depth):
            W = A(blocks[-1])
            n_matvec += b
            products.append(W)
            blocks.append(_orthonormalize(torch.cat(blocks, dim=1), W))
        products.append(A(blocks[-1]))
        n_matvec += b
        Q, AQ = torch.cat(blocks, dim=1), torch.cat(products, dim=1)  # (n, (depth + 1) b)
        H = Q.T @ AQ
        theta, Y = torch.linalg.eigh((H + H.T) / 2)
        X, AX = Q @ Y[:, :b], AQ @ Y[:, :b]
        residuals = torch.linalg.vector_norm(AX - X * theta[:b], dim=0)
        if bool((residuals[:k] <= tol).all()):
            break
    return LanczosResult(theta[:k], X[:, :k], residuals[:k], bool((residuals[:k] <= tol).all()), it, n_matvec,
                         method="subspace")
