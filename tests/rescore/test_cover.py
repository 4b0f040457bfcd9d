"""Each named document's first bridge (spectrag.rescore.cover) against the per-query reference
(spectrag.reference.pipeline.cover: dicts and sorted lists) on random graphs and pools: on the
pools as blocks on the ``device`` fixture's devices, and as the CPU's unbuilt pools."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spectrag.expand.blocks import candidate_blocks
from spectrag.kernels.csr import TorchCSR
from spectrag.reference.pipeline import cover as reference_cover
from spectrag.rescore.cover import MAX_NAMED, cover_named, named_document_bits
from spectrag.util.syncs import SyncCounter

N = 400


def random_case(seed: int, batch: int = 9, p: int = 50):
    """Two graphs (one directed, as citations are), the chunk -> document map (about 3 chunks a
    document), pools, each query's named documents (0 to 11 of them: past ``MAX_NAMED`` too), and
    float32 scores with ties."""
    rng = np.random.default_rng(seed)
    graphs = []
    for density, symmetric in ((0.02, True), (0.01, False)):
        a = sp.random(N, N, density=density, random_state=rng, format="csr", dtype=np.float32)
        a = (a + a.T) if symmetric else a
        a.setdiag(0)
        a.eliminate_zeros()
        graphs.append(a.tocsr())
    doc_of = np.sort(rng.integers(0, N // 3, N))
    candidates = np.stack([rng.permutation(N)[:p] for _ in range(batch)]).astype(np.int64)
    candidates[1, -9:] = -1  # padding
    candidates[2, :] = -1  # an empty pool
    named = np.zeros((batch, p), dtype=bool)
    for b in range(batch):
        docs_here = np.unique(doc_of[candidates[b][candidates[b] >= 0]])
        k = [0, 1, 2, 2, 3, 5, 11, 4, 2][b]
        picked = rng.choice(docs_here, size=min(k, len(docs_here)), replace=False) if len(docs_here) else []
        named[b] = np.isin(doc_of[np.maximum(candidates[b], 0)], picked) & (candidates[b] >= 0)
    scores = rng.random((batch, p)).astype(np.float32)
    scores[4, :6] = scores[4, 6]  # ties: the smaller chunk id first
    scores[candidates < 0] = float("-inf")
    docs = np.where(candidates >= 0, doc_of[np.maximum(candidates, 0)], -1)
    return graphs, doc_of, torch.from_numpy(candidates), torch.from_numpy(named), torch.from_numpy(scores), \
        torch.from_numpy(docs)


def expected(graphs, doc_of, candidates, named, scores, depth):
    """The reference, one query at a time, its lifted scores rounded to float32 as the pipeline's."""
    dicts = [{i: {int(j): float(w) for j, w in zip(g.indices[g.indptr[i]:g.indptr[i + 1]],
                                                     g.data[g.indptr[i]:g.indptr[i + 1]])} for i in range(N)}
             for g in graphs]
    out = scores.clone()
    for b in range(candidates.shape[0]):
        pool = [int(c) for c in candidates[b] if c >= 0]
        if not pool:
            continue
        s = {int(c): float(scores[b, i]) for i, c in enumerate(candidates[b].tolist()) if c >= 0}
        named_chunks = {int(candidates[b, i]) for i in range(candidates.shape[1]) if named[b, i]}
        got = reference_cover(s, pool, named_chunks, dicts, doc_of, depth, max_named=MAX_NAMED)
        for i, c in enumerate(candidates[b].tolist()):
            if c >= 0:
                out[b, i] = float(np.float32(got[c]))
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("depth", [1, 3, 20, 60])
def test_cover_equals_the_per_query_reference_on_blocks(seed, depth, device):
    graphs, doc_of, cand, named, scores, docs = random_case(seed)
    blocks = candidate_blocks(cand.to(device), [TorchCSR.from_scipy(g, device) for g in graphs])
    got = cover_named(scores.to(device), blocks, named.to(device), docs.to(device), cand.to(device), depth=depth)
    torch.testing.assert_close(got.cpu(), expected(graphs, doc_of, cand, named, scores, depth), rtol=0, atol=2e-6)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("depth", [1, 3, 20, 60])
def test_cover_equals_the_per_query_reference_on_cpu_pools(seed, depth):
    graphs, doc_of, cand, named, scores, docs = random_case(seed)
    pools = candidate_blocks(cand, graphs)  # unbuilt: only the queries naming several documents are read
    got = cover_named(scores, pools, named, docs, cand, depth=depth)
    torch.testing.assert_close(got, expected(graphs, doc_of, cand, named, scores, depth), rtol=0, atol=2e-6)


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_cover_gives_the_torch_versions_bits(seed):
    """The CPU batch's compiled kernel (named chunks' CSR rows) against the torch version on
    the pools' blocks: the same marks, so the same lifted float32 scores."""
    graphs, doc_of, cand, named, scores, docs = random_case(seed)
    for depth in (1, 4, 20, 60):
        compiled = cover_named(scores, candidate_blocks(cand, graphs), named, docs, cand, depth=depth)
        blocks = candidate_blocks(cand, [TorchCSR.from_scipy(g, "cpu") for g in graphs])
        assert torch.equal(compiled, cover_named(scores, blocks, named, docs, cand, depth=depth))
    one = cover_named(scores, candidate_blocks(cand, graphs[:1]), named, docs, cand, depth=20)  # relations only
    assert torch.equal(one, cover_named(scores, candidate_blocks(cand, [TorchCSR.from_scipy(graphs[0], "cpu")]),
                                        named, docs, cand, depth=20))


def test_the_cover_moves_only_queries_naming_several_documents_and_keeps_their_order():
    graphs, doc_of, cand, named, scores, docs = random_case(0)
    got = cover_named(scores, candidate_blocks(cand, graphs), named, docs, cand, depth=20)
    _, count = named_document_bits(named, docs)
    moved = ((got - scores).abs() > 0) & (cand >= 0)
    assert moved.any(), "nothing moved: the case would test nothing"
    assert not moved[count < 2].any()  # a query naming one document or none is untouched
    for b in moved.any(dim=1).nonzero().squeeze(1).tolist():
        up, rest = got[b][moved[b]], got[b][~moved[b] & (cand[b] >= 0)]
        assert up.min() > rest.max()  # the first bridges above every other candidate
        assert torch.equal(torch.argsort(up, descending=True), torch.argsort(scores[b][moved[b]], descending=True))


def test_named_document_bits_number_each_querys_documents_in_code_order():
    named = torch.tensor([[True, True, False, True], [False, False, False, False], [True, False, True, True]])
    docs = torch.tensor([[7, 3, 3, 7], [1, 2, 3, 4], [5, 5, 9, 2]])
    bits, count = named_document_bits(named, docs)
    assert bits.tolist() == [[1, 0, -1, 1], [-1, -1, -1, -1], [1, -1, 2, 0]]
    assert count.tolist() == [2, 0, 3]


def test_named_document_bits_compiled_equal_torch():
    """The compiled numbering (the CPU path) against the torch one on random pools: many
    documents, repeated codes, rows naming nothing or everything."""
    pytest.importorskip("numba")
    from spectrag.kernels.compiled.documents import named_document_bits_compiled

    g = torch.Generator().manual_seed(3)
    named = torch.rand(50, 60, generator=g) < 0.3
    named[0], named[1] = False, True
    docs = torch.randint(0, 25, (50, 60), generator=g)
    want = named_document_bits(named, docs)
    got = named_document_bits_compiled(named.numpy(), docs.numpy())
    assert torch.equal(torch.from_numpy(got[0]), want[0]) and torch.equal(torch.from_numpy(got[1]), want[1])
    assert int(want[1].max()) > 10 and int(want[1][0]) == 0


def test_the_device_stage_reads_nothing_back_to_the_host():
    """On a device the cover is fixed-shape tensor work: no ``.item()``, ``nonzero``, boolean-mask
    index or data-sized op (spectrag.util.syncs.SyncCounter, here on the CPU's tensors)."""
    from spectrag.rescore.bridge import lift_above
    from spectrag.rescore.cover import cover_anchors, first_bridges

    graphs, doc_of, cand, named, scores, docs = random_case(3)
    blocks = candidate_blocks(cand, [TorchCSR.from_scipy(g, "cpu") for g in graphs])
    with SyncCounter(where=True) as syncs:
        bits, count = named_document_bits(named & (cand >= 0), docs)
        anchors = cover_anchors(blocks, bits, named)
        marked = first_bridges(scores, anchors, named, cand, count >= 2, 20)
        lifted = lift_above(scores, marked, cand)
    assert syncs.total == 0, syncs.places
    torch.testing.assert_close(lifted, expected(graphs, doc_of, cand, named, scores, 20), rtol=0, atol=2e-6)
