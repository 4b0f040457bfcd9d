"""spectrag.interop.to_pyg: the sample index's chunk graph as a torch_geometric Data, checked with
torch_geometric's own utilities against the stored scipy graph and signals."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.data import Data
from torch_geometric.utils import is_undirected, to_scipy_sparse_matrix

from spectrag.interop import to_pyg


@pytest.fixture(scope="module")
def data(sample_index) -> Data:
    return to_pyg(sample_index)


def test_the_fused_graph_round_trips(sample_index, data):
    w = sp.csr_matrix(sample_index.graph["weights"])
    n = len(sample_index.chunks)
    assert isinstance(data, Data) and data.num_nodes == n and data.validate(raise_on_error=True)
    back = to_scipy_sparse_matrix(data.edge_index, data.edge_weight, n).tocsr()
    assert (back != w).nnz == 0  # same pattern and weights (both float32)
    assert is_undirected(data.edge_index, data.edge_weight, n) and is_undirected(data.edge_index, data.edge_attr, n)
    assert data.num_edges == w.nnz and not data.has_self_loops()


def test_edge_attributes_are_each_signal_on_the_fused_edges(sample_index, data):
    n = len(sample_index.chunks)
    w = sp.csr_matrix(sample_index.graph["weights"])
    assert data.signal_names == sorted(sample_index.graph["signals"]) and data.edge_attr.shape == (w.nnz, len(data.signal_names))
    for j, name in enumerate(data.signal_names):
        rows, cols, vals = (np.asarray(a) for a in sample_index.graph["signals"][name])
        signal = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
        want = (signal + signal.T).multiply(w != 0).tocsr()  # the signal where the fused graph has an edge
        got = to_scipy_sparse_matrix(data.edge_index, data.edge_attr[:, j], n).tocsr()
        got.eliminate_zeros()
        assert abs(got - want).max() <= 1e-7, name
    assert (data.edge_attr > 0).any(dim=1).all()  # every fused edge comes from some signal


def test_node_features(sample_index, data):
    g = sample_index.graph
    assert torch.equal(data.x, torch.from_numpy(np.array(sample_index.embeddings)))
    assert torch.equal(data.spectral, torch.from_numpy(np.array(g["coordinates"])))
    assert torch.equal(data.cluster, torch.from_numpy(np.asarray(g["clusters"]).astype(np.int64)))
    assert [data.doc_ids[i] for i in data.doc.tolist()] == [c.doc_id for c in sample_index.chunks]
    assert data.n_tokens.tolist() == [c.n_tokens for c in sample_index.chunks]
    assert data.eigenvalues.shape == (data.spectral.shape[1],)
