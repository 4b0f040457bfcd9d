"""Signal ablations: re-fusing the stored signals reproduces the stored graph (same edges,
weights within float32 rounding: the signals are stored in float32, fused in float64 at build
time); dropping one only takes weight away; the stored index is untouched."""

from __future__ import annotations

import numpy as np
import pytest

from spectrag.errors import SpectragError
from spectrag.eval.graphs import rebuild_graph, stored_signals, with_graph
from spectrag.retriever import Retriever


def test_refusing_every_signal_reproduces_the_stored_graph(sample_index):
    graph = rebuild_graph(sample_index)
    stored = sample_index.graph
    w = stored["weights"]
    assert ((graph["weights"] != 0) != (w != 0)).nnz == 0
    assert abs(graph["weights"] - w).max() <= 1e-6
    np.testing.assert_array_equal(graph["clusters"], stored["clusters"])
    # eigenvectors up to sign, within what a Lanczos residual tolerance of 1e-6 pins down
    np.testing.assert_allclose(np.abs(graph["coordinates"]), np.abs(stored["coordinates"]), atol=1e-4)


def test_dropping_a_signal_removes_its_edges_only(sample_index):
    signals = stored_signals(sample_index)
    assert {"semantic", "adjacency", "section"} <= set(signals)
    full = rebuild_graph(sample_index, signals=signals)["weights"]
    without = rebuild_graph(sample_index, ("adjacency",), signals)
    assert "adjacency" not in without["signals"] and without["facts"]["dropped"] == ["adjacency"]
    w = without["weights"]
    assert (w != w.T).nnz == 0 and w.nnz <= full.nnz and w.sum() < full.sum() - 1.0
    # an edge that remains never gained weight
    both = w.multiply(full > 0)
    assert np.all(both.data <= full[both.nonzero()].A1 + 1e-7)
    before = sample_index.graph["weights"].copy()
    retriever = Retriever(sample_index)
    other = with_graph(retriever, without)
    assert other.state.weights.nnz == w.nnz and retriever.state.weights.nnz == before.nnz
    assert other.index is retriever.index and other.config is retriever.config
    res = other.score_batch(["Who designed the Veltra Bridge?"], mode="spectral", budget=500)
    assert (res.candidates >= 0).any()


def test_unknown_or_last_signal_is_refused(sample_index):
    signals = stored_signals(sample_index)
    with pytest.raises(SpectragError, match="cannot drop signal"):
        rebuild_graph(sample_index, ("telepathy",), signals)
    with pytest.raises(SpectragError, match="leaves no edge signal"):
        rebuild_graph(sample_index, tuple(signals), signals)
