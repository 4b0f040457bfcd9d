"""Benchmark: batch invariance, the product property the README states ("Batch invariance").

Every question of each dev set is retrieved alone (batch size 1, one thread), then in batches of
7, 64 and 256 at each thread count given, through the user's API (``Retriever.retrieve``: query
embedding, seeding, expansion, propagation, selection, contexts). Per mode, batch size and
thread count it counts the questions whose ranking (the whole candidate ranking) or context
(the selected chunk ids, in order) differ from the question's alone (goal: 0), and the largest
relative difference of a selected chunk's scores (relevance, proximity, final).

    python bench/bench_invariance.py                            # musique, 2wiki-dev, docs-dev
    python bench/bench_invariance.py --sets docs --modes spectral --batches 7

Results: bench/results/invariance_cpu.md / .json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.ensure_spectrag()

import time  # noqa: E402

from spectrag.config import IndexConfig, RetrieverConfig, with_openie  # noqa: E402
from spectrag.eval.datasets import load_dataset  # noqa: E402
from spectrag.eval.runner import find_openie, resolve_index  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402

DATA = _common.ROOT.parent / "shared" / "data"
SETS = {"musique": ("musique", "musique"), "2wiki": ("2wiki", "2wiki-dev"), "docs": ("beir", "docs-dev")}


def dev_set(key: str):
    """A dev set's index (the evaluation's cached one) and its question texts, or None when absent."""
    name, folder = SETS[key]
    if not (DATA / folder).exists():
        print(f"{key} skipped: {DATA / folder} is absent", flush=True)
        return None
    ds = load_dataset(name, f"../shared/data/{folder}")  # as the README spells it (the cache key)
    config = IndexConfig()
    openie = find_openie(ds)
    if openie is not None:
        config = with_openie(config, openie)
    index, _ = resolve_index(ds, None, config, log=lambda m: print(m, flush=True))
    return index, [q.text for q in ds.questions]


def relative_gap(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def compare(alone, batched) -> dict:
    """Questions whose ranking / context differ, and the largest relative score gap of a chunk
    both selected."""
    rank_diff = ctx_diff = 0
    gap = 0.0
    for a, b in zip(alone, batched):
        rank_diff += a.ranking != b.ranking
        ids_a, ids_b = [c.chunk_id for c in a.chunks], [c.chunk_id for c in b.chunks]
        ctx_diff += ids_a != ids_b
        for ca, cb in zip(a.chunks, b.chunks):
            if ca.chunk_id == cb.chunk_id:
                gap = max([gap] + [relative_gap(ca.scores[k], cb.scores[k]) for k in ca.scores])
        for ha, hb in zip(a.hits, b.hits):
            if ha.chunk_id == hb.chunk_id:
                gap = max(gap, relative_gap(ha.score, hb.score))
    return {"ranking_differs": rank_diff, "context_differs": ctx_diff, "max_relative_score_gap": gap}


def main() -> None:
    ap = _common.bench_parser(__doc__, "invariance_cpu")
    ap.add_argument("--sets", default="musique,2wiki,docs", help="comma-separated: musique, 2wiki, docs")
    ap.add_argument("--modes", default="dense,bm25,hybrid,heat,ppr,spectral")
    ap.add_argument("--batches", default="7,64,256")
    ap.add_argument("--thread-counts", default="1,2", help="threads of the batched runs (alone: 1)")
    args = ap.parse_args()
    record = _common.new_record("each question alone (batch 1, 1 thread) vs in batches; whole dev sets")
    start = time.perf_counter()
    rows = []
    for key in args.sets.split(","):
        got = dev_set(key)
        if got is None:
            continue
        index, texts = got
        for mode in args.modes.split(","):
            alone_r = Retriever(index, RetrieverConfig(mode=mode, threads=1, device="cpu"))
            budget = alone_r.config.budget  # the default context budget, selection and all
            alone = alone_r.retrieve(texts, k=10, budget=budget, batch_size=1)
            for threads in (int(t) for t in args.thread_counts.split(",")):
                r = Retriever(index, RetrieverConfig(mode=mode, threads=threads, device="cpu"))
                for batch in (int(b) for b in args.batches.split(",")):
                    row = {"set": key, "mode": mode, "batch": batch, "threads": threads, "questions": len(texts),
                           **compare(alone, r.retrieve(texts, k=10, budget=budget, batch_size=batch))}
                    rows.append(row)
                    print(row, flush=True)
    record["rows"] = rows
    record["wall_seconds"] = time.perf_counter() - start
    _common.finish_record(record)
    lines = _common.results_header("Batch invariance: each question alone vs in batches", record)
    lines += ["A question's ranking (every candidate, in order) and context (selected chunk ids, in order) "
              "retrieved alone (batch 1, one thread) against the same question in batches of the given size "
              "and thread count. Goal: 0 differing questions; scores within 1e-6 relative (README, "
              "\"Batch invariance\").", "",
              "| set | mode | batch | threads | questions | ranking differs | context differs | max rel. score gap |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['set']} | {r['mode']} | {r['batch']} | {r['threads']} | {r['questions']} | {r['ranking_differs']} "
              f"| {r['context_differs']} | {r['max_relative_score_gap']:.1e} |" for r in rows]
    total = sum(r["ranking_differs"] + r["context_differs"] for r in rows)
    lines += ["", f"Questions differing over all rows: {total}."]
    _common.write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
