"""What the query stages read from an index, laid out once as tensors on one device.

Building this costs a copy of the embeddings and the graph arrays onto ``device``; every batch
afterwards only gathers from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from engine.errors import SpectragError


@dataclass
class QueryState:
    """Shapes: ``embeddings [n, d]``, ``tokens/doc_codes/clusters [n]``, ``coords [n, m]`` (rows
    L2-normalized), ``weights`` the fused graph as scipy CSR (CPU expansion) and torch CSR."""

    n: int
    device: torch.device
    embeddings: torch.Tensor
    tokens: torch.Tensor
    doc_codes: torch.Tensor
    clusters: torch.Tensor
    coords: torch.Tensor | None
    weights: sp.csr_matrix | None

    @classmethod
    def from_index(cls, index, device: str | torch.device = "cpu") -> "QueryState":
        device = torch.device(device)
        n = len(index.chunks)
        codes: dict[str, int] = {}
        doc_codes = [codes.setdefault(c.doc_id, len(codes)) for c in index.chunks]
        graph = index.graph
        coords = clusters = weights = None
        if graph is not None:
            z = torch.from_numpy(np.array(graph["coordinates"], dtype=np.float32))
            coords = (z / z.norm(dim=1, keepdim=True).clamp(min=1e-12)).to(device)
            clusters = torch.from_numpy(np.array(graph["clusters"], dtype=np.int64)).to(device)
            w = graph["weights"]
            weights = sp.csr_matrix((np.array(w.data), np.array(w.indices), np.array(w.indptr)), shape=w.shape)
        return cls(
            n=n,
            device=device,
            embeddings=torch.from_numpy(np.array(index.embeddings, dtype=np.float32)).to(device),
            tokens=torch.tensor([c.n_tokens for c in index.chunks], dtype=torch.int64, device=device),
            doc_codes=torch.tensor(doc_codes, dtype=torch.int64, device=device),
            clusters=clusters if clusters is not None else torch.zeros(n, dtype=torch.int64, device=device),
            coords=coords,
            weights=weights,
        )

    def require_graph(self, mode: str) -> None:
        if self.weights is None:
            raise SpectragError(
                f"mode {mode!r} needs the chunk graph, but this index was built without it "
                "(graph.enabled = false); rebuild it or use mode dense, bm25 or hybrid"
            )
