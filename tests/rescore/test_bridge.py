"""Bridged relevance (spectrag.rescore.bridge, on sparse blocks) against a per-query Python loop
on random dense pools, on the ``device`` fixture's devices (the loop on the CPU; float64 on any
device, same tolerance)."""

from __future__ import annotations

import math

import pytest
import torch

from spectrag.kernels.blocks import BlockGraph
from spectrag.rescore.bridge import best_per_document, named_best_chunks
from spectrag.rescore.bridge import bridge_relevance as _bridge


def bridge_relevance(blocks, relevance, candidates, **kw):
    """The stage on the sparse form of dense test blocks."""
    return _bridge(BlockGraph.from_dense(blocks), relevance, candidates, **kw)


def loop_reference(blocks, relevance, candidates, *, sources, lam, gamma, rounds, anchors=None, docs=None,
                   start=None, target=None):
    """One query at a time, dicts and sorted lists only; ``anchors`` the allowed sources,
    ``docs`` the document of each candidate (no bridge inside one, one chunk per document),
    ``start`` the scores bridging starts from and ``target`` what a reached chunk brings
    (default: the relevance, both)."""
    start = relevance if start is None else start
    target = relevance if target is None else target
    out = start.clone().double()
    for b in range(blocks.shape[0]):
        pool = [p for p in range(blocks.shape[1]) if candidates[b, p] >= 0]
        r = {p: float(target[b, p]) for p in pool}
        x = {p: float(start[b, p]) for p in pool}
        for _ in range(rounds):
            eligible = [p for p in pool if anchors is None or bool(anchors[b, p])]
            top = sorted(eligible, key=lambda p: (-x[p], int(candidates[b, p])))[:sources]
            best = {}
            for s in top:
                for c in pool:
                    w = float(blocks[b, s, c])
                    if w > 0 and not (docs is not None and int(docs[b, s]) == int(docs[b, c])):
                        best[c] = max(best.get(c, float("-inf")), (1 - lam) * x[s] + lam * r[c] - gamma * (1 - w))
            if docs is not None:
                winner = {}
                for c in sorted(best, key=lambda c: int(candidates[b, c])):
                    d = int(docs[b, c])
                    if d not in winner or best[c] > best[winner[d]]:
                        winner[d] = c
                best = {c: v for c, v in best.items() if winner[int(docs[b, c])] == c}
            x = {p: max(v, best.get(p, float("-inf"))) for p, v in x.items()}
        for p in pool:
            out[b, p] = x[p]
    return out


def random_pools(seed: int, batch: int = 5, p: int = 40, density: float = 0.08):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(batch, p, p, generator=g, dtype=torch.float64)
    w = torch.where(torch.rand(batch, p, p, generator=g) < density, w, torch.zeros_like(w))
    w = torch.maximum(w, w.transpose(1, 2))
    w.diagonal(dim1=1, dim2=2).zero_()
    candidates = torch.stack([torch.randperm(1000, generator=g)[:p] for _ in range(batch)])
    candidates[1, -7:] = -1  # padding
    candidates[2, :] = -1  # an empty pool
    pad = candidates < 0
    w = w.masked_fill(pad[:, :, None] | pad[:, None, :], 0.0)
    relevance = torch.rand(batch, p, generator=g, dtype=torch.float64).masked_fill(pad, 0.0)
    relevance[3, :4] = relevance[3, 4]  # ties at the top: broken by smaller chunk id
    return w, relevance, candidates


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sources,rounds", [(1, 1), (5, 1), (5, 2), (100, 3)])
def test_bridge_equals_per_query_loop(seed, sources, rounds, device):
    w, r, cand = random_pools(seed)
    got = bridge_relevance(w.to(device), r.to(device), cand.to(device), sources=sources, lam=0.3, gamma=0.05,
                           rounds=rounds).cpu()
    want = loop_reference(w, r, cand, sources=sources, lam=0.3, gamma=0.05, rounds=rounds)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sources,rounds", [(2, 1), (5, 2)])
def test_anchors_and_other_documents_equal_per_query_loop(seed, sources, rounds, device):
    """Only the anchors vouch (a query without any bridges nothing); a bridge leads to another
    document, one chunk per document reached (ties: the smaller chunk id)."""
    w, r, cand = random_pools(seed)
    g = torch.Generator().manual_seed(100 + seed)
    docs = torch.randint(0, 9, cand.shape, generator=g).masked_fill(cand < 0, -1)  # ~4 chunks per document
    anchors = torch.rand(cand.shape, generator=g) < 0.2
    anchors[4] = False  # a query that names nothing
    kw = dict(sources=sources, lam=0.3, gamma=0.05, rounds=rounds)
    got = bridge_relevance(w.to(device), r.to(device), cand.to(device), anchors=anchors.to(device),
                           docs=docs.to(device), **kw).cpu()
    want = loop_reference(w, r, cand, anchors=anchors, docs=docs, **kw)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert torch.equal(got[4], r[4])
    plain = bridge_relevance(w, r, cand, **kw)
    assert int((plain > r + 1e-12).sum()) > int((got > r + 1e-12).sum()) > 0  # both rules bite, neither empties


def test_bridge_never_lowers_and_lifts_linked_chunk(device):
    w, r, cand = (t.to(device) for t in random_pools(7))
    x = bridge_relevance(w, r, cand)
    assert torch.all(x >= r)
    # a pool of three: chunk 2 is linked only to the best chunk 0
    blocks = torch.zeros(1, 3, 3, dtype=torch.float64)
    blocks[0, 0, 2] = blocks[0, 2, 0] = 0.5
    rel = torch.tensor([[0.8, 0.5, 0.1]], dtype=torch.float64)
    x = bridge_relevance(blocks.to(device), rel.to(device), torch.tensor([[10, 11, 12]], device=device), sources=1,
                         lam=0.3, gamma=0.05).cpu()
    assert x[0, 2].item() == pytest.approx(0.7 * 0.8 + 0.3 * 0.1 - 0.05 * 0.5)
    assert x[0, :2].tolist() == rel[0, :2].tolist()


def test_bridge_off_or_unlinked_is_identity(device):
    w, r, cand = (t.to(device) for t in random_pools(3))
    assert torch.equal(bridge_relevance(w, r, cand, rounds=0), r)
    assert torch.equal(bridge_relevance(torch.zeros_like(w), r, cand), r)


@pytest.mark.parametrize("seed", range(3))
def test_other_candidates_start_from_the_question_beyond_the_names(seed, device):
    """``bridge.others_beyond_names``: in a query that names documents, every other candidate
    starts from min(relevance, target), the named chunks from their protected relevance; a query
    that names none is untouched. Against the per-query loop started from those scores."""
    from spectrag.config import BridgeConfig
    from spectrag.rescore.bridge import graph_evidence, protect_named

    w, r, cand = random_pools(seed)
    g = torch.Generator().manual_seed(200 + seed)
    target = torch.rand(r.shape, generator=g, dtype=torch.float64).masked_fill(cand < 0, 0.0)
    named = (torch.rand(cand.shape, generator=g) < 0.1) & (cand >= 0)
    named[0, :3] = True
    named[4] = False  # a query that names nothing
    config = BridgeConfig(cited=False, other_documents=False, named_floor=0.0)
    docs = torch.zeros_like(cand)
    got = graph_evidence(BlockGraph.from_dense(w.to(device)), None, r.to(device), cand.to(device), named.to(device),
                         docs.to(device), config, target=target.to(device)).cpu()
    start = protect_named(r, r, named, cand, floor=0.0)
    own = torch.where(named | ~named.any(1, keepdim=True), start, torch.minimum(target, r))
    want = loop_reference(w, r, cand, sources=config.sources, lam=config.lam, gamma=config.gamma, rounds=1,
                          anchors=named, start=own, target=target)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert torch.equal(got[4], r[4])  # names nothing: its own relevance (no anchors)
    lowered = (got < r - 1e-12) & (cand >= 0)
    assert lowered[:4].any() and not lowered[4].any()  # the rule bites where names are
    off = graph_evidence(BlockGraph.from_dense(w), None, r, cand, named, docs,
                         BridgeConfig(cited=False, other_documents=False, named_floor=0.0, others_beyond_names=False),
                         target=target)
    assert torch.all(off >= r)



def _documents_case(seed: int, dtype: torch.dtype, batch: int = 11, width: int = 40):
    g = torch.Generator().manual_seed(seed)
    candidates = torch.stack([torch.randperm(500, generator=g)[:width] for _ in range(batch)])
    candidates[torch.rand(batch, width, generator=g) < 0.15] = -1  # padding
    docs = torch.randint(0, 9, (batch, width), generator=g).masked_fill(candidates < 0, -1)
    best = (torch.randint(0, 4, (batch, width), generator=g).to(dtype) / 4)  # ties within a document
    best[torch.rand(batch, width, generator=g) < 0.2] = float("-inf")  # nothing reached
    best[0] = torch.where(torch.rand(width, generator=g) < 0.5, torch.tensor(-0.0, dtype=dtype), torch.tensor(0.0, dtype=dtype))
    best[1] = float("-inf")  # a query where nothing is live
    return best.masked_fill(candidates < 0, float("-inf")), docs, candidates


def _best_per_document_reference(best, docs, candidates):
    out = torch.full_like(best, float("-inf"))
    for b in range(best.shape[0]):
        winner: dict[int, tuple[float, int, int]] = {}
        for i in range(best.shape[1]):
            v, c = float(best[b, i]), int(candidates[b, i])
            if c < 0 or not math.isfinite(v):
                continue
            d = int(docs[b, i])
            if d not in winner or (v, -c) > (winner[d][0], -winner[d][1]):
                winner[d] = (v, c, i)
        for v, c, i in winner.values():
            out[b, i] = best[b, i]
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_best_per_document_torch_and_compiled_equal_a_plain_loop(seed, dtype):
    """Each document's best candidate (ties to the smaller chunk id, -0.0 equal to 0.0), the
    others -inf: the torch path against a per-query loop, the compiled kernel bit for bit."""
    pytest.importorskip("numba")
    best, docs, candidates = _documents_case(seed, dtype)
    want = _best_per_document_reference(best, docs, candidates)
    got = best_per_document(best, docs, candidates)
    assert torch.equal(got, want)
    fast = best_per_document(best, docs, candidates, compiled=True)
    assert fast.dtype == dtype and torch.equal(fast, got)
    assert torch.equal(torch.signbit(fast[0]), torch.signbit(got[0]))  # the kept zeros keep their sign
    tied = sum(int(((best[b] == v) & (docs[b] == d) & torch.isfinite(best[b])).sum()) > 1
               for b in range(best.shape[0]) for v, d in zip(best[b].tolist(), docs[b].tolist()))
    assert tied > 10 and bool(torch.isinf(got[1]).all())  # ties within documents, a query with nothing live
    named = torch.isfinite(best)
    assert torch.equal(named_best_chunks(named, best.float(), docs, candidates, compiled=True),
                       named_best_chunks(named, best.float(), docs, candidates))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lift_and_protection_compiled_equal_torch_bit_for_bit(seed, dtype):
    """The compiled lift and protection (the CPU path) against the torch ones (their references):
    the same bits in float32 and float64 (the constants rounded to the scores' dtype, as torch
    does), queries with nothing named, nothing kept or no real candidate; and the lift's
    promise itself: the kept candidates above every other, in their own order."""
    pytest.importorskip("numba")
    from spectrag.rescore.bridge import lift_above, protect_named

    g = torch.Generator().manual_seed(seed)
    batch, width = 12, 30
    candidates = torch.randperm(400, generator=g)[: batch * width].reshape(batch, width)
    candidates[torch.rand(batch, width, generator=g) < 0.2] = -1
    candidates[2] = -1  # no real candidate
    scores = (torch.rand(batch, width, generator=g) * 1.8 - 0.8).to(dtype)  # scores above -1: the lift's domain
    scores = scores.masked_fill(candidates < 0, float("-inf"))
    relevance = torch.rand(batch, width, generator=g).masked_fill(candidates < 0, 0.0)
    named = torch.rand(batch, width, generator=g) < 0.3
    named[0] = False  # a query that names nothing
    for floor in (0.0, 0.5, 0.9):
        want = protect_named(scores, relevance, named, candidates, floor=floor)
        got = protect_named(scores, relevance, named, candidates, floor=floor, compiled=True)
        assert got.dtype == dtype and torch.equal(got, want)
    # relevance exactly on the floor's bar, float32(floor * best), where a bar formed in float64
    # would leave out what torch keeps (floor 0.3 is not exact in binary)
    rel = torch.tensor([[0.56063944, 0.16819184, 0.1681918]])
    on_bar = torch.tensor([[False, True, True]])
    ids3 = torch.tensor([[0, 1, 2]])
    for r in (rel.double(), rel):
        want = protect_named(r.clone(), r, on_bar, ids3, floor=0.3)
        assert torch.equal(protect_named(r.clone(), r, on_bar, ids3, floor=0.3, compiled=True), want)
    assert float(want[0, 1]) > float(rel[0, 0])  # float32: the chunk on the bar is kept and lifted
    keep = named & (candidates >= 0)
    want = lift_above(scores, keep, candidates, eps=1e-3)
    got = lift_above(scores, keep, candidates, eps=1e-3, compiled=True)
    assert torch.equal(got, want)
    for b in range(batch):
        kept, rest = got[b][keep[b]], got[b][~keep[b] & (candidates[b] >= 0)]
        if len(kept) and len(rest):
            assert float(kept.min()) > float(rest.max())
        assert torch.equal(torch.argsort(kept, stable=True), torch.argsort(scores[b][keep[b]], stable=True))
    assert int((got != scores).sum()) > 20  # the lift moved scores
    # enough kept values that arithmetic in float64 rounded once (instead of torch's float32 with
    # the constants rounded) would show: about 4 values in 10,000 differ between the two
    big = (torch.rand(400, 500, generator=g) * 1.8 - 0.8).to(dtype)
    ids = torch.arange(500).expand(400, 500).contiguous()
    mark = torch.rand(400, 500, generator=g) < 0.5
    assert torch.equal(lift_above(big, mark, ids, eps=1e-3, compiled=True), lift_above(big, mark, ids, eps=1e-3))
