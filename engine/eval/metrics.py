r"""Retrieval metrics for a batch of questions, as tensor operations (no loop over questions).

Inputs are padded: a ranking ``[B, L]`` of unit (or chunk) ids, best first, -1 padded; gold
ids ``[B, G]`` (-1 padded) with gains ``[B, G]``. Per question ``q`` with gold set ``E_q``:

.. math::
    \mathrm{Recall@}k = \frac{|E_q \cap \mathrm{top}_k|}{|E_q|}, \qquad
    \mathrm{RR} = \frac{1}{\mathrm{rank\ of\ the\ first\ gold\ id}}\ (0\ \text{if none}),

    \mathrm{nDCG@}k = \frac{\sum_{i \le k} g_{(i)} / \log_2(i + 1)}
                           {\sum_{i \le \min(k, |E_q|)} g^\ast_{(i)} / \log_2(i + 1)}

(linear gains ``g``, ideal order ``g*`` over all gold ids, as ``trec_eval``'s ``ndcg_cut``),
``All@k`` = 1 when every gold id is in the top k (``Recall@k = 1``), and
for a context set ``C_q`` (SpectRAG eq. 23-24):

.. math::
    P = \frac{|C_q \cap E_q|}{|C_q|}, \quad R = \frac{|C_q \cap E_q|}{|E_q|}, \quad
    F_1 = \frac{2PR}{P + R}\ (0\ \text{when}\ P + R = 0).

Recall@k is HippoRAG's definition (the fraction of a question's gold found in its top k,
averaged over questions), not "any gold in the top k". Questions without gold have no defined
value: :func:`mean` averages over ``n_gold > 0`` only. An empty context has ``P = 0``.
"""

from __future__ import annotations

import numpy as np
import torch


def collapse(ranked: torch.Tensor, unit_of: torch.Tensor) -> torch.Tensor:
    """Chunk ranking -> unit ranking: each unit at the rank of its best chunk, later chunks of the
    same unit dropped, order kept. Shapes: ``ranked [B, L]`` (-1 padded), ``unit_of [n]`` -> ``[B, L]``."""
    batch, length = ranked.shape
    units = torch.where(ranked >= 0, unit_of.to(ranked.device)[ranked.clamp(min=0)], torch.full_like(ranked, -1))
    # a stable sort groups equal units with their earliest position first
    sorted_units, order = torch.sort(units, dim=1, stable=True)
    dup_sorted = torch.zeros_like(units, dtype=torch.bool)
    dup_sorted[:, 1:] = sorted_units[:, 1:] == sorted_units[:, :-1]
    dup = torch.zeros_like(dup_sorted).scatter_(1, order, dup_sorted)
    keep = (units >= 0) & ~dup
    pos = torch.arange(length, device=ranked.device).expand(batch, length)
    compact = torch.argsort(torch.where(keep, pos, pos + length), dim=1)  # kept ones first, in order
    out = units.gather(1, compact)
    return out.masked_fill(~keep.gather(1, compact), -1)


def gold_gain(ranked: torch.Tensor, gold: torch.Tensor, gains: torch.Tensor) -> torch.Tensor:
    """Gain of each ranked id (0 when not gold or padding). ``[B, L]``, ``[B, G]`` -> ``[B, L]`` float64."""
    match = (ranked[:, :, None] == gold[:, None, :]) & (ranked[:, :, None] >= 0)  # (B, L, G)
    return (match.to(torch.float64) * gains[:, None, :].to(torch.float64)).sum(dim=2)


def hits(ranked: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Whether each ranked id is gold. ``[B, L]``, ``[B, G]`` -> ``[B, L]`` bool."""
    return ((ranked[:, :, None] == gold[:, None, :]) & (ranked[:, :, None] >= 0)).any(dim=2)


def _nonempty(hit: torch.Tensor) -> torch.Tensor:
    """An empty ranking ``[B, 0]`` as one non-hit column, so cut-offs need no special case."""
    return hit if hit.shape[1] else torch.zeros((hit.shape[0], 1), dtype=torch.bool, device=hit.device)


def recall_at(hit: torch.Tensor, n_gold: torch.Tensor, ks: list[int]) -> torch.Tensor:
    """Recall@k for each ``k``. ``hit [B, L]``, ``n_gold [B]`` -> ``[B, len(ks)]`` float64."""
    hit = _nonempty(hit)
    found = torch.cumsum(hit.to(torch.float64), dim=1)  # (B, L) gold within the first i + 1
    cols = torch.tensor([min(k, hit.shape[1]) - 1 for k in ks], device=hit.device)
    return found[:, cols] / n_gold.clamp(min=1).to(torch.float64)[:, None]


def all_found_at(hit: torch.Tensor, n_gold: torch.Tensor, k: int) -> torch.Tensor:
    """1 where every gold id of the question is in the top ``k`` (a two-page question needs
    both pages), else 0 (also without gold). ``hit [B, L]``, ``n_gold [B]`` -> ``[B]`` float64."""
    found = _nonempty(hit)[:, :k].sum(dim=1)
    return ((found >= n_gold) & (n_gold > 0)).to(torch.float64)


def reciprocal_rank(hit: torch.Tensor) -> torch.Tensor:
    """1 / rank of the first gold id, 0 when none. ``[B, L]`` -> ``[B]`` float64."""
    hit = _nonempty(hit)
    rank = torch.arange(1, hit.shape[1] + 1, dtype=torch.float64, device=hit.device)
    return torch.where(hit, 1.0 / rank, torch.zeros_like(rank)).max(dim=1).values


def ndcg_at(gain: torch.Tensor, gains: torch.Tensor, k: int) -> torch.Tensor:
    """nDCG@k from the ranked gains ``[B, L]`` and the gold gains ``[B, G]`` -> ``[B]`` float64."""
    discount = 1.0 / torch.log2(torch.arange(2, k + 2, dtype=torch.float64, device=gain.device))  # (k,)
    top = gain[:, :k]
    dcg = (top * discount[: top.shape[1]]).sum(dim=1)
    ideal = torch.sort(gains.to(torch.float64), dim=1, descending=True).values[:, :k]
    idcg = (ideal * discount[: ideal.shape[1]]).sum(dim=1)
    return torch.where(idcg > 0, dcg / idcg.clamp(min=1e-300), torch.zeros_like(dcg))


def set_prf(selected: torch.Tensor, gold: torch.Tensor, n_gold: torch.Tensor) -> torch.Tensor:
    """Precision, recall and F1 of each context set (ids distinct, -1 padded).
    ``selected [B, S]``, ``gold [B, G]``, ``n_gold [B]`` -> ``[B, 3]`` float64."""
    found = hits(selected, gold).sum(dim=1).to(torch.float64)
    size = (selected >= 0).sum(dim=1).to(torch.float64)
    p = found / size.clamp(min=1)
    r = found / n_gold.clamp(min=1).to(torch.float64)
    f = torch.where(p + r > 0, 2 * p * r / (p + r).clamp(min=1e-300), torch.zeros_like(p))
    return torch.stack([p, r, f], dim=1)


def mean(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean over the rows where ``valid``; NaN-free (0 when no row is valid). ``[B, ...]`` -> ``[...]``."""
    w = valid.to(torch.float64)
    shape = (-1,) + (1,) * (values.dim() - 1)
    return (values * w.view(shape)).sum(dim=0) / w.sum().clamp(min=1)


def paired_bootstrap_ci(diff: torch.Tensor, *, samples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-question differences (two methods on the
    same questions), resampling questions with a fixed seed (``scipy.stats.bootstrap``).
    ``[Q]`` -> ``(low, high)``."""
    from scipy import stats

    if diff.numel() == 0:
        return 0.0, 0.0
    values = diff.to(torch.float64).cpu().numpy()
    ci = stats.bootstrap((values,), np.mean, n_resamples=samples, confidence_level=level, method="percentile",
                         rng=np.random.default_rng(seed), vectorized=True).confidence_interval
    return float(ci.low), float(ci.high)
