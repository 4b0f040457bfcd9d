"""The chunk graph of an index as a ``torch_geometric.data.Data``, to train GNN retrievers on it.

Nodes are chunks (node ``i`` = chunk id ``i``); edges are the fused graph ``W`` in both directions
(undirected, as PyG stores it). Needs ``torch-geometric`` (``pip install torch==2.13.0
'spectrag[pyg]'``: it depends on no particular torch build, so the pinned one stays).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.errors import SpectragError


def _signal_on_edges(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, keys: np.ndarray, n: int) -> np.ndarray:
    """One signal's weight on each fused edge (0 where the signal has none). ``rows, cols`` are
    its undirected edges (i < j); ``keys`` the fused edges as ``row * n + col``, sorted."""
    if len(rows) == 0:
        return np.zeros(len(keys), np.float32)
    rows, cols = rows.astype(np.int64), cols.astype(np.int64)
    sig = np.concatenate([rows * n + cols, cols * n + rows])  # both directions
    val = np.concatenate([weights, weights]).astype(np.float32)
    order = np.argsort(sig, kind="stable")
    sig, val = sig[order], val[order]
    pos = np.minimum(np.searchsorted(sig, keys), len(sig) - 1)
    return np.where(sig[pos] == keys, val[pos], 0.0).astype(np.float32)

def fused_edges(index) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The fused graph's directed edges ``src, dst [E]`` (sorted by source, then target), their
    weights ``[E]`` and each signal's weight on them ``[E, S]``, and the signal names ``[S]``."""
    graph = index.graph
    if graph is None:
        raise SpectragError(f"{index.path}: the index has no chunk graph (built with graph.enabled = false)")
    w = sp.csr_matrix(graph["weights"])
    w.sort_indices()
    n = w.shape[0]
    coo = w.tocoo()
    src, dst = coo.row.astype(np.int64), coo.col.astype(np.int64)
    keys = src * n + dst  # sorted: CSR rows in order, sorted columns
    names = sorted(graph["signals"])
    attr = np.zeros((len(keys), len(names)), np.float32)
    for j, name in enumerate(names):
        attr[:, j] = _signal_on_edges(*graph["signals"][name], keys, n)
    return src, dst, coo.data.astype(np.float32), attr, names


def to_pyg(index):
    """``index``'s chunk graph as ``torch_geometric.data.Data``.

    Attributes (``n`` chunks, ``E`` directed edges = twice the undirected fused edges, ``S``
    signals, ``d`` embedding and ``m`` spectral dimensions):

    - ``x [n, d]`` float32: the chunk embeddings (L2-normalized);
    - ``edge_index [2, E]`` int64, sorted by source then target; ``edge_weight [E]``: the fused
      weight ``W = sum_r alpha_r W_r`` after threshold and degree cap;
    - ``edge_attr [E, S]`` float32: each signal's own weight in ``[0, 1]`` on that edge (0 where the
      signal has none), columns named by ``signal_names``;
    - ``spectral [n, m]`` float32: the Laplacian spectral coordinates (the smallest non-trivial
      eigenvectors of ``L_sym``; what PyG's ``AddLaplacianEigenvectorPE`` would add) and
      ``eigenvalues [m]``;
    - ``cluster [n]`` int64: the spectral cluster of each chunk; ``doc [n]`` int64: its document
      (index into ``doc_ids``); ``n_tokens [n]`` int64.
    """
    try:
        from torch_geometric.data import Data  # the `pyg` extra
    except ImportError as exc:
        raise ImportError("to_pyg needs torch-geometric: pip install torch==2.13.0 'spectrag[pyg]'") from exc
    src, dst, weight, attr, names = fused_edges(index)
    graph = index.graph
    doc_ids = list(dict.fromkeys(c.doc_id for c in index.chunks))
    code = {d: i for i, d in enumerate(doc_ids)}
    data = Data(
        x=torch.from_numpy(np.array(index.embeddings, dtype=np.float32)),
        edge_index=torch.from_numpy(np.stack([src, dst])),
        edge_weight=torch.from_numpy(weight),
        edge_attr=torch.from_numpy(attr),
        num_nodes=len(index.chunks),
    )
    data.signal_names = names
    data.spectral = torch.from_numpy(np.array(graph["coordinates"], dtype=np.float32))
    data.eigenvalues = torch.from_numpy(np.array(graph["eigenvalues"], dtype=np.float64))
    data.cluster = torch.from_numpy(np.array(graph["clusters"], dtype=np.int64))
    data.doc = torch.tensor([code[c.doc_id] for c in index.chunks], dtype=torch.int64)
    data.doc_ids = doc_ids
    data.n_tokens = torch.tensor([c.n_tokens for c in index.chunks], dtype=torch.int64)
    return data
