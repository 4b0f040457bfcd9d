"""BM25 statistics and scores from stored token ids, in a few vectorized passes: what an index
update needs when chunks are removed or added (document frequencies, chunk lengths and the mean
length are global, so every stored score changes).

bm25s computes the same matrix with a Python loop over documents (about 30 s for 10^5 chunks on
the 2-core machine, ``bench/results/incremental_cpu.md``); here the (term, chunk) counts come
from one sort of the token stream and the scores from bm25s's own term-frequency and IDF
formulas applied to whole arrays, in the dtypes bm25s uses (IDF rounded to float32, the
term-frequency component in float64, the product rounded to float32), so the matrix is
bitwise the one bm25s builds (``tests/index/test_bm25_scores.py`` compares the files).

Shapes: ``ids [tokens]`` int32 term ids, ``indptr [n + 1]`` (chunk i holds
``ids[indptr[i]:indptr[i + 1]]``) -> CSR ``[vocab, n]`` float32, columns ascending per term.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from spectrag.config import BM25Config

#: bm25s's default ``delta`` (BM25L and BM25+), which the build's bm25s.BM25 uses
DELTA = 0.5


def _scorers(method: str):
    from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer  # the formulas bm25s builds with

    return _select_idf_scorer(method), _select_tfc_scorer(method)


def score_matrix(ids: np.ndarray, indptr: np.ndarray, n_terms: int, config: BM25Config) -> sp.csr_matrix:
    """The BM25 contribution of every term to every chunk, as bm25s's ``BM25(k1, b, method)``
    indexes the same token ids. Shapes: -> CSR ``[n_terms, n]`` float32."""
    ids = np.asarray(ids)
    indptr = np.asarray(indptr, dtype=np.int64)
    n = len(indptr) - 1
    lengths = np.diff(indptr)
    idf_fn, tfc_fn = _scorers(config.method)
    if n == 0 or ids.size == 0:
        return sp.csr_matrix((n_terms, n), dtype=np.float32)
    avg = lengths.mean()  # as bm25s computes it (a numpy mean of the int lengths): a float64 numpy scalar
    chunk = np.repeat(np.arange(n, dtype=np.int32), lengths)
    # (term, chunk) counts: scipy's COO -> CSR is a counting sort that keeps the stream's chunk
    # order within a term and sums the duplicates (np.unique's sort was 5x slower at 10^5 chunks)
    counts = sp.coo_matrix((np.ones(ids.size, dtype=np.float32), (ids, chunk)), shape=(n_terms, n)).tocsr()
    counts.sum_duplicates()
    tf, doc, df = counts.data, counts.indices, np.diff(counts.indptr)
    # IDF per distinct document frequency with bm25s's scalar formula (math.log, as it calls it)
    values, inverse = np.unique(df, return_inverse=True)
    idf_of = np.array([idf_fn(int(v), N=n) for v in values.tolist()], dtype=np.float32)
    per_entry = np.repeat(inverse, df)
    tfc = tfc_fn(tf_array=tf, l_d=lengths[doc], l_avg=avg, k1=config.k1, b=config.b, delta=DELTA)
    scores = idf_of[per_entry] * tfc
    if config.method in ("bm25l", "bm25+"):  # minus each term's score in a document that lacks it
        absent = tfc_fn(tf_array=0, l_d=avg, l_avg=avg, k1=config.k1, b=config.b, delta=DELTA)
        nonocc_of = np.array([idf_fn(int(v), N=n) * absent for v in values.tolist()], dtype=np.float32)
        scores = scores - nonocc_of[per_entry]
    return sp.csr_matrix((scores.astype(np.float32), doc.astype(np.int32), counts.indptr.astype(np.int64)),
                         shape=(n_terms, n))


def select_tokens(ids: np.ndarray, indptr: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The token ids of the chunks where ``keep [n]`` is true, in order (a ragged gather).
    Shapes: -> ``ids [kept tokens]``, ``indptr [kept + 1]``."""
    indptr = np.asarray(indptr, dtype=np.int64)
    lengths = np.diff(indptr)
    mask = np.repeat(np.asarray(keep, dtype=bool), lengths)
    out_ptr = np.zeros(int(np.count_nonzero(keep)) + 1, dtype=np.int64)
    np.cumsum(lengths[keep], out=out_ptr[1:])
    return np.asarray(ids)[mask], out_ptr


def first_use_order(ids: np.ndarray, n_terms: int) -> tuple[np.ndarray, np.ndarray]:
    """Renumber terms by first use in the token stream ``ids`` (what a build of these chunks
    numbers them by), dropping terms no chunk uses any more. Returns ``(old id of each new term
    [V'], new ids [tokens])``."""
    ids = np.asarray(ids)
    first = np.full(max(n_terms, 1), ids.size, dtype=np.int64)
    np.minimum.at(first, ids, np.arange(ids.size, dtype=np.int64))  # (np.unique's sort was 8x slower)
    used = np.flatnonzero(first < ids.size)
    order = used[np.argsort(first[used], kind="stable")]
    renumber = np.full(max(n_terms, 1), -1, dtype=np.int32)
    renumber[order] = np.arange(len(order), dtype=np.int32)
    return order, renumber[ids]
