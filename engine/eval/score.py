"""Scoring a run against the gold evidence, at two levels:

* **passage level** (the headline): the chunk ranking is collapsed to units (a passage or
  document ranks at its best chunk; its later chunks are dropped), and the context set is the
  distinct units of the selected chunks. A gold passage split into several chunks is found as
  soon as any of its chunks is.
* **chunk level**: the raw chunk ranking and selection against every chunk of every gold unit.

On single-chunk passages (MuSiQue, 2Wiki, HotpotQA) the two coincide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from spectrag.eval import metrics as M
from spectrag.eval.datasets import Dataset
from spectrag.eval.gold import GoldSet, chunk_gold, map_gold, unit_table
from spectrag.index.load import iter_documents

KS = (2, 5, 10, 20)
METRICS = ("R@2", "R@5", "R@10", "R@20", "MRR", "nDCG@10", "All@5", "P", "R", "F1")
CURVE_K = 20


@dataclass
class Run:
    """One method on all questions. ``ranking [Q, L]`` and ``selected [Q, S]`` are chunk ids (-1
    padded); ``used_tokens [Q]``."""

    ranking: torch.Tensor
    selected: torch.Tensor
    used_tokens: torch.Tensor
    seconds: float


@dataclass
class Scorer:
    """Gold of all questions at both levels and the question groups, ready for scoring runs."""

    gold: GoldSet
    chunk_gold: GoldSet
    unit_of: torch.Tensor  # [n_chunks] chunk -> unit
    groups: dict[str, list[str]]  # grouping -> value per question

    def per_question(self, run: Run, level: str = "passage") -> torch.Tensor:
        """``[Q, len(METRICS)]`` float64."""
        if level == "passage":
            gold, ranked, chosen = self.gold, M.collapse(run.ranking, self.unit_of), M.collapse(run.selected, self.unit_of)
        else:
            gold, ranked, chosen = self.chunk_gold, run.ranking, run.selected
        hit = M.hits(ranked, gold.units)
        cols = [
            M.recall_at(hit, gold.n_gold, list(KS)),
            M.reciprocal_rank(hit)[:, None],
            M.ndcg_at(M.gold_gain(ranked, gold.units, gold.gains), gold.gains, 10)[:, None],
            M.all_found_at(hit, gold.n_gold, 5)[:, None],
            M.set_prf(chosen, gold.units, gold.n_gold),
        ]
        return torch.cat(cols, dim=1)

    def summary(self, run: Run, *, detail: bool = True, per_q: torch.Tensor | None = None) -> dict[str, Any]:
        """``per_q``: :meth:`per_question` of ``run`` when the caller already has it."""
        valid = self.gold.n_gold > 0
        per_q = self.per_question(run) if per_q is None else per_q
        out: dict[str, Any] = {"overall": _named(M.mean(per_q, valid)), "questions": int(valid.sum())}
        size = (run.selected >= 0).sum(dim=1).to(torch.float64)
        out["context"] = {"chunks": round(float(size.mean()), 2), "tokens": round(float(run.used_tokens.double().mean()), 1)}
        out["seconds"] = round(run.seconds, 3)
        out["queries_per_second"] = round(len(run.used_tokens) / max(run.seconds, 1e-9), 1)
        if not detail:
            return out
        out["groups"] = {}
        for name, values in self.groups.items():
            table = {}
            for value in sorted(set(values)):
                member = valid & torch.tensor([v == value for v in values])
                table[value] = {"n": int(member.sum()), **_named(M.mean(per_q, member))}
            out["groups"][name] = table
        hit = M.hits(M.collapse(run.ranking, self.unit_of), self.gold.units)
        curve = M.mean(M.recall_at(hit, self.gold.n_gold, list(range(1, CURVE_K + 1))), valid)
        out["recall_curve"] = [round(float(v), 4) for v in curve]
        out["chunk_level"] = _named(M.mean(self.per_question(run, "chunk"), self.chunk_gold.n_gold > 0))
        return out


def _named(values: torch.Tensor) -> dict[str, float]:
    return {name: round(float(v), 4) for name, v in zip(METRICS, values)}


def make_scorer(ds: Dataset, index) -> Scorer:

    table = unit_table(list(iter_documents(ds.corpus, ds.fmt)), index.chunks, ds.fmt)
    gold = map_gold(ds.questions, table)
    groups: dict[str, list[str]] = {}
    for q in ds.questions:
        for name in q.groups:
            groups.setdefault(name, [])
    for name in groups:
        groups[name] = [q.groups.get(name, "none") for q in ds.questions]
    return Scorer(gold, chunk_gold(gold, table, len(index.chunks)), torch.from_numpy(table.chunk_unit), groups)
