"""Reciprocal rank fusion (spectrag.seed.rrf): the vectorized batch, on the ``device`` fixture's
devices, equals a per-query dictionary reference."""

from __future__ import annotations

import torch
from conftest import to_cpu

from spectrag.seed.rrf import reciprocal_rank_fusion


def _reference(lists: list[list[int]], k: int) -> list[tuple[float, int]]:
    scores: dict[int, float] = {}
    for ranked in lists:
        for rank, i in enumerate(ranked, start=1):
            if i >= 0:
                scores[i] = scores.get(i, 0.0) + 1.0 / (k + rank)
    return sorted(((s, i) for i, s in scores.items()), key=lambda t: (-t[0], t[1]))


def test_rrf_matches_per_query_reference_on_random_lists(device):
    gen = torch.Generator().manual_seed(0)
    for trial in range(20):
        batch, n = 7, 30
        lists = []
        for width in (10, 6, 12):
            ids = torch.stack([torch.randperm(n, generator=gen)[:width] for _ in range(batch)])
            ids[torch.rand(batch, width, generator=gen) < 0.15] = -1  # empty slots
            lists.append(ids)
        scores, ids = to_cpu(reciprocal_rank_fusion([l.to(device) for l in lists], k=60, top=8))
        for b in range(batch):
            ref = _reference([l[b].tolist() for l in lists], 60)[:8]
            got = [(s, i) for s, i in zip(scores[b].tolist(), ids[b].tolist()) if i >= 0]
            assert [i for _, i in got] == [i for _, i in ref]
            assert all(abs(s - r) < 1e-6 for (s, _), (r, _) in zip(got, ref))


def test_rrf_ties_break_by_smaller_id_and_pads(device):
    a = torch.tensor([[5, 2]], device=device)
    b = torch.tensor([[2, 5]], device=device)
    scores, ids = reciprocal_rank_fusion([a, b], top=4)
    assert ids.tolist() == [[2, 5]]  # only two distinct ids: the output is as wide as needed
    assert scores[0, 0] == scores[0, 1]


def test_compiled_fusion_equals_torch_bitwise():
    """The CPU pipeline's compiled fusion (spectrag.kernels.compiled.fusion): the torch version's
    scores bit for bit, its ids and its width, over lists with padding, ids in several lists,
    empty rows, one list and none deep enough for ``top``."""
    from spectrag.kernels.compiled.fusion import reciprocal_rank_fusion_compiled

    gen = torch.Generator().manual_seed(1)
    shared = 0
    for trial in range(300):
        batch = int(torch.randint(0, 7, (1,), generator=gen))
        lists = []
        for _ in range(int(torch.randint(1, 5, (1,), generator=gen))):
            width = int(torch.randint(1, 14, (1,), generator=gen))
            ids = torch.stack([torch.randperm(25, generator=gen)[:width] for _ in range(batch)]) if batch \
                else torch.zeros(0, width, dtype=torch.int64)
            ids[torch.rand(batch, width, generator=gen) < 0.2] = -1
            lists.append(ids)
        top = (None, 3, 8, 100)[trial % 4]
        want = reciprocal_rank_fusion(lists, k=60, top=top)
        got = reciprocal_rank_fusion_compiled(lists, k=60, top=top)
        assert got[0].shape == want[0].shape and got[0].dtype == want[0].dtype == torch.float32
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), trial
        shared += int((want[0] > 1.0 / 61 + 1e-9).sum())  # an id in more than one list
    assert shared > 100  # fused sums were compared, not only single contributions
    a, b = torch.tensor([[5, 2]]), torch.tensor([[2, 5]])
    assert reciprocal_rank_fusion_compiled([a, b], top=4)[1].tolist() == [[2, 5]]  # a tie: the smaller id
