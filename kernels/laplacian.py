"""Symmetric normalized graph Laplacian of a sparse weighted adjacency matrix."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

__all__ = ["degree_vector", "normalized_laplacian"]

_SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr)
_FLOAT_DTYPES = (torch.float32, torch.float64)


def _validated_coo(weights: Tensor, check_symmetry: bool = False) -> Tensor:
    """Validate ``weights`` and return it as a coalesced COO tensor."""
    if not isinstance(weights, Tensor):
        raise TypeError(f"weights must be a torch sparse tensor, got {type(weights).__name__}")
    if weights.layout not in _SPARSE_LAYOUTS:
        raise ValueError(
            "weights must be a sparse COO or CSR tensor (torch.sparse_coo / torch.sparse_csr), "
            f"got layout={weights.layout}"
        )
    if weights.dim() != 2:
        raise ValueError(
            f"weights must be 2-D [n, n] (no batch or dense dimensions), got shape={tuple(weights.shape)}"
        )
    n, n_cols = weights.shape
    if n != n_cols:
        raise ValueError(f"weights must be square [n, n], got shape={tuple(weights.shape)}")
    if weights.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"weights must have dtype float32 or float64, got dtype={weights.dtype}")

    coo = weights.to_sparse_coo() if weights.layout == torch.sparse_csr else weights
    coo = coo.coalesce()  # sums duplicate entries of an uncoalesced COO input
    values = coo.values()
    if values.numel() > 0:
        bad = torch.isnan(values)
        if bool(bad.any()):
            pos = int(bad.nonzero()[0, 0])
            i, j = (int(t) for t in coo.indices()[:, pos])
            raise ValueError(f"weights must not contain NaN, got weights[{i}, {j}]=nan")
        bad = values < 0
        if bool(bad.any()):
            pos = int(bad.nonzero()[0, 0])
            i, j = (int(t) for t in coo.indices()[:, pos])
            raise ValueError(
                f"weights must be non-negative, got weights[{i}, {j}]={values[pos].item()!r} "
                f"({int(bad.sum())} negative entries in total)"
            )
        bad = torch.isinf(values)
        if bool(bad.any()):
            pos = int(bad.nonzero()[0, 0])
            i, j = (int(t) for t in coo.indices()[:, pos])
            raise ValueError(f"weights must be finite, got weights[{i}, {j}]={values[pos].item()!r}")
    if check_symmetry:
        diff = (coo - coo.t()).coalesce().values()
        if diff.numel() > 0:
            scale = values.abs().max() if values.numel() > 0 else diff.new_zeros(())
            max_diff = diff.abs().max()
            if bool(max_diff > 8 * torch.finfo(weights.dtype).eps * scale):
                raise ValueError(
                    f"weights must be symmetric, got max |W - W^T| = {max_diff.item():.3e}"
                )
    return coo


def degree_vector(weights: Tensor) -> Tensor:
    r"""Weighted degree (row sum) of a sparse adjacency matrix.

    .. math::
        d_i = \sum_{j} W_{ij}

    A self-loop :math:`W_{ii}` is counted once in :math:`d_i`.

    Args:
        weights (torch.Tensor): Non-negative sparse adjacency matrix :math:`\mathbf{W}`
            (``torch.sparse_coo`` or ``torch.sparse_csr``, ``float32`` or ``float64``,
            any device). Duplicate COO entries are summed.

    Returns:
        torch.Tensor: Dense degree vector :math:`\mathbf{d}` with the dtype and device of
        ``weights``.

    Shapes:
        **input:** :math:`(n, n)` sparse, **output:** :math:`(n,)` dense.

    Raises:
        ValueError: If ``weights`` is not a square 2-D sparse floating-point tensor, or if it
            contains negative, NaN or infinite entries (the message names the offending
            entry and its value).
    """
    coo = _validated_coo(weights)
    n = coo.shape[0]
    deg = torch.zeros(n, dtype=coo.dtype, device=coo.device)
    return deg.index_add_(0, coo.indices()[0], coo.values())


def normalized_laplacian(weights: Tensor, *, check_symmetry: bool = False) -> Tensor:
    r"""Symmetric normalized Laplacian of a weighted undirected graph.

    .. math::
        \mathbf{L}_{\mathrm{sym}} = \mathbf{I} - \mathbf{D}^{-1/2} \mathbf{W} \mathbf{D}^{-1/2},
        \qquad D_{ii} = d_i = \sum_j W_{ij},

    with the convention :math:`d_i^{-1/2} = 0` for isolated nodes (:math:`d_i = 0`), whose row
    (and column) of :math:`\mathbf{L}_{\mathrm{sym}}` is therefore the identity row:
    :math:`L_{ii} = 1` and nothing else is stored.

    **Self-loops** are handled exactly by the formula above: :math:`W_{ii}` counts once in
    the degree :math:`d_i` and gives :math:`L_{ii} = 1 - W_{ii} / d_i` (so a node whose only
    edge is a self-loop has :math:`L_{ii} = 0`). The result stays symmetric positive
    semi-definite with spectrum in :math:`[0, 2]`, since
    :math:`\mathbf{L}_{\mathrm{sym}} = \mathbf{D}^{-1/2} (\mathbf{D} - \mathbf{W})
    \mathbf{D}^{-1/2}` and the self-loop cancels in :math:`\mathbf{D} - \mathbf{W}`.
    (``scipy.sparse.csgraph.laplacian(normed=True)`` instead *ignores* the diagonal of
    :math:`\mathbf{W}`; both agree when there are no self-loops.)

    Explicitly stored zero weights are dropped; the diagonal of the result is always stored
    (all ``n`` entries), even where it is zero. Duplicate COO entries are summed (and the
    validation applies to the sums).

    Args:
        weights (torch.Tensor): Symmetric, non-negative sparse adjacency matrix
            :math:`\mathbf{W}` (``torch.sparse_coo`` or ``torch.sparse_csr``, ``float32`` or
            ``float64``, any device).
        check_symmetry (bool, optional): If set to :obj:`True`, verify
            :math:`\mathbf{W} = \mathbf{W}^\top` (up to rounding) and raise otherwise; this
            costs a sparse transpose. Symmetry is assumed, not checked, when :obj:`False`.
            (default: :obj:`False`)

    Returns:
        torch.Tensor: :math:`\mathbf{L}_{\mathrm{sym}}` as a ``torch.sparse_csr`` tensor with
        the dtype and device of ``weights`` (sorted column indices in each row).

    Shapes:
        **input:** :math:`(n, n)` sparse, **output:** :math:`(n, n)` sparse CSR.

    Raises:
        ValueError: If ``weights`` is not a square 2-D sparse ``float32``/``float64`` tensor, or
            contains negative, NaN or infinite entries, or (with ``check_symmetry=True``) is
            not symmetric. The message names the problem and the offending value.

    Example:
        >>> i = torch.tensor([[0, 1], [1, 0]])
        >>> W = torch.sparse_coo_tensor(i, torch.ones(2), (3, 3))
        >>> normalized_laplacian(W).to_dense()
        tensor([[ 1., -1.,  0.],
                [-1.,  1.,  0.],
                [ 0.,  0.,  1.]])
    """
    coo = _validated_coo(weights, check_symmetry=check_symmetry)
    n = coo.shape[0]
    dtype, device = coo.dtype, coo.device
    index = coo.indices()
    values = coo.values()

    deg = torch.zeros(n, dtype=dtype, device=device).index_add_(0, index[0], values)
    inv_sqrt = torch.where(deg > 0, deg.clamp_min(torch.finfo(dtype).tiny).rsqrt(), torch.zeros_like(deg))

    row, col = index[0], index[1]
    # s_i * s_j first (commutative), so that L is bitwise symmetric when W is.
    scaled = values * (inv_sqrt[row] * inv_sqrt[col])

    # Diagonal: 1 - W_ii / d_i (W_ii = 0 when there is no self-loop; isolated rows give 1).
    diag = torch.ones(n, dtype=dtype, device=device)
    is_loop = row == col
    loop_rows = row[is_loop]
    diag.index_add_(0, loop_rows, -(values[is_loop] / deg[loop_rows]))

    keep = (~is_loop) & (values != 0)
    arange = torch.arange(n, device=device)
    rows = torch.cat([row[keep], arange])
    cols = torch.cat([col[keep], arange])
    vals = torch.cat([-scaled[keep], diag])

    lap = torch.sparse_coo_tensor(
        torch.stack([rows, cols]), vals, (n, n), check_invariants=False
    ).coalesce()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return lap.to_sparse_csr()


def block_laplacian(blocks: torch.Tensor) -> torch.Tensor:
    """``I - D^-1/2 W D^-1/2`` per block; degree-0 nodes (and padding) get an identity row.

    Shapes: ``[B, P, P]`` -> ``[B, P, P]``.
    """
    deg = blocks.sum(dim=2)
    inv = torch.where(deg > 0, deg.clamp(min=1e-30).rsqrt(), torch.zeros_like(deg))
    eye = torch.eye(blocks.shape[1], dtype=blocks.dtype, device=blocks.device)
    return eye - inv[:, :, None] * blocks * inv[:, None, :]
