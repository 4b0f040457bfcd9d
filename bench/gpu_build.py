"""The index build's two heavy steps with the vectors given, timed on the device: the kNN graph
(k = 10, cosine) and the spectrum (32 smallest non-trivial eigenpairs of L_sym), at 10^6
synthetic chunks (``--small``: 3,000). Issue 35's goal: kNN + spectrum <= 2 minutes on the H200.

What runs depends on this checkout, checked at run time (so the script runs either way):

* kNN: ``spectrag.graph.signals.semantic_edges(..., device=...)`` when it takes a ``device``
  (the torch tiled top-k on the GPU, branch ``gpu-resident``); else the existing device kernel
  :func:`spectrag.kernels.topk.tiled_topk_ip` over every row in tiles of queries (what a device
  kNN would run), the graph assembled on the host.
* spectrum: ``spectrag.graph.spectrum.spectral_coordinates(..., device=...)`` when it takes a
  ``device``; else the CPU solve (it passes ``device="cpu"`` to the Lanczos) on at most
  ``--cpu-spectrum-max`` nodes (a 10^6 CPU solve takes minutes, beyond the device script's
  8-minute budget): the line says which.

    python bench/gpu_build.py [--small] [--out DIR] [--knn-budget-s 45]
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import ensure_spectrag, finish_record, md_table, new_record, results_header, sync, write_results  # noqa: E402

ensure_spectrag()
from spectrag.kernels.topk import tiled_topk_ip  # noqa: E402

D, K, DIM = 384, 10, 32


def vectors(n: int, dev: torch.device, seed: int = 0) -> torch.Tensor:
    """``[n, D]`` unit vectors around ``n / 1000`` centres (as bench/gpu_check.py's chunks)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    centres = torch.randn(max(n // 1000, 4), D, generator=g, device=dev)
    centres /= centres.norm(dim=1, keepdim=True)
    x = centres[torch.randint(0, centres.shape[0], (n,), generator=g, device=dev)]
    x = x + 0.6 * torch.randn(n, D, generator=g, device=dev) / D**0.5
    return x / x.norm(dim=1, keepdim=True)


def knn_by_topk(x: torch.Tensor, k: int, rows: int = 8192, budget_s: float = float("inf")):
    """The symmetric cosine kNN graph by :func:`tiled_topk_ip` on ``x``'s device, ``rows``
    queries at a time; the self match dropped, weights max(0, cos). Stops after ``budget_s``:
    returns the graph of the rows done and their number."""
    n = x.shape[0]
    cols, vals = [], []
    t0 = time.perf_counter()
    done = 0
    for lo in range(0, n, rows):
        s, i = tiled_topk_ip(x[lo : lo + rows], x, k + 1)
        cols.append(i.cpu())
        vals.append(s.cpu())
        done = min(lo + rows, n)
        if time.perf_counter() - t0 > budget_s:
            break
    c, v = torch.cat(cols).numpy(), torch.cat(vals).numpy()
    r = np.repeat(np.arange(done), k + 1)
    keep = (c.ravel() != r) & (v.ravel() > 0)
    A = sp.csr_matrix((v.ravel()[keep], (r[keep], c.ravel()[keep])), shape=(n, n))
    return A.maximum(A.T).tocsr(), done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="n = 3,000 (the CPU rehearsal)")
    ap.add_argument("--knn-budget-s", type=float, default=45.0, help="stop the tiled kNN after this (extrapolated)")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--cpu-spectrum-max", type=int, default=100_000, help="largest n for a CPU spectrum solve here")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(HERE / "results"))
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    n = args.n or (3_000 if args.small else 1_000_000)
    record = new_record("one run each (a build step, not a hot path), synchronized on CUDA", device=dev)
    rows = []
    if dev.type != "cuda":
        print("[no CUDA] the build steps run on the CPU here (a rehearsal of the script; no GPU figure)")
    x = vectors(n, dev)
    sync(dev)

    from spectrag.graph import signals, spectrum

    t = time.perf_counter()
    if "device" in inspect.signature(signals.semantic_edges).parameters:
        done = n
        W = signals.semantic_edges(x.cpu().numpy(), K, device=str(dev))
        W = W.maximum(W.T).tocsr()  # each node's kNN list is one-sided; the build symmetrizes at fusion
        how = f"semantic_edges(device={dev.type!r})"
    else:
        W, done = knn_by_topk(x, K, budget_s=args.knn_budget_s)
        how = f"tiled_topk_ip on {dev.type}, 8,192 queries a tile (semantic_edges has no device parameter here)"
    sync(dev)
    t_knn = time.perf_counter() - t
    if done < n:  # stopped at the budget: the rate of the rows done, said as an extrapolation
        how += f"; stopped after {done:,} of {n:,} rows at the {args.knn_budget_s:.0f} s budget: time EXTRAPOLATED"
        t_knn *= n / done
    rows.append(dict(step="kNN graph (k = 10)", n=n, seconds=t_knn, how=how, note=f"{W.nnz:,} entries"))
    print(f"  kNN n={n:,}: {t_knn:.1f} s ({how})", flush=True)

    takes_device = "device" in inspect.signature(spectrum.spectral_coordinates).parameters
    no_kmeans = importlib.util.find_spec("faiss") is None
    if no_kmeans:  # the clusters come from FAISS k-means: without FAISS time the solve alone
        print("  note: FAISS is absent: the spectrum's k-means is left out (every node in cluster 0)")
        spectrum.kmeans = lambda points, k, **kw: torch.zeros(points.shape[0], dtype=torch.int64)
    if done < n:
        rows.append(dict(step="spectrum (32 eigenpairs, Lanczos)", n=n, seconds=float("nan"), how="skipped",
                         note="the kNN graph was not finished within its budget"))
        print(f"  [skip] spectrum: {rows[-1]['note']}", flush=True)
    elif takes_device or n <= args.cpu_spectrum_max:
        t = time.perf_counter()
        kw = {"device": str(dev)} if takes_device else {}
        spec = spectrum.spectral_coordinates(W.astype(np.float64), DIM, dtype="auto", **kw)
        sync(dev)
        t_spec = time.perf_counter() - t
        where = dev.type if takes_device else "cpu (spectral_coordinates has no device parameter here)"
        rows.append(dict(step="spectrum (32 eigenpairs, Lanczos)", n=n, seconds=t_spec, how=where,
                         note=f"converged {spec.report.get('converged')}, {spec.report.get('n_matvec')} products; "
                         f"parts s {spec.report.get('seconds')}" + ("; k-means left out (no FAISS)" if no_kmeans else "")))
        print(f"  spectrum n={n:,}: {t_spec:.1f} s on {where}", flush=True)
    else:
        rows.append(dict(step="spectrum (32 eigenpairs, Lanczos)", n=n, seconds=float("nan"),
                         how="skipped", note=f"spectral_coordinates has no device parameter in this checkout and a CPU "
                         f"solve of {n:,} nodes exceeds --cpu-spectrum-max {args.cpu_spectrum_max:,}"))
        print(f"  [skip] spectrum n={n:,}: {rows[-1]['note']}", flush=True)
    total = sum(r["seconds"] for r in rows if r["seconds"] == r["seconds"])
    record.update(n=n, rows=rows, total_seconds=total, command="python bench/gpu_build.py " + " ".join(sys.argv[1:]))
    finish_record(record)
    L = results_header(f"Index build steps with vectors given, n = {n:,} ({dev.type})", record)
    L += md_table(rows, [("step", "step", ""), ("n", "n", ",d"), ("seconds", "seconds", ".1f"), ("how", "how", ""),
                         ("note", "note", "")])
    L += ["", f"Total of the steps run: {total:.1f} s (goal on the H200 at 10^6: kNN + spectrum <= 120 s)."]
    write_results(os.path.join(args.out, f"gpu_build_{dev.type}"), L, record)


if __name__ == "__main__":
    main()
