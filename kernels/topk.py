"""Exact inner-product top-k by tiled matrix products, for devices without FAISS.

The database is scanned in tiles of ``tile`` rows, so memory stays at ``B * (tile + 2k)``
scores whatever ``n`` is; each tile's top-k is merged into a running per-query top-k
(FAISS's ``contrib`` streaming pattern).
"""

from __future__ import annotations

import torch


def tiled_topk_ip(
    xq: torch.Tensor, xb: torch.Tensor, k: int, *, tile: int = 65_536
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Top-``k`` rows of ``xb`` by inner product with each query.

    .. math::
        I_{b,:} = \operatorname{arg\,top}_k \; \langle x^q_b, x^b_i \rangle

    Ties are broken by the smaller row id, so the result is deterministic.

    Args:
        xq: queries (device and dtype of the computation).
        xb: database vectors, on the same device as ``xq``.
        k: results per query, ``1 <= k``; clipped to ``n``.
        tile: database rows per matrix product (default: 65536).

    Shapes:
        xq ``[B, d]``, xb ``[n, d]`` -> scores ``[B, min(k, n)]`` (descending), ids ``[B, min(k, n)]``
        (int64).
    """
    if xq.dim() != 2 or xb.dim() != 2 or xq.shape[1] != xb.shape[1]:
        raise ValueError(f"xq must be [B, d] and xb [n, d] with the same d, got {tuple(xq.shape)} and {tuple(xb.shape)}")
    if xq.device != xb.device:
        raise ValueError(f"xq is on {xq.device} but xb is on {xb.device}; move both to one device")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    n = xb.shape[0]
    k = min(k, n)
    best_s = torch.empty(xq.shape[0], 0, dtype=xq.dtype, device=xq.device)
    best_i = torch.empty(xq.shape[0], 0, dtype=torch.int64, device=xq.device)
    for lo in range(0, n, tile):
        scores = xq @ xb[lo : lo + tile].T  # (B, tile)
        s, i = topk_smallest_id_ties(scores, k)
        best_s = torch.cat([best_s, s], dim=1)  # (B, <= 2k)
        best_i = torch.cat([best_i, i + lo], dim=1)
        best_s, best_i = sort_by_score_then_id(best_s, best_i, k)
    return best_s, best_i


def topk_smallest_id_ties(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``k`` of each row where ties at the cut go to the smaller column id
    (``torch.topk`` alone picks an arbitrary one of the tied columns).

    Rows whose ``k``-th and ``k+1``-th values differ take the plain ``torch.topk`` result; only
    rows with a tie across the cut are resolved by id, so the usual case costs one top-k.

    Shapes: scores ``[B, n]`` -> scores, ids ``[B, min(k, n)]``, score descending then id ascending.
    """
    n = scores.shape[1]
    k = min(k, n)
    top_s, top_i = torch.topk(scores, min(k + 1, n), dim=1)
    if k == n:
        return sort_by_score_then_id(top_s, top_i, k)
    top_s, top_i, nxt = top_s[:, :k].contiguous(), top_i[:, :k].contiguous(), top_s[:, k]
    cut_tie = (nxt == top_s[:, -1]).nonzero().squeeze(1)
    if cut_tie.numel():
        rows = scores[cut_tie]  # (T, n) only the rows with a tie across the cut
        kth = top_s[cut_tie, -1:]
        above, tied = rows > kth, rows == kth
        need = k - above.sum(dim=1, keepdim=True)  # tied columns to take, smallest ids first
        keep = above | (tied & (torch.cumsum(tied, dim=1) <= need))
        ids = keep.nonzero()[:, 1].view(len(cut_tie), k)  # row-major: ids ascend in each row
        top_i[cut_tie] = ids
        top_s[cut_tie] = rows.gather(1, ids)
    return sort_by_score_then_id(top_s, top_i, k)


def sort_by_score_then_id(
    scores: torch.Tensor, ids: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best of each row, by score descending then id ascending.

    Shapes: scores, ids ``[B, m]`` -> ``[B, min(k, m)]``.
    """
    # stable two-key sort: ids ascending first, then scores descending keeps id order among ties
    order = torch.argsort(ids, dim=1, stable=True)
    scores, ids = scores.gather(1, order), ids.gather(1, order)
    order = torch.argsort(scores, dim=1, descending=True, stable=True)[:, :k]
    return scores.gather(1, order), ids.gather(1, order)
