"""Benchmark: what each quality feature of the default pipeline earns, on both dev sets, per
question type, with 95% paired-bootstrap intervals (one question at a time resampled, 2,000
times, fixed seed), against the baselines.

Rows: the baselines; the default ``spectral``; the default with one feature switched off at a
time (the third seed list of named documents, their protection above bridged chunks, bridging
from them, the bridging weight and selection settings before this tuning, the PPR / spectral
proximity); everything new switched off at once (the engine before); and, with a knowledge
graph, ``activation`` and ``combined``. Each delta is R@5 against the default, with its interval.

    python bench/bench_quality.py                    # MuSiQue (with its OpenIE file) and 2Wiki dev
    python bench/bench_quality.py --no-openie        # MuSiQue's LLM-free index (built-in extractor)

Results: bench/results/quality.md / .json. Tune only on these sets: the same figures are
checked on held-out questions.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.ensure_spectrag()

import argparse  # noqa: E402
import json  # noqa: E402

import torch  # noqa: E402

from spectrag.config import IndexConfig, RetrieverConfig, with_openie  # noqa: E402
from spectrag.eval.datasets import load_dataset  # noqa: E402
from spectrag.eval.metrics import paired_bootstrap_ci  # noqa: E402
from spectrag.eval.run import run_method  # noqa: E402
from spectrag.eval.runner import find_openie, resolve_index  # noqa: E402
from spectrag.eval.score import METRICS, make_scorer  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402

ROOT = _common.ROOT
DATA = {"musique": "../shared/data/musique", "2wiki": "../shared/data/2wiki-dev"}  # as the README spells them
R5 = METRICS.index("R@5")
BEFORE = {"seed.k_named": 0, "bridge.protect_named": False, "bridge.named_sources": False, "bridge.lam": 0.3,
          "bridge.named_floor": 0.5, "select.core_size": 3, "select.backfill_floor": 0.0}
ROWS = [
    ("dense", "dense", {}), ("bm25", "bm25", {}), ("hybrid", "hybrid", {}),
    ("spectral (default)", "spectral", {}),
    ("- named-document seed list", "spectral", {"seed.k_named": 0}),
    ("- protection of named documents", "spectral", {"bridge.protect_named": False}),
    ("- bridging from named documents", "spectral", {"bridge.named_sources": False}),
    ("bridging lambda 0.3 (before)", "spectral", {"bridge.lam": 0.3}),
    ("core 3, no backfill floor (before)", "spectral", {"select.core_size": 3, "select.backfill_floor": 0.0}),
    ("- PPR / spectral proximity (alpha 0)", "spectral", {"propagate.alpha": 0.0}),
    ("everything above off (the engine before)", "spectral", BEFORE),
    ("+ lexical relevance 0.1 (off by default)", "spectral", {"seed.lexical_weight": 0.1}),
    ("+ lexical relevance 0.3 (off by default)", "spectral", {"seed.lexical_weight": 0.3}),
    ("heat", "heat", {}), ("ppr", "ppr", {}),
    ("activation", "activation", {}), ("combined", "combined", {}),
]


def log(*a) -> None:
    print(*a, flush=True)


def run_set(name: str, openie: bool, budgets: tuple[int, ...]) -> dict:
    ds = load_dataset(name, DATA[name])
    config = IndexConfig()
    found = find_openie(ds) if openie else None
    if found is not None:
        config = with_openie(config, found)
    index, _ = resolve_index(ds, None, config, log=log)
    scorer = make_scorer(ds, index)
    texts = [q.text for q in ds.questions]
    retriever = Retriever(index, RetrieverConfig(device="cpu"))
    qvecs = torch.cat([retriever.embed(texts[i : i + 256]) for i in range(0, len(texts), 256)])
    rows, base_q = [], None
    for label, mode, overrides in ROWS:
        if mode in ("activation", "combined") and index.kg is None:
            continue
        retriever.config = RetrieverConfig(device="cpu").replace(**overrides)
        run = run_method(retriever, texts, qvecs, mode, None, 256)
        per_q = scorer.per_question(run)
        summary = scorer.summary(run, per_q=per_q)
        row = {"row": label, "mode": mode, "overrides": overrides,
               **{k: 100 * summary["overall"][k] for k in ("R@2", "R@5", "R@10", "MRR")}}
        for b in budgets:
            rb = run_method(retriever, texts, qvecs, mode, b, 256)
            row[f"F1@{b}"] = 100 * scorer.summary(rb, detail=False)["overall"]["F1"]
        for group, values in summary.get("groups", {}).items():
            for value, metrics in values.items():
                row[f"R@5 {value}"] = 100 * metrics["R@5"]
        if label == "spectral (default)":
            base_q = per_q[:, R5]
        if base_q is not None and label != "spectral (default)" and mode not in ("dense", "bm25", "hybrid"):
            diff = (per_q[:, R5] - base_q)[scorer.gold.n_gold > 0]
            lo, hi = paired_bootstrap_ci(diff)
            row["dR@5"], row["ci"] = 100 * float(diff.mean()), [100 * lo, 100 * hi]
        rows.append(row)
        log(f"  {name} {label}: R@2 {row['R@2']:.1f} R@5 {row['R@5']:.1f} MRR {row['MRR']:.1f}")
    # the baselines' deltas against the default, too (the default against each baseline)
    return {"name": name, "openie": found is not None, "questions": len(texts), "rows": rows}


def markdown(record: dict) -> str:
    lines = _common.results_header("Retrieval quality: what each feature earns (passage level, %)", record)
    for res in record["sets"]:
        rows = res["rows"]
        types = [k for k in rows[0] if k.startswith("R@5 ")]
        best = max((r for r in rows if r["mode"] in ("dense", "bm25", "hybrid")), key=lambda r: r["R@5"])
        lines += [f"## {res['name']} ({res['questions']} questions; "
                  f"{'with' if res['openie'] else 'without'} the OpenIE file)", "",
                  f"Best baseline at R@5: {best['row']} {best['R@5']:.1f}.", ""]
        cols = [("", "row", ""), ("R@2", "R@2", ".1f"), ("R@5", "R@5", ".1f"), ("R@10", "R@10", ".1f"),
                ("MRR", "MRR", ".1f")] + [(f"F1 {k[3:]}", k, ".1f") for k in rows[0] if k.startswith("F1@")] \
            + [(t[4:], t, ".1f") for t in types] \
            + [("R@5 - default [95% CI]", lambda r: f"{r['dR@5']:+.1f} [{r['ci'][0]:+.1f}, {r['ci'][1]:+.1f}]"
                if "dR@5" in r else None, "")]
        lines += _common.md_table(rows, cols) + [""]
    lines += ["F1: the budgeted context set's F1 (SpectRAG eq. 23-24) at that many tokens. Intervals: 95% paired "
              "bootstrap of the per-question R@5 difference (`spectrag.eval.metrics.paired_bootstrap_ci`)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="musique,2wiki")
    ap.add_argument("--no-openie", action="store_true", help="build/use MuSiQue's index without its OpenIE file")
    ap.add_argument("--budgets", default="500,1000,2000")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "quality"))
    args = ap.parse_args()
    record = _common.new_record("one run per row (retrieval is deterministic)")
    budgets = tuple(int(b) for b in args.budgets.split(",") if b)
    record["sets"] = [run_set(name, not args.no_openie, budgets) for name in args.sets.split(",")]
    _common.finish_record(record)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2, default=float))
    out.with_suffix(".md").write_text(markdown(record))
    log(markdown(record))


if __name__ == "__main__":
    main()
