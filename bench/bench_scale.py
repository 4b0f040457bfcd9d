"""Benchmark: index a synthetic corpus of 10^5-10^6 chunks on one machine with one command and
report wall time, CPU time and peak memory per stage, the approximate kNN's recall, the
Lanczos residuals and the graph's edges per signal.

    python bench/bench_scale.py --n 1000000        # generates (or reuses) the corpus, builds the index
    python bench/bench_scale.py --n 100000 --threads 2

**Corpus** (``bench/make_synthetic.py``, seed 0): ``--n`` chunks of Markdown documents (1-7
sections of about 80-200 tokens, one chunk each) and clustered d = ``--dim`` embeddings,
written to ``--corpus`` (default ``/tmp/spectrag-synth-corpus-<n>``) and reused when present.

**Build**: ``spectrag.build_index(corpus.jsonl, --index, embeddings=<memory-mapped .npy>)`` with
the default configuration (the model is not run: the vectors are supplied). The index folder
(default ``/tmp/spectrag-synth-<1eK>``) is kept for query benchmarks. Per stage, the manifest
records wall seconds, CPU seconds (this process and its finished worker processes, all
threads) and the peak resident memory during the stage (``engine/util/usage.py``: the kernel's
high-water mark, reset at each stage start); the graph stage is broken down per signal.

**Checks after the build** (not part of the build times):

* kNN recall@10 of the IVF index the build uses above ``knn_exact_max_n`` (rebuilt here with the
  same parameters and seed) against exact FAISS flat search, on ``--recall-sample`` random rows
  (self excluded); the exact search time of those rows, scaled to ``n`` rows, estimates what the
  exact kNN would have cost (a ratio measured in the same run).
* SpMV locality: median time of one float32 Laplacian SpMV in chunk order and in the stored
  reverse Cuthill-McKee order (the order the spectrum was solved in).

Results: ``--out`` (default ``bench/results/scale_cpu.md``) and ``.json`` beside it; each run
replaces the entry of its ``n`` and keeps the others.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import time
from pathlib import Path

from _common import ensure_spectrag, pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("2", passive=True)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import ROOT, command_line, load_average, machine_info, machine_line, median_seconds  # noqa: E402

ensure_spectrag()
import make_synthetic as synth  # noqa: E402
from spectrag.config import EmbedConfig, IndexConfig  # noqa: E402

HERE = ROOT / "bench"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def label(n: int) -> str:
    """``1e6`` for powers of ten, else the number."""
    k = len(str(n)) - 1
    return f"1e{k}" if n == 10**k and k > 0 else str(n)


# ------------------------------------------------------------------------------------------
# build
# ------------------------------------------------------------------------------------------


def build(corpus: Path, index_dir: Path):
    from spectrag.util import usage
    from spectrag.build import build_index

    emb = np.load(corpus / "embeddings.npy", mmap_mode="r")  # (n, d) float32, never copied whole
    t0 = time.perf_counter()
    last = [t0]

    def on_stage(name: str) -> None:
        now = time.perf_counter()
        log(f"  stage {name:<10} {now - last[0]:8.1f} s   (RSS now {usage.rss_mib():,.0f} MiB)")
        last[0] = now

    config = IndexConfig(embed=EmbedConfig(cache_dir=""))
    log(f"building {index_dir} from {corpus / 'corpus.jsonl'} ...")
    index = build_index(corpus / "corpus.jsonl", index_dir, config, fmt="jsonl", overwrite=True,
                        on_stage=on_stage, embeddings=emb)
    wall = time.perf_counter() - t0
    log(f"  build_index returned after {wall:.1f} s (includes loading the written index)")
    return index, wall


# ------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------


def knn_check(emb: np.ndarray, graph: dict, args) -> dict:
    """Recall@10 of the build's IVF parameters vs exact, on ``args.recall_sample`` rows."""
    from spectrag.graph import signals as sig

    n, d = emb.shape
    k = 10
    rows = np.sort(np.random.default_rng(args.seed + 7).choice(n, min(args.recall_sample, n), replace=False))
    xq = np.ascontiguousarray(emb[rows])
    t0 = time.perf_counter()
    flat = sig.knn_index(emb, "exact", tile=65_536)  # the build's exact index, filled tile by tile
    t_add = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, exact = flat.search(xq, k + 1)
    t_exact = time.perf_counter() - t0
    del flat
    knn = graph.get("knn", {})
    nlist = knn.get("nlist") or sig.ivf_nlist(n)
    nprobe = knn.get("nprobe") or 8
    t0 = time.perf_counter()
    ivf = sig.knn_index(emb, "ivf", nlist=nlist, nprobe=nprobe, seed=0)  # as the build (GraphConfig.seed = 0)
    t_ivf_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, approx = ivf.search(xq, k + 1)
    t_ivf = time.perf_counter() - t0
    hits = 0
    for i, e, a in zip(rows, exact, approx):
        want = [j for j in e if j != i and j >= 0][:k]
        got = [j for j in a if j != i and j >= 0][:k]
        hits += len(set(want) & set(got))
    return {
        "method_used_by_build": knn.get("method", "exact"),
        "nlist": int(nlist), "nprobe": int(nprobe), "sample_rows": int(len(rows)),
        "recall_at_10": hits / (k * len(rows)),
        "exact_sample_search_s": round(t_exact, 3),
        "exact_index_add_s": round(t_add, 3),
        "exact_full_estimate_s": round(t_exact * n / len(rows) + t_add, 1),
        "ivf_train_add_s": round(t_ivf_build, 3),
        "ivf_sample_search_s": round(t_ivf, 3),
    }


def spmv_locality(index_dir: Path, repeats: int = 5) -> dict:
    """Median milliseconds of one float32 ``L_sym`` SpMV (1 column, what Lanczos applies) and
    SpMM (32 columns, a query block) with the nodes in chunk order, the stored reverse
    Cuthill-McKee order, and sorted by spectral k-means cluster."""
    from spectrag.graph.build import load_graph
    from spectrag.graph.spectrum import laplacian_csr, scipy_to_torch_csr

    graph = load_graph(index_dir)
    w = graph["weights"]
    orders = {"chunk order": None, "RCM order": np.asarray(graph["rcm_order"]),
              "cluster order": np.argsort(np.asarray(graph["clusters"]), kind="stable")}
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(w.shape[0], 32, dtype=torch.float32, generator=gen)
    out: dict = {}
    for name, order in orders.items():
        mat = w if order is None else w[order][:, order].tocsr()
        lap = scipy_to_torch_csr(laplacian_csr(mat), torch.float32)
        row = {}
        for cols, fn in (("spmv_ms", lambda: torch.mv(lap, x[:, 0])), ("spmm32_ms", lambda: torch.sparse.mm(lap, x))):
            row[cols] = round(median_seconds(fn, repeats)[0] * 1e3, 2)
        row["bandwidth"] = int(np.abs(np.repeat(np.arange(mat.shape[0]), np.diff(mat.indptr)) - mat.indices).max())
        out[name] = row
    return out


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------


def _s(x) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def render(record: dict) -> str:
    m = record["machine"]
    lines = [
        "# Large-corpus indexing on the CPU: synthetic 10^5 / 10^6 chunks, one command",
        "",
        machine_line(m) + f" Threads {record.get('threads', m['torch_threads'])} for torch, BLAS and FAISS/OpenMP; "
        "chunking and entity extraction use a process pool of the usable CPUs.",
        "",
        "Each size is one run (not repeated). Wall seconds on this shared machine depend on the other jobs "
        "(load average given per run); CPU seconds (this process and its worker processes, all threads) "
        "show the work. Peak RSS is per stage (the kernel's high-water mark, reset at each stage start; "
        "worker processes not included, the largest worker is listed).",
        "",
    ]
    runs = sorted(record["runs"].values(), key=lambda r: r["n"])
    for r in runs:
        c, b = r["corpus"], r["build"]
        origin = f"reused from {r['corpus_dir']}" if r["corpus_reused"] else f"generated in {_s(r['gen_s'])} s into {r['corpus_dir']}"
        lines += [
            f"## n = {r['n']:,} chunks",
            "",
            f"Command: `{r['command']}`  ",
            f"Date: {r['date']}; load average at start {', '.join(map(str, r['load_average_start']))}, "
            f"at end {', '.join(map(str, r['load_average_end']))}.  ",
            f"Corpus: {c['documents']:,} documents, {c['topics']:,} topics, {c['corpus_bytes'] / 2**20:,.0f} MiB of "
            f"JSONL, d = {c['dim']}, {r['tokens']:,} tokens ({r['tokens'] / r['n']:.0f} per chunk); "
            f"{origin}.  ",
            f"Index: `{r['index_dir']}` ({r['index_bytes'] / 2**30:.2f} GiB on disk). "
            f"Build wall time **{_s(b['total_s'])} s** ({b['total_s'] / 60:.1f} min), CPU time "
            f"{_s(sum(b['cpu_seconds'].values()))} s, peak RSS **{r['process_peak_rss_mib'] / 1024:.2f} GiB** (largest "
            f"stage peak), largest worker process {r['largest_worker_mib']:,.0f} MiB.",
            "",
            "| stage | wall [s] | CPU [s] | peak RSS [MiB] |",
            "|---|---:|---:|---:|",
        ]
        for name, wall in b["seconds"].items():
            lines.append(f"| {name} | {_s(wall)} | {_s(b['cpu_seconds'].get(name))} | {b['peak_rss_mib'].get(name, 0):,.0f} |")
            if name == "graph":
                g = r["graph"]
                for sub, sw in g["seconds"].items():
                    lines.append(f"| &nbsp;&nbsp;graph: {sub} | {_s(sw)} | {_s(g['cpu_seconds'].get(sub))} | "
                                 f"{g['peak_rss_mib'].get(sub, 0):,.0f} |")
        lines.append(f"| build_index total (incl. loading the written index) | {_s(b['total_s'])} | | |")
        lines.append("")
        g, k, sp_ = r["graph"], r["knn"], r["graph"]["spectrum"]
        ent = g.get("entities", {})
        lines += [
            "| graph fact | value |",
            "|---|---|",
            f"| undirected edges per signal (before fusion) | {', '.join(f'{s} {v:,}' for s, v in g['signal_edges'].items())} |",
            f"| fused graph | {g['edges']:,} edges, mean degree {g['mean_degree']:.1f}, max degree {r['max_degree']}, "
            f"{g['components']} component(s), {g.get('isolated_nodes', 0)} isolated |",
            f"| entities | {ent.get('mentions', 0):,} mentions, {ent.get('kept', 0):,} kept, {ent.get('dropped_frequent', 0):,} "
            f"dropped as too frequent (limit {r['entity_limit']} chunks) |",
            f"| semantic kNN used by the build | {k['method_used_by_build']}"
            + (f" (IVF-Flat, nlist {k['nlist']}, nprobe {k['nprobe']})" if k["method_used_by_build"] == "ivf" else "") + " |",
            f"| IVF recall@10 vs exact ({k['sample_rows']:,} random rows, self excluded) | **{k['recall_at_10']:.4f}** "
            f"(nlist {k['nlist']}, nprobe {k['nprobe']}) |",
            f"| exact kNN of all n rows (estimate) | {_s(k['exact_full_estimate_s'])} s wall: {k['sample_rows']:,} rows took "
            f"{_s(k['exact_sample_search_s'])} s, x n / rows, + {_s(k['exact_index_add_s'])} s index add |",
            f"| spectrum | {sp_.get('dim')} eigenpairs, {sp_.get('dtype')}, tol {sp_.get('tol')}, "
            f"{'RCM-reordered' if sp_.get('reordered') else 'chunk order'}, "
            f"{'converged' if sp_.get('converged') else 'NOT converged'} in {sp_.get('n_iter')} restarts / "
            f"{sp_.get('n_matvec'):,} matvecs; "
            + ", ".join(f"{part} {_s(v)} s" for part, v in sp_.get("seconds", {}).items()) + " |",
            f"| Lanczos residual max ||L'v - lambda v|| | {sp_.get('max_residual', 0):.2e} (working dtype)"
            + (f", {sp_['max_residual_float64']:.2e} recomputed in float64" if "max_residual_float64" in sp_ else "") + " |",
            f"| eigenvalues | {sp_['eigenvalue_range'][0]:.6f} .. {sp_['eigenvalue_range'][1]:.6f}; k-means clusters "
            f"{sp_.get('clusters')} |",
        ]
        lines += [
            "",
            "Node order and one float32 product with L_sym (median of 5; 1 column = what Lanczos applies, "
            "32 columns = a query block):",
            "",
            "| order | bandwidth | SpMV 1 column [ms] | SpMM 32 columns [ms] |",
            "|---|---:|---:|---:|",
        ]
        for name, row in r["spmv"].items():
            if not isinstance(row, dict):  # an entry of the earlier format (replaced by the next run)
                continue
            lines.append(f"| {name} | {row['bandwidth']:,} | {row['spmv_ms']} | {row['spmm32_ms']} |")
        lines.append("")
    if record.get("conclusions"):
        lines += ["## Conclusions", "", record["conclusions"].strip(), ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="chunks (default: 1000000)")
    ap.add_argument("--dim", type=int, default=128, help="embedding dimension (default: 128)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=int(_THREADS), help="torch / BLAS / FAISS threads (default: 2)")
    ap.add_argument("--corpus", default=None, help="corpus folder (default: /tmp/spectrag-synth-corpus-<n>)")
    ap.add_argument("--index", default=None, help="index folder (default: /tmp/spectrag-synth-<1eK>)")
    ap.add_argument("--recall-sample", type=int, default=1000, help="rows of the kNN recall check (default: 1000)")
    ap.add_argument("--out", default=str(HERE / "results" / "scale_cpu.md"))
    ap.add_argument("--render", action="store_true", help="only re-render the Markdown from the JSON")
    ap.add_argument("--conclusions", default=None, metavar="FILE", help="Markdown added as Conclusions")
    args = ap.parse_args()
    out_md, out_json = Path(args.out), Path(args.out).with_suffix(".json")
    record = json.loads(out_json.read_text()) if out_json.exists() else {"runs": {}}
    if args.conclusions:
        record["conclusions"] = Path(args.conclusions).read_text(encoding="utf-8")
    if args.render:
        out_json.write_text(json.dumps(record, indent=1) + "\n")
        out_md.write_text(render(record))
        log(f"re-rendered {out_md}")
        return

    import faiss

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    record["machine"], record["threads"] = machine_info(packages=("faiss",)), args.threads
    corpus = Path(args.corpus or f"/tmp/spectrag-synth-corpus-{args.n}")
    index_dir = Path(args.index or f"/tmp/spectrag-synth-{label(args.n)}")
    run: dict = {"n": args.n, "command": command_line(),
                 "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
                 "load_average_start": load_average(),
                 "corpus_dir": str(corpus), "index_dir": str(index_dir)}

    t0 = time.perf_counter()
    log(f"corpus {corpus} ({args.n:,} chunks, d = {args.dim}) ...")
    meta, reused = synth.ensure(corpus, args.n, dim=args.dim, seed=args.seed, log=log)
    run.update(corpus=meta, corpus_reused=reused, gen_s=round(time.perf_counter() - t0, 1))
    log(f"  {'reused' if reused else 'generated'}: {meta['documents']:,} documents, {meta['topics']:,} topics "
        f"({run['gen_s']} s)")

    index, wall = build(corpus, index_dir)
    man = index.manifest
    run["build"] = {"seconds": man["seconds"], "cpu_seconds": man["cpu_seconds"],
                    "peak_rss_mib": man["memory"]["peak_rss_mib"], "total_s": round(wall, 1)}
    run["largest_worker_mib"] = man["memory"]["largest_worker_mib"]
    # the per-stage resets of the high-water mark also reset getrusage's ru_maxrss: the build's
    # peak is the largest stage peak
    run["process_peak_rss_mib"] = max(man["memory"]["peak_rss_mib"].values())
    run["tokens"] = man["counts"]["tokens"]
    g = man["graph"]
    run["graph"] = {k: g[k] for k in ("seconds", "cpu_seconds", "peak_rss_mib", "signal_edges", "edges",
                                      "mean_degree", "components", "spectrum", "knn") if k in g}
    run["graph"]["isolated_nodes"] = g.get("isolated_nodes", 0)
    run["graph"]["entities"] = g.get("entities", {})
    run["graph_order"] = g.get("order", {})
    w = index.graph["weights"]
    run["max_degree"] = int(np.diff(np.asarray(w.indptr)).max())
    cfg = index.config.graph
    run["entity_limit"] = min(max(int(cfg.entity_max_df * args.n), 50), cfg.entity_max_count or args.n)
    run["index_bytes"] = folder_bytes(index_dir)
    emb = index.embeddings
    del index

    log("kNN recall check ...")
    run["knn"] = knn_check(emb, g, args)
    log(f"  IVF recall@10 {run['knn']['recall_at_10']:.4f} (nlist {run['knn']['nlist']}, nprobe {run['knn']['nprobe']}); "
        f"exact kNN of all rows estimated at {run['knn']['exact_full_estimate_s']:.0f} s")
    log("SpMV locality check ...")
    run["spmv"] = spmv_locality(index_dir)
    log("  " + "; ".join(f"{k}: SpMV {v['spmv_ms']} ms, SpMM(32) {v['spmm32_ms']} ms" for k, v in run["spmv"].items()))
    run["load_average_end"] = load_average()
    run["bench_wall_s"] = round(time.perf_counter() - t0, 1)

    record["runs"][str(args.n)] = run
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(record, indent=1) + "\n")
    out_md.write_text(render(record))
    b = run["build"]
    log("per stage: " + ", ".join(f"{k} {v:.0f} s / {b['peak_rss_mib'].get(k, 0):,.0f} MiB" for k, v in b["seconds"].items()))
    log("graph: " + ", ".join(f"{k} {v:.0f} s / {g['peak_rss_mib'].get(k, 0):,.0f} MiB" for k, v in g["seconds"].items()))
    sp_ = g["spectrum"]
    log(f"spectrum: {sp_.get('dtype')} converged={sp_.get('converged')} matvecs={sp_.get('n_matvec')} "
        f"residual {sp_.get('max_residual', 0):.2e} (float64 check {sp_.get('max_residual_float64', float('nan')):.2e})")
    log(f"done in {run['bench_wall_s'] / 60:.1f} min: {out_md}, {out_json}; index kept at {index_dir}")


if __name__ == "__main__":
    main()
