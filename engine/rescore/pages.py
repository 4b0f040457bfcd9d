"""Online step 4b (page support): what a document's second relevant chunk says for all its chunks.

A page with two separate passages that stand out for the question is more likely about the
question than a page with one incidental paragraph: the max-plus-second aggregation of passage
scores into a document score. Every candidate chunk of a document gets

.. math::
    \\beta \\, \\max(0, \\; r_{(2)}(d) - \\bar r)

with ``r_(2)(d)`` the relevance of the document's second-best candidate chunk and ``r̄`` the mean
relevance over the query's real candidates. A document with one candidate chunk (a Wikipedia
passage) gets nothing, so multi-hop passage corpora are left as they were
(bench/results/quality.md: the gain is on documentation pages).

Shapes: ``[B, P]``, no loop over queries; the reference is
:func:`spectrag.reference.pipeline.page_support`. On the CPU's compiled path a kernel finds each
document's two best candidates in one pass (:mod:`spectrag.kernels.compiled.pages`), with the
same bits.
"""

from __future__ import annotations

import torch

from spectrag.kernels.compiled.pages import page_support_compiled
from spectrag.rescore.relevance import pool_moments


def page_support(relevance: torch.Tensor, docs: torch.Tensor, mask: torch.Tensor, beta: float, *,
                 compiled: bool = False) -> torch.Tensor:
    """The support of each candidate's document (the module docstring). ``relevance`` ``r``,
    ``docs`` the candidates' document codes, ``mask`` the real candidates, all ``[B, P]`` ->
    float64 ``[B, P]``, 0 on padding. ``compiled``: by the compiled CPU kernel."""
    r = relevance.to(torch.float64)
    batch, width = r.shape
    mean, _ = pool_moments(r, mask)
    if compiled:
        return torch.from_numpy(page_support_compiled(r.numpy(), docs.numpy(), mask.numpy(), mean[:, 0].numpy(), beta))
    doc = torch.where(mask, docs, torch.full_like(docs, -1))  # padding: a group of its own, given nothing
    # each row by document, and within a document by relevance, best first (two stable sorts)
    by_r = torch.argsort(r.masked_fill(~mask, float("-inf")), dim=1, descending=True, stable=True)
    order = by_r.gather(1, torch.argsort(doc.gather(1, by_r), dim=1, stable=True))
    d, v = doc.gather(1, order), r.gather(1, order)
    first = torch.ones_like(d, dtype=torch.bool)
    first[:, 1:] = d[:, 1:] != d[:, :-1]
    at = torch.arange(width, device=r.device).expand(batch, width)
    start = torch.where(first, at, torch.zeros_like(at)).cummax(dim=1).values  # where each one's document begins
    second = (start + 1).clamp(max=width - 1)
    has_second = (start + 1 < width) & (d.gather(1, second) == d) & (d >= 0)
    gain = torch.where(has_second, beta * (v.gather(1, second) - mean).clamp(min=0), torch.zeros_like(v))
    return torch.zeros_like(r).scatter(1, order, gain)
