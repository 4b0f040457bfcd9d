"""Edge signals of the chunk graph (SpectRAG paper 3.2.1), each a sparse ``[n, n]`` matrix with
weights in [0, 1], built with sparse / vectorized operations (no loop over chunk pairs).

============ ===================================================================== ==========
signal       edge (i, j)                                                           weight
============ ===================================================================== ==========
semantic     j among the ``k`` nearest neighbours of i by cosine (exact, FAISS)    max(0, cos)
adjacency    consecutive chunks of one document                                    1
section      chunks of one document sharing a section path prefix of depth d,      d / max depth
             each linked to its next ``band`` fellows in the group (no cliques)
entity       shared extracted entities: cosine of IDF-weighted entity indicators   in [0, 1]
citation     link / URL / footnote / title mention from i to j                     1
utility      cosine of the mean embeddings of generated questions (kNN)           max(0, cos)
============ ===================================================================== ==========

Signals are returned as directed edge sets; :mod:`engine.graph.fuse` symmetrizes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp


def coo(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, n: int) -> sp.csr_matrix:
    """CSR ``[n, n]`` from edge arrays; duplicate edges keep their largest weight."""
    rows, cols, weights = (np.asarray(a) for a in (rows, cols, weights))
    keep = rows != cols
    rows, cols, weights = rows[keep], cols[keep], weights[keep].astype(np.float32)
    if rows.size:
        order = np.lexsort((-weights, cols, rows))  # per (row, col): largest weight first
        rows, cols, weights = rows[order], cols[order], weights[order]
        first = np.ones(rows.size, dtype=bool)
        first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        rows, cols, weights = rows[first], cols[first], weights[first]
    return sp.csr_matrix((weights, (rows, cols)), shape=(n, n))


def top_k_per_row(matrix: sp.csr_matrix, k: int) -> sp.csr_matrix:
    """Keep the ``k`` largest entries of each row (ties: smaller column), vectorized."""
    matrix = matrix.tocsr()
    matrix.sum_duplicates()
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    order = np.lexsort((matrix.indices, -matrix.data, rows))
    rank = np.arange(order.size) - matrix.indptr[rows[order]]
    keep = order[rank < k]
    return sp.csr_matrix((matrix.data[keep], (rows[keep], matrix.indices[keep])), shape=matrix.shape)


def semantic_edges(embeddings: np.ndarray, k: int, *, min_cos: float = 0.0, tile: int = 16_384) -> sp.csr_matrix:
    """Exact cosine kNN graph of L2-normalized ``embeddings [n, d]``, queried in tiles of rows."""
    import faiss

    n = embeddings.shape[0]
    index = faiss.IndexFlatIP(embeddings.shape[1])
    index.add(np.ascontiguousarray(embeddings, dtype=np.float32))
    kk = min(k + 1, n)
    rows, cols, weights = [], [], []
    for lo in range(0, n, tile):
        block = np.ascontiguousarray(embeddings[lo : lo + tile], dtype=np.float32)
        scores, ids = index.search(block, kk)  # (tile, k + 1), self usually first
        r = np.repeat(np.arange(lo, lo + len(block)), kk)
        c, w = ids.ravel(), scores.ravel()
        keep = (c >= 0) & (c != r) & (w > max(min_cos, 0.0))
        rows.append(r[keep])
        cols.append(c[keep])
        weights.append(np.minimum(w[keep], 1.0))
    return top_k_per_row(coo(np.concatenate(rows), np.concatenate(cols), np.concatenate(weights), n), k)


def adjacency_edges(doc_codes: np.ndarray) -> sp.csr_matrix:
    """Chunk i -> i + 1 when both belong to one document (chunk ids follow reading order)."""
    n = len(doc_codes)
    i = np.flatnonzero(doc_codes[1:] == doc_codes[:-1])
    return coo(i, i + 1, np.ones(i.size), n)


def _group_codes(keys: Sequence[object]) -> np.ndarray:
    codes: dict[object, int] = {}
    return np.fromiter((codes.setdefault(k, len(codes)) for k in keys), dtype=np.int64, count=len(keys))


def section_edges(doc_ids: Sequence[str], sections: Sequence[tuple[str, ...]], *, band: int = 8) -> sp.csr_matrix:
    """Chunks sharing a section path prefix of depth d, weight d / max(depth_i, depth_j).

    Within each group (same document, same prefix) every chunk links to its next ``band``
    members in chunk order, so a section of m chunks adds O(band * m) edges, not m^2.
    """
    n = len(doc_ids)
    depth = np.array([len(s) for s in sections], dtype=np.int64)
    result = sp.csr_matrix((n, n), dtype=np.float32)
    for d in range(1, int(depth.max(initial=0)) + 1):
        members = np.flatnonzero(depth >= d)
        if members.size < 2:
            continue
        group = _group_codes([(doc_ids[i], sections[i][:d]) for i in members])
        order = np.lexsort((members, group))
        members, group = members[order], group[order]
        rows, cols = [], []
        for offset in range(1, band + 1):
            same = group[offset:] == group[:-offset]
            rows.append(members[:-offset][same])
            cols.append(members[offset:][same])
        r, c = np.concatenate(rows), np.concatenate(cols)
        w = d / np.maximum(depth[r], depth[c])
        result = result.maximum(coo(r, c, w, n))
    return result.tocsr()


def entity_edges(incidence: sp.csr_matrix, idf: np.ndarray, *, top_k: int = 10, row_tile: int = 50_000) -> sp.csr_matrix:
    """Cosine of IDF-weighted entity indicator rows: ``X X^T`` with ``X = normalize(C diag(idf))``.

    Computed in row tiles (each tile's product is pruned to ``top_k`` per row before the next),
    so memory stays bounded by the tile and the frequent-entity cap of the incidence.
    """
    x = (incidence @ sp.diags(idf.astype(np.float32))).tocsr()
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    x = (sp.diags(np.where(norms > 0, 1.0 / np.maximum(norms, 1e-30), 0.0).astype(np.float32)) @ x).tocsr()
    xt = x.T.tocsr()
    parts = []
    for lo in range(0, x.shape[0], row_tile):
        block = (x[lo : lo + row_tile] @ xt).tocoo()  # (tile, n)
        rows = block.row + lo
        keep = rows != block.col
        pruned = top_k_per_row(
            sp.csr_matrix((block.data[keep], (rows[keep], block.col[keep])), shape=(x.shape[0], x.shape[0])), top_k
        )
        parts.append(pruned)
    out = sum(parts[1:], parts[0]) if parts else sp.csr_matrix((x.shape[0],) * 2)
    out.data = np.minimum(out.data, 1.0)
    return out.tocsr()


def utility_edges(question_vectors: np.ndarray, has_questions: np.ndarray, k: int) -> sp.csr_matrix:
    """kNN graph over the mean question embedding of the chunks that have questions.

    Shapes: question_vectors ``[n, d]`` (rows without questions ignored), has_questions ``[n]`` bool.
    """
    n = len(has_questions)
    idx = np.flatnonzero(has_questions)
    if idx.size < 2:
        return sp.csr_matrix((n, n), dtype=np.float32)
    vecs = question_vectors[idx]
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    sub = semantic_edges(vecs.astype(np.float32), k).tocoo()
    return coo(idx[sub.row], idx[sub.col], sub.data, n)
