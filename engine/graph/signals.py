"""Edge signals of the chunk graph (SpectRAG paper 3.2.1), each a sparse ``[n, n]`` matrix with
weights in [0, 1], built with sparse / vectorized operations (no loop over chunk pairs).

============ ===================================================================== ==========
signal       edge (i, j)                                                           weight
============ ===================================================================== ==========
semantic     j among the ``k`` nearest neighbours of i by cosine (FAISS: exact, or  max(0, cos)
             IVF above ``GraphConfig.knn_exact_max_n`` chunks)
adjacency    consecutive chunks of one document                                    1
section      chunks of one document sharing a section path prefix of depth d,      d / max depth
             each linked to its next ``band`` fellows in the group (no cliques)
entity       shared extracted entities: cosine of IDF-weighted entity indicators   in [0, 1]
citation     link / URL / footnote / title mention from i to j                     1
utility      cosine of the mean embeddings of generated questions (kNN)           max(0, cos)
============ ===================================================================== ==========

Signals are returned as directed edge sets; :mod:`spectrag.graph.fuse` symmetrizes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from spectrag.index.dense import TorchScan, exact_search, load_faiss
from spectrag.kernels.screen import ScreenedSearch, native_bf16


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
    """Keep the ``k`` largest entries of each row (ties: smaller column), vectorized.

    Only rows with more than ``k`` entries are sorted. For non-negative float32 weights (every
    signal here) the sort is one stable argsort of an int64 key ``row << 31 | (bits(+inf) -
    bits(w))`` (float32 bit patterns order like the values), over entries already in column
    order; other dtypes use a three-key lexsort. Both give the same entries.
    """
    matrix = matrix.tocsr()
    matrix.sum_duplicates()  # canonical: columns ascending within each row
    n_rows = matrix.shape[0]
    counts = np.diff(matrix.indptr)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), counts)
    keep = np.ones(matrix.nnz, dtype=bool)
    big = np.flatnonzero(counts[rows] > k)  # entries of rows that must be cut
    if big.size:
        r, w = rows[big], matrix.data[big]
        if w.dtype == np.float32 and bool(np.all(w >= 0)):  # (NaN fails the test)
            bits = np.where(w == 0, np.float32(0), w).view(np.int32).astype(np.int64)  # -0.0 -> 0.0
            order = np.argsort((r << 31) | (0x7F800000 - bits), kind="stable")
        else:
            order = np.lexsort((matrix.indices[big], -w, r))
        sorted_rows = r[order]
        first = np.searchsorted(sorted_rows, sorted_rows, side="left")  # start of each row's run
        rank = np.arange(order.size) - first
        keep[big[order[rank >= k]]] = False
    kept_counts = np.bincount(rows[keep], minlength=n_rows)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(kept_counts, out=indptr[1:])
    return sp.csr_matrix((matrix.data[keep], matrix.indices[keep], indptr), shape=matrix.shape)


KNN_METHODS = ("exact", "ivf")
#: IVF training sample per list (FAISS warns below 39) and k-means iterations
IVF_TRAIN_PER_LIST = 40
IVF_TRAIN_ITER = 10


def ivf_nlist(n: int) -> int:
    """Default IVF list count: ``4 sqrt(n)`` (4,000 lists at 10^6 vectors), at most
    ``n / IVF_TRAIN_PER_LIST``."""
    return max(1, min(n // IVF_TRAIN_PER_LIST, int(round(4 * np.sqrt(n)))))


def faiss_installed() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def screens(method: str, device=None) -> bool:
    """Whether :func:`knn_index` searches by the bfloat16 screen: the exact kNN on a CPU that
    multiplies bfloat16 natively."""
    return method == "exact" and str(device or "cpu") == "cpu" and native_bf16()


def knn_index(
    embeddings: np.ndarray, method: str = "exact", *, nlist: int = 0, nprobe: int = 8, seed: int = 0, tile: int = 16_384,
    device=None,
):
    """The inner-product index :func:`semantic_edges` searches, over ``embeddings [n, d]``: for
    ``method = "exact"`` on a CPU that multiplies bfloat16 natively, the exact top-k of a bfloat16
    screen (:class:`~spectrag.kernels.screen.ScreenedSearch`, a bfloat16 copy of the vectors);
    else FAISS, filled tile by tile (a memory-mapped input is read once, never copied whole); or,
    for ``method = "exact"`` with a ``device`` (a torch device: ``"cuda"``, ``"cpu"``) or where
    FAISS is not installed, a tiled torch top-k there (:class:`~spectrag.index.dense.TorchScan`,
    the vectors copied to the device once). Every row's hits are re-scored exactly in float64
    (:func:`~spectrag.index.dense.exact_search`), so both give the same neighbour lists, ties
    included (``tests/graph/test_knn_device.py``)."""
    if screens(method, device):
        return ScreenedSearch(embeddings)  # the same lists, from a bfloat16 screen (spectrag.kernels.screen)
    if method == "exact" and (device is not None or not faiss_installed()):
        return TorchScan(embeddings, "cpu" if device is None else device)
    faiss = load_faiss()

    n, d = embeddings.shape
    if method == "exact":
        index = faiss.IndexFlatIP(d)
    elif method == "ivf":
        nlist = nlist or ivf_nlist(n)
        if not 1 <= nlist <= n:
            raise ValueError(f"nlist must be in [1, n={n}] for the IVF kNN, got {nlist}")
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed, index.cp.niter, index.cp.spherical = seed, IVF_TRAIN_ITER, True
        index.cp.min_points_per_centroid = 1  # FAISS only warns below it (from C++, on stderr); same lists
        sample = np.sort(np.random.default_rng(seed).choice(n, min(n, IVF_TRAIN_PER_LIST * nlist), replace=False))
        index.train(np.ascontiguousarray(embeddings[sample], dtype=np.float32))
        index.nprobe = max(1, min(nprobe, nlist))
    else:
        raise ValueError(f"method must be one of {KNN_METHODS}, got {method!r}")
    for lo in range(0, n, tile):
        index.add(np.ascontiguousarray(embeddings[lo : lo + tile], dtype=np.float32))
    return index


def semantic_edges(
    embeddings: np.ndarray,
    k: int,
    *,
    min_cos: float = 0.0,
    tile: int = 16_384,
    method: str = "exact",
    nlist: int = 0,
    nprobe: int = 8,
    seed: int = 0,
    device=None,
) -> sp.csr_matrix:
    """Cosine kNN graph of L2-normalized ``embeddings [n, d]``, queried in tiles of rows.
    ``device``: None (FAISS on the CPU) or a torch device for the exact search (:func:`knn_index`).

    ``method="exact"``: FAISS ``IndexFlatIP`` (brute force, O(n^2 d)). ``method="ivf"``:
    FAISS ``IndexIVFFlat``, ``nlist`` lists (0: :func:`ivf_nlist`) from spherical k-means
    (``IVF_TRAIN_ITER`` iterations on ``IVF_TRAIN_PER_LIST * nlist`` sampled rows, ``seed``),
    each query scanning its ``nprobe`` nearest lists: about ``n * nprobe / nlist`` vectors per
    row instead of ``n``, approximate (recall measured in ``bench/bench_scale.py``).
    Memory: the index (one float32 copy of the vectors) plus one tile of results.
    Each row's candidates are re-scored in float64 (:data:`KNN_MARGIN` extra), so the edges
    do not depend on the tiling, FAISS's BLAS kernel or its thread count: a build split into
    row ranges (:mod:`spectrag.distributed`) gives the same graph.
    """
    n = embeddings.shape[0]
    index = knn_index(embeddings, method, nlist=nlist, nprobe=nprobe, seed=seed, tile=tile, device=device)
    parts = knn_rows(index, embeddings, min(k + 1, n), min_cos=min_cos, tile=tile, base=embeddings)  # k + 1: self
    return knn_graph(*parts, n, k)


def knn_graph(rows: list[np.ndarray], cols: list[np.ndarray], weights: list[np.ndarray], n: int, k: int) -> sp.csr_matrix:
    """The kNN signal ``[n, n]`` from :func:`knn_rows`' edge arrays (of any row ranges, in
    any order): duplicates merged, the ``k`` strongest per row (ties: smaller column)."""
    cat = lambda parts, dtype: np.concatenate(parts) if parts else np.zeros(0, dtype)  # noqa: E731
    return top_k_per_row(coo(cat(rows, np.int64), cat(cols, np.int64), cat(weights, np.float32), n), k)


#: extra candidates per row that :func:`knn_rows` re-scores in float64 when given ``base``
KNN_MARGIN = 8


def knn_rows(
    index, queries: np.ndarray, k: int, *, first: int = 0, offset: int = 0, min_cos: float = 0.0, tile: int = 16_384,
    base: np.ndarray | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Edges (row, col, weight), one array per tile, of the ``k`` nearest entries of ``index`` to
    each query row, queried in tiles: no self-edge, cosine above ``min_cos`` (and 0), at most 1.
    Query ``i`` is row ``first + i``; result ids are shifted by ``offset`` (``spectrag add``
    searches the new rows against all and the old rows against the new ones). With ``base``
    (the vectors ``index`` holds, ``[N, d]``) each row's ``k`` are the exact top-``k`` by float64
    score, then smaller id (:func:`spectrag.index.dense.exact_search`, ``KNN_MARGIN`` extra
    hits), rounded to float32."""
    rows, cols, weights = [], [], []
    for lo in range(0, len(queries), tile):
        block = np.ascontiguousarray(queries[lo : lo + tile], dtype=np.float32)
        if base is None:
            scores, ids = index.search(block, k)  # (tile, k)
        else:
            exact, ids = exact_search(index, base, block, k, margin=KNN_MARGIN)  # (tile, k)
            scores = exact.astype(np.float32)
        r = np.repeat(np.arange(first + lo, first + lo + len(block)), k)
        c, w = ids.ravel().astype(np.int64), scores.ravel()
        keep = (c >= 0) & (c + offset != r) & (w > max(min_cos, 0.0))
        rows.append(r[keep])
        cols.append(c[keep] + offset)
        weights.append(np.minimum(w[keep], 1.0))
    return rows, cols, weights


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


# Scalar products per tile of the entity signal: a tile's product, its coordinates and its pruned
# copy take about 50 bytes per product at once, so 4 million keep a tile near 200 MB (20 million
# took a gigabyte, the peak of a 20 MB single-file build). Tiles change the time, not the edges.
ENTITY_TILE_PRODUCTS = 4_000_000


def entity_edges(
    incidence: sp.csr_matrix,
    idf: np.ndarray,
    *,
    top_k: int = 10,
    row_tile: int = 50_000,
    max_products: int = ENTITY_TILE_PRODUCTS,
) -> sp.csr_matrix:
    """Cosine of IDF-weighted entity indicator rows: ``X X^T`` with ``X = normalize(C diag(idf))``,
    the ``top_k`` strongest per row.

    Computed in row tiles, each pruned to ``top_k`` per row before the next, so memory is
    bounded by the tile: a tile holds at most ``row_tile`` rows and, when rows allow, at most
    ``max_products`` scalar products (row ``i`` costs ``sum of df(e)`` over its entities ``e``;
    the total, ``sum_e df(e)^2``, is what the entity document-frequency cap bounds: at most
    ``cap * nnz(C)``). Shapes: incidence ``[n, V]``, idf ``[V]`` -> ``[n, n]``.
    """
    x, xt, bounds = entity_tiles(incidence, idf, row_tile=row_tile, max_products=max_products)
    return stack_entity_tiles([entity_tile(x, xt, lo, hi, top_k) for lo, hi in bounds], x.shape[0])


def entity_tiles(
    incidence: sp.csr_matrix, idf: np.ndarray, *, row_tile: int = 50_000, max_products: int = ENTITY_TILE_PRODUCTS
) -> tuple[sp.csr_matrix, sp.csr_matrix, list[tuple[int, int]]]:
    """The operands of :func:`entity_edges` and its row tiles: ``X [n, V]``, ``X^T`` (CSR) and
    the ``[lo, hi)`` bounds, each tile independent of the others (a distributed build runs them
    as separate tasks)."""
    x, xt = entity_operands(incidence, idf)
    return x, xt, tile_bounds(entity_work(x, xt), row_tile=row_tile, max_products=max_products)


def entity_operands(incidence: sp.csr_matrix, idf: np.ndarray) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``X = normalize(C diag(idf))`` (rows of unit length) and ``X^T`` as CSR. Shapes:
    ``[n, V]``, ``[V, n]``."""
    x = (incidence @ sp.diags(idf.astype(np.float32))).tocsr()
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    x = (sp.diags(np.where(norms > 0, 1.0 / np.maximum(norms, 1e-30), 0.0).astype(np.float32)) @ x).tocsr()
    return x, x.T.tocsr()


def entity_work(x: sp.csr_matrix, xt: sp.csr_matrix) -> np.ndarray:
    """Scalar products row ``i`` of ``X X^T`` costs: the sum of its entities' document
    frequencies. Shapes: -> ``[n]`` int64."""
    df = np.diff(xt.indptr)  # chunks per entity
    n = x.shape[0]
    return np.bincount(np.repeat(np.arange(n), np.diff(x.indptr)), weights=df[x.indices], minlength=n).astype(np.int64)


def tile_bounds(row_work: np.ndarray, *, row_tile: int = 50_000, max_products: int = ENTITY_TILE_PRODUCTS) -> list[tuple[int, int]]:
    """``[lo, hi)`` tiles of consecutive rows holding at most ``row_tile`` rows and, when rows
    allow, at most ``max_products`` of ``row_work``."""
    n = len(row_work)
    work = np.zeros(n + 1, dtype=np.int64)  # products of rows 0 .. i-1
    np.cumsum(row_work, out=work[1:])
    bounds = []
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(work, work[lo] + max_products, side="right")) - 1
        hi = min(n, max(hi, lo + 1), lo + row_tile)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def entity_tile(x: sp.csr_matrix, xt: sp.csr_matrix, lo: int, hi: int, top_k: int) -> sp.csr_matrix:
    """Rows ``[lo, hi)`` of the entity signal: ``X[lo:hi] X^T`` without self-loops, the
    ``top_k`` strongest per row. Shapes: -> ``[hi - lo, n]``."""
    n = x.shape[0]
    block = (x[lo:hi] @ xt).tocoo()  # (tile, n)
    keep = block.row + lo != block.col  # no self-loops
    return top_k_per_row(sp.csr_matrix((block.data[keep], (block.row[keep], block.col[keep])), shape=(hi - lo, n)), top_k)


def stack_entity_tiles(parts: list[sp.csr_matrix], n: int) -> sp.csr_matrix:
    """The entity signal ``[n, n]`` from its row tiles in row order, weights capped at 1."""
    out = sp.vstack(parts, format="csr") if parts else sp.csr_matrix((n, n), dtype=np.float32)
    out.data = np.minimum(out.data, 1.0)
    return out


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
