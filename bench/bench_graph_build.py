"""How long does each edge signal of the chunk graph take, and the fusion, and how much memory,
at 10^4 .. 10^6 chunks? The engine's own build (``spectrag.graph.build.build_signals`` and
``spectrag.graph.fuse.fuse_signals`` with ``GraphConfig()`` defaults), timed by the engine's
stage marks (``spectrag.util.usage``: wall, CPU seconds and peak RSS per stage).

    python bench/bench_graph_build.py --sizes 10000 100000 1000000 --threads 2
    python bench/bench_graph_build.py --sizes 5000 --out /tmp/graph_build     # smoke test

**Data**: ``make_synthetic.chunk_corpus`` (seed 0): the chunks of the synthetic Markdown corpus
of ``bench/make_synthetic.py`` (one chunk per section, topics of ~400 chunks, per-topic names,
title mentions, links and URLs, so every signal has edges) with clustered d = ``--dim``
embeddings, made in memory without running the chunker. Generation is timed apart.

**Semantic kNN at scale.** Above ``--exact-knn-max-n`` chunks an exact FAISS search of
``--knn-sample`` rows against all ``n`` is timed first; when the exact kNN of all rows would
take longer than ``--knn-max-seconds`` (that search x n / rows + the index add), the graph is
built with the IVF kNN instead (``GraphConfig(knn="ivf")``, nprobe ``--nprobe``), the table
gives the extrapolated exact time beside it, and the IVF recall@10 is measured on the sample
rows (exact neighbours against the semantic signal's rows).

Threads: torch, BLAS (threadpoolctl) and FAISS/OpenMP all get ``--threads``. One run per size
(not repeated). Results: ``--out`` (default ``results/graph_build_cpu.md``) and ``.json``; an
earlier run's figures (another corpus generator, with the entity stage split in three) are in
``results/graph_cpu.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import ensure_spectrag, pin_threads

THREADS = pin_threads("2", passive=True)

import numpy as np  # noqa: E402

from _common import ROOT, finish_record, limit_threads, md_table, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
import make_synthetic  # noqa: E402
from spectrag.config import GraphConfig  # noqa: E402
from spectrag.graph import signals as sig  # noqa: E402
from spectrag.graph.build import build_signals  # noqa: E402
from spectrag.graph.fuse import fuse_signals  # noqa: E402
from spectrag.util import usage  # noqa: E402

SIGNALS = ("semantic", "adjacency", "section", "entity", "citation")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def exact_sample(emb: np.ndarray, k: int, rows: int) -> dict:
    """The exact kNN of the first ``rows`` rows against all (FAISS flat, as the build's exact
    method): seconds of the index add and of the search, and the neighbour ids ``[rows, k + 1]``."""
    t0 = time.perf_counter()
    index = sig.knn_index(emb, "exact")
    t_add = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, ids = index.search(np.ascontiguousarray(emb[:rows]), k + 1)
    return {"rows": rows, "add_s": t_add, "search_s": time.perf_counter() - t0, "ids": ids}


def recall(sample: dict, semantic, k: int) -> float:
    """Recall@k of the semantic signal's rows against the exact neighbours of the sample rows."""
    hits = total = 0
    for i, ids in enumerate(sample["ids"]):
        truth = [int(j) for j in ids if j >= 0 and j != i][:k]
        got = set(semantic.indices[semantic.indptr[i] : semantic.indptr[i + 1]].tolist())
        hits, total = hits + len(got.intersection(truth)), total + len(truth)
    return hits / max(1, total)


def run_size(n: int, args) -> dict:
    rec: dict = {"n": n}
    t0 = time.perf_counter()
    chunks, emb, rec["corpus"] = make_synthetic.chunk_corpus(n, dim=args.dim, seed=args.seed)
    rec["generate_s"] = time.perf_counter() - t0
    log(f"n = {n:,}: corpus {rec['corpus']} in {rec['generate_s']:.1f} s")
    knn, sample = "exact", None
    if n > args.exact_knn_max_n:
        log(f"  exact kNN of {args.knn_sample:,} sample rows against all {n:,} ...")
        sample = exact_sample(emb, GraphConfig().k_semantic, min(args.knn_sample, n))
        estimate = sample["add_s"] + sample["search_s"] * n / sample["rows"]
        rec["knn_sample"] = {k: v for k, v in sample.items() if k != "ids"} | {"exact_estimate_s": estimate}
        knn = "exact" if estimate <= args.knn_max_seconds else "ivf"
    cfg = GraphConfig(knn=knn, knn_nprobe=args.nprobe)
    log(f"  signals (semantic kNN: {knn}) ...")
    signals, info = build_signals(chunks, emb, cfg)
    log("  fuse ...")
    mark = usage.begin()
    fused = fuse_signals(signals, cfg.signal_weights(), tau=cfg.tau, max_degree=cfg.max_degree)
    for key, value in zip(("seconds", "cpu_seconds", "peak_rss_mib"), usage.end(mark)):
        info[key]["fuse"] = value
    if sample is not None and knn == "ivf":
        rec["knn_sample"]["ivf_recall_at_10"] = recall(sample, signals["semantic"], cfg.k_semantic)
    w = fused.weights
    rec.update({k: info[k] for k in ("seconds", "cpu_seconds", "peak_rss_mib", "knn")},
               entities=info.get("entities", {}), citations=info.get("citations", {}),
               signal_edges=dict(fused.signal_edges), directed_edges={k: int(m.nnz) for k, m in signals.items()},
               fused={"edges": int(w.nnz // 2), "mean_degree": float(w.nnz / n), "max_degree": int(np.diff(w.indptr).max())})
    log("  " + ", ".join(f"{k} {v:.1f} s" for k, v in rec["seconds"].items()))
    return rec


def _s(x: float | None) -> str:
    return "-" if x is None else (f"{x:.2f}" if x < 100 else f"{x:,.0f}")


def stage_rows(sizes: list[dict]) -> list[dict]:
    """One row per stage: seconds, CPU seconds, peak RSS and edges per size."""
    rows = []
    for stage in (*SIGNALS, "fuse"):
        row = {"stage": stage}
        for r in sizes:
            n = f"{r['n']:,}"
            note = " (IVF)" if stage == "semantic" and r["knn"]["method"] == "ivf" else ""
            row[f"{n} [s]"] = _s(r["seconds"].get(stage)) + note
            row[f"{n} CPU [s]"] = _s(r["cpu_seconds"].get(stage))
            row[f"{n} peak RSS [MiB]"] = f"{r['peak_rss_mib'].get(stage, 0):,.0f}"
            edges = r["fused"]["edges"] if stage == "fuse" else r["signal_edges"].get(stage)
            row[f"{n} edges"] = "" if edges is None else f"{edges:,}"
        rows.append(row)
    return rows


def render(record: dict) -> list[str]:
    sizes = record["sizes"]
    lines = results_header("Chunk-graph build per signal on the CPU (synthetic corpora)", record)
    lines += [f"Data: `make_synthetic.chunk_corpus` (seed {record['seed']}, d = {record['dim']}); graph settings "
              "`GraphConfig()` defaults (k_g = 10, section band 8, entity max_df 0.01 and max_count 200, top_k 10, "
              "citation max_targets 4, the paper's weights, tau 0.05, max_degree 40); no utility signal. Times and peak "
              "RSS per stage from the engine's stage marks (`spectrag.util.usage`); edges = undirected edges of a "
              "signal before fusion (on the fuse row: of the fused graph).", "", "## Corpora", ""]
    lines += md_table(sizes, [("n", "n", ","), ("topics", lambda r: r["corpus"]["topics"], ","),
                              ("documents", lambda r: r["corpus"]["documents"], ","),
                              ("entity names", lambda r: r["corpus"]["entity_names"], ","),
                              ("mentions", lambda r: r["entities"].get("mentions"), ","),
                              ("kept entities", lambda r: r["entities"].get("kept"), ","),
                              ("dropped (too frequent)", lambda r: r["entities"].get("dropped_frequent"), ","),
                              ("citations", lambda r: ", ".join(f"{k} {v:,}" for k, v in r["citations"].items()), ""),
                              ("generate [s]", "generate_s", ".1f")])
    lines += ["", "## Seconds, CPU seconds and peak RSS per stage (one run per size)", ""]
    rows = stage_rows(sizes)
    lines += md_table(rows, [(k, k, "") for k in rows[0]])
    lines += ["", "| n | total [s] | fused edges | mean degree | max degree |", "|---:|---:|---:|---:|---:|"]
    for r in sizes:
        total = sum(r["seconds"].get(s, 0.0) for s in (*SIGNALS, "fuse"))
        lines.append(f"| {r['n']:,} | {_s(total)} | {r['fused']['edges']:,} | {r['fused']['mean_degree']:.1f} "
                     f"| {r['fused']['max_degree']} |")
    for r in sizes:
        ks = r.get("knn_sample")
        if ks:
            lines.append(f"\n* n = {r['n']:,}: exact FAISS search of {ks['rows']:,} sample rows against all took "
                         f"{ks['search_s']:.1f} s (+ {ks['add_s']:.1f} s index add): the exact kNN of all rows would take "
                         f"about {_s(ks['exact_estimate_s'])} s (extrapolated, not measured)"
                         + (f"; the graph used the IVF kNN, recall@10 {ks['ivf_recall_at_10']:.3f} on the sample rows"
                            if "ivf_recall_at_10" in ks else "") + ".")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--dim", type=int, default=32, help="embedding dimension (default: 32)")
    ap.add_argument("--threads", type=int, default=int(THREADS), help="torch / BLAS / FAISS threads (default: 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exact-knn-max-n", type=int, default=200_000,
                    help="above this size, time an exact kNN sample first and extrapolate (default: 200000)")
    ap.add_argument("--knn-sample", type=int, default=16_384, help="query rows of the exact kNN sample")
    ap.add_argument("--knn-max-seconds", type=float, default=600.0, help="run exact kNN only if estimated below this")
    ap.add_argument("--nprobe", type=int, default=8, help="IVF probes of the approximate kNN (default: 8)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "graph_build_cpu"), help="results path without extension")
    ap.add_argument("--render", default=None, metavar="JSON", help="only re-render the Markdown of an earlier JSON")
    args = ap.parse_args()
    if args.render:
        record = json.loads(Path(args.render).read_text(encoding="utf-8"))
        write_results(args.out, render(record), record)
        return
    record = new_record("one run per size", packages=("faiss",))
    record.update(seed=args.seed, dim=args.dim, sizes=[])
    with limit_threads(args.threads):
        for n in args.sizes:
            record["sizes"].append(run_size(n, args))
            write_results(args.out, render(finish_record(record)), record)  # partial results survive a stop


if __name__ == "__main__":
    main()
