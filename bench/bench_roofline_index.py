"""Roofline of the diffusion kernels on a built index's own chunk graph, in three node orders.

    python bench/bench_roofline_index.py --index /tmp/spectrag-synth-1e6    # ~5 min at 1e6 chunks

``bench/bench_roofline.py`` measures synthetic extremes (uniformly random graphs, banded locality
graphs); this runs the same kernels (``chebyshev_heat`` t = 1 with int32 / int64 operators,
``personalized_pagerank`` from one-hot restarts, B = 16 columns) on the fused chunk graph ``W`` of
an index built by ``bench/bench_scale.py`` (or ``spectrag index``), with the nodes

* in chunk order (as stored),
* in the stored reverse Cuthill-McKee order (``graph/rcm_order.npy``, when present),
* sorted by spectral k-means cluster (``graph/clusters.npy``).

Bytes and FLOPs as in ``bench_roofline.py`` (gather model, the goal's measure; the compulsory
model beside it); the ceiling is the median of the torch copy bandwidth measured at the start
and at the end of this run. Writes ``bench/results/roofline_index_cpu.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from _common import cpu_model, pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

from bench_roofline import RESULTS, copy_bandwidth, csr_bytes, diffusion, md_table, permute  # noqa: E402


def compulsory(row: dict) -> float:
    """Bytes of the row's call when X is read once per SpMM (no repeated gathers)."""
    n, B, nnz, s = row["n"], row["B"], row["nnz"], 4
    if row["kernel"].startswith("heat"):
        i = 4 if "int32" in row["kernel"] else 8
        return row["spmms"] * (csr_bytes(nnz, n, s, i) + 2 * n * B * s + 6 * n * B * s)
    return row["spmms"] * csr_bytes(nnz, n, s, 4) + row["column_iters"] * 8 * n * s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True, help="an index folder with graph/weights.*.npy")
    ap.add_argument("--batch", type=int, default=16, help="columns B (default: 16)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(RESULTS, "roofline_index_cpu"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = Path(args.index) / "graph"
    if not (g / "weights.indptr.npy").is_file():
        raise SystemExit(f"{args.index}: no graph/weights.indptr.npy (an index built with the chunk graph is needed)")
    t_start, load0 = time.perf_counter(), os.getloadavg()
    cb0 = copy_bandwidth()
    print(f"copy bandwidth at the start: {cb0['torch_GBps']:.2f} GB/s", flush=True)
    indptr = np.load(g / "weights.indptr.npy")
    W = sp.csr_matrix((np.load(g / "weights.data.npy"), np.load(g / "weights.indices.npy"), indptr),
                      shape=(len(indptr) - 1,) * 2)
    orders = {"chunk order": None}
    if (g / "rcm_order.npy").is_file():
        orders["RCM order"] = np.load(g / "rcm_order.npy")
    orders["cluster order"] = np.argsort(np.load(g / "clusters.npy"), kind="stable")
    rows = []
    for name, order in orders.items():
        A = W if order is None else permute(W, order)
        rows += diffusion(A, name, [args.batch], args.repeats, cb0["torch_GBps"], args.seed)
        del A
    cb1 = copy_bandwidth()
    ceiling = statistics.median([cb0["torch_GBps"], cb1["torch_GBps"]])
    for r in rows:
        r["ratio"] = r["GBps"] / ceiling
        r["compulsory_GBps"] = compulsory(r) / (r["ms"] / 1e3) / 1e9
        r["compulsory_ratio"] = r["compulsory_GBps"] / ceiling
    res = {"command": "python bench/bench_roofline_index.py " + " ".join(sys.argv[1:]), "index": str(args.index),
           "n": W.shape[0], "nnz": W.nnz, "machine": f"{cpu_model()}, {os.cpu_count()} logical CPUs",
           "torch": torch.__version__, "python": platform.python_version(), "loadavg_start": load0,
           "loadavg_end": os.getloadavg(), "copy_start": cb0, "copy_end": cb1, "ceiling_GBps": ceiling,
           "rows": rows, "wall_seconds": time.perf_counter() - t_start}
    L = ["# Roofline of the diffusion kernels on an index's own chunk graph (CPU)", "",
         f"Command: `{res['command']}`  ",
         f"Graph: {args.index}, n = {W.shape[0]:,}, nnz = {W.nnz:,} (fused W; the heat rows use L_sym, "
         "the PPR rows the random-walk operator).  ",
         f"Machine: {res['machine']}, torch {res['torch']} with 1 thread, Python {res['python']}; load average "
         f"{load0[0]:.1f} at the start, {res['loadavg_end'][0]:.1f} at the end. Wall time {res['wall_seconds'] / 60:.1f} min.  ",
         f"Ceiling: torch copy bandwidth {cb0['torch_GBps']:.2f} GB/s at the start, {cb1['torch_GBps']:.2f} at the end; "
         f"**{ceiling:.2f} GB/s used** (their median).", "",
         "Bytes as in `bench_roofline.py`: *gather* counts a read of X's row for every nonzero (the goal's model), "
         "*compulsory* X read once per SpMM; B = 16 columns; median of the repeats after one warm-up.", ""]
    L += md_table(rows, [("node order", "graph", ""), ("kernel", "kernel", ""), ("SpMMs", "spmms", "d"),
                         ("ms", "ms", ".1f"), ("GFLOP/s", "GFLOPs", ".2f"), ("gather GB/s", "GBps", ".2f"),
                         ("gather / ceiling", "ratio", ".0%"), ("compulsory GB/s", "compulsory_GBps", ".2f"),
                         ("compulsory / ceiling", "compulsory_ratio", ".0%")])
    L += ["", "## Goal: SpMM diffusion >= 50% of the copy bandwidth (gather model)", ""]
    for r in rows:
        L.append(f"- {r['kernel']}, {r['graph']}: {r['ratio']:.0%} -- " + ("met" if r["ratio"] >= 0.5 else "NOT met"))
    L.append("")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    Path(args.out + ".md").write_text("\n".join(L), encoding="utf-8")
    Path(args.out + ".json").write_text(json.dumps(res, indent=1), encoding="utf-8")
    print(f"written to {args.out}.md and .json")


if __name__ == "__main__":
    main()
