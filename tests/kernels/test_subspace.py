"""The warm-started block eigensolver (spectrag.kernels.subspace) against numpy.linalg.eigh and
scipy's eigsh, on the ``device`` fixture's devices (float64).

Tolerances: started from a block near the wanted eigenvectors and run to ``tol = 1e-9``, the
eigenvalues match eigh to 1e-9 and the projector onto the wanted subspace to 1e-7. For any
run, the reported residuals are the explicit ``||A x_i - theta_i x_i||`` (to 1e-10), and each
Ritz value lies within the residual norm of the matching true eigenvalue when the start block
spans the low modes (the backward-error statement of the module docstring)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import torch

from spectrag.kernels.subspace import subspace_eigsh


def gapped_operator(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A symmetric ``[n, n]`` matrix with ``k`` small eigenvalues well below the rest, its
    eigenvalues and eigenvectors."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    values = np.concatenate([np.sort(rng.uniform(0.0, 0.3, k)), np.sort(rng.uniform(0.6, 2.0, n - k))])
    return (q * values) @ q.T, values, q


def operator(a: np.ndarray, device):
    t = torch.from_numpy(a).to(device)
    return lambda x: t @ x


def test_a_near_start_converges_to_eigh(device):
    a, values, q = gapped_operator(120, 6, 0)
    rng = np.random.default_rng(1)
    x0 = np.hstack([q[:, :6] + 0.05 * rng.standard_normal((120, 6)), rng.standard_normal((120, 4))])
    r = subspace_eigsh(operator(a, device), torch.from_numpy(x0).to(device), 6, tol=1e-9, max_iter=30, depth=2)
    assert r.converged and r.eigenvectors.device.type == device.type
    np.testing.assert_allclose(r.eigenvalues.cpu().numpy(), values[:6], atol=1e-9)
    v = r.eigenvectors.cpu().numpy()
    np.testing.assert_allclose(v.T @ v, np.eye(6), atol=1e-10)
    assert np.linalg.norm(v @ v.T - q[:, :6] @ q[:, :6].T, 2) <= 1e-7


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_residuals_are_explicit_and_bound_the_eigenvalue_error(device, depth):
    a, values, q = gapped_operator(90, 5, 2)
    rng = np.random.default_rng(3)
    x0 = np.hstack([q[:, :5] + 0.02 * rng.standard_normal((90, 5)), rng.standard_normal((90, 3))])
    r = subspace_eigsh(operator(a, device), torch.from_numpy(x0).to(device), 5, tol=1e-14, max_iter=1, depth=depth)
    assert not r.converged and r.n_iter == 1 and r.n_matvec == (depth + 1) * 8
    v, theta = r.eigenvectors.cpu().numpy(), r.eigenvalues.cpu().numpy()
    np.testing.assert_allclose(np.linalg.norm(a @ v - v * theta, axis=0), r.residual_norms.cpu().numpy(), atol=1e-10)
    assert (np.abs(theta - values[:5]) <= r.residual_norms.cpu().numpy() + 1e-12).all()
    assert (theta >= values[:5] - 1e-12).all()  # Ritz values from above (Cauchy interlacing)


def test_more_steps_never_worse_on_a_sparse_laplacian():
    """On a graph Laplacian (scipy eigsh as the reference), the residual after two restarts is
    no larger than after one, and the eigenvalues approach eigsh's."""
    rng = np.random.default_rng(4)
    n, blocks = 400, 8
    labels = rng.integers(0, blocks, n)
    p = np.where(labels[:, None] == labels[None, :], 0.08, 0.004)
    adj = np.triu(rng.random((n, n)) < p, 1).astype(float)
    w = sp.csr_matrix(adj + adj.T)
    deg = np.asarray(w.sum(1)).ravel()
    d = sp.diags(1 / np.sqrt(np.maximum(deg, 1e-12)))
    lap = (sp.eye(n) - d @ w @ d).toarray()
    values = np.sort(sla.eigsh(sp.csr_matrix(lap), k=7, which="SA", tol=1e-12)[0])
    start = np.linalg.eigh(lap + 0.05 * np.diag(rng.standard_normal(n)))[1][:, :7]
    runs = [subspace_eigsh(operator(lap, torch.device("cpu")), torch.from_numpy(start), 7, tol=1e-14, max_iter=it,
                           depth=1) for it in (1, 2)]
    assert runs[1].residual_norms.max() <= runs[0].residual_norms.max() + 1e-12
    assert np.abs(runs[1].eigenvalues.numpy() - values).max() <= np.abs(runs[0].eigenvalues.numpy() - values).max() + 1e-12


def test_bad_input_is_named():
    a = operator(np.eye(5), torch.device("cpu"))
    with pytest.raises(ValueError, match=r"b >= k >= 1"):
        subspace_eigsh(a, torch.ones(5, 2, dtype=torch.float64), 3, tol=1e-6)
    with pytest.raises(ValueError, match="NaN"):
        subspace_eigsh(a, torch.full((5, 2), float("nan"), dtype=torch.float64), 1, tol=1e-6)
    with pytest.raises(ValueError, match="depth must be >= 0"):
        subspace_eigsh(a, torch.ones(5, 2, dtype=torch.float64), 1, tol=1e-6, depth=-1)
