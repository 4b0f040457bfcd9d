"""Each chunk's nearest neighbours by cosine as a sorted list with a reserve (``graph/knn.*``),
and their exact update when chunks are removed and added.

The semantic signal keeps each row's ``k`` nearest; the index also stores the next
:data:`KNN_RESERVE` (``K = k + KNN_RESERVE`` per row), sorted by float64 score, then smaller id.
A stored list is always a *prefix* of the row's exact order over the current chunks: a chunk
outside it scores no higher than its last entry. That survives both edits:

* removing chunks takes entries out of a list; what is left is a prefix of the survivors'
  order. While a row keeps at least ``k`` entries its new ``k`` nearest are read off the list,
  without a search (a row that lost more is searched again, against all chunks);
* adding chunks: each old row's nearest new chunks are searched (``K`` of them, against an
  index of the new vectors only) and merged with its list; the merge is a prefix down to the
  larger of the two lists' last scores (below it a chunk of either side may be missing).

So the kNN graph after any sequence of edits is the one a build of the final corpus finds, at
a cost proportional to the edited rows: ``O(m n d)`` for ``m`` added chunks (the rebuild's is
``O(n^2 d)``) and a search only for the rows that lost more than the reserve.
(Exact ties in float64, e.g. duplicate chunks, at a list's cut may resolve differently.)
Shapes: ``ids [n, K]`` int64 (``-1`` past a list's end), ``scores [n, K]`` float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spectrag.graph.signals import KNN_MARGIN, knn_index, top_k_per_row
from spectrag.index.dense import TIE_TOL, exact_search, rescore

#: neighbours kept per row beyond ``k``, for removals to consume before a row needs a search
KNN_RESERVE = 8


@dataclass(frozen=True)
class NeighbourLists:
    """Sorted neighbour lists. Shapes: ``ids [n, K]`` int64, -1 padded at the end of a row;
    ``scores [n, K]`` float32 (the float64 cosine rounded), 0 where ``ids`` is -1."""

    ids: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def lengths(self) -> np.ndarray:
        return (np.asarray(self.ids) >= 0).sum(axis=1)


def _left(ids: np.ndarray, scores: np.ndarray, valid: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Valid entries moved to the front of each row, order kept; cut or padded to ``width``."""
    order = np.argsort(~valid, axis=1, kind="stable")
    ids = np.where(np.take_along_axis(valid, order, 1), np.take_along_axis(ids, order, 1), -1)
    scores = np.where(ids >= 0, np.take_along_axis(scores, order, 1), 0).astype(np.float32)
    pad = width - ids.shape[1]
    if pad > 0:
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)))
    return ids[:, :width], scores[:, :width]


def search_lists(index, vectors: np.ndarray, rows: np.ndarray, width: int, *, min_cos: float = 0.0,
                 offset: int = 0, tile: int = 16_384) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``width`` nearest entries of ``index`` (which holds ``vectors[offset:]``) to
    each row ``rows [B]`` of ``vectors [n, d]``, by float64 score then smaller id
    (:func:`spectrag.index.dense.exact_search`): no self, cosine above ``min_cos`` (and 0) as
    rounded to float32. Shapes: -> ``ids [B, width]`` (global ids), ``scores [B, width]``."""
    out_ids = np.full((len(rows), width), -1, dtype=np.int64)
    out_scores = np.zeros((len(rows), width), dtype=np.float32)
    base = vectors[offset:]
    want = min(width + 1, index.ntotal)  # + 1: the row itself
    for lo in range(0, len(rows), tile):
        part = np.asarray(rows[lo : lo + tile])
        block = np.ascontiguousarray(vectors[part], dtype=np.float32)
        exact, ids = exact_search(index, base, block, want, margin=KNN_MARGIN)  # (b, want)
        ids = np.where(ids >= 0, ids + offset, -1)
        w = exact.astype(np.float32)
        valid = (ids >= 0) & (ids != part[:, None]) & (w > max(min_cos, 0.0))
        out_ids[lo : lo + len(part)], out_scores[lo : lo + len(part)] = _left(ids, np.minimum(w, 1.0), valid, width)
    return out_ids, out_scores


def lists_signal(lists: NeighbourLists, k: int) -> sp.csr_matrix:
    """The semantic signal ``[n, n]``: each row's first ``k`` entries (what
    :func:`spectrag.graph.signals.semantic_edges` keeps), as canonical CSR (a list holds no self
    and no repeated id, so no deduplication and no cut are needed)."""
    n = len(lists)
    ids, scores = np.asarray(lists.ids)[:, :k], np.asarray(lists.scores)[:, :k]
    valid = ids >= 0
    rows = np.repeat(np.arange(n, dtype=np.int64), valid.sum(axis=1))
    out = sp.csr_matrix((scores[valid].astype(np.float32), (rows, ids[valid])), shape=(n, n))
    out.sum_duplicates()  # sorts each row's columns
    return out


def semantic_lists(embeddings: np.ndarray, k: int, *, reserve: int = KNN_RESERVE, min_cos: float = 0.0,
                   method: str = "exact", nlist: int = 0, nprobe: int = 8, seed: int = 0,
                   tile: int = 16_384, device=None) -> tuple[sp.csr_matrix, NeighbourLists]:
    """The semantic signal of ``embeddings [n, d]`` (as :func:`~spectrag.graph.signals.semantic_edges`
    finds it: the same search, the first ``k`` entries) and the lists of ``k + reserve``.
    ``device``: None (FAISS on the CPU) or a torch device for the exact search
    (:func:`~spectrag.graph.signals.knn_index`: the same lists)."""
    n = embeddings.shape[0]
    index = knn_index(embeddings, method, nlist=nlist, nprobe=nprobe, seed=seed, tile=tile, device=device)
    ids, scores = search_lists(index, embeddings, np.arange(n), k + reserve, min_cos=min_cos, tile=tile)
    lists = NeighbourLists(ids, scores)
    return lists_signal(lists, k), lists


def lists_from_signal(signal: sp.csr_matrix, k: int) -> NeighbourLists:
    """Each row's own ``k`` nearest from a stored symmetrized kNN signal (no reserve), for an
    index written before the lists were stored: row ``i`` of ``max(S, S^T)`` holds ``i``'s own
    list plus the rows that have ``i`` in theirs, which are no nearer, so its ``k`` strongest
    entries are its list (ties: smaller id)."""
    own = top_k_per_row(sp.csr_matrix(signal), k)
    n = own.shape[0]
    counts = np.diff(own.indptr)
    rows = np.repeat(np.arange(n), counts)
    order = np.lexsort((own.indices, -own.data, rows))  # per row: score desc, id asc
    slot = np.arange(own.nnz) - own.indptr[rows[order]]
    ids = np.full((n, k), -1, dtype=np.int64)
    scores = np.zeros((n, k), dtype=np.float32)
    ids[rows[order], slot] = own.indices[order]
    scores[rows[order], slot] = own.data[order]
    return NeighbourLists(ids, scores)


def update_lists(old: NeighbourLists, remap: np.ndarray, vectors: np.ndarray, index, k: int, *,
                 reserve: int = KNN_RESERVE, min_cos: float = 0.0, tile: int = 16_384) -> tuple[NeighbourLists, int]:
    """The lists of the chunks ``vectors [n, d]`` (the kept old chunks in order, then the new
    ones) from the old chunks' lists. ``remap [n_old]``: each old chunk's new id, -1 when
    removed; ``index``: a FAISS inner-product index of all ``vectors``. Returns the lists
    (``k + reserve`` wide) and how many old rows were searched again."""
    width = k + reserve
    n = vectors.shape[0]
    remap = np.asarray(remap, dtype=np.int64)
    kept_rows = np.flatnonzero(remap >= 0)
    n_keep = kept_rows.size
    if not np.array_equal(remap[kept_rows], np.arange(n_keep)):
        raise ValueError("remap must number the kept chunks 0 .. n_keep - 1 in their old order")
    old_ids = np.asarray(old.ids)[kept_rows]
    mapped = np.where(old_ids >= 0, remap[np.maximum(old_ids, 0)], -1)
    lost = ((old_ids >= 0) & (mapped < 0)).any(axis=1)
    ids, scores = _left(mapped, np.asarray(old.scores)[kept_rows], mapped >= 0, width)
    length = (ids >= 0).sum(axis=1)
    cut = np.zeros(n_keep, dtype=bool)  # the merge dropped entries it could not vouch for
    if n > n_keep and n_keep:  # merge each old row's nearest new chunks
        new_index = knn_index(vectors[n_keep:], "exact", tile=tile)
        rows = _near_new(new_index, vectors[:n_keep], scores, length, width, min_cos, tile)
        cand, _ = search_lists(new_index, vectors, rows, width, min_cos=min_cos, offset=n_keep, tile=tile)
        both = np.concatenate([ids[rows], cand], axis=1)
        exact, merged = rescore(vectors, vectors[rows], both, both.shape[1])  # float64, sorted
        # below the larger of the two lists' last scores a chunk of either side may be missing; a
        # new-side list shorter than ``width`` holds every new chunk above the cosine floor
        floor = np.maximum(_score_of(exact, merged, _last(ids[rows])),
                           np.where((cand >= 0).sum(axis=1) == width, _score_of(exact, merged, _last(cand)), -np.inf))
        w = exact.astype(np.float32)
        above = (merged >= 0) & (w > max(min_cos, 0.0))
        valid = above & (exact >= floor[:, None])
        cut[rows] = (above & ~valid).any(axis=1)
        ids[rows], scores[rows] = _left(merged, np.minimum(w, 1.0), valid, width)
        length = (ids >= 0).sum(axis=1)
    redo = np.flatnonzero((length < min(k, n - 1)) & (lost | cut))
    if redo.size:
        ids[redo], scores[redo] = search_lists(index, vectors, redo, width, min_cos=min_cos, tile=tile)
    new_rows = np.arange(n_keep, n)
    new_ids, new_scores = search_lists(index, vectors, new_rows, width, min_cos=min_cos, tile=tile)
    return NeighbourLists(np.vstack([ids, new_ids]), np.vstack([scores, new_scores])), int(redo.size)


def _near_new(new_index, queries: np.ndarray, scores: np.ndarray, length: np.ndarray, width: int, min_cos: float,
              tile: int) -> np.ndarray:
    """The old rows a new chunk may enter: whose best new chunk (a plain FAISS search) scores
    within :data:`~spectrag.index.dense.TIE_TOL` of their last entry or above it, or whose list
    has room and a new chunk above the cosine floor. The others keep their lists as they are,
    which saves re-scoring every row in float64."""
    best = np.empty(len(queries), dtype=np.float32)
    for lo in range(0, len(queries), tile):
        best[lo : lo + tile] = new_index.search(np.ascontiguousarray(queries[lo : lo + tile], dtype=np.float32), 1)[0][:, 0]
    last = scores[np.arange(len(scores)), np.maximum(length - 1, 0)]
    room = length < width
    return np.flatnonzero((best > max(min_cos, 0.0) - TIE_TOL) & (room | (best >= last - TIE_TOL)))


def _last(ids: np.ndarray) -> np.ndarray:
    """Each row's last listed id (-1 for an empty row)."""
    return ids[np.arange(ids.shape[0]), np.maximum((ids >= 0).sum(axis=1) - 1, 0)]


def _score_of(exact: np.ndarray, ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The score ``exact`` holds for id ``wanted[b]`` in row ``b`` of ``ids`` (-inf if absent)."""
    hit = (ids == wanted[:, None]) & (wanted[:, None] >= 0)
    return np.where(hit, exact, -np.inf).max(axis=1)
