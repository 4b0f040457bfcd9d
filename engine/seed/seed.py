"""Online step 1: the seed list of every query (SpectRAG Algorithm 1, lines 1-3).

    dense     exact inner-product top-``k_dense`` over the chunk embeddings      [B, K]
    bm25      BM25 top-``k_bm25`` from the query term counts                      [B, K]
    fused     reciprocal rank fusion of the two (``rrf_k``)                       [B, K]

Mode ``dense`` seeds with the dense list, ``bm25`` with the BM25 list, every other mode with the
fused list; a batch without term counts (query vectors only) seeds with the dense list.
"""

from __future__ import annotations

import scipy.sparse as sp
import torch

from spectrag.errors import SpectragError
from spectrag.index.dense import DenseIndex
from spectrag.index.lexical import BM25Index
from spectrag.seed.rrf import reciprocal_rank_fusion


def seed(
    mode: str,
    vectors: torch.Tensor,
    terms: sp.csr_matrix | None,
    dense: DenseIndex,
    bm25: BM25Index | None,
    *,
    k_dense: int = 50,
    k_bm25: int = 50,
    rrf_k: int = 60,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seed chunk ids and scores per query, best first, -1 padded.

    Shapes: ``vectors [B, d]``, ``terms`` sparse ``[B, vocab]`` -> ids (int64), scores
    (float32) ``[B, K]`` on the vectors' device.
    """
    device = vectors.device
    if mode == "bm25" and (terms is None or bm25 is None):
        raise SpectragError("mode 'bm25' needs query texts (term counts) and a BM25 index; got query vectors only")
    dense_s, dense_i = dense.search_tensors(vectors, k_dense)  # a torch-backend search stays on the device
    if mode == "dense" or terms is None or bm25 is None:
        return dense_i, dense_s
    bm_s, bm_i = bm25.search_terms(terms, k_bm25, device=device)  # on a GPU: torch sparse products there
    bm_s, bm_i = torch.from_numpy(bm_s).to(device), torch.from_numpy(bm_i).to(device)
    if mode == "bm25":
        return bm_i, bm_s
    fused_s, fused_i = reciprocal_rank_fusion([dense_i, bm_i], k=rrf_k, top=max(k_dense, k_bm25))
    return fused_i, fused_s
