"""Signal ablations: the fused chunk graph rebuilt in memory without one edge signal.

The index stores each signal's undirected edges (``graph/signals/<name>.{rows,cols,weights}.npy``,
upper triangle) beside the fused ``W``, so a variant graph is a re-fusion of the stored signals
(:func:`spectrag.graph.fuse.fuse_signals` with the index's weights, tau and degree cap) plus a new
spectrum and clusters (:func:`spectrag.graph.spectrum.spectral_coordinates`). No signal is
re-extracted, so the variant differs from the stored graph only by the dropped signal, and the
stored index is never touched. Fusing every stored signal reproduces the stored ``W`` (the same
edges; weights within float32 rounding, as the signals are stored in float32) and its clusters
(tested).
"""

from __future__ import annotations

import copy
from typing import Any

import scipy.sparse as sp

from spectrag.errors import SpectragError
from spectrag.graph.build import spectrum_of
from spectrag.graph.fuse import fuse_signals, signal_matrix
from spectrag.graph.relational import relational_graph
from spectrag.state import QueryState


def stored_signals(index) -> dict[str, sp.csr_matrix]:
    """Each stored signal as an ``[n, n]`` CSR holding its upper-triangle edges (from the
    arrays the index already maps)."""
    if index.graph is None or not index.graph.get("signals"):
        raise SpectragError(f"{index.path}: the index has no stored graph signals (built with graph.enabled = false?)")
    n = len(index.chunks)
    return {name: signal_matrix(edges, n, symmetric=False) for name, edges in index.graph["signals"].items()}


def rebuild_graph(index, drop: tuple[str, ...] = (), signals: dict[str, sp.csr_matrix] | None = None) -> dict[str, Any]:
    """The index's graph fused without the signals in ``drop``: a dict with the keys of
    :func:`spectrag.graph.build.load_graph` that :meth:`QueryState.from_index` reads (``signals``
    holds the kept signals' edges as ``(rows, cols, weights)``), plus ``facts`` (edges,
    components, spectrum report). ``signals`` reuses :func:`stored_signals`."""
    signals = stored_signals(index) if signals is None else signals
    unknown = set(drop) - set(signals)
    if unknown:
        raise SpectragError(f"cannot drop signal(s) {sorted(unknown)}: the index stores {sorted(signals)}")
    keep = {k: v for k, v in signals.items() if k not in drop}
    if not keep:
        raise SpectragError(f"dropping {sorted(drop)} leaves no edge signal")
    cfg = index.config.graph
    fused = fuse_signals(keep, cfg.signal_weights(), tau=cfg.tau, max_degree=cfg.max_degree)
    spectrum = spectrum_of(fused.weights, cfg)  # as the build: also its dtype and node order
    facts = {"dropped": list(drop), "edges": int(fused.weights.nnz // 2), "components": spectrum.components,
             "isolated_nodes": spectrum.isolated, "spectrum": spectrum.report}
    kept_edges = {name: index.graph["signals"][name] for name in keep}  # the stored (rows, cols, weights)
    relations = relational_graph(kept_edges, cfg.signal_weights(), len(index.chunks))
    return {"weights": fused.weights, "relations": relations, "coordinates": spectrum.coordinates, "eigenvalues": spectrum.eigenvalues,
            "clusters": spectrum.clusters, "signals": kept_edges, "facts": facts}


def with_graph(retriever, graph: dict[str, Any]):
    """A copy of ``retriever`` (same index and config) whose query state uses ``graph``."""
    other = copy.copy(retriever)
    other.state = QueryState.from_index(retriever.index, retriever.state.device, graph=graph)
    return other
