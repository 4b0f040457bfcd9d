"""Thick-restart Lanczos eigensolver for a few extreme eigenpairs of a symmetric operator."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch
from torch import Tensor

__all__ = ["LanczosNotConverged", "LanczosResult", "lanczos_eigsh"]

#: Problems with ``n <= DENSE_MAX_N`` are solved with a dense ``torch.linalg.eigh``.
DENSE_MAX_N = 64

#: Ritz estimates below ``_FLOOR_FACTOR * eps * ||A||`` count as converged-looking (the
#: explicit residual check then decides), so an unreachable ``tol`` is reported quickly.
_FLOOR_FACTOR = 10.0
#: A Gram--Schmidt pass that keeps this share of the vector's norm is not repeated.
_TWICE_IS_ENOUGH = 2 ** -0.5
_FLOAT_DTYPES = (torch.float32, torch.float64)
_TENSOR_LAYOUTS = (torch.strided, torch.sparse_coo, torch.sparse_csr, torch.sparse_csc)


@dataclass(frozen=True)
class LanczosResult:
    r"""Output of :func:`lanczos_eigsh`. Read the fields by name (it is not a tuple).

    Attributes:
        eigenvalues (torch.Tensor): The ``k`` wanted eigenvalues, ascending for
            ``which="SA"`` and descending for ``which="LA"``. Shape :math:`(k,)`.
        eigenvectors (torch.Tensor): Matching orthonormal eigenvectors as columns.
            Shape :math:`(n, k)`.
        residual_norms (torch.Tensor): :math:`\|\mathbf{A}\mathbf{v}_i -
            \lambda_i \mathbf{v}_i\|_2`, computed explicitly with the operator (not an
            estimate). Shape :math:`(k,)`.
        converged (bool): Whether every pair meets the convergence criterion.
        n_iter (int): Number of Lanczos cycles (basis expansion + Rayleigh--Ritz), i.e.
            restarts + 1; ``0`` for the dense path.
        n_matvec (int): Number of operator applications, counted per vector (a block of
            ``b`` columns counts ``b``), including the explicit residual checks.
        method (str): ``"lanczos"`` or ``"dense"`` (small problems, see :func:`lanczos_eigsh`).
    """

    eigenvalues: Tensor
    eigenvectors: Tensor
    residual_norms: Tensor
    converged: bool
    n_iter: int
    n_matvec: int
    method: str = "lanczos"


class LanczosNotConverged(RuntimeError):
    """Raised by :func:`lanczos_eigsh` when the wanted eigenpairs did not converge.

    Attributes:
        result (LanczosResult): The partial result (best Ritz pairs found, with their explicit
            residual norms and ``converged=False``).
    """

    def __init__(self, message: str, result: LanczosResult) -> None:
        super().__init__(message)
        self.result = result


class _Operator:
    """Uniform ``X [n, b] -> A X [n, b]`` wrapper that counts applied vectors."""

    def __init__(
        self,
        A: Union[Tensor, Callable[[Tensor], Tensor]],
        n: Optional[int],
        dtype: Optional[torch.dtype],
        device: Optional[Union[str, torch.device]],
    ) -> None:
        self.n_matvec = 0
        self._checked = False
        if isinstance(A, Tensor):
            if n is not None or dtype is not None or device is not None:
                raise ValueError(
                    "n, dtype and device are only accepted when A is a callable; for a tensor A "
                    f"they are taken from A (got n={n!r}, dtype={dtype!r}, device={device!r})"
                )
            if A.layout not in _TENSOR_LAYOUTS:
                raise ValueError(f"A must be a dense, COO, CSR or CSC tensor, got layout={A.layout}")
            if A.dim() != 2 or A.shape[0] != A.shape[1]:
                raise ValueError(f"A must be a square 2-D tensor [n, n], got shape={tuple(A.shape)}")
            if A.dtype not in _FLOAT_DTYPES:
                raise ValueError(f"A must have dtype float32 or float64, got dtype={A.dtype}")
            self.n = int(A.shape[0])
            self.dtype = A.dtype
            self.device = A.device
            if A.layout != torch.strided:
                A = _as_csr(A)
            # One-column products: SpMV/GEMV (torch.mv) is much faster than SpMM on the CPU.
            self._use_mv = A.device.type == "cpu"
            self._tensor: Optional[Tensor] = A
            self._fn: Optional[Callable[[Tensor], Tensor]] = None
        elif callable(A):
            if n is None:
                raise ValueError("n must be given when A is a callable matvec, got n=None")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"n must be a positive int, got n={n!r}")
            dtype = torch.float64 if dtype is None else dtype
            if dtype not in _FLOAT_DTYPES:
                raise ValueError(f"dtype must be torch.float32 or torch.float64, got dtype={dtype!r}")
            self.n = n
            self.dtype = dtype
            self.device = torch.device("cpu") if device is None else torch.device(device)
            self._tensor = None
            self._fn = A
        else:
            raise TypeError(
                f"A must be a torch.Tensor or a callable matvec, got {type(A).__name__}"
            )

    def __call__(self, X: Tensor) -> Tensor:
        self.n_matvec += X.shape[1]
        if self._tensor is not None:
            if X.shape[1] == 1 and self._use_mv:
                return torch.mv(self._tensor, X[:, 0]).unsqueeze(1)
            return self._tensor @ X
        Y = self._fn(X)  # type: ignore[misc]
        if not self._checked:
            if not isinstance(Y, Tensor) or tuple(Y.shape) != tuple(X.shape):
                got = tuple(Y.shape) if isinstance(Y, Tensor) else type(Y).__name__
                raise ValueError(
                    f"the matvec A must map a [n, b] block to a [n, b] block, got {got} for "
                    f"input shape {tuple(X.shape)}"
                )
            if Y.dtype != X.dtype or Y.device != X.device:
                raise ValueError(
                    f"the matvec A must keep dtype {X.dtype} and device {X.device}, got "
                    f"dtype={Y.dtype}, device={Y.device}"
                )
            self._checked = True
        return Y

    def dense(self) -> Tensor:
        """The operator as a dense float64 matrix (small problems only)."""
        if self._tensor is not None:
            M = self._tensor.to_dense() if self._tensor.layout != torch.strided else self._tensor
        else:
            M = self(torch.eye(self.n, dtype=self.dtype, device=self.device))
        if M.device.type == "mps":  # no float64 there
            M = M.cpu()
        M = M.to(torch.float64)
        return 0.5 * (M + M.T)


def _as_csr(A: Tensor) -> Tensor:
    """CSR copy of a sparse matrix; on the CPU with int32 indices when they fit (faster SpMV)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        if A.layout == torch.sparse_coo:
            A = A.coalesce().to_sparse_csr()
        elif A.layout != torch.sparse_csr:
            A = A.to_sparse_csr()
        crow, col = A.crow_indices(), A.col_indices()
        if (
            A.device.type == "cpu"
            and crow.dtype != torch.int32
            and max(A.shape[0], col.numel()) < 2**31 - 1
        ):
            A = torch.sparse_csr_tensor(
                crow.to(torch.int32), col.to(torch.int32), A.values(), A.shape,
                check_invariants=False,
            )
    return A


def _to(x: Tensor, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Cast on the source device first (float64 may not exist on the target, e.g. MPS)."""
    return x.to(dtype).to(device)


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {name}={value!r}")
    return value


def _thresholds(theta: Tensor, tol: float) -> Tensor:
    return tol * theta.abs().clamp_min(1.0)


def _explicit_residuals(op: _Operator, U: Tensor, theta: Tensor) -> Tensor:
    """``||A u_i - theta_i u_i||`` in the working dtype, returned as float64 on the CPU."""
    R = op(U) - U * _to(theta, U.dtype, U.device)
    return torch.linalg.vector_norm(R, dim=0).cpu().double()


def _dense_solve(op: _Operator, k: int, which: str, tol: float) -> tuple[LanczosResult, str]:
    M = op.dense()
    evals, evecs = torch.linalg.eigh(M)
    idx = torch.arange(k, device=evals.device) if which == "SA" else torch.arange(
        op.n - 1, op.n - 1 - k, -1, device=evals.device
    )
    theta = evals[idx].cpu()
    U = _to(evecs[:, idx], op.dtype, op.device).contiguous()
    res = _explicit_residuals(op, U, theta)
    ok = bool((res <= _thresholds(theta, tol)).all())
    msg = "" if ok else _floor_message(res, theta, tol, op.dtype, "was computed by dense eigh")
    result = LanczosResult(
        eigenvalues=_to(theta, op.dtype, op.device),
        eigenvectors=U,
        residual_norms=_to(res, op.dtype, op.device),
        converged=ok,
        n_iter=0,
        n_matvec=op.n_matvec,
        method="dense",
    )
    return result, msg


def _floor_message(
    res: Tensor, theta: Tensor, tol: float, dtype: torch.dtype, how: str = "stopped improving"
) -> str:
    ratio = res / _thresholds(theta, tol)
    worst = int(torch.argmax(ratio))
    return (
        f"residual ||A v - lambda v|| = {res[worst].item():.3e} for lambda = "
        f"{theta[worst].item():.8g} exceeds tol * max(1, |lambda|) = "
        f"{(_thresholds(theta, tol)[worst]).item():.3e} (tol={tol:g}) and {how}, "
        f"which points to the rounding floor of {dtype} (about eps={torch.finfo(dtype).eps:.1e} "
        f"times ||A||): increase tol"
        + (" or use float64" if dtype == torch.float32 else "")
    )


def lanczos_eigsh(
    A: Union[Tensor, Callable[[Tensor], Tensor]],
    k: int,
    *,
    which: str = "SA",
    tol: float = 1e-6,
    max_iter: Optional[int] = None,
    ncv: Optional[int] = None,
    seed: int = 0,
    raise_on_failure: bool = True,
    probe: bool = True,
    n: Optional[int] = None,
    dtype: Optional[torch.dtype] = None,
    device: Optional[Union[str, torch.device]] = None,
    v0: Optional[Tensor] = None,
) -> LanczosResult:
    r"""A few extreme eigenpairs of a symmetric operator by thick-restart Lanczos.

    Computes the ``k`` smallest (``which="SA"``) or largest (``which="LA"``) algebraic
    eigenpairs of a symmetric :math:`\mathbf{A} \in \mathbb{R}^{n \times n}`:

    .. math::
        \mathbf{A} \mathbf{v}_i = \lambda_i \mathbf{v}_i, \qquad
        \mathbf{V}^\top \mathbf{V} = \mathbf{I}_k .

    **Algorithm.** Thick-restart Lanczos (Wu & Simon, 2000) with full
    re-orthogonalization: each new Krylov vector is orthogonalized against the whole basis
    with two passes of classical Gram--Schmidt written as matrix products
    (:math:`\mathbf{h} = \mathbf{Q}^\top \mathbf{w}`,
    :math:`\mathbf{w} \leftarrow \mathbf{w} - \mathbf{Q}\mathbf{h}`, twice; a third pass is
    made if the second one cancels more than half of the norm). The projected matrix
    :math:`\mathbf{T} = \mathbf{Q}^\top \mathbf{A} \mathbf{Q}` is assembled from the
    computed projection coefficients and diagonalized densely. At a restart the
    ``k + (ncv - k) // 2`` best Ritz vectors are kept together with the current residual
    direction, so the Lanczos relation stays exact. A breakdown
    (:math:`\beta_j \le 4\sqrt{j}\,\epsilon\,\|\mathbf{A}\|`, i.e. an invariant subspace was
    found) is continued with a fresh random vector orthogonalized against the basis. The
    start vector is drawn from a CPU :class:`torch.Generator` seeded with ``seed``, so equal
    inputs give bit-identical outputs (on the same device, thread count and library build).

    **Convergence criterion.** The run stops when, for each of the ``k`` wanted Ritz pairs
    :math:`(\theta_i, \mathbf{u}_i)`, the Lanczos residual estimate
    :math:`|\beta_m \, y_{m,i}|` satisfies
    :math:`|\beta_m y_{m,i}| \le \mathrm{tol} \cdot \max(1, |\theta_i|)` **and** the residual
    recomputed explicitly with the operator satisfies
    :math:`\|\mathbf{A}\mathbf{u}_i - \theta_i \mathbf{u}_i\|_2 \le \mathrm{tol} \cdot
    \max(1, |\theta_i|)`. The explicit norms are returned in ``residual_norms``. (The
    estimate test is relaxed to :math:`\max(\mathrm{tol} \cdot \max(1, |\theta_i|),
    10\,\epsilon\,\|\mathbf{A}\|)` so that an unreachable ``tol`` reaches the explicit
    check; :math:`\|\mathbf{A}\|` is estimated by the largest :math:`\|\mathbf{A}\mathbf{q}_j\|`
    and :math:`|\theta|` seen.) If the explicit residuals fail twice without halving (the
    rounding floor of the dtype, about :math:`\epsilon \|\mathbf{A}\|`, is above the
    tolerance), the run stops early as not converged with a message that says so. Eigenvalue errors are then bounded
    by about :math:`\|\mathbf{r}_i\|` (and :math:`\|\mathbf{r}_i\|^2/\mathrm{gap}` for
    isolated eigenvalues); eigenvector angles by :math:`\|\mathbf{r}_i\|/\mathrm{gap}_i`.

    **Missed eigenvalues (probe).** A single Krylov sequence holds only one direction of
    each eigenspace, so further copies of a repeated eigenvalue (e.g. the eigenvalue 0 of a
    graph Laplacian with several connected components) appear only through rounding and may
    be missed. With ``probe=True``, once the criterion is met the ``k`` converged pairs are
    locked and one more cycle is run from a fresh random vector orthogonal to them (their
    converged residual couplings, each below the tolerance, are dropped from the
    recurrence). If no wanted Ritz value improves on a locked one by more than its
    tolerance, the verified result is returned; otherwise the iteration continues in the
    enlarged space and is probed again at the next convergence. This costs one cycle
    (``ncv - k`` matvecs) per probe. It is skipped when ``max_iter`` leaves no cycle for it.

    **Precision.** The matvec and the Krylov basis use the dtype of ``A`` (so ``float32``
    keeps its memory and bandwidth savings); the projected eigenproblem, the restart
    rotations and the residual bookkeeping are always done in ``float64``. For ``float32``
    the attainable residual is therefore a small multiple of
    :math:`\epsilon_{32} \|\mathbf{A}\| \approx 1.2 \cdot 10^{-7} \|\mathbf{A}\|`, growing
    slowly with ``n`` (measured on random normalized Laplacians, :math:`\|\mathbf{L}\| \le 2`:
    about ``8e-7`` at ``n = 2e4`` and ``1.4e-6`` at ``n = 1e5``), so the default
    ``tol=1e-6`` is borderline in ``float32``: use ``tol >= 1e-5`` there, or ``float64``.
    With ``tol`` below the floor the solver reports non-convergence instead of returning
    silently.

    **Small problems.** If ``n <= 64`` or ``ncv >= n`` (which includes ``k`` close to ``n``
    with the default ``ncv``), the problem is solved directly with
    :func:`torch.linalg.eigh` on the dense (symmetrized, ``float64``) matrix; for a callable
    this costs ``n`` matvecs. The same convergence check is applied to the result, and
    ``method`` is ``"dense"``.

    Args:
        A (torch.Tensor or callable): The symmetric operator: a dense, COO, CSR or CSC tensor
            of shape ``[n, n]`` (``float32`` or ``float64``, any device; symmetry is assumed
            and not checked), or a callable mapping a block ``X [n, b]`` to ``A @ X [n, b]``
            (then ``n`` is required and ``dtype``/``device`` describe its inputs).
        k (int): Number of eigenpairs, ``1 <= k < n``.
        which (str, optional): ``"SA"`` (smallest algebraic) or ``"LA"`` (largest algebraic).
            (default: ``"SA"``)
        tol (float, optional): Residual tolerance of the convergence criterion above, ``> 0``.
            (default: ``1e-6``)
        max_iter (int, optional): Maximum number of Lanczos cycles (restarts + 1). If
            :obj:`None`, ``max(100, ceil(10 n / (ncv - keep)))`` where ``keep`` is the number
            of Ritz vectors kept at a restart. (default: :obj:`None`)
        ncv (int, optional): Krylov basis size (``> k``). If :obj:`None`,
            ``min(n, max(2 k + 1, k + 32))``. (default: :obj:`None`)
        seed (int, optional): Seed of the start (and breakdown) vectors. (default: ``0``)
        raise_on_failure (bool, optional): If :obj:`True`, raise
            :class:`LanczosNotConverged` (carrying the partial result in ``.result``) when
            the criterion is not met; otherwise return it with ``converged=False``.
            (default: :obj:`True`)
        probe (bool, optional): After convergence, run one probe cycle from a random
            vector orthogonal to the converged pairs to catch missed (e.g. repeated)
            eigenvalues, see above. (default: :obj:`True`)
        n (int, optional): Operator size; only (and then required) for a callable ``A``.
            (default: :obj:`None`)
        dtype (torch.dtype, optional): Working dtype for a callable ``A``.
            (default: :obj:`None`, i.e. ``torch.float64``)
        device (torch.device, optional): Device for a callable ``A``.
            (default: :obj:`None`, i.e. CPU)
        v0 (torch.Tensor, optional): Warm start, ``[n]`` or a block ``[n, p]`` (e.g. the
            eigenvectors of a slightly different operator). A block is orthonormalized and its
            columns summed, so the start vector holds every column's direction with equal
            weight (when the columns span an invariant subspace, ``p`` Lanczos steps span it).
            Ignored by the dense path. (default: :obj:`None`, a random start drawn with
            ``seed``)

    Returns:
        LanczosResult: ``eigenvalues`` :math:`(k,)`, ``eigenvectors`` :math:`(n, k)`,
        ``residual_norms`` :math:`(k,)` (dtype and device of ``A``), ``converged``,
        ``n_iter``, ``n_matvec`` and ``method``. Read the fields by name.

    Shapes:
        **input:** :math:`(n, n)` or a callable :math:`(n, b) \to (n, b)`;
        **output:** eigenvalues :math:`(k,)`, eigenvectors :math:`(n, k)`.

    Raises:
        ValueError: Bad arguments (the message names the argument and its value).
        TypeError: ``A`` is neither a tensor nor a callable.
        LanczosNotConverged: Not converged and ``raise_on_failure=True``.
    """
    op = _Operator(A, n, dtype, device)
    n = op.n
    k = _check_int("k", k)
    if not 1 <= k < n:
        raise ValueError(f"k must satisfy 1 <= k < n (n={n}), got k={k}")
    if which not in ("SA", "LA"):
        raise ValueError(f'which must be "SA" or "LA", got which={which!r}')
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (0 < tol < math.inf):
        raise ValueError(f"tol must be a positive finite float, got tol={tol!r}")
    tol = float(tol)
    if max_iter is not None:
        max_iter = _check_int("max_iter", max_iter)
        if max_iter < 1:
            raise ValueError(f"max_iter must be >= 1 or None, got max_iter={max_iter}")
    if ncv is None:
        ncv = min(n, max(2 * k + 1, k + 32))
    else:
        ncv = _check_int("ncv", ncv)
        if ncv <= k:
            raise ValueError(f"ncv must be > k (k={k}), got ncv={ncv}")
    seed = _check_int("seed", seed)
    if not isinstance(raise_on_failure, bool):
        raise ValueError(f"raise_on_failure must be a bool, got raise_on_failure={raise_on_failure!r}")
    if not isinstance(probe, bool):
        raise ValueError(f"probe must be a bool, got probe={probe!r}")

    start = None if v0 is None else _start_vector(v0, n, op.dtype, op.device)
    if n <= DENSE_MAX_N or ncv >= n:
        result, msg = _dense_solve(op, k, which, tol)
    else:
        result, msg = _thick_restart(op, k, which, tol, max_iter, ncv, seed, probe, start)
    if not result.converged and raise_on_failure:
        raise LanczosNotConverged(
            f"lanczos_eigsh did not converge (k={k}, which={which!r}, ncv={ncv}, "
            f"n_iter={result.n_iter}, n_matvec={result.n_matvec}): {msg}",
            result,
        )
    return result


def _start_vector(v0: Tensor, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """The warm-start vector of a block ``v0 [n] | [n, p]``: the sum of its orthonormalized
    (independent) columns, in the working dtype and device."""
    if not isinstance(v0, Tensor):
        raise ValueError(f"v0 must be a torch.Tensor [n] or [n, p] or None, got {type(v0).__name__}")
    V = v0.detach().to("cpu", torch.float64)
    V = V.unsqueeze(1) if V.dim() == 1 else V
    if V.dim() != 2 or V.shape[0] != n or V.shape[1] < 1:
        raise ValueError(f"v0 must have shape [n] or [n, p] with n={n}, got shape={tuple(v0.shape)}")
    if not bool(torch.isfinite(V).all()):
        raise ValueError("v0 has NaN or infinite entries")
    Qv, R = torch.linalg.qr(V)
    diag = R.diagonal().abs()
    independent = diag > 1e-10 * float(diag.max())
    if not bool(independent.any()):
        raise ValueError("v0 is zero: it gives no start direction")
    return _to(Qv[:, independent].sum(dim=1), dtype, device)


def _orthonormalize_against(
    Q: Tensor, w: Tensor
) -> tuple[Tensor, Tensor, float, float]:
    """Orthogonalize ``w`` against the rows of ``Q``: a local pass against the last two rows,
    then classical Gram--Schmidt passes against all rows until one leaves the norm above
    ``1 / sqrt(2)`` of its input ("twice is enough", Kahan--Parlett; at most three).

    In Lanczos ``w = A q_j`` lies mostly along ``q_j`` and ``q_{j-1}``: removing those first (two
    rows) leaves a residual that a full pass barely shrinks, so one full pass over the basis
    usually suffices instead of two. The full passes are what is memory-bound at scale (each
    reads every basis vector twice).

    Returns ``(w_orth, h, norm_before, norm_after)`` where ``h = Q w`` accumulated over passes.
    """
    norm_before = float(torch.linalg.vector_norm(w))
    h = torch.zeros(Q.shape[0], dtype=w.dtype, device=w.device)
    tail = Q[-2:]
    ht = torch.mv(tail, w)
    w = torch.addmv(w, tail.T, ht, alpha=-1)
    h[-tail.shape[0]:] += ht
    norm = float(torch.linalg.vector_norm(w))
    for _ in range(3):
        h2 = torch.mv(Q, w)
        w = torch.addmv(w, Q.T, h2, alpha=-1)
        h += h2
        shrunk, norm = norm, float(torch.linalg.vector_norm(w))
        if norm >= _TWICE_IS_ENOUGH * shrunk:
            break
    return w, h, norm_before, norm


def _thick_restart(
    op: _Operator,
    k: int,
    which: str,
    tol: float,
    max_iter: Optional[int],
    m: int,
    seed: int,
    probe: bool,
    start: Optional[Tensor] = None,
) -> tuple[LanczosResult, str]:
    n, wd, dev = op.n, op.dtype, op.device
    eps = torch.finfo(wd).eps
    keep = k + (m - k) // 2  # k <= keep <= m - 1
    if max_iter is None:
        max_iter = max(100, math.ceil(10 * n / (m - keep)))
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def random_vector() -> Tensor:
        return _to(torch.randn(n, generator=gen, dtype=torch.float64), wd, dev)

    # Basis stored as rows: Q[j] is the j-th Lanczos vector (contiguous per vector).
    Q = torch.empty(m + 1, n, dtype=wd, device=dev)
    H = torch.zeros(m + 1, m, dtype=torch.float64)  # projection coefficients (CPU, float64)
    v = random_vector() if start is None else start
    Q[0] = v / torch.linalg.vector_norm(v)
    j0 = 0
    anorm = 0.0  # running lower bound on ||A||
    n_iter = 0
    best_ratio = math.inf  # explicit-residual progress, to detect a rounding floor
    stalls = 0
    # (U, theta, thresholds, residuals) of a converged result while a probe cycle runs
    saved: Optional[tuple[Tensor, Tensor, Tensor, Tensor]] = None

    while True:
        n_iter += 1
        # ---- expand the basis from column j0 to m ---------------------------------------
        for j in range(j0, m):
            w = op(Q[j].unsqueeze(1)).squeeze(1)
            Qj = Q[: j + 1]
            w, h, norm_aw, beta = _orthonormalize_against(Qj, w)
            anorm = max(anorm, norm_aw)
            H[: j + 1, j] = h.cpu().double()
            if beta <= 4.0 * math.sqrt(j + 1) * eps * anorm:
                # Invariant subspace: continue with a random vector orthogonal to the basis.
                H[j + 1, j] = 0.0
                for _ in range(5):
                    r, _, _, rn = _orthonormalize_against(Qj, random_vector())
                    if rn > 0:
                        break
                Q[j + 1] = r / rn
            else:
                H[j + 1, j] = beta
                Q[j + 1] = w / beta

        # ---- Rayleigh--Ritz on T = Q^T A Q (upper triangle = computed coefficients) ------
        Hm = H[:m, :m]
        T = torch.triu(Hm) + torch.triu(Hm, 1).T
        theta, Y = torch.linalg.eigh(T)
        order = torch.arange(m) if which == "SA" else torch.arange(m - 1, -1, -1)
        beta_m = float(H[m, m - 1])
        est = (beta_m * Y[m - 1]).abs()
        want = order[:k]
        thr = _thresholds(theta[want], tol)
        anorm = max(anorm, float(theta.abs().max()))
        # Estimates below ~eps ||A|| cannot be verified in this dtype: accept them as
        # converged-looking and let the explicit check (and its stall test) decide.
        est_ok = est[want] <= torch.clamp(thr, min=_FLOOR_FACTOR * eps * anorm)

        if saved is not None:
            # This cycle was a probe: it started from a random vector orthogonal to the
            # converged pairs. If no wanted Ritz value moved past a saved one by more than
            # its tolerance, nothing was missed and the saved (verified) result stands.
            U1, theta1, thr1, res1 = saved
            gain = theta1 - theta[want] if which == "SA" else theta[want] - theta1
            if not bool((gain > thr1).any()):
                return _make_result(U1, theta1, res1, True, n_iter, op), ""
            saved = None  # found something: carry on with the enlarged search space

        if bool(est_ok.all()):
            U = (_to(Y[:, want].T, wd, dev) @ Q[:m]).T.contiguous()
            res = _explicit_residuals(op, U, theta[want])
            if bool((res <= thr).all()):
                if not probe or n_iter >= max_iter:
                    return _make_result(U, theta[want], res, True, n_iter, op), ""
                # Probe for eigenvalues the single Krylov sequence missed (e.g. further copies
                # of a repeated eigenvalue): lock the k converged pairs and run one cycle from
                # a fresh random vector orthogonal to them. Their (converged, <= tol)
                # residual couplings are dropped from the recurrence; the final answer is
                # always re-checked explicitly.
                saved = (U, theta[want].clone(), thr.clone(), res)
                Q[:k] = U.T
                r, _, _, rn = _orthonormalize_against(Q[:k], random_vector())
                Q[k] = r / rn
                H.zero_()
                idx = torch.arange(k)
                H[idx, idx] = theta[want]
                j0 = k
                continue
            ratio = float((res / thr).max())
            stalls = stalls + 1 if ratio > 0.5 * best_ratio else 0
            best_ratio = min(best_ratio, ratio)
            if stalls >= 2:
                msg = _floor_message(res, theta[want], tol, wd)
                return _make_result(U, theta[want], res, False, n_iter, op), msg

        if n_iter >= max_iter:
            U = (_to(Y[:, want].T, wd, dev) @ Q[:m]).T.contiguous()
            res = _explicit_residuals(op, U, theta[want])
            n_conv = int((est[want] <= thr).sum())
            msg = (
                f"max_iter={max_iter} Lanczos cycles reached with {n_conv} of {k} Ritz pairs "
                f"within tol * max(1, |theta|) (tol={tol:g}); largest residual "
                f"{float(res.max()):.3e}; increase max_iter or ncv"
            )
            return _make_result(U, theta[want], res, False, n_iter, op), msg

        # ---- thick restart: keep the best `keep` Ritz vectors + the residual direction ---
        kept = order[:keep]
        Yk = Y[:, kept]
        Q[:keep] = _to(Yk.T, wd, dev) @ Q[:m]
        Q[keep] = Q[m]
        H.zero_()
        idx = torch.arange(keep)
        H[idx, idx] = theta[kept]
        H[keep, :keep] = beta_m * Yk[m - 1]
        j0 = keep


def _make_result(
    U: Tensor, theta: Tensor, res: Tensor, converged: bool, n_iter: int, op: _Operator
) -> LanczosResult:
    return LanczosResult(
        eigenvalues=_to(theta, op.dtype, op.device),
        eigenvectors=U,
        residual_norms=_to(res, op.dtype, op.device),
        converged=converged,
        n_iter=n_iter,
        n_matvec=op.n_matvec,
        method="lanczos",
    )
