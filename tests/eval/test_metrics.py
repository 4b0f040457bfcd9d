"""Batched metrics against hand-computed cases and a plain per-question reference, and against
ir_measures (trec_eval) on the same run."""

from __future__ import annotations

import math

import pytest
import torch

from spectrag.eval import metrics as M

KS = [1, 2, 5, 10]


# --- per-question reference (plain Python) ---------------------------------------------------


def ref_collapse(ranking: list[int], unit_of: list[int]) -> list[int]:
    out: list[int] = []
    for c in ranking:
        if c >= 0 and unit_of[c] not in out:
            out.append(unit_of[c])
    return out


def ref_metrics(ranked: list[int], gold: dict[int, float], selected: list[int], ks: list[int]) -> list[float]:
    ranked = [r for r in ranked if r >= 0]
    recall = [len(set(ranked[:k]) & set(gold)) / len(gold) for k in ks]
    rr = next((1 / (i + 1) for i, r in enumerate(ranked) if r in gold), 0.0)
    dcg = sum(gold.get(r, 0.0) / math.log2(i + 2) for i, r in enumerate(ranked[:10]))
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gold.values(), reverse=True)[:10]))
    sel = [s for s in selected if s >= 0]
    found = len(set(sel) & set(gold))
    p = found / len(sel) if sel else 0.0
    r = found / len(gold)
    f = 2 * p * r / (p + r) if p + r else 0.0
    return recall + [rr, dcg / idcg, p, r, f]


def batched(ranked, gold, gains, selected, ks):
    n_gold = (gold >= 0).sum(dim=1)
    hit = M.hits(ranked, gold)
    return torch.cat([
        M.recall_at(hit, n_gold, ks),
        M.reciprocal_rank(hit)[:, None],
        M.ndcg_at(M.gold_gain(ranked, gold, gains), gains, 10)[:, None],
        M.set_prf(selected, gold, n_gold),
    ], dim=1)


# --- hand-computed -----------------------------------------------------------------------------


def test_hand_computed_case():
    # gold {3, 7}; ranking 5, 3, 9, 7, 1 -> hits at ranks 2 and 4
    ranked = torch.tensor([[5, 3, 9, 7, 1]])
    gold = torch.tensor([[3, 7]])
    gains = torch.tensor([[1.0, 1.0]])
    selected = torch.tensor([[5, 3, 9, -1]])  # context {5, 3, 9}: one of three is gold
    out = batched(ranked, gold, gains, selected, [1, 2, 5])[0].tolist()
    idcg = 1 + 1 / math.log2(3)
    expected = [0.0, 0.5, 1.0, 0.5, (1 / math.log2(3) + 1 / math.log2(5)) / idcg, 1 / 3, 0.5, 0.4]
    assert out == pytest.approx(expected, abs=1e-12)


def test_no_hit_empty_context_and_padding():
    ranked = torch.tensor([[4, 5, -1, -1]])
    gold = torch.tensor([[1, -1]])
    out = batched(ranked, gold, torch.tensor([[1.0, 0.0]]), torch.tensor([[-1, -1]]), [2, 10])[0].tolist()
    assert out == [0.0] * 7  # F1 = 0 when P + R = 0; an empty context has P = 0


def test_recall_is_fraction_of_gold_not_any_hit():
    # HippoRAG's Recall@k: 1 of 3 gold in the top 2 -> 1/3 (an "any gold" hit rate would say 1)
    out = M.recall_at(M.hits(torch.tensor([[8, 1]]), torch.tensor([[1, 2, 3]])), torch.tensor([3]), [2])
    assert out.item() == pytest.approx(1 / 3)


def test_graded_ndcg():
    # gains 3 (id 1) and 1 (id 2); ranking 2, 1 -> DCG = 1 + 3/log2 3, ideal 3 + 1/log2 3
    nd = M.ndcg_at(M.gold_gain(torch.tensor([[2, 1]]), torch.tensor([[1, 2]]), torch.tensor([[3.0, 1.0]])),
                   torch.tensor([[3.0, 1.0]]), 10)
    assert nd.item() == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))


def test_collapse_keeps_each_unit_at_its_best_chunk():
    unit_of = torch.tensor([0, 0, 1, 2, 2, 2])
    ranked = torch.tensor([[4, 0, 3, 1, 5, 2, -1], [-1, -1, -1, -1, -1, -1, -1]])
    assert M.collapse(ranked, unit_of).tolist() == [[2, 0, 1, -1, -1, -1, -1], [-1] * 7]


def test_mean_skips_questions_without_gold():
    values = torch.tensor([[1.0], [0.0], [0.5]], dtype=torch.float64)
    assert M.mean(values, torch.tensor([True, False, True])).item() == pytest.approx(0.75)


# --- batched equals the per-question reference on random inputs ------------------------------


def _random_case(seed: int, batch: int = 16, length: int = 30, n: int = 40, units: int = 25):
    g = torch.Generator().manual_seed(seed)
    unit_of = torch.randint(0, units, (n,), generator=g)
    ranked = torch.stack([torch.randperm(n, generator=g)[:length] for _ in range(batch)])
    cut = torch.randint(0, length + 1, (batch,), generator=g)
    ranked = torch.where(torch.arange(length)[None, :] < cut[:, None], ranked, -1)
    n_gold = torch.randint(1, 6, (batch,), generator=g)
    gold = torch.full((batch, 6), -1)
    gains = torch.zeros((batch, 6), dtype=torch.float64)
    for b in range(batch):
        gold[b, : n_gold[b]] = torch.randperm(units + 3, generator=g)[: n_gold[b]]  # some never retrievable
        gains[b, : n_gold[b]] = torch.randint(1, 4, (int(n_gold[b]),), generator=g).double()
    selected = ranked[:, torch.randperm(length, generator=g)[:8]]
    return unit_of, ranked, gold, gains, selected


@pytest.mark.parametrize("seed", range(5))
def test_batched_equals_reference(seed):
    unit_of, ranked, gold, gains, selected = _random_case(seed)
    units = M.collapse(ranked, unit_of)
    chosen = M.collapse(selected, unit_of)
    out = batched(units, gold, gains, chosen, KS)
    for b in range(ranked.shape[0]):
        gl = {u: w for u, w in zip(gold[b].tolist(), gains[b].tolist()) if u >= 0}
        r = ref_collapse(ranked[b].tolist(), unit_of.tolist())
        assert [u for u in units[b].tolist() if u >= 0] == r
        s = ref_collapse(selected[b].tolist(), unit_of.tolist())
        assert out[b].tolist() == pytest.approx(ref_metrics(r, gl, s, KS), abs=1e-12)


# --- ir_measures (trec_eval) on the same run ---------------------------------------------------


def test_agrees_with_ir_measures(tmp_path):
    ir_measures = pytest.importorskip("ir_measures", reason="ir-measures is in the test extra: pip install -e '.[test]'")
    unit_of, ranked, gold, gains, selected = _random_case(7, batch=24)
    units, chosen = M.collapse(ranked, unit_of), M.collapse(selected, unit_of)
    qrels, run, ctx = [], [], []
    for b in range(units.shape[0]):
        qrels += [ir_measures.Qrel(f"q{b}", f"d{u}", int(w)) for u, w in zip(gold[b].tolist(), gains[b].tolist()) if u >= 0]
        row = [u for u in units[b].tolist() if u >= 0]
        run += [ir_measures.ScoredDoc(f"q{b}", f"d{u}", float(len(row) - i)) for i, u in enumerate(row)]
        sel = [u for u in chosen[b].tolist() if u >= 0]
        ctx += [ir_measures.ScoredDoc(f"q{b}", f"d{u}", float(len(sel) - i)) for i, u in enumerate(sel)]
    ours = batched(units, gold, gains, chosen, [2, 5, 10])
    keep = torch.tensor([bool(((units[b] >= 0).any()) and (chosen[b] >= 0).any()) for b in range(units.shape[0])])
    mean = M.mean(ours, keep).tolist()  # trec_eval averages over queries present in the run
    names = ["R@2", "R@5", "R@10", "RR", "nDCG@10"]
    theirs = ir_measures.calc_aggregate([ir_measures.parse_measure(m) for m in names],
                                        [q for q in qrels if keep[int(q.query_id[1:])]],
                                        [r for r in run if keep[int(r.query_id[1:])]])
    for name, value in zip(names, mean[:5]):
        assert theirs[ir_measures.parse_measure(name)] == pytest.approx(value, abs=1e-9), name
    sets = ir_measures.calc_aggregate([ir_measures.SetP, ir_measures.SetR, ir_measures.SetF],
                                      [q for q in qrels if keep[int(q.query_id[1:])]],
                                      [r for r in ctx if keep[int(r.query_id[1:])]])
    assert [sets[ir_measures.SetP], sets[ir_measures.SetR], sets[ir_measures.SetF]] == pytest.approx(mean[5:], abs=1e-9)


def test_all_found_at_k_is_recall_one():
    unit_of, ranked, gold, gains, selected = _random_case(11, batch=40)
    units = M.collapse(ranked, unit_of)
    n_gold = (gold >= 0).sum(dim=1)
    hit = M.hits(units, gold)
    assert M.all_found_at(hit, n_gold, 5).sum() >= 3  # the case has questions with all of their gold found
    for k in (1, 2, 5):
        got = M.all_found_at(hit, n_gold, k).tolist()
        for b in range(units.shape[0]):
            ranked_b = [u for u in units[b].tolist() if u >= 0][:k]
            want = set(u for u in gold[b].tolist() if u >= 0)
            assert got[b] == float(bool(want) and want <= set(ranked_b))


def test_paired_bootstrap_interval():
    g = torch.Generator().manual_seed(3)
    diff = torch.randn(200, generator=g, dtype=torch.float64) * 0.2 + 0.1
    lo, hi = M.paired_bootstrap_ci(diff)
    assert lo < diff.mean().item() < hi and (lo, hi) == M.paired_bootstrap_ci(diff)  # fixed seed
    se = diff.std().item() / math.sqrt(200)  # the normal interval is about mean +- 1.96 se
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)
    assert M.paired_bootstrap_ci(torch.zeros(50, dtype=torch.float64)) == (0.0, 0.0)
