"""The relational graph: the chunk graph bridging walks (:mod:`spectrag.rescore.bridge`), built
at index time from the stored signals and saved beside the fused graph."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

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
