"""Online step 1: the seed list of every query (SpectRAG Algorithm 1, lines 1-3).

    dense     exact inner-product top-``k_dense`` over the chunk embeddings      [B, K]
    bm25      BM25 top-``k_bm25`` from the query term counts                      [B, K]
    utility   top-``k_utility`` chunks by their best utility question (seed/utility.py) [B, K]
    fused     reciprocal rank fusion of the lists (``rrf_k``)                     [B, K]

Modes ``dense`` and ``hyde`` seed with the dense list (``hyde``'s query vectors are the
embeddings of LLM-written passages), ``bm25`` with the BM25 list, ``hybrid`` with dense + BM25
fused, every other mode with dense + BM25 + utility fused (SpectRAG Algorithm 1, lines 1-3; the
utility list only when the index has utility questions). A batch without term counts (query
vectors only) seeds with the dense list.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from spectrag.errors import SpectragError
from spectrag.index.dense import DenseIndex
from spectrag.index.lexical import BM25Index, DeviceTerms
from spectrag.kernels.compiled.fusion import reciprocal_rank_fusion_compiled
from spectrag.kernels.topk import topk_by_row
from spectrag.seed.rrf import reciprocal_rank_fusion
from spectrag.seed.titles import NamedChunks
from spectrag.seed.utility import QuestionIndex

DENSE_MODES = ("dense", "hyde")


def seed(
    mode: str,
    vectors: torch.Tensor,
    terms: sp.csr_matrix | DeviceTerms | None,
    dense: DenseIndex,
    bm25: BM25Index | None,
    *,
    named: sp.csr_matrix | NamedChunks | None = None,
    embeddings: torch.Tensor | None = None,
    k_dense: int = 50,
    k_bm25: int = 50,
    rrf_k: int = 60,
    k_named: int = 10,
    questions: QuestionIndex | None = None,
    k_utility: int = 50,
    allowed: torch.Tensor | None = None,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seed chunk ids and scores per query, best first, -1 padded. Fused lists of graph modes
    also take ``named`` (the chunks of the documents each query names, ``[B, n]``), ranked by
    relevance (``embeddings [n, d]``), as a third list (``k_named`` deep). ``allowed`` (bool
    ``[B, n]``, the queries' metadata filters): every list is the top of the allowed chunks
    (``named`` must already be restricted: :func:`restrict_named`).

    Shapes: ``vectors [B, d]``, ``terms`` sparse ``[B, vocab]`` -> ids (int64), scores
    (float32) ``[B, K]`` on the vectors' device. ``terms`` as :class:`DeviceTerms` and ``named``
    as :class:`NamedChunks` (the device path) score BM25 and the named list on their device
    (:meth:`BM25Index.search_device`): the same lists, no host round trip. ``compiled``: the
    lists are fused by the compiled CPU kernel (:mod:`spectrag.kernels.compiled.fusion`), else
    by torch.
    """
    device = vectors.device
    if mode == "bm25" and (terms is None or bm25 is None):
        raise SpectragError("mode 'bm25' needs query texts (term counts) and a BM25 index; got query vectors only")
    dense_s, dense_i = dense.search_tensors(vectors, k_dense, allowed=allowed)  # a torch-backend search stays on the device
    if mode in DENSE_MODES or terms is None or bm25 is None:
        return dense_i, dense_s
    if isinstance(terms, DeviceTerms):
        bm_s, bm_i = bm25.search_device(terms, k_bm25, allowed=allowed)
    else:  # on a GPU: torch sparse products there
        bm_s, bm_i = bm25.search_terms_tensors(terms, k_bm25, device=device, allowed=allowed)
    if mode == "bm25":
        return bm_i, bm_s
    lists = [dense_i, bm_i]
    if named is not None and embeddings is not None and k_named > 0 and named.nnz:
        lists.append(named_list(named, embeddings, vectors, k_named))
    if questions is not None and k_utility > 0 and mode != "hybrid":  # hybrid: the dense + BM25 baseline
        lists.append(questions.search(vectors, k_utility, allowed=allowed)[1])
    fuse = reciprocal_rank_fusion_compiled if compiled else reciprocal_rank_fusion  # the same output
    fused_s, fused_i = fuse(lists, k=rrf_k, top=max(k_dense, k_bm25))
    return fused_i, fused_s


def named_list(named: sp.csr_matrix | NamedChunks, embeddings: torch.Tensor, vectors: torch.Tensor,
               k: int) -> torch.Tensor:
    """The named chunks of each query by relevance, best first (ties: smaller id), -1 padded.
    Shapes: ``named [B, n]``, ``embeddings [n, d]``, ``vectors [B, d]`` -> ``[B, k]``."""
    dev = vectors.device
    if not isinstance(named, NamedChunks):
        named = NamedChunks.from_csr(named, dev)
    rows, ids = named.rows().to(dev), named.ids().to(dev)  # (row, id) order, as topk_by_row wants
    rel = (vectors[rows] * embeddings[ids]).sum(dim=1)
    _, top = topk_by_row(rows, ids, rel, named.batch, k)
    return top


def restrict_named(named: sp.csr_matrix | None, allowed: torch.Tensor | None) -> sp.csr_matrix | None:
    """``named [B, n]`` without the chunks a query's filter leaves out (``allowed [B, n]`` bool)."""
    if named is None or allowed is None or not named.nnz:
        return named
    rows = np.repeat(np.arange(named.shape[0]), np.diff(named.indptr))
    keep = allowed.detach().cpu().numpy()[rows, named.indices]
    out = sp.csr_matrix((named.data[keep], named.indices[keep], np.concatenate([[0], np.cumsum(
        np.bincount(rows[keep], minlength=named.shape[0]))])), shape=named.shape)
    return out
