"""Page support (spectrag.rescore.pages) against the per-query reference
(spectrag.reference.pipeline.page_support, plain Python) on random pools with padding, documents
of one and of many candidates and tied relevances, on the ``device`` fixture's devices; and what
it is for: a page with a second relevant passage rises, one with a single passage does not."""

from __future__ import annotations

import pytest
import torch

from spectrag.reference.pipeline import page_support as reference
from spectrag.rescore.pages import page_support


def _case(seed: int, batch: int = 7, width: int = 40):
    g = torch.Generator().manual_seed(seed)
    relevance = torch.rand(batch, width, generator=g) * 1.2 - 0.2
    docs = torch.randint(0, 12, (batch, width), generator=g)
    mask = torch.rand(batch, width, generator=g) > 0.25
    mask[1, 3:] = False  # a small pool
    mask[2] = False  # an empty one
    docs[3] = torch.arange(width)  # every candidate its own document: no support anywhere
    relevance[4, docs[4] == docs[4, 0]] = relevance[4, 0]  # a document whose candidates tie
    return relevance, docs, mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_equals_the_per_query_reference(seed, beta, device):
    relevance, docs, mask = _case(seed)
    got = page_support(relevance.to(device), docs.to(device), mask.to(device), beta).cpu()
    assert got.dtype == torch.float64 and torch.all(got[~mask] == 0)
    for b in range(relevance.shape[0]):
        pool = [int(i) for i in torch.nonzero(mask[b]).flatten()]  # positions stand for chunk ids here
        want = reference(pool, {i: float(relevance[b, i]) for i in pool}, docs[b].tolist(), beta)
        for i in pool:
            assert got[b, i].item() == pytest.approx(want[i], abs=1e-12), (b, i)
    assert torch.all(got[3] == 0)
    assert got.abs().sum() > 0  # not vacuous


def test_a_second_relevant_passage_lifts_its_whole_page():
    relevance = torch.tensor([[0.9, 0.8, 0.85, 0.1, 0.2, 0.0]])
    docs = torch.tensor([[0, 0, 1, 2, 2, 3]])  # page 0: two strong passages; page 1: one
    mask = torch.ones_like(docs, dtype=torch.bool)
    got = page_support(relevance, docs, mask, 0.5)[0]
    mean = relevance.double().mean()
    assert got[0] == got[1] == pytest.approx(0.5 * (0.8 - float(mean)))
    assert got[2] == 0  # one passage: nothing, however relevant
    assert got[3] == got[4] == 0  # a second passage below the pool's mean: nothing
    assert got[5] == 0


@pytest.mark.parametrize("seed", range(5))
def test_the_compiled_kernel_gives_the_torch_bits(seed):
    relevance, docs, mask = _case(seed)
    docs = docs.masked_fill(~mask, -1)  # as the pipeline hands them over
    want = page_support(relevance, docs, mask, 0.1)
    got = page_support(relevance, docs, mask, 0.1, compiled=True)
    assert torch.equal(got, want)
