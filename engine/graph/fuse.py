"""Fusion of the edge signals into one weighted chunk graph (SpectRAG paper eq. 10).

.. math::
    W = \\operatorname{sym}\\Big(\\operatorname{prune}_{\\tau, k_{max}}\\big(\\sum_r \\alpha_r\\, \\operatorname{sym}(W_r)\\big)\\Big)

Each signal is first symmetrized by ``max(W_r, W_r^T)``; the weighted sum drops weights below
``tau`` and self-loops, keeps each node's ``max_degree`` strongest edges, and is symmetrized
again (an edge survives if either endpoint keeps it), so the graph has at most
``2 * max_degree * n`` stored entries: O(k_g n).

Signals are **not** min-max normalized before fusing (the public SpectRAG code does that):
every signal is already in [0, 1] by construction, and rescaling each by its own maximum
would shrink the edges of weak signals unevenly and erase edges that only one signal carries.
A single-signal edge therefore keeps ``alpha_r * w_r`` and survives when that exceeds ``tau``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from spectrag.graph.signals import top_k_per_row


def symmetrize(matrix: sp.csr_matrix) -> sp.csr_matrix:
    return matrix.maximum(matrix.T).tocsr()


@dataclass(frozen=True)
class FusedGraph:
    """The fused graph ``weights`` (symmetric CSR ``[n, n]``) and per-signal statistics."""

    weights: sp.csr_matrix
    signals: dict[str, sp.coo_matrix]  # each signal's undirected edges (upper triangle, i < j)
    signal_edges: dict[str, int]  # undirected edges each signal contributed before fusion
    signal_histograms: dict[str, list[int]]  # 10 bins over [0, 1]
    fused_histogram: list[int]
    stored: dict[str, Any] = field(default_factory=dict)  # what an index update reads (graph/stored.py)


def _histogram(values: np.ndarray) -> list[int]:
    return np.histogram(np.clip(values, 0, 1), bins=10, range=(0.0, 1.0))[0].astype(int).tolist()


def fuse_signals(
    signals: dict[str, sp.csr_matrix], alpha: dict[str, float], *, tau: float, max_degree: int
) -> FusedGraph:
    """Weighted sum of the symmetrized ``signals`` (names must be keys of ``alpha``)."""
    unknown = set(signals) - set(alpha)
    if unknown:
        raise ValueError(f"signals {sorted(unknown)} have no fusion weight; weights exist for {sorted(alpha)}")
    n = next(iter(signals.values())).shape[0]
    total = sp.csr_matrix((n, n), dtype=np.float32)
    uppers, edges, hists = {}, {}, {}
    for name, matrix in signals.items():
        sym = symmetrize(matrix)
        sym.setdiag(0)
        sym.eliminate_zeros()
        upper = sp.triu(sym, k=1).tocoo()
        uppers[name] = upper
        edges[name] = int(upper.nnz)
        hists[name] = _histogram(upper.data)
        total = total + alpha[name] * sym
    total = total.tocsr()
    total.setdiag(0)
    total.data[total.data < tau] = 0
    total.eliminate_zeros()
    fused = symmetrize(top_k_per_row(total, max_degree))
    fused.sort_indices()
    fused.data = fused.data.astype(np.float32)
    return FusedGraph(fused, uppers, edges, hists, _histogram(sp.triu(fused, k=1).data))


def signal_matrix(edges: tuple, n: int, *, symmetric: bool = True) -> sp.csr_matrix:
    """A stored signal's undirected edges ``(rows, cols, weights)`` (i < j, as under
    ``graph/signals`` and in :func:`load_graph`'s ``signals``) as float32 CSR ``[n, n]``: both
    triangles, or the upper one only with ``symmetric=False``."""
    rows, cols, w = (np.asarray(a) for a in edges)
    upper = sp.csr_matrix((w.astype(np.float32), (rows, cols)), shape=(n, n))
    return (upper + upper.T).tocsr() if symmetric else upper
