"""Benchmark: what each quality feature of the default pipeline earns, on the four dev sets
(MuSiQue, 2Wiki dev, the docs-dev documentation set, the bundled sample), per question type,
with 95% paired-bootstrap intervals (one question at a time resampled, 2,000 times, fixed seed),
against the baselines on the same index.

Rows: the baselines; the default ``spectral``; the default with one feature switched off at a
time (the calibrated lexical relevance, title specificity, bridging only from named documents,
one chunk per document reached, a named document's best chunk, the cited documents, the stub
filter; and the earlier ones: the named-document seed list, their protection, bridging from
them, the PPR / spectral proximity, proximity in ranking and selection, the evidence cut);
everything of issue 28 off at once; a small sweep of the new constants; then the index-level
features, each on its own index: the earlier chunk size (1,200 / 100 tokens, long chunks pooled) and, for the two corpora of long documents, the earlier
index (1,200 / 100, chunks cut at the model's 256 wordpieces). Each delta is against the default
with its interval (R@5 and MRR). ``All@5``: the share of questions with every gold passage in
the top 5 (docs-dev's two-page questions need both pages). The sample also counts the demo's
measure: gold documents among the top 5 chunks. The budgeted context (SpectRAG eq. 23-24 over
passages) is tabled at every budget for the rows of ``CONTEXT_ROWS``: P / R / F1, the share of
questions with every gold passage in it, passages and tokens used, F1 per question type, and the
intervals of its recall and F1 at the default budget.

    python bench/bench_quality.py                       # all four sets
    python bench/bench_quality.py --sets docs,sample    # some of them
    python bench/bench_quality.py --no-openie           # MuSiQue's LLM-free index (built-in extractor)
    python bench/bench_quality.py --rows context --out bench/results/quality_context   # the context rows only

Results: bench/results/quality.md / .json. Tune only on these sets: the same figures are
checked on held-out questions and a held-out documentation set.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.ensure_spectrag()

import argparse  # noqa: E402

import torch  # noqa: E402

from spectrag.config import IndexConfig, RetrieverConfig, with_openie  # noqa: E402
from spectrag.eval.datasets import load_dataset  # noqa: E402
from spectrag.eval.metrics import collapse, paired_bootstrap_ci  # noqa: E402
from spectrag.eval.run import run_method  # noqa: E402
from spectrag.eval.runner import find_openie, resolve_index  # noqa: E402
from spectrag.eval.score import METRICS, make_scorer  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402

ROOT = _common.ROOT
# name -> (dataset, --data as the README spells it); the sample is the bundled corpus
DATA = {"musique": ("musique", "../shared/data/musique"), "2wiki": ("2wiki", "../shared/data/2wiki-dev"),
        "docs": ("beir", "../shared/data/docs-dev"), "sample": ("sample", None)}
COLS = {m: METRICS.index(m) for m in ("R@2", "R@5", "R@10", "MRR", "All@5")}
ISSUE28 = {"seed.lexical_weight": 0.0, "seed.named_specificity": 0.0, "bridge.anchors": "top",
           "bridge.other_documents": False, "bridge.named_best_chunk": False, "bridge.cited": False}
# (label, mode, retriever overrides, index overrides); "stubs": False drops the stub filter
ROWS = [
    ("dense", "dense", {}, None), ("bm25", "bm25", {}, None), ("hybrid", "hybrid", {}, None),
    ("spectral (default)", "spectral", {}, None),
    ("- calibrated lexical relevance (w = 0)", "spectral", {"seed.lexical_weight": 0.0}, None),
    ("- title specificity (every title names)", "spectral", {"seed.named_specificity": 0.0}, None),
    ("bridging from any top candidate (anchors = top)", "spectral", {"bridge.anchors": "top"}, None),
    ("- one chunk per document reached", "spectral", {"bridge.other_documents": False}, None),
    ("- a named document's best chunk only", "spectral", {"bridge.named_best_chunk": False}, None),
    ("- cited documents", "spectral", {"bridge.cited": False}, None),
    ("- stub filter", "spectral", {"stubs": False}, None),
    ("- named-document seed list", "spectral", {"seed.k_named": 0}, None),
    ("- protection of named documents", "spectral", {"bridge.protect_named": False}, None),
    ("- bridging from named documents", "spectral", {"bridge.named_sources": False}, None),
    ("- PPR / spectral proximity (alpha 0)", "spectral", {"propagate.alpha": 0.0}, None),
    ("- proximity in ranking and selection (alpha 0, b 0)", "spectral", {"propagate.alpha": 0.0, "select.b": 0.0},
     None),
    ("- evidence cut (stop_floor 0: the budget filled)", "spectral", {"select.stop_floor": 0.0}, None),
    ("- bridged chunks past the cut (bridge.past_cut off)", "spectral", {"bridge.past_cut": False}, None),
    ("- page support (bridge.page_support 0)", "spectral", {"bridge.page_support": 0.0}, None),
    ("- bridged chunks judged by the question beyond its names (bridge.target_lexical_weight 0)", "spectral",
     {"bridge.target_lexical_weight": 0.0}, None),
    ("- other candidates by the question beyond its names (bridge.others_beyond_names off)", "spectral",
     {"bridge.others_beyond_names": False}, None),
    ("- each named document's first bridge (bridge.cover_named off)", "spectral",
     {"bridge.cover_named": False}, None),
    ("everything of issue 28 off (same index)", "spectral", ISSUE28, None),
    ("sweep: w = 0.25", "spectral", {"seed.lexical_weight": 0.25}, None),
    ("sweep: w = 1.0", "spectral", {"seed.lexical_weight": 1.0}, None),
    ("sweep: named_specificity = 0.4", "spectral", {"seed.named_specificity": 0.4}, None),
    ("sweep: named_specificity = 0.6", "spectral", {"seed.named_specificity": 0.6}, None),
    ("sweep: cited_lam = 0.3", "spectral", {"bridge.cited_lam": 0.3}, None),
    ("sweep: cited_lam = 0.7", "spectral", {"bridge.cited_lam": 0.7}, None),
    ("sweep: stop_floor = 0.35", "spectral", {"select.stop_floor": 0.35}, None),
    ("sweep: stop_floor = 0.55", "spectral", {"select.stop_floor": 0.55}, None),
    ("sweep: page_support = 0.05", "spectral", {"bridge.page_support": 0.05}, None),
    ("sweep: page_support = 0.2", "spectral", {"bridge.page_support": 0.2}, None),
    ("sweep: target_lexical_weight = 1.0", "spectral", {"bridge.target_lexical_weight": 1.0}, None),
    ("sweep: target_lexical_weight = 4.0", "spectral", {"bridge.target_lexical_weight": 4.0}, None),
    ("sweep: cover_depth = 10", "spectral", {"bridge.cover_depth": 10}, None),
    ("sweep: cover_depth = 40", "spectral", {"bridge.cover_depth": 40}, None),
    ("heat", "heat", {}, None), ("ppr", "ppr", {}, None),
    ("activation", "activation", {}, None), ("combined", "combined", {}, None),
]
# the rows whose budgeted context is tabled at every budget (context_table)
CONTEXT_ROWS = ("dense", "bm25", "hybrid", "spectral (default)", "- evidence cut (stop_floor 0: the budget filled)",
                "- bridged chunks past the cut (bridge.past_cut off)",
                "sweep: stop_floor = 0.35", "sweep: stop_floor = 0.55",
                "- proximity in ranking and selection (alpha 0, b 0)", "heat", "ppr")
CHUNK_1200 = {"chunk.chunk_size": 1200, "chunk.overlap": 100}
INDEX_ROWS = [  # (label, index overrides, sets): each on its own index; baselines and spectral there
    ("no section headings in the embedded text (embed.include_headings off)", {"embed.include_headings": False},
     ("docs", "sample")),
    ("chunks 1,200 / 100 (earlier default), long chunks pooled", CHUNK_1200, ("musique", "2wiki", "docs", "sample")),
    ("chunks 1,200 / 100, cut at 256 wordpieces (the earlier index)", {**CHUNK_1200, "embed.long_texts": "truncate"},
     ("docs", "sample")),
]


def log(*a) -> None:
    print(*a, flush=True)


def index_config(overrides: dict, openie) -> IndexConfig:
    data = IndexConfig().to_dict()
    for key, value in overrides.items():
        table, field = key.split(".")
        data[table][field] = value
    config = IndexConfig.from_dict(data)
    return with_openie(config, openie) if openie is not None else config


class Bench:
    """One set: its questions, scorer and the default index's retriever and query vectors."""

    def __init__(self, name: str, openie: bool, cache_dir: str | None) -> None:
        dataset, data = DATA[name]
        self.name, self.ds = name, load_dataset(dataset, data)
        self.openie = find_openie(self.ds) if openie else None
        self.cache_dir = cache_dir
        self.texts = [q.text for q in self.ds.questions]
        self.retriever = self.scorer = self.qvecs = None
        self.use({})

    def use(self, overrides: dict) -> None:
        index, _ = resolve_index(self.ds, None, index_config(overrides, self.openie), cache_dir=self.cache_dir, log=log)
        self.index, self.scorer = index, make_scorer(self.ds, index)
        self.retriever = Retriever(index, RetrieverConfig(device="cpu"))
        if self.qvecs is None:  # one model: the query vectors serve every index
            self.qvecs = torch.cat([self.retriever.embed(self.texts[i : i + 256]) for i in range(0, len(self.texts), 256)])

    def run(self, mode: str, overrides: dict, budget: int | None):
        over = {k: v for k, v in overrides.items() if k != "stubs"}
        stubs = self.retriever.state.stubs
        self.retriever.config = RetrieverConfig(device="cpu").replace(**over)
        if overrides.get("stubs") is False:
            self.retriever.state.stubs = None
        try:
            return run_method(self.retriever, self.texts, self.qvecs, mode, budget, 256)
        finally:
            self.retriever.state.stubs = stubs


def gold_in_top_chunks(bench: Bench, run, k: int = 5) -> int:
    """Gold documents among each question's top ``k`` chunks, summed (the demo's measure)."""
    units = torch.where(run.ranking[:, :k] >= 0, bench.scorer.unit_of[run.ranking[:, :k].clamp(min=0)], -1)
    gold = bench.scorer.gold.units
    return int(((units[:, :, None] == gold[:, None, :]) & (gold[:, None, :] >= 0)).any(dim=1).sum())


def context_figures(bench: Bench, run, per_q: torch.Tensor, budget: int) -> dict:
    """The budgeted context's P / R / F1 (SpectRAG eq. 23-24), the share of questions with every
    gold passage in it, its mean tokens and passages, and F1 per question type, at ``budget``."""
    valid = bench.scorer.gold.n_gold > 0
    p, r, f = (per_q[valid, METRICS.index(m)] for m in ("P", "R", "F1"))
    units = collapse(run.selected, bench.scorer.unit_of)
    out = {f"F1@{budget}": 100 * float(f.mean()), f"P@{budget}": 100 * float(p.mean()),
           f"Rctx@{budget}": 100 * float(r.mean()), f"Allctx@{budget}": 100 * float((r >= 1 - 1e-9).double().mean()),
           f"tokens@{budget}": float(run.used_tokens.double().mean()),
           f"passages@{budget}": float((units >= 0).sum(1)[valid].double().mean())}
    for values in bench.scorer.groups.values():
        for value in sorted(set(values)):
            member = valid & torch.tensor([v == value for v in values])
            out[f"F1@{budget} {value}"] = 100 * float(per_q[member, METRICS.index("F1")].mean())
    return out


def score_row(bench: Bench, label: str, mode: str, overrides: dict, budgets: tuple[int, ...], base) -> dict:
    run = bench.run(mode, overrides, None)
    per_q = bench.scorer.per_question(run)
    summary = bench.scorer.summary(run, per_q=per_q)
    row = {"row": label, "mode": mode, "overrides": overrides,
           **{k: 100 * summary["overall"][k] for k in COLS}, "gold@5 chunks": gold_in_top_chunks(bench, run)}
    default_budget = RetrieverConfig().budget
    for b in budgets:  # the context at each budget (the run above is the default budget's)
        ctx = run if b == default_budget else bench.run(mode, overrides, b)
        ctx_q = per_q if ctx is run else bench.scorer.per_question(ctx)
        row.update(context_figures(bench, ctx, ctx_q, b))
    for group, values in summary.get("groups", {}).items():
        for value, metrics in values.items():
            row[f"R@5 {value}"] = 100 * metrics["R@5"]
            if value == "two-doc":
                row["All@5 two-doc"] = 100 * metrics["All@5"]
    if base is not None:
        valid = bench.scorer.gold.n_gold > 0
        for metric in ("R@5", "MRR", "R", "F1"):  # R, F1: the context's, at the default budget
            diff = (per_q[:, METRICS.index(metric)] - base[:, METRICS.index(metric)])[valid]
            lo, hi = paired_bootstrap_ci(diff)
            row[f"d{metric}"], row[f"ci {metric}"] = 100 * float(diff.mean()), [100 * lo, 100 * hi]
    row["_per_q"] = per_q
    return row


def run_set(name: str, openie: bool, budgets: tuple[int, ...], cache_dir: str | None,
            only_context: bool = False) -> dict:
    bench = Bench(name, openie, cache_dir)
    rows, base = [], None
    for label, mode, overrides, _ in ROWS:
        if mode in ("activation", "combined") and bench.index.kg is None or only_context and label not in CONTEXT_ROWS:
            continue
        row = score_row(bench, label, mode, overrides, budgets, base)
        if label == "spectral (default)":
            base = row["_per_q"]
        rows.append(row)
        log(f"  {name} {label}: R@2 {row['R@2']:.1f} R@5 {row['R@5']:.1f} MRR {row['MRR']:.1f} All@5 {row['All@5']:.1f}")
    for label, overrides, sets in INDEX_ROWS:
        if name not in sets or only_context:
            continue
        bench.use(overrides)  # the same questions and gold documents: the deltas stay paired
        for mode in ("dense", "bm25", "hybrid", "spectral"):
            row = score_row(bench, f"{label}: {mode}", mode, {}, budgets, base if mode == "spectral" else None)
            rows.append(row)
            log(f"  {name} {row['row']}: R@2 {row['R@2']:.1f} R@5 {row['R@5']:.1f} MRR {row['MRR']:.1f}")
    for row in rows:
        row.pop("_per_q")
    return {"name": name, "dataset": DATA[name][0], "openie": bench.openie is not None,
            "questions": len(bench.texts), "rows": rows}


def context_table(res: dict, budgets: list[int]) -> list[str]:
    """The budgeted context of the baselines and the spectral rows of CONTEXT_ROWS: P / R / F1,
    every gold passage in it (All), passages and tokens at each budget, and F1 per question type."""
    rows = [r for r in res["rows"] if r["row"] in CONTEXT_ROWS]
    if not rows:
        return []
    types = sorted({k.split(" ", 1)[1] for k in rows[0] if k.startswith(f"F1@{budgets[0]} ")})
    lines = [f"Context of {res['name']} at each budget (P / R / F1: SpectRAG eq. 23-24 over passages; All: every "
             "gold passage in the context; pass.: distinct passages; tok.: tokens used):", ""]
    cols = [("", "row", "")]
    for b in budgets:
        cols += [(f"P {b}", f"P@{b}", ".1f"), (f"R {b}", f"Rctx@{b}", ".1f"), (f"F1 {b}", f"F1@{b}", ".1f"),
                 (f"All {b}", f"Allctx@{b}", ".1f"), (f"pass. {b}", f"passages@{b}", ".1f"),
                 (f"tok. {b}", f"tokens@{b}", ".0f")]
    at = RetrieverConfig().budget  # the intervals: the context of the default budget, paired with the default's
    cols += [(f"{name} {at} - default [95% CI]", (lambda m: lambda r: f"{r['d' + m]:+.1f} [{r['ci ' + m][0]:+.1f}, "
                                                  f"{r['ci ' + m][1]:+.1f}]" if "d" + m in r else None)(m), "")
             for name, m in (("R", "R"), ("F1", "F1"))]
    lines += _common.md_table(rows, cols) + [""]
    if types:
        lines += [f"F1 of {res['name']}'s context per question type:", ""]
        cols = [("", "row", "")] + [(f"{t} {b}", f"F1@{b} {t}", ".1f") for b in budgets for t in types]
        lines += _common.md_table(rows, cols) + [""]
    return lines


def markdown(record: dict) -> str:
    lines = _common.results_header("Retrieval quality: what each feature earns (passage level, %)", record)
    for res in record["sets"]:
        rows = res["rows"]
        first = [r for r in rows if ":" not in r["row"] or r["row"].startswith("sweep")]
        baselines = [r for r in first if r["mode"] in ("dense", "bm25", "hybrid")]
        best = {m: max(r[m] for r in baselines) for m in ("R@2", "R@5", "MRR", "All@5")}
        default = next(r for r in rows if r["row"] == "spectral (default)")
        lines += [f"## {res['name']} ({res['questions']} questions; "
                  f"{'with' if res['openie'] else 'without'} an OpenIE file)", "",
                  "Best baseline (same index): " + ", ".join(f"{m} {v:.1f}" for m, v in best.items())
                  + "; default spectral: " + ", ".join(f"{m} {default[m]:.1f}" for m in best) + ".", ""]
        extra = [k for k in rows[0] if k.startswith("R@5 ") or k == "All@5 two-doc"]
        budgets = [k for k in rows[0] if k.startswith("F1@") and " " not in k]
        cols = [("", "row", ""), ("R@2", "R@2", ".1f"), ("R@5", "R@5", ".1f"), ("R@10", "R@10", ".1f"),
                ("MRR", "MRR", ".1f"), ("All@5", "All@5", ".1f")] \
            + [(f"F1 {k[3:]}", k, ".1f") for k in budgets] + [(k[4:] if k.startswith("R@5 ") else k, k, ".1f") for k in extra]
        if res["dataset"] == "sample":
            cols.append(("gold docs in top 5 chunks", "gold@5 chunks", "d"))
        cols += [(f"{m} - default [95% CI]", (lambda m: lambda r: f"{r['d' + m]:+.1f} [{r['ci ' + m][0]:+.1f}, "
                                             f"{r['ci ' + m][1]:+.1f}]" if "d" + m in r else None)(m), "")
                 for m in ("R@5", "MRR")]
        lines += _common.md_table(rows, cols) + [""] + context_table(res, [int(k[3:]) for k in budgets])
    lines += ["R@k: HippoRAG's recall (the share of a question's gold passages in the top k, averaged); All@5: the "
              "share of questions with every gold passage in the top 5; F1: the budgeted context set's F1 (SpectRAG "
              "eq. 23-24) at that many tokens; per-type columns: R@5 of that question type. Intervals: 95% paired "
              "bootstrap of the per-question difference (`spectrag.eval.metrics.paired_bootstrap_ci`). Rows after "
              "the sweep each use their own index (named in the row), scored against the default index's spectral."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="musique,2wiki,docs,sample")
    ap.add_argument("--no-openie", action="store_true", help="build/use MuSiQue's index without its OpenIE file")
    ap.add_argument("--budgets", default="500,2000,12000")
    ap.add_argument("--rows", choices=("all", "context"), default="all",
                    help="context: only the rows of the context tables (baselines, default, the cut, proximity)")
    ap.add_argument("--cache-dir", default=None, help="where the evaluation indexes are built (default: the "
                    "evaluation cache, $SPECTRAG_CACHE_DIR/eval)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "quality"))
    args = ap.parse_args()
    record = _common.new_record("one run per row (retrieval is deterministic)")
    budgets = tuple(int(b) for b in args.budgets.split(",") if b)
    record["sets"] = [run_set(name, not args.no_openie, budgets, args.cache_dir, args.rows == "context")
                      for name in args.sets.split(",")]
    _common.finish_record(record)
    log(_common.save_record(args.out, record, markdown))


if __name__ == "__main__":
    main()
