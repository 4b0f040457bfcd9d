"""The entity signal after chunks are removed and added, recomputed for the rows the edit
touches (:func:`update_entity_signal`).

The entity keys of every chunk are stored (``graph/entities.*``), so an update extracts only the
new chunks and the old ones that mention an added or removed title (the extractor adds corpus
titles, and a removed longer title uncovers a shorter one inside it). The incidence, document
frequencies, the frequency limits and the IDF weights are then recomputed for the whole corpus
(vectorized, cheap). What costs is ``X X^T``, so its rows are recomputed only where the edit
shows:

* the new chunks, and the old chunks whose keys changed;
* the chunks that had an edge to a removed chunk or to a chunk whose keys changed (their lists
  lost or may lose a member);
* the chunks holding an entity that the frequency limits now keep or drop.

Every other row keeps its stored list, with the recomputed weights of its edges to the rows
above and any of their edges that now beat its ``k``-th; its other weights keep the IDF of the
corpus they were computed on (``log(n / df)`` moved by the change of ``n`` and of the
frequencies of entities removed or added elsewhere). ``spectrag compact`` recomputes all rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from spectrag.config import GraphConfig
from spectrag.extract.entities import df_limit, incidence_from_ids
from spectrag.graph.signals import entity_operands, entity_work, tile_bounds, top_k_per_row
from spectrag.graph.stored import EntityLists
from spectrag.index.bm25_scores import first_use_order, select_tokens
from spectrag.types import Chunk

MIN_DF = 2  # entity_incidence's default: an entity in one chunk makes no edge


def merge_lists(old: EntityLists, keep: np.ndarray, replaced: dict[int, list[str]],
                new: list[list[str]]) -> EntityLists:
    """The kept chunks' stored keys (row ``r`` of the kept ones replaced by ``replaced[r]``),
    then ``new``; keys no chunk holds any more are dropped and the rest numbered by first use."""
    ids, ptr = select_tokens(np.asarray(old.ids), np.asarray(old.indptr), keep)
    n_keep = len(ptr) - 1
    column = {key: j for j, key in enumerate(old.keys)}
    keys = list(old.keys)

    def encode(lists: list[list[str]]) -> np.ndarray:
        return np.fromiter((column.setdefault(k, len(column)) for keys_ in lists for k in keys_), dtype=np.int64)

    rows_of = np.repeat(np.arange(n_keep, dtype=np.int64), np.diff(ptr))
    lengths = np.diff(ptr).copy()
    redo = np.asarray(sorted(replaced), dtype=np.int64)
    dropped = np.isin(rows_of, redo)
    extra_lists = [replaced[r] for r in redo.tolist()] + list(new)
    extra_rows = np.concatenate([np.repeat(redo, [len(replaced[r]) for r in redo.tolist()]),
                                 np.repeat(np.arange(n_keep, n_keep + len(new)), [len(x) for x in new])]).astype(np.int64)
    extra_ids = encode(extra_lists)
    keys += list(column)[len(keys):]
    lengths[redo] = [len(replaced[r]) for r in redo.tolist()]
    lengths = np.concatenate([lengths, np.asarray([len(x) for x in new], dtype=np.int64)])
    all_rows = np.concatenate([rows_of[~dropped], extra_rows])
    all_ids = np.concatenate([ids[~dropped].astype(np.int64), extra_ids])
    order = np.argsort(all_rows, kind="stable")  # kept rows keep their order; replaced ones slot in
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    used, renumbered = first_use_order(all_ids[order], len(keys))
    return EntityLists([keys[j] for j in used.tolist()], indptr, renumbered.astype(np.int32))


def _key_df(lists: EntityLists) -> np.ndarray:
    """Chunks holding each key (a key repeated within a chunk counts once). Shapes: -> ``[V]``."""
    n = len(lists)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.asarray(lists.indptr)))
    m = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, np.asarray(lists.ids, dtype=np.int64))),
                      shape=(n, len(lists.keys)))
    m.sum_duplicates()
    return np.bincount(m.indices, minlength=len(lists.keys))


def _kept(df: np.ndarray, n: int, config: GraphConfig) -> np.ndarray:
    limit = df_limit(n, max_df=config.entity_max_df, max_count=config.entity_max_count or None)
    return (df >= MIN_DF) & (df <= limit)


def status_changed_rows(old: EntityLists, new: EntityLists, config: GraphConfig) -> np.ndarray:
    """Rows of ``new`` holding a key whose kept / dropped status differs from ``old``'s."""
    old_kept = dict(zip(old.keys, _kept(_key_df(old), len(old), config).tolist()))
    new_kept = _kept(_key_df(new), len(new), config)
    flips = np.array([old_kept.get(key, False) != bool(k) for key, k in zip(new.keys, new_kept.tolist())], dtype=bool)
    if not flips.any():
        return np.zeros(0, dtype=np.int64)
    rows = np.repeat(np.arange(len(new), dtype=np.int64), np.diff(np.asarray(new.indptr)))
    return np.unique(rows[flips[np.asarray(new.ids)]])


def _neighbours(old_edges: tuple, rows_old: np.ndarray, n_old: int) -> np.ndarray:
    """Old ids with a stored edge to one of ``rows_old`` (old ids)."""
    r, c = (np.asarray(a, dtype=np.int64) for a in old_edges[:2])
    hit = np.zeros(n_old, dtype=bool)
    hit[rows_old] = True
    return np.unique(np.concatenate([r[hit[c]], c[hit[r]]]))


def update_entity_signal(
    chunks: Sequence[Chunk],
    remap: np.ndarray,
    old_lists: EntityLists,
    old_edges: tuple,
    retitled: np.ndarray,
    config: GraphConfig,
    extract,
) -> tuple[sp.csr_matrix, dict[str, Any], EntityLists]:
    """The entity signal ``[n, n]`` of ``chunks`` (the kept old chunks in order, then the new
    ones), its manifest facts and every chunk's keys. ``remap [n_old]``: old id -> new id or -1;
    ``old_lists``, ``old_edges``: the old index's keys and stored entity edges ``(rows, cols,
    weights)`` (i < j); ``retitled``: kept chunks (new ids) to extract again; ``extract(chunks)``
    -> key lists (the build's extractor with the final corpus's titles)."""
    n, n_old = len(chunks), len(remap)
    remap = np.asarray(remap, dtype=np.int64)
    keep = remap >= 0
    n_keep = int(keep.sum())
    old_of = np.flatnonzero(keep)  # new id -> old id, for the kept chunks
    retitled = np.asarray(retitled, dtype=np.int64)
    fresh = extract([chunks[i] for i in retitled.tolist()] + list(chunks[n_keep:]))
    before = old_lists.lists(old_of[retitled])
    changed = np.asarray([r for r, a, b in zip(retitled.tolist(), fresh, before) if sorted(a) != sorted(b)],
                         dtype=np.int64)
    changed_set = set(changed.tolist())
    replaced = {int(r): fresh[j] for j, r in enumerate(retitled.tolist()) if r in changed_set}
    lists = merge_lists(old_lists, keep, replaced, fresh[len(retitled):])

    removed_old = np.flatnonzero(~keep)
    touched_old = _neighbours(old_edges, np.concatenate([removed_old, old_of[changed]]), n_old)
    touched = np.concatenate([remap[touched_old][remap[touched_old] >= 0], changed, np.arange(n_keep, n),
                              status_changed_rows(old_lists, lists, config)])
    in_t = np.zeros(n, dtype=bool)
    in_t[touched] = True
    rows_t = np.flatnonzero(in_t)

    inc = incidence_from_ids(lists.indptr, lists.ids, lists.keys, max_df=config.entity_max_df, min_df=MIN_DF,
                             max_count=config.entity_max_count or None)
    x, xt = entity_operands(inc.matrix, inc.idf)
    own_u = _old_lists(old_edges, remap, n, config.entity_top_k, in_t)  # untouched rows, edges to T dropped
    kth = _kth(own_u, config.entity_top_k)
    parts_t, offers = [], []
    work = entity_work(x, xt)[rows_t]
    for lo, hi in tile_bounds(work):
        rows = rows_t[lo:hi]
        block = (x[rows] @ xt).tocoo()  # (tile, n) cosines of the recomputed rows
        r, c, v = rows[block.row], block.col.astype(np.int64), block.data
        off = r != c
        r, c, v = r[off], c[off], v[off]
        parts_t.append((r, c, v))
        offer = ~in_t[c] & (v > kth[c])  # an untouched row takes an edge that beats its k-th
        offers.append((c[offer], r[offer], v[offer]))
    cat = lambda parts, i: np.concatenate([p[i] for p in parts]) if parts else np.zeros(0)  # noqa: E731
    t_rows = top_k_per_row(sp.csr_matrix((cat(parts_t, 2).astype(np.float32), (cat(parts_t, 0), cat(parts_t, 1))),
                                         shape=(n, n)), config.entity_top_k)
    u = own_u.tocoo()
    u_rows = top_k_per_row(sp.csr_matrix(
        (np.concatenate([u.data, cat(offers, 2)]).astype(np.float32),
         (np.concatenate([u.row, cat(offers, 0)]).astype(np.int64), np.concatenate([u.col, cat(offers, 1)]).astype(np.int64))),
        shape=(n, n)), config.entity_top_k)
    signal = (t_rows + u_rows).tocsr()  # disjoint rows
    signal.data = np.minimum(signal.data, 1.0)
    facts = {"kept": len(inc.vocab), "dropped_frequent": inc.dropped_frequent, "mentions": int(inc.matrix.nnz),
             "recomputed_rows": int(rows_t.size), "extracted_again": int(len(retitled))}
    return signal, facts, lists


def _old_lists(old_edges: tuple, remap: np.ndarray, n: int, k: int, in_t: np.ndarray) -> sp.csr_matrix:
    """Each untouched row's own stored list (the ``k`` strongest of its symmetrized row),
    renumbered, without its edges to touched rows. Shapes: -> ``[n, n]``."""
    r, c, w = (np.asarray(a) for a in old_edges)
    r, c = remap[np.asarray(r, dtype=np.int64)], remap[np.asarray(c, dtype=np.int64)]
    ok = (r >= 0) & (c >= 0)
    r, c, w = r[ok], c[ok], np.asarray(w, dtype=np.float32)[ok]
    sym = sp.csr_matrix((np.concatenate([w, w]), (np.concatenate([r, c]), np.concatenate([c, r]))), shape=(n, n))
    own = top_k_per_row(sym, k).tocoo()
    keep = ~in_t[own.row] & ~in_t[own.col]
    return sp.csr_matrix((own.data[keep], (own.row[keep], own.col[keep])), shape=(n, n))


def _kth(lists: sp.csr_matrix, k: int) -> np.ndarray:
    """Each row's ``k``-th largest entry, for rows of at most ``k`` entries: the smallest of a
    full row, 0 for a row with fewer. Shapes: -> ``[n]``."""
    n = lists.shape[0]
    counts = np.diff(lists.indptr)
    low = np.full(n, np.inf, dtype=np.float32)
    np.minimum.at(low, np.repeat(np.arange(n), counts), lists.data.astype(np.float32))
    return np.where(counts >= k, low, 0.0).astype(np.float32)
