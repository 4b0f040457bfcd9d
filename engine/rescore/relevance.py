"""Online step 3 (relevance): the first-stage evidence of every candidate, dense and lexical
together, calibrated per query from the candidates' own score distributions.

A cosine and a BM25 score live on unrelated scales, and each scale moves from query to query
(a question full of rare API names has BM25 scores in the tens, a paraphrase a few points) and
from corpus to corpus. So neither is compared raw: each signal is standardized over the query's
candidate pool (its z-score: how far a candidate stands out among the candidates this query
has), the two are averaged with the lexical one weighed ``w``, and the result is put back on
the dense scale of the same pool (its mean and standard deviation), where the graph stage's
settings (bridging's ``gamma``, the named-document and selection floors) were chosen:

.. math::
    z^{d}_c = \\frac{d_c - \\mu_d}{\\sigma_d}, \\quad z^{b}_c = \\frac{b_c - \\mu_b}{\\sigma_b}, \\qquad
    r_c = \\mu_d + \\sigma_d \\, \\frac{z^{d}_c + w_q z^{b}_c}{1 + w_q}

with ``d`` the cosine, ``b`` the BM25 score, means and (population) deviations over the real
candidates of the query, and ``w_q = w`` when the query's BM25 scores vary over its pool, else
0 (a query that shares no word with its candidates keeps its cosines). A candidate both signals
put on top stays on top with its cosine (``z^d = z^b`` gives ``r = d``); one only BM25 likes
rises by what BM25 says, in this query's units. No constant depends on a corpus: the scale is
each query's own (bench/results/quality.md: ``w`` swept, with intervals).

Shapes: ``[B, P]`` (queries are rows, a ``mask`` marks the real candidates); the reference is
:func:`spectrag.reference.pipeline.calibrated` (one query, plain Python).
"""

from __future__ import annotations

import torch

from spectrag.kernels.compiled.relevance import calibrated_compiled


def pool_moments(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and population standard deviation of each row over its real entries (0, 0 for a row
    without any). Shapes: ``[B, P]`` -> ``[B, 1]``, ``[B, 1]`` float64."""
    x = x.to(torch.float64)
    m = mask.to(torch.float64)
    n = m.sum(dim=1, keepdim=True).clamp(min=1)
    mu = (x * m).sum(dim=1, keepdim=True) / n
    var = (((x - mu) * m) ** 2).sum(dim=1, keepdim=True) / n
    return mu, var.sqrt()


def calibrated_relevance(dense: torch.Tensor, lexical: torch.Tensor, mask: torch.Tensor, *,
                         weight: float = 0.5, eps: float = 1e-9, compiled: bool = False) -> torch.Tensor:
    """``r`` of the module docstring. Args: ``dense`` cosines, ``lexical`` BM25 scores (0 where
    a candidate shares no term with the query), ``mask`` the real candidates, all ``[B, P]``;
    ``weight``: ``w``, the lexical evidence's weight against the dense one's 1 (default: 0.5);
    ``compiled``: the z-scores and ``r`` by the compiled CPU kernel (this is its reference; the
    same bits). Returns ``[B, P]`` in ``dense``'s dtype, 0 on padding."""
    mu_d, sd_d = pool_moments(dense, mask)
    mu_b, sd_b = pool_moments(lexical, mask)
    if compiled:
        return torch.from_numpy(calibrated_compiled(
            dense.numpy(), lexical.numpy(), mask.numpy(), mu_d.numpy().ravel(), sd_d.numpy().ravel(),
            mu_b.numpy().ravel(), sd_b.numpy().ravel(), weight, eps))
    z_d = torch.where(sd_d > eps, (dense.to(torch.float64) - mu_d) / sd_d.clamp(min=eps), torch.zeros_like(mu_d))
    varies = sd_b > eps
    z_b = torch.where(varies, (lexical.to(torch.float64) - mu_b) / sd_b.clamp(min=eps), torch.zeros_like(mu_b))
    w = torch.where(varies, torch.full_like(sd_b, weight), torch.zeros_like(sd_b))  # (B, 1)
    r = mu_d + sd_d * (z_d + w * z_b) / (1.0 + w)
    return torch.where(mask, r, torch.zeros_like(r)).to(dense.dtype)
