"""Utility-question matching (SpectRAG Algorithm 1, line 2): the chunks whose generated
questions best match each query, a third list for reciprocal rank fusion.

A chunk scores the best inner product between the query and any of its questions:

.. math::
    u(q, c) = \\max_{j : \\mathrm{owner}(j) = c} \\langle e_q, e_{Q_j} \\rangle

Exact for all B queries at once: the top ``k * m`` questions per query (``m``: the most
questions any chunk has) by exact inner-product search always hold the best question of each
of the top-``k`` chunks (at most ``(k - 1) m`` questions can outscore it: those of the chunks
ranked above it; up to exact ties at that cut), then one segment max per (query, chunk) pair and a per-query top-``k``.
Ties are broken by the smaller chunk id.
"""

from __future__ import annotations

import numpy as np
import torch

from spectrag.index.dense import DenseIndex


class QuestionIndex:
    """Question vectors ``[Q, d]`` and their chunk ids ``[Q]``, searched per chunk."""

    def __init__(self, vectors: np.ndarray, owners: np.ndarray, *, device: str | torch.device = "cpu") -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        owners = np.array(owners, dtype=np.int64)  # a private copy off the read-only memory map
        if vectors.ndim != 2 or owners.shape != (vectors.shape[0],):
            raise ValueError(f"question vectors [Q, d] and owners [Q] do not match: {vectors.shape}, {owners.shape}")
        self.device = torch.device(device)
        self.dense = DenseIndex(vectors, device=str(self.device))
        self.owners = torch.from_numpy(owners).to(self.device)
        self.per_chunk = int(np.bincount(owners).max()) if len(owners) else 0
        self.n_questions = len(owners)

    def search(self, vectors: torch.Tensor, k: int, *,
               allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` chunks by their best question per query (``allowed [B, n]`` bool: only the
        questions of allowed chunks). Shapes: ``vectors [B, d]`` -> scores (float32, descending;
        0 where padded), chunk ids (int64, -1 padded) ``[B, k]``."""
        batch = vectors.shape[0]
        if self.n_questions == 0 or k < 1:
            return (torch.zeros(batch, 0, device=vectors.device),
                    torch.full((batch, 0), -1, dtype=torch.int64, device=vectors.device))
        mask = None if allowed is None else allowed[:, self.owners.to(allowed.device)]  # (B, n_questions)
        scores, qids = self.dense.search_tensors(vectors, k * self.per_chunk, allowed=mask)  # (B, M), exact
        owners = self.owners.to(vectors.device)[qids.clamp(min=0)]
        owners = torch.where(qids >= 0, owners, torch.full_like(owners, -1))
        rows = torch.arange(batch, device=vectors.device).unsqueeze(1).expand_as(owners)
        valid = owners >= 0
        span = int(owners.max().item()) + 1 if valid.any() else 1
        keys = (rows * span + owners)[valid]
        unique, inverse = torch.unique(keys, return_inverse=True)  # sorted by (row, chunk)
        best = torch.full((unique.numel(),), float("-inf"), dtype=torch.float32, device=vectors.device)
        best = best.scatter_reduce(0, inverse, scores[valid].to(torch.float32), reduce="amax")
        urow, ucid = unique // span, unique % span
        counts = torch.bincount(urow, minlength=batch)
        width = int(counts.max().item()) if unique.numel() else 0
        col = torch.arange(unique.numel(), device=vectors.device) - (torch.cumsum(counts, 0) - counts)[urow]
        out_s = torch.full((batch, width), float("-inf"), dtype=torch.float32, device=vectors.device)
        out_i = torch.full((batch, width), -1, dtype=torch.int64, device=vectors.device)
        out_s[urow, col] = best
        out_i[urow, col] = ucid
        # chunk ids ascend within each row, so a stable descending sort breaks ties by id
        order = torch.argsort(out_s, dim=1, descending=True, stable=True)[:, :k]
        top_s, top_i = out_s.gather(1, order), out_i.gather(1, order)
        return torch.where(top_i >= 0, top_s, torch.zeros_like(top_s)), top_i
