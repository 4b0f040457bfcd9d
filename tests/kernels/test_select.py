"""Token-budgeted greedy selection: batched kernel == per-query Python reference, invariants,
brute-force optima where greedy is exact, edge cases and input errors. The kernel runs on the
``device`` fixture's devices (``run``: inputs moved there, the result back on the CPU), the
reference on the CPU, compared as before on any device (order, phase, selection and tokens
exactly, utility to 1e-12), as the former CUDA-only test compared GPU and CPU runs."""

from __future__ import annotations

from dataclasses import asdict

import itertools
import math

import numpy as np
import pytest
import torch
from conftest import to_cpu

from spectrag.config import SelectConfig
from spectrag.kernels.select import SelectResult, budget_select
from spectrag.reference.select import budget_select_reference



# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

INPUT_NAMES = ("scores", "prox", "tokens", "mask", "embeddings", "clusters", "docs")


def params(budget=12_000, **kw) -> dict:
    """The kernel's keyword arguments: the engine's selection defaults (SelectConfig) and a budget;
    without the evidence cut unless ``stop_floor`` is given (the tests of the phases fill the
    budget; the cut has tests of its own and a share of the random configurations)."""
    return {"budget": budget, **asdict(SelectConfig(**{"stop_floor": 0.0, **kw}))}


def make_case(
    seed: int,
    B: int,
    P: int,
    *,
    d: int = 6,
    ties: bool = False,
    negative: bool = False,
    tokens: tuple[int, int] = (1, 30),
    pad: float = 0.25,
    n_clusters: int = 3,
    n_docs: int = 4,
    garbage: bool = True,
    dtype: torch.dtype = torch.float64,
) -> dict:
    """Random padded pools.  ``ties=True`` draws everything from small exact (dyadic) sets, so
    scores, proximities, cosines and even ``U / l**rho`` tie exactly (lengths are perfect
    squares, making ``l**0.5`` exact too) and both implementations compute identical floats.
    ``garbage=True`` fills padded slots with NaN / 0 / -7 that must be ignored."""
    g = torch.Generator().manual_seed(seed)
    if ties:
        scores = torch.randint(0, 5, (B, P), generator=g).double() / 4
        prox = torch.randint(0, 3, (B, P), generator=g).double() / 2
        tok = torch.randint(1, 6, (B, P), generator=g) ** 2
        emb = (torch.randint(0, 2, (B, P, 4), generator=g).double() - 0.5)  # +-1/2: unit norm
    else:
        scores = torch.rand(B, P, generator=g, dtype=torch.float64)
        if negative:
            scores = 2.0 * scores - 1.2
        prox = torch.rand(B, P, generator=g, dtype=torch.float64)
        tok = torch.randint(tokens[0], tokens[1] + 1, (B, P), generator=g)
        emb = torch.randn(B, P, d, generator=g, dtype=torch.float64)
        emb = emb / emb.norm(dim=2, keepdim=True)
    mask = torch.rand(B, P, generator=g) >= pad
    clusters = torch.randint(0, n_clusters, (B, P), generator=g)
    docs = torch.randint(0, n_docs, (B, P), generator=g)
    if garbage:
        scores = scores.masked_fill(~mask, math.nan)
        prox = prox.masked_fill(~mask, 7.0)
        tok = tok.masked_fill(~mask, 0)
        emb = emb.masked_fill(~mask.unsqueeze(2), math.nan)
        clusters = clusters.masked_fill(~mask, -7)
    return dict(
        scores=scores.to(dtype), prox=prox.to(dtype), tokens=tok, mask=mask,
        embeddings=emb.to(dtype), clusters=clusters, docs=docs,
    )


def run(device: torch.device, case: dict, **cfg) -> SelectResult:
    """budget_select with the case's tensors (and a tensor budget) on ``device``; the result on
    the CPU."""
    cfg = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in cfg.items()}
    return to_cpu(budget_select(**{k: v.to(device) for k, v in case.items()}, **cfg))


def random_config(rng: np.random.Generator, case: dict) -> tuple[dict, object]:
    cfg = params(
        budget=int(rng.choice([0, 5, 40, 120, 10_000])),
        core_size=int(rng.choice([0, 1, 3, 5])),
        a=float(rng.choice([1.0, 0.5, 0.0])),
        b=float(rng.choice([0.0, 0.3, 1.0])),
        c=float(rng.choice([0.0, 0.1, 0.5])),
        d=float(rng.choice([0.0, 0.1, 0.5])),
        lam=float(rng.choice([0.0, 0.5, 2.0])),
        rho=float(rng.choice([0.0, 0.3, 0.5, 1.0])),
        precision_floor=float(rng.choice([0.0, 0.3, 0.5, 1.0])),
        backfill=bool(rng.integers(2)),
        backfill_floor=float(rng.choice([0.0, 0.0, 0.4, 0.8])),
        stop_floor=float(rng.choice([0.0, 0.0, 0.3, 0.7, 1.0])),
    )
    budget = cfg["budget"]
    if rng.integers(3) == 0:  # per-query budgets
        B = case["scores"].shape[0]
        budget = torch.from_numpy(rng.integers(0, 150, B))
    return cfg, budget


def assert_same(r: SelectResult, q: SelectResult) -> None:
    assert torch.equal(r.order, q.order), f"order\n{r.order}\n!=\n{q.order}"
    assert torch.equal(r.phase, q.phase), f"phase\n{r.phase}\n!=\n{q.phase}"
    assert torch.equal(r.selected, q.selected)
    assert torch.equal(r.used_tokens, q.used_tokens)
    assert r.n_steps == q.n_steps
    assert r.utility.dtype == q.utility.dtype
    torch.testing.assert_close(r.utility, q.utility, rtol=1e-12, atol=1e-12, equal_nan=True)


def above_cut(s: list[float], ids: list[int], floor: float) -> list[int]:
    """The candidates the evidence cut keeps: ``s >= m + floor (top - m)``, ``m`` the lower median."""
    if floor == 0 or not ids:
        return ids
    ranked = sorted((s[i] for i in ids), reverse=True)
    median = ranked[len(ranked) // 2]
    return [i for i in ids if s[i] >= median + floor * (ranked[0] - median)]


def check_invariants(case: dict, cfg: dict, res: SelectResult, budget=None) -> None:
    B, P = case["scores"].shape
    bud = torch.full((B,), cfg["budget"]) if budget is None else torch.as_tensor(budget).expand(B)
    mask, tok, s = case["mask"], case["tokens"], case["scores"].double()
    K = res.order.shape[1]
    assert res.order.dtype == torch.int64 and res.phase.dtype == torch.int8
    assert res.selected.shape == (B, P) and res.used_tokens.dtype == torch.int64
    for q in range(B):
        picks = [i for i in res.order[q].tolist() if i >= 0]
        n = len(picks)
        assert res.order[q, n:].eq(-1).all() and res.phase[q, n:].eq(-1).all()
        assert res.phase[q, :n].ge(0).all()
        assert len(set(picks)) == n and all(mask[q, i] for i in picks)  # padding never taken
        assert sorted(picks) == res.selected[q].nonzero().flatten().tolist()
        used = sum(int(tok[q, i]) for i in picks)
        assert used == int(res.used_tokens[q]) <= int(bud[q])  # never over budget
        phases = res.phase[q, :n].tolist()
        assert phases == sorted(phases)  # core, then tail, then backfill
        ids = above_cut(s[q].tolist(), [i for i in range(P) if mask[q, i]], cfg["stop_floor"])
        assert set(picks) <= set(ids)  # nothing below the evidence cut
        # core = top-core_size by s (ties: position), each taken iff it fits, in that order
        top = sorted(ids, key=lambda i: (-float(s[q, i]), i))[: cfg["core_size"]]
        rem, core = int(bud[q]), []
        for i in top:
            if int(tok[q, i]) <= rem:
                core.append(i)
                rem -= int(tok[q, i])
        assert [i for i, p in zip(picks, phases) if p == 0] == core
        if ids:
            floor = cfg["precision_floor"] * max(float(s[q, i]) for i in ids)
            assert all(float(s[q, i]) >= floor for i, p in zip(picks, phases) if p == 1)
        left = int(bud[q]) - used
        unpicked = [i for i in ids if not res.selected[q, i]]  # above the cut
        fitting = [i for i in unpicked if int(tok[q, i]) <= left]
        if cfg["backfill"]:
            back = cfg["backfill_floor"] * max(float(s[q, i]) for i in ids) if ids else 0.0
            assert not [i for i in fitting if float(s[q, i]) >= back]  # backfill fills until nothing fits
            assert all(float(s[q, i]) >= back for i, p in zip(picks, phases) if p == 2)
        else:
            assert not [i for i in fitting if float(s[q, i]) >= floor]
            assert 2 not in phases
    assert K == max([int((res.order[q] >= 0).sum()) for q in range(B)], default=0)


# ---------------------------------------------------------------------------------------------
# batched == reference
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
def test_equals_reference_on_random_cases(ties, device):
    rng = np.random.default_rng(1 if ties else 0)
    for seed in range(200):
        B = int(rng.choice([1, 2, 5, 9]))
        P = int(rng.choice([1, 3, 8, 17, 33]))
        case = make_case(
            seed, B, P, ties=ties, negative=not ties and seed % 4 == 0,
            pad=float(rng.choice([0.0, 0.3, 0.8])),
            n_clusters=int(rng.choice([1, 3, 50])), n_docs=int(rng.choice([1, 4, 50])),
        )
        cfg, budget = random_config(rng, case)
        r = run(device, case, **{**cfg, "budget": budget})
        q = budget_select_reference(**case, **{**cfg, "budget": budget})
        assert_same(r, q)
        check_invariants(case, cfg, r, budget)


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("backfill", [True, False])
def test_equals_reference_default_weights(rho, backfill, device):
    case = make_case(11, 6, 40, d=8, tokens=(5, 60), n_clusters=5, n_docs=8)
    for stop in (0.0, SelectConfig().stop_floor):  # without and with the default evidence cut
        cfg = params(budget=300, rho=rho, backfill=backfill, stop_floor=stop)
        assert_same(run(device, case, **cfg), budget_select_reference(**case, **cfg))
    ties = make_case(12, 6, 40, ties=True)
    cfg = params(budget=120, rho=rho, backfill=backfill, precision_floor=0.75)
    assert_same(run(device, ties, **cfg), budget_select_reference(**ties, **cfg))


def test_exact_ties_go_to_smaller_position(device):
    # identical candidates everywhere: every arg max is a tie, so the order is by position
    B, P = 3, 6
    one = torch.ones(B, P, dtype=torch.float64)
    case = dict(
        scores=one.clone(), prox=one * 0.5, tokens=torch.ones(B, P, dtype=torch.int64),
        mask=torch.ones(B, P, dtype=torch.bool), embeddings=torch.ones(B, P, 1, dtype=torch.float64),
        clusters=torch.zeros(B, P, dtype=torch.int64), docs=torch.zeros(B, P, dtype=torch.int64),
    )
    for core in (0, 2):
        cfg = params(budget=4, core_size=core)
        r = run(device, case, **cfg)
        assert r.order.tolist() == [[0, 1, 2, 3]] * B
        assert_same(r, budget_select_reference(**case, **cfg))


def test_batched_equals_single_query_calls(device):
    case = make_case(5, 12, 30, d=5, tokens=(3, 40))
    budget = torch.arange(12) * 25
    cfg = params(budget=0, core_size=2, rho=0.5, lam=1.0)
    r = run(device, case, **{**cfg, "budget": budget})
    K = r.order.shape[1]
    for q in range(12):
        one = {k: v[q : q + 1] for k, v in case.items()}
        r1 = run(device, one, **{**cfg, "budget": budget[q : q + 1]})
        k = r1.order.shape[1]
        assert torch.equal(r1.order[0], r.order[q, :k]) and r.order[q, k:].eq(-1).all()
        assert torch.equal(r1.phase[0], r.phase[q, :k])
        assert torch.equal(r1.utility[0], r.utility[q, :k]) and r.utility[q, k:].isnan().all()
        assert torch.equal(r1.selected[0], r.selected[q])
        assert int(r1.used_tokens[0]) == int(r.used_tokens[q])
        assert k <= K


def test_permutation_equivariance(device):
    # no ties: permuting the candidate positions of each query permutes the result
    case = make_case(21, 4, 25, d=6, tokens=(2, 30), garbage=False)
    cfg = params(budget=150, core_size=2)
    r = run(device, case, **cfg)
    perm = torch.stack([torch.randperm(25, generator=torch.Generator().manual_seed(q)) for q in range(4)])
    permuted = {k: v.gather(1, perm if v.dim() == 2 else perm.unsqueeze(2).expand_as(v)) for k, v in case.items()}
    rp = run(device, permuted, **cfg)
    back = torch.where(rp.order >= 0, perm.gather(1, rp.order.clamp_min(0)), rp.order)
    assert torch.equal(back, r.order) and torch.equal(rp.phase, r.phase)
    torch.testing.assert_close(rp.utility, r.utility, equal_nan=True)


def test_float32_inputs_and_output_dtype(device):
    case = make_case(3, 5, 20, ties=True, dtype=torch.float32)  # dyadic: exact in float32
    cfg = params(budget=60, rho=0.5)
    r = run(device, case, **cfg)
    assert r.utility.dtype == torch.float64
    assert_same(r, budget_select_reference(**case, **cfg))
    r64 = run(device, {k: v.double() if v.is_floating_point() else v for k, v in case.items()}, **cfg)
    assert_same(r, r64)


# ---------------------------------------------------------------------------------------------
# invariants on larger pools (batched only)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backfill", [True, False])
def test_invariants_larger_pools(backfill, device):
    rng = np.random.default_rng(7)
    for seed in range(6):
        case = make_case(100 + seed, 16, 120, d=12, tokens=(10, 200), n_clusters=6, n_docs=20)
        cfg = params(budget=int(rng.integers(50, 3000)), core_size=int(rng.integers(0, 6)),
                           precision_floor=float(rng.uniform(0, 1)), backfill=backfill)
        check_invariants(case, cfg, run(device, case, **cfg))


def test_backfill_fills_and_off_leaves_budget(device):
    # floor 1.0: only the top score passes the tail; the rest must come from backfill
    case = make_case(8, 3, 20, tokens=(1, 10), garbage=False, pad=0.0)
    on = run(device, case, **params(budget=60, core_size=0, precision_floor=1.0))
    off = run(device, case, **params(budget=60, core_size=0, precision_floor=1.0, backfill=False))
    assert off.order.shape[1] == 1 and off.phase.eq(1).all()
    assert (on.phase == 2).sum(1).ge(1).all() and (on.used_tokens > off.used_tokens).all()
    assert on.used_tokens.le(60).all()
    # backfill order is by descending s
    for q in range(3):
        back = [i for i, p in zip(on.order[q].tolist(), on.phase[q].tolist()) if p == 2]
        vals = [float(case["scores"][q, i]) for i in back]
        assert vals == sorted(vals, reverse=True)
        torch.testing.assert_close(on.utility[q, on.phase[q] == 2], case["scores"][q, back])


def test_core_skips_what_does_not_fit_and_is_taken_first(device):
    s = torch.tensor([[0.9, 0.8, 0.7, 0.1, 0.2]], dtype=torch.float64)
    case = dict(
        scores=s, prox=torch.zeros_like(s), tokens=torch.tensor([[5, 50, 5, 1, 1]]),
        mask=torch.ones(1, 5, dtype=torch.bool), embeddings=torch.ones(1, 5, 1, dtype=torch.float64),
        clusters=torch.zeros(1, 5, dtype=torch.int64), docs=torch.zeros(1, 5, dtype=torch.int64),
    )
    r = run(device, case, **params(budget=12, core_size=3, precision_floor=0.0))
    # core: 0 fits, 1 (50 tokens) is skipped and not replaced, 2 fits; then 4, 3 (tail)
    assert r.order.tolist() == [[0, 2, 4, 3]] and r.phase.tolist() == [[0, 0, 1, 1]]
    assert r.used_tokens.tolist() == [12] and r.utility[0, :2].tolist() == [0.9, 0.7]
    assert_same(r, budget_select_reference(**case, **params(budget=12, core_size=3, precision_floor=0.0)))


# ---------------------------------------------------------------------------------------------
# brute force where greedy is exact
# ---------------------------------------------------------------------------------------------


def brute_force(values, lengths, budget):
    """max over all subsets C with sum(lengths) <= budget of sum(values[C]) (itertools)."""
    best = 0.0
    n = len(values)
    for r in range(n + 1):
        for C in itertools.combinations(range(n), r):
            if sum(lengths[i] for i in C) <= budget:
                best = max(best, sum(values[i] for i in C))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_unit_tokens_top_k_is_optimal(seed, device):
    P = 9
    case = make_case(seed, 2, P, pad=0.0, garbage=False)
    case["tokens"] = torch.ones(2, P, dtype=torch.int64)
    cfg0 = params(core_size=0, a=1.0, b=0.0, c=0.0, d=0.0, lam=0.0, rho=0.0, precision_floor=0.0)
    for k in range(P + 2):
        r = run(device, case, **{**cfg0, "budget": k})
        for q in range(2):
            s = case["scores"][q].tolist()
            picks = [i for i in r.order[q].tolist() if i >= 0]
            assert sorted(picks) == sorted(np.argsort(-np.asarray(s), kind="stable")[:k].tolist())
            assert math.isclose(sum(s[i] for i in picks), brute_force(s, [1] * P, k), rel_tol=1e-12)
    # additive utility a*s + b*prox with unit tokens (any rho: l**rho == 1): greedy == optimum
    cfg1 = params(core_size=0, a=0.7, b=0.4, c=0.0, d=0.0, lam=0.0, rho=1.0, precision_floor=0.0)
    for k in (0, 1, 3, 6):
        r = run(device, case, **{**cfg1, "budget": k})
        for q in range(2):
            u = (0.7 * case["scores"][q] + 0.4 * case["prox"][q]).tolist()
            picks = [i for i in r.order[q].tolist() if i >= 0]
            assert math.isclose(sum(u[i] for i in picks), brute_force(u, [1] * P, k), rel_tol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_equal_lengths_top_floor_budget_over_length(seed, device):
    P, L = 8, 7
    case = make_case(seed, 1, P, pad=0.0, garbage=False)
    case["tokens"] = torch.full((1, P), L)
    cfg = params(core_size=0, a=1.0, b=0.0, c=0.0, d=0.0, lam=0.0, rho=0.5, precision_floor=0.0)
    s = case["scores"][0].tolist()
    for budget in (0, 6, 7, 20, 21, 48, 100):
        r = run(device, case, **{**cfg, "budget": budget})
        picks = [i for i in r.order[0].tolist() if i >= 0]
        assert len(picks) == min(budget // L, P)
        assert math.isclose(sum(s[i] for i in picks), brute_force(s, [L] * P, budget), rel_tol=1e-12)


# ---------------------------------------------------------------------------------------------
# edge cases
# ---------------------------------------------------------------------------------------------


def test_budget_smaller_than_every_chunk_gives_empty_selection(device):
    case = make_case(4, 3, 10, tokens=(20, 40))
    for budget in (0, 19, torch.tensor([0, 5, 19])):
        r = run(device, case, **{**params(budget=12_000), "budget": budget})
        assert r.order.shape == (3, 0) and r.phase.shape == (3, 0) and r.utility.shape == (3, 0)
        assert not r.selected.any() and r.used_tokens.tolist() == [0, 0, 0]
        assert_same(r, budget_select_reference(**case, **{**params(), "budget": budget}))
    # one empty query among others: its row is all -1
    r = run(device, case, **{**params(), "budget": torch.tensor([100, 5, 100])})
    assert r.order[1].eq(-1).all() and r.phase[1].eq(-1).all() and int(r.used_tokens[1]) == 0
    assert r.order[0].ge(0).any()


def test_single_candidate_and_all_masked_and_empty_batch(device):
    case = make_case(6, 4, 1, garbage=False, pad=0.0)
    r = run(device, case, **params(budget=100))
    assert r.order.tolist() == [[0]] * 4 and r.phase.tolist() == [[0]] * 4
    assert_same(r, budget_select_reference(**case, **params(budget=100)))
    r = run(device, case, **params(budget=100, core_size=0))
    assert r.phase.tolist() == [[1]] * 4  # the only candidate is the top: it passes any floor
    case["mask"][:] = False
    r = run(device, case, **params())
    assert r.order.shape == (4, 0) and r.n_steps == 0
    assert_same(r, budget_select_reference(**case, **params()))
    empty = {k: v[:0] for k, v in case.items()}
    r = run(device, empty, **params())
    assert r.order.shape == (0, 0) and r.selected.shape == (0, 1)


def test_budget_larger_than_pool_selects_everything(device):
    case = make_case(9, 5, 12)
    r = run(device, case, **params(budget=10**9, precision_floor=1.0, backfill_floor=0.0, stop_floor=0.0))
    assert torch.equal(r.selected, case["mask"])
    assert r.order.shape[1] == int(case["mask"].sum(1).max())
    assert torch.equal(r.used_tokens, (case["tokens"] * case["mask"]).sum(1))
    assert_same(r, budget_select_reference(**case, **params(budget=10**9, precision_floor=1.0, backfill_floor=0.0,
                                                           stop_floor=0.0)))


def test_evidence_cut_stops_before_the_budget(device):
    # median of the 7 scores (index 7 // 2 = 3 in descending order) is 0.5; floor 0.5 cuts at
    # 0.5 + 0.5 * (1.0 - 0.5) = 0.75 (exact: dyadic): only the three chunks at or above it, the
    # budget left unused
    s = torch.tensor([[0.5, 1.0, 0.125, 0.75, 0.375, 0.875, 0.25]], dtype=torch.float64)
    case = dict(scores=s, prox=torch.zeros_like(s), tokens=torch.full((1, 7), 10),
                mask=torch.ones(1, 7, dtype=torch.bool), embeddings=torch.eye(7, dtype=torch.float64)[None],
                clusters=torch.arange(7)[None], docs=torch.arange(7)[None])
    for core in (0, 2, 5):
        cfg = params(budget=1000, core_size=core, precision_floor=0.0, backfill_floor=0.0, stop_floor=0.5)
        r = run(device, case, **cfg)
        assert sorted(r.order[0].tolist()) == [1, 3, 5] and r.used_tokens.tolist() == [30]
        assert_same(r, budget_select_reference(**case, **cfg))
    r = run(device, case, **params(budget=1000, core_size=0, precision_floor=0.0, backfill_floor=0.0, stop_floor=0.0))
    assert r.used_tokens.tolist() == [70]  # no cut: the whole pool fits
    # a padded slot does not count towards the median; the best chunk always stays
    case["mask"][0, 2] = False
    r = run(device, case, **params(budget=1000, stop_floor=1.0))
    assert r.order[0].tolist() == [1] and r.phase.tolist() == [[0]]


def test_kept_candidates_pass_the_evidence_cut(device):
    """``keep`` (the chunks bridging raised) lets a candidate below the cut into the context,
    after those above it (it is the lowest), and changes nothing without a cut; the reference
    agrees."""
    s = torch.tensor([[0.5, 1.0, 0.125, 0.75, 0.375, 0.875, 0.25]], dtype=torch.float64)
    case = dict(scores=s, prox=torch.zeros_like(s), tokens=torch.full((1, 7), 10),
                mask=torch.ones(1, 7, dtype=torch.bool), embeddings=torch.eye(7, dtype=torch.float64)[None],
                clusters=torch.arange(7)[None], docs=torch.arange(7)[None])
    keep = torch.tensor([[False, False, True, False, False, False, False]])
    cfg = params(budget=1000, core_size=2, precision_floor=0.0, backfill_floor=0.0, stop_floor=0.5)
    r = run(device, case, **cfg, keep=keep)
    assert r.order[0].tolist() == [1, 5, 3, 2] and r.used_tokens.tolist() == [40]
    assert_same(r, budget_select_reference(**case, **cfg, keep=keep))
    open_cfg = {**cfg, "stop_floor": 0.0}
    assert_same(run(device, case, **open_cfg, keep=keep), run(device, case, **open_cfg))
    with pytest.raises(ValueError, match="keep must be a bool"):
        run(device, case, **cfg, keep=keep.int())


@pytest.mark.parametrize("seed", range(3))
def test_keep_on_random_cases_equals_reference(seed, device):
    rng = np.random.default_rng(40 + seed)
    case = make_case(seed, 9, 33, pad=0.3, n_clusters=3, n_docs=4)
    keep = torch.from_numpy(rng.random((9, 33)) < 0.2)
    cfg = params(budget=300, core_size=3, stop_floor=0.6)
    r = run(device, case, **cfg, keep=keep)
    assert_same(r, budget_select_reference(**case, **cfg, keep=keep))
    assert not torch.equal(r.selected, run(device, case, **cfg).selected)  # keep matters here


def test_evidence_cut_is_scale_free(device):
    # an increasing affine map of the scores keeps the same candidates (relevance-only utility)
    case = make_case(31, 8, 40, d=5, tokens=(5, 50), garbage=False)
    cfg = params(budget=400, core_size=3, b=0.0, c=0.0, d=0.0, lam=0.0, precision_floor=0.0, backfill_floor=0.0,
                 stop_floor=0.6)
    r = run(device, case, **cfg)
    moved = run(device, {**case, "scores": 7.5 * case["scores"] - 3.0}, **cfg)
    assert torch.equal(r.selected, moved.selected) and torch.equal(r.order, moved.order)
    assert bool((r.used_tokens < 400).any())  # the cut binds somewhere: not a vacuous comparison


def test_thousand_small_pools(device):
    case = make_case(10, 1000, 8, d=4, tokens=(1, 6), pad=0.3)
    cfg = params(budget=12, core_size=1)
    r = run(device, case, **cfg)
    assert r.order.shape[0] == 1000 and r.used_tokens.le(12).all()
    assert_same(r, budget_select_reference(**case, **cfg))


def test_nan_in_padding_is_ignored(device):
    dirty = make_case(13, 4, 15, garbage=True)
    clean = {k: v.clone() for k, v in dirty.items()}
    m = clean["mask"]
    clean["scores"][~m] = 0.0
    clean["embeddings"][~m] = 0.0
    clean["prox"][~m] = 0.0
    clean["tokens"][~m] = 1
    assert_same(run(device, dirty, **params()), run(device, clean, **params()))


# ---------------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------------


def _bad(case, **change):
    out = {k: v.clone() for k, v in case.items()}
    out.update(change)
    return out


def test_bad_inputs_raise_with_the_argument_named():
    case = make_case(14, 4, 20, garbage=False, pad=0.0)
    B, P = 4, 20

    def tok0():
        t = case["tokens"].clone()
        t[3, 17] = 0
        return t

    def nan_at(name, where):
        t = case[name].clone()
        t[where] = math.nan
        return t

    bad = [
        (dict(tokens=tok0()), ValueError, r"tokens must be >= 1 where mask is True, found 0 at \[3, 17\]"),
        (dict(scores=nan_at("scores", (1, 2))), ValueError, r"scores must be finite .*scores\[1, 2\]"),
        (dict(prox=nan_at("prox", (0, 5))), ValueError, r"prox must be finite"),
        (dict(embeddings=nan_at("embeddings", (2, 3, 1))), ValueError, r"embeddings must be finite .*\[2, 3, 1\]"),
        (dict(scores=case["scores"].masked_fill(torch.eye(B, P, dtype=torch.bool), math.inf)), ValueError, "scores must be finite"),
        (dict(prox=case["prox"] + 1.5), ValueError, r"prox must be in \[0, 1\]"),
        (dict(tokens=case["tokens"].double()), TypeError, "tokens must have an integer dtype"),
        (dict(scores=case["tokens"]), TypeError, "scores must have a floating dtype"),
        (dict(clusters=case["clusters"].double()), TypeError, "clusters must have an integer dtype"),
        (dict(docs=case["docs"].bool()), TypeError, "docs must have an integer dtype"),
        (dict(mask=case["mask"].to(torch.uint8)), TypeError, "mask must have dtype torch.bool"),
        (dict(scores=case["scores"][0]), ValueError, r"scores must be 2-D \[B, P\]"),
        (dict(prox=case["prox"][:, :5]), ValueError, r"prox must have shape \[4, 20\]"),
        (dict(embeddings=case["embeddings"][:, :, 0]), ValueError, r"embeddings must have shape \[4, 20, d\]"),
        (dict(embeddings=case["embeddings"][:, :, :0]), ValueError, "d >= 1"),
        (dict(docs=case["docs"].to("meta")), ValueError, "docs is on meta but scores is on cpu"),
        (dict(mask=case["mask"].tolist()), TypeError, "mask must be a torch.Tensor, got list"),
    ]
    for change, exc, match in bad:
        with pytest.raises(exc, match=match):
            budget_select(**_bad(case, **change), **params())
        with pytest.raises(exc, match=match):
            budget_select_reference(**_bad(case, **change), **params())

    for budget, exc, match in [
        (-1, ValueError, "budget must be >= 0, got -1"),
        (2.5, TypeError, "budget must be an int"),
        (True, TypeError, "budget must be an int"),
        (torch.tensor([1, 2, 3]), ValueError, r"\[B\] = \[4\]"),
        (torch.tensor([1, 2, -3, 4]), ValueError, r"budget must be >= 0, found -3 at budget\[2\]"),
        (torch.ones(4), TypeError, "integer tensor"),
    ]:
        with pytest.raises(exc, match=match):
            budget_select(**case, **{**params(), "budget": budget})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(core_size=-1), "core_size must be an int >= 0"),
        (dict(core_size=1.5), "core_size must be an int >= 0"),
        (dict(rho=1.5), r"rho must be \[0, 1\], got 1.5"),
        (dict(precision_floor=-0.1), r"precision_floor must be \[0, 1\]"),
        (dict(lam=-1.0), "lam must be >= 0"),
        (dict(a=math.nan), "a must be >= 0 and finite"),
        (dict(b="x"), "b must be a real number"),
        (dict(backfill=1), "backfill must be a bool"),
    ],
)
def test_bad_parameters(kwargs, match):
    case = make_case(0, 2, 5)
    with pytest.raises((ValueError, TypeError), match=match):
        budget_select(**case, **{**params(), **kwargs})


def test_device_equals_cpu(device):
    """Formerly ``test_cuda_equals_cpu`` (skipped without CUDA): the kernel on ``device`` equals
    the kernel on the CPU, bitwise where ``assert_same`` asks for it."""
    rng = np.random.default_rng(3)
    for seed in range(20):
        case = make_case(seed, 7, 33, ties=bool(seed % 2))
        cfg, budget = random_config(rng, case)
        r = budget_select(**case, **{**cfg, "budget": budget})
        on_device = {k: v.to(device) for k, v in case.items()}
        rc = budget_select(**on_device, **{**cfg, "budget": budget.to(device) if torch.is_tensor(budget) else budget})
        assert rc.order.device.type == device.type
        assert_same(to_cpu(rc), r)


def test_table_and_ids_equal_gathered_embeddings(device):
    """``embeddings`` as the [n, d] table with ``ids``: the same selection as the gathered rows."""
    rng = np.random.default_rng(5)
    for seed in range(20):
        case = make_case(seed, 6, 25, ties=bool(seed % 2))
        n = 40
        table = torch.randn(n, case["embeddings"].shape[2], dtype=case["embeddings"].dtype)
        table = table / table.norm(dim=1, keepdim=True)
        ids = torch.from_numpy(rng.integers(0, n, size=case["scores"].shape))
        gathered = {**case, "embeddings": table[ids]}
        cfg, budget = random_config(rng, case)
        kw = {**cfg, "budget": budget}
        want = budget_select(**gathered, **kw)
        got = budget_select(**{k: v.to(device) for k, v in {**case, "embeddings": table}.items()},
                            **{**kw, "budget": budget.to(device) if torch.is_tensor(budget) else budget},
                            ids=ids.to(device))
        assert_same(SelectResult(*(t.cpu() if isinstance(t, torch.Tensor) else t for t in (
            got.order, got.selected, got.used_tokens, got.phase, got.utility, got.n_steps))), want)
        assert_same(budget_select_reference(**{**case, "embeddings": table}, **kw, ids=ids), want)


def test_table_rows_are_checked_where_they_are_read():
    """With ``ids``, a non-finite row of the table is an error when a candidate the tail weighs
    uses it, and no error (nor any effect) when no candidate does."""
    case = make_case(3, 4, 20, ties=False)
    n, d = 50, case["embeddings"].shape[2]
    table = torch.randn(n, d, dtype=case["embeddings"].dtype)
    table = table / table.norm(dim=1, keepdim=True)
    ids = torch.arange(4 * 20).reshape(4, 20) % 40  # rows 40..49 are never candidates
    kw = dict(budget=10**6, lam=0.2, precision_floor=0.0)
    want = budget_select(**{**case, "embeddings": table}, ids=ids, **kw)
    unused = table.clone()
    unused[45] = math.nan
    got = budget_select(**{**case, "embeddings": unused}, ids=ids, **kw)
    assert torch.equal(got.order, want.order)
    used = table.clone()
    used[int(ids[0, 0])] = math.nan
    case["mask"][0, 0] = True
    with pytest.raises(ValueError, match="embeddings must be finite"):
        budget_select(**{**case, "embeddings": used}, ids=ids, **kw)
