"""Benchmark: retrieval quality on MuSiQue (HippoRAG's 100-question tuning subset, 1,890
passages) for every retrieval mode, the ablations of the full pipeline and a one-at-a-time
sensitivity sweep, through ``spectrag.eval.evaluate``; the same as::

    spectrag eval musique --data ../shared/data/musique --methods all --ablations --sweep \
        --budgets 500,1000,2000 --out bench/results

    python bench/bench_eval.py                          # everything (minutes on 2 cores)
    python bench/bench_eval.py --no-sweep --methods dense,hybrid,spectral

The index is built once into ``~/.cache/spectrag/eval/musique-<hash>`` (with the dataset's
OpenIE file for the knowledge graph and the entity signal, as ``spectrag index --openie``) and
reused; embeddings come from the embedding cache when it holds them (a rebuild then runs no
model, only chunking, the graph and the knowledge graph). ``--index DIR`` evaluates an existing
index instead.

**Reference in the same run.** Every figure is recomputed from the TREC runs and qrels the
evaluation writes (``bench/.cache/eval_musique_trec``, git-ignored) by
``ir_measures`` (trec_eval): R@2/5/10/20, RR, nDCG@10 from the ranking runs and SetP / SetR /
SetF from the context runs. The largest absolute difference is reported (our figures are
rounded to 4 decimals, so up to 5e-5).

Writes ``bench/results/eval_musique.md`` / ``.json`` and the PNG plots beside them (``--out``);
the machine, threads and load average go into the results' ``machine`` line.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from _common import ensure_spectrag, load_average, machine_info, pin_threads  # noqa: E402  (before numpy: sets thread counts)

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "musique"


def ir_measures_check(result: dict) -> dict:
    """Recompute every method's figures with ir_measures from the written TREC files."""
    import ir_measures

    trec = Path(result["outputs"]["trec"]["qrels"]).parent
    qrels = list(ir_measures.read_trec_qrels(str(trec / "qrels.txt")))
    rank = {"R@2": "R@2", "R@5": "R@5", "R@10": "R@10", "R@20": "R@20", "MRR": "RR", "nDCG@10": "nDCG@10"}
    sets = {"P": ir_measures.SetP, "R": ir_measures.SetR, "F1": ir_measures.SetF}
    worst = 0.0
    for method, m in result["methods"].items():
        run = list(ir_measures.read_trec_run(str(trec / f"{method}.run")))
        got = ir_measures.calc_aggregate([ir_measures.parse_measure(v) for v in rank.values()], qrels, run)
        for ours, theirs in rank.items():
            worst = max(worst, abs(got[ir_measures.parse_measure(theirs)] - m["overall"][ours]))
        ctx = list(ir_measures.read_trec_run(str(trec / f"{method}.context.run")))
        got = ir_measures.calc_aggregate(list(sets.values()), qrels, ctx)
        for ours, measure in sets.items():
            worst = max(worst, abs(got[measure] - m["overall"][ours]))
    return {"tool": f"ir_measures {ir_measures.__version__}", "max_abs_diff": worst,
            "summary": f"ir_measures {ir_measures.__version__} recomputed every figure from the TREC files: "
                       f"max |difference| {worst:.1e}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--index", type=Path, help="Evaluate this index instead of the cached one.")
    ap.add_argument("--methods", default="all")
    ap.add_argument("--budget", type=int)
    ap.add_argument("--budgets", default="500,1000,2000", help="More budgets for the context P/R/F1 table ('' for none).")
    ap.add_argument("--no-ablations", action="store_true")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--threads", default="1")
    args = ap.parse_args()
    if not (args.data / "musique_train.json").is_file():
        sys.exit(f"{args.data}: MuSiQue data absent (it lives in ../shared/data/musique); nothing to run")

    import torch

    torch.set_num_threads(int(args.threads))
    ensure_spectrag()
    from spectrag.eval import evaluate
    from spectrag.eval.report import save

    command = shlex.join(["python", "bench/bench_eval.py", *sys.argv[1:]])
    machine = machine_info(packages=("faiss", "ir_measures"))  # before the run: the background's load average
    start = time.perf_counter()
    result = evaluate("musique", args.data, index=args.index, methods=args.methods, ablations=not args.no_ablations,
                      sweep=not args.no_sweep, budget=args.budget, out=args.out,
                      budgets=[int(b) for b in args.budgets.split(",") if b.strip()], trec_dir=HERE / ".cache" / "eval_musique_trec",
                      command=command, log=lambda m: print(m, file=sys.stderr, flush=True))
    seconds = time.perf_counter() - start
    result["machine"] = {**machine, "load_average_end": load_average(), "wall_seconds": round(seconds, 1),
                         "runs": "one evaluation run (retrieval is deterministic)"}
    result["check"] = ir_measures_check(result)
    save(args.out, result)
    from spectrag.eval.report import markdown

    print(markdown(result))


if __name__ == "__main__":
    pin_threads("1", passive=True)
    main()
