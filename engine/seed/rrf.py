"""Reciprocal rank fusion of several ranked lists, for a batch of queries at once."""

from __future__ import annotations

import torch


def reciprocal_rank_fusion(
    ranked_ids: list[torch.Tensor], *, k: int = 60, top: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Fuse ranked id lists per query by reciprocal rank (Cormack et al., 2009).

    .. math::
        \mathrm{RRF}(q, c) = \sum_{s} \frac{1}{k + \mathrm{rank}_s(q, c)}, \quad \mathrm{rank} \ge 1

    One vectorized pass over all ``B x (S K)`` entries: ids are keyed by ``(query, id)``,
    contributions summed per key, then a padded per-query top-``top``. Ids ``< 0`` (empty slots)
    are ignored. Ties are broken by the smaller id.

    Args:
        ranked_ids: ``S`` tensors ``[B, K_s]`` (int64), best first.
        k: rank offset (default: 60).
        top: results per query (default: all fused candidates).

    Shapes:
        -> scores ``[B, T]`` float32 (descending, 0 where padded) and ids ``[B, T]`` (-1 where padded).
    """
    if not ranked_ids:
        raise ValueError("ranked_ids must hold at least one [B, K] tensor")
    batch = ranked_ids[0].shape[0]
    device = ranked_ids[0].device
    ids = torch.cat([r.to(torch.int64) for r in ranked_ids], dim=1)  # (B, S*K)
    ranks = torch.cat(
        [torch.arange(1, r.shape[1] + 1, device=device).expand(batch, -1) for r in ranked_ids], dim=1
    )
    contrib = 1.0 / (k + ranks.to(torch.float64))
    rows = torch.arange(batch, device=device).unsqueeze(1).expand_as(ids)
    valid = ids >= 0
    span = int(ids.max().item()) + 1 if valid.any() else 1
    keys = (rows * span + ids)[valid]
    unique, inverse = torch.unique(keys, return_inverse=True)  # sorted by (row, id)
    fused = torch.zeros(unique.numel(), dtype=torch.float64, device=device).index_add_(0, inverse, contrib[valid])
    urow, uid = unique // span, unique % span
    counts = torch.bincount(urow, minlength=batch)
    width = int(counts.max().item()) if unique.numel() else 0
    start = torch.cumsum(counts, 0) - counts
    col = torch.arange(unique.numel(), device=device) - start[urow]
    scores = torch.zeros(batch, width, dtype=torch.float64, device=device)
    out_ids = torch.full((batch, width), -1, dtype=torch.int64, device=device)
    scores[urow, col] = fused
    out_ids[urow, col] = uid
    # ids ascend within each row already, so a stable descending sort breaks ties by id
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    if top is not None:
        order = order[:, :top]
    return scores.gather(1, order).to(torch.float32), out_ids.gather(1, order)
