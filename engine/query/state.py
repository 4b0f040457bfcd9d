"""What the query stages read from an index, laid out once as tensors on one device.

Building this costs a copy of the embeddings and the graph arrays onto ``device``; every batch
afterwards only gathers from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.errors import SpectragError
from spectrag.graph.fuse import signal_matrix


# Signals that say *how* two chunks are related (a shared entity, a title mention, a citation,
# the same section or document, a shared question). The semantic kNN signal is left out: a
# chunk's embedding neighbours are already scored by their own cosine to the query, so its
# edges carry no evidence beyond relevance (measured: bridging over them lowers Recall@5).
NON_RELATIONAL = ("semantic",)


def relational_graph(signals: dict, alpha: dict[str, float], n: int) -> sp.csr_matrix:
    """``sum_r alpha_r sym(W_r) / sum_r alpha_r`` over the relational signals that have edges,
    in [0, 1].

    ``signals``: name -> (rows, cols, weights) undirected edges (as stored under graph/signals).
    Unlike the fused graph it is neither thresholded nor degree-capped: a single title mention
    (weight alpha_citation) is a link here. Shapes: -> symmetric CSR ``[n, n]`` float32.
    """
    # signals without edges in this corpus (e.g. no sections) do not dilute the others
    names = [name for name in signals
             if name not in NON_RELATIONAL and alpha.get(name, 0) > 0 and len(signals[name][0]) > 0]
    total = sum(alpha[name] for name in names)
    out = sp.csr_matrix((n, n), dtype=np.float32)
    for name in names:
        out = out + (alpha[name] / total) * signal_matrix(signals[name], n)
    out = out.tocsr()
    out.sum_duplicates()
    out.sort_indices()
    return out.astype(np.float32)


@dataclass
class QueryState:
    """Shapes: ``embeddings [n, d]``, ``tokens/doc_codes/clusters [n]``, ``coords [n, m]`` (rows
    L2-normalized), ``weights`` the fused graph as scipy CSR (CPU expansion), ``relations`` the
    relational graph (see :func:`relational_graph`) as scipy CSR ``[n, n]``."""

    n: int
    device: torch.device
    embeddings: torch.Tensor
    tokens: torch.Tensor
    doc_codes: torch.Tensor
    clusters: torch.Tensor
    coords: torch.Tensor | None
    weights: sp.csr_matrix | None
    relations: sp.csr_matrix | None = None
    _torch_graphs: dict = field(default_factory=dict, repr=False, compare=False)  # name -> TorchCSR, on first use

    @classmethod
    def from_index(cls, index, device: str | torch.device = "cpu", graph: dict | None = None) -> "QueryState":
        """``graph`` (the keys of ``spectrag.graph.build.load_graph``: weights, coordinates,
        clusters) replaces the index's stored graph, e.g. a graph rebuilt without one signal."""
        device = torch.device(device)
        n = len(index.chunks)
        codes: dict[str, int] = {}
        doc_codes = [codes.setdefault(c.doc_id, len(codes)) for c in index.chunks]
        graph = index.graph if graph is None else graph
        coords = clusters = weights = relations = None
        if graph is not None:
            z = torch.from_numpy(np.array(graph["coordinates"], dtype=np.float32))
            coords = (z / z.norm(dim=1, keepdim=True).clamp(min=1e-12)).to(device)
            clusters = torch.from_numpy(np.array(graph["clusters"], dtype=np.int64)).to(device)
            w = graph["weights"]
            weights = sp.csr_matrix((np.array(w.data), np.array(w.indices), np.array(w.indptr)), shape=w.shape)
            relations = relational_graph(graph.get("signals", {}), index.config.graph.signal_weights(), n)
        return cls(
            n=n,
            device=device,
            embeddings=torch.from_numpy(np.array(index.embeddings, dtype=np.float32)).to(device),
            tokens=torch.tensor([c.n_tokens for c in index.chunks], dtype=torch.int64, device=device),
            doc_codes=torch.tensor(doc_codes, dtype=torch.int64, device=device),
            clusters=clusters if clusters is not None else torch.zeros(n, dtype=torch.int64, device=device),
            coords=coords,
            weights=weights,
            relations=relations,
        )

    def torch_graph(self, name: str):
        """``weights`` or ``relations`` as a :class:`spectrag.query.expand_torch.TorchCSR` on the
        device, copied once on first use."""
        from spectrag.query.expand_torch import TorchCSR

        if name not in self._torch_graphs:
            self._torch_graphs[name] = TorchCSR.from_scipy(getattr(self, name), self.device)
        return self._torch_graphs[name]

    def require_graph(self, mode: str) -> None:
        if self.weights is None:
            raise SpectragError(
                f"mode {mode!r} needs the chunk graph, but this index was built without it "
                "(graph.enabled = false); rebuild it or use mode dense, bm25 or hybrid"
            )
