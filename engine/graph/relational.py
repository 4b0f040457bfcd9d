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


def specific_citations(edges: tuple, chunk_specificity: np.ndarray, n: int, min_specificity: float) -> sp.csr_matrix:
    """The citation signal's edges (links, footnotes, title mentions; undirected ``(rows, cols,
    weights)`` as stored) between chunks whose documents' titles are both at least
    ``min_specificity`` specific (:func:`spectrag.seed.titles.title_specificity`), so that a
    mention of "Settings" or "Installation" in a documentation corpus links nothing. What the
    best candidates of a query vouch for along (:mod:`spectrag.rescore.bridge`). Shapes:
    ``chunk_specificity [n]`` -> symmetric CSR ``[n, n]`` float32 (weights 1 kept as stored)."""
    rows, cols, w = (np.asarray(a) for a in edges)
    keep = np.minimum(chunk_specificity[rows], chunk_specificity[cols]) >= min_specificity if len(rows) else rows > 0
    return signal_matrix((rows[keep], cols[keep], w[keep]), n)
