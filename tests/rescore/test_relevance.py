"""Calibrated relevance (spectrag.rescore.relevance) against the per-query reference
(spectrag.reference.pipeline.calibrated: statistics.fmean / pstdev in plain Python) on random
pools with padding, and its invariants: a scale-free combination (rescaling either signal of a
query changes nothing), the cosine kept where the signals agree or BM25 says nothing."""

from __future__ import annotations

import pytest
import torch

from spectrag.reference.pipeline import calibrated
from spectrag.rescore.relevance import calibrated_relevance


def _case(seed: int, batch: int = 9, width: int = 30):
    g = torch.Generator().manual_seed(seed)
    dense = torch.rand(batch, width, generator=g) * 1.4 - 0.4
    lexical = torch.rand(batch, width, generator=g).double() * 20
    lexical[torch.rand(batch, width, generator=g) < 0.5] = 0.0  # most candidates share no term
    lexical[0] = 0.0  # a query with no lexical evidence
    lexical[1] = 3.0  # BM25 that does not vary
    mask = torch.rand(batch, width, generator=g) > 0.2
    mask[2, 1:] = False  # one candidate
    return dense, lexical, mask


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("w", [0.25, 0.5, 1.0, 2.0])
def test_equals_the_per_query_reference(seed, w):
    dense, lexical, mask = _case(seed)
    got = calibrated_relevance(dense, lexical, mask, weight=w)
    assert got.dtype == torch.float32 and got.shape == dense.shape
    for b in range(dense.shape[0]):
        real = mask[b].nonzero().ravel().tolist()
        assert bool((got[b][~mask[b]] == 0).all())
        if not real:
            continue
        want = calibrated({c: float(dense[b, c]) for c in real}, {c: float(lexical[b, c]) for c in real}, w)
        for c in real:
            assert float(got[b, c]) == pytest.approx(want[c], abs=1e-6)


def test_scale_free_and_the_cosine_kept_where_nothing_is_added():
    dense, lexical, mask = _case(7)
    base = calibrated_relevance(dense, lexical, mask, weight=0.5)
    rescaled = calibrated_relevance(dense, lexical * 37.0, mask, weight=0.5)  # BM25 in other units
    torch.testing.assert_close(base, rescaled, atol=1e-6, rtol=0)
    for b in (0, 1):  # no lexical evidence, or none that varies: the cosines
        torch.testing.assert_close(base[b][mask[b]], dense[b][mask[b]], atol=1e-6, rtol=0)
    agree = calibrated_relevance(dense, dense.double() * 5 + 2, mask, weight=0.5)  # BM25 = affine in the cosine
    torch.testing.assert_close(agree[mask], dense[mask], atol=1e-5, rtol=0)
    assert not torch.allclose(base[3:][mask[3:]], dense[3:][mask[3:]], atol=1e-3)  # elsewhere it does change r


def test_lexical_evidence_lifts_what_bm25_prefers():
    dense = torch.tensor([[0.50, 0.50, 0.40, 0.30]])
    lexical = torch.tensor([[0.0, 9.0, 1.0, 0.0]], dtype=torch.float64)
    mask = torch.ones_like(dense, dtype=torch.bool)
    r = calibrated_relevance(dense, lexical, mask, weight=0.5)[0]
    assert float(r[1]) > float(r[0])  # equal cosines: the one BM25 likes first
    assert float(r.max()) <= float(dense.max()) + 1e-6 + float(dense.std(unbiased=False)) * 2  # on the cosine scale


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("w", [0.5, 2.0])
def test_compiled_equals_torch_bit_for_bit(seed, w):
    """The compiled kernel (the CPU path) forms every value by the torch path's float64
    operations in the same order: the same bits, padding, one-candidate pools, BM25 that does
    not vary and cosines that do not vary included."""
    pytest.importorskip("numba")
    dense, lexical, mask = _case(seed)
    dense[3] = 0.25  # cosines that do not vary: z_d = 0
    for dtype in (torch.float32, torch.float64):
        d = dense.to(dtype)
        want = calibrated_relevance(d, lexical, mask, weight=w)
        got = calibrated_relevance(d, lexical, mask, weight=w, compiled=True)
        assert got.dtype == dtype and torch.equal(got, want)
    assert int((want != dense.to(torch.float64)).sum()) > 50  # the calibration moved most values
