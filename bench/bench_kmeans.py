"""Benchmark: an own torch k-means (the engine's until this measurement; kept here as the
alternative) against ``faiss.Kmeans`` on the spectral coordinates the index build clusters.

One question: is an own k-means needed, or does FAISS's do the same job? Both get the same
points (row-normalized spectral coordinates), the same k (the build's ``sqrt(n / 2)``), 50
iterations, a fixed seed and FAISS's 256-points-per-centre sample. Reported per data set:
median wall seconds, the k-means objective (mean squared distance of every point to its centre,
lower is better), the adjusted Rand index between the two labelings, and, where the data set is
an evaluation set with an index, the retrieval figures (R@5, context F1) of mode ``spectral``
with each labeling (clusters enter the selection's ClusterGain term).

    python bench/bench_kmeans.py                  # synthetic 10^4, 10^5 (and --large: 10^6)
    python bench/bench_kmeans.py --eval musique   # also: MuSiQue's index, both labelings evaluated

Results: bench/results/kmeans_cpu.md (machine, threads, load average, repeats in the file).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_model, median_seconds, pin_threads  # noqa: E402

THREADS = pin_threads("1")

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]


def _nearest(points: torch.Tensor, centers: torch.Tensor, tile: int = 65_536) -> torch.Tensor:
    """Nearest centre per point: ``argmin_c (||c||^2 - 2 x.c)``, one GEMM per row tile."""
    c2 = (centers * centers).sum(dim=1)
    return torch.cat([torch.addmm(c2, points[lo : lo + tile], centers.T, alpha=-2.0).argmin(dim=1)
                      for lo in range(0, len(points), tile)])


def kmeans(points: torch.Tensor, k: int, *, seed: int = 0, iters: int = 50, per_center: int = 256) -> torch.Tensor:
    """Lloyd's k-means with k-means++ seeding from a fixed generator, centres fitted on a seeded
    sample of ``per_center * k`` points (FAISS's rule). ``[n, m]`` -> labels ``[n]``."""
    n = points.shape[0]
    gen = torch.Generator().manual_seed(seed)
    everything = points
    if n > per_center * k:
        points = points[torch.randperm(n, generator=gen)[: per_center * k].sort().values]
        n = points.shape[0]
    centers = points[torch.randint(n, (1,), generator=gen)]
    dist = ((points - centers) ** 2).sum(dim=1)
    for _ in range(1, k):
        total = dist.sum()
        probs = dist / total if total > 0 else torch.full_like(dist, 1.0 / n)
        nxt = points[torch.multinomial(probs, 1, generator=gen)]
        centers = torch.cat([centers, nxt])
        dist = torch.minimum(dist, ((points - nxt) ** 2).sum(dim=1))
    labels = _nearest(points, centers)
    for _ in range(iters):
        sums = torch.zeros_like(centers).index_add_(0, labels, points)
        counts = torch.bincount(labels, minlength=k).to(points.dtype)
        centers = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], centers)
        new = _nearest(points, centers)
        if torch.equal(new, labels):
            break
        labels = new
    return labels if everything is points else _nearest(everything, centers)


def faiss_kmeans(points: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``faiss.Kmeans`` with the build's settings; labels by nearest centroid. ``[n, m]`` -> ``[n]``."""
    import faiss

    km = faiss.Kmeans(points.shape[1], k, niter=50, seed=seed + 1, max_points_per_centroid=256, verbose=False)
    km.train(np.ascontiguousarray(points, dtype=np.float32))
    _, labels = km.index.search(np.ascontiguousarray(points, dtype=np.float32), 1)
    return labels.ravel().astype(np.int64)


def objective(points: np.ndarray, labels: np.ndarray) -> float:
    """Mean squared distance of each point to the centroid of its cluster."""
    k = int(labels.max()) + 1
    sums = np.zeros((k, points.shape[1]))
    np.add.at(sums, labels, points)
    counts = np.bincount(labels, minlength=k)[:, None]
    centres = sums / np.maximum(counts, 1)
    return float(((points - centres[labels]) ** 2).sum(axis=1).mean())


def adjusted_rand(a: np.ndarray, b: np.ndarray) -> float:
    """Adjusted Rand index of two labelings (1 = identical partitions)."""
    from scipy.special import comb

    table = np.zeros((a.max() + 1, b.max() + 1), dtype=np.int64)
    np.add.at(table, (a, b), 1)
    pairs = comb(table, 2).sum()
    rows, cols = comb(table.sum(1), 2).sum(), comb(table.sum(0), 2).sum()
    expected = rows * cols / comb(len(a), 2)
    return float((pairs - expected) / (0.5 * (rows + cols) - expected))


def synthetic(n: int, m: int = 32, centres: int = 64, seed: int = 0) -> np.ndarray:
    """Row-normalized points around ``centres`` directions (the shape of spectral coordinates)."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, m))
    x = c[rng.integers(0, centres, n)] + 0.6 * rng.standard_normal((n, m))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def compare(name: str, points: np.ndarray, repeats: int) -> dict:
    n = len(points)
    k = max(1, min(int(round(np.sqrt(n / 2))), 1024, n))
    pts = torch.from_numpy(points)
    own_s, own = median_seconds(lambda: kmeans(pts, k, seed=0).numpy(), repeats)
    fs_s, fs = median_seconds(lambda: faiss_kmeans(points, k, 0), repeats)
    row = {"data": name, "n": n, "m": points.shape[1], "k": k, "own_s": own_s, "faiss_s": fs_s,
           "own_objective": objective(points, own), "faiss_objective": objective(points, fs),
           "adjusted_rand": adjusted_rand(own, fs), "own_labels": own, "faiss_labels": fs}
    print(f"{name}: n={n:,} k={k}: own {own_s:.3f} s (objective {row['own_objective']:.5f}), "
          f"faiss {fs_s:.3f} s ({row['faiss_objective']:.5f}), ARI {row['adjusted_rand']:.3f}", flush=True)
    return row


def eval_with_labels(dataset: str, data: str, labels: dict[str, np.ndarray]) -> dict:
    """Mode spectral on the dataset's cached index with each labeling in place of the stored one."""
    from spectrag.eval import evaluate
    from spectrag.eval.runner import cache_folder, find_openie
    from spectrag.config import IndexConfig, with_openie
    from spectrag.eval.datasets import load_dataset
    from spectrag.store import load_index

    ds = load_dataset(dataset, data)
    config = IndexConfig()
    openie = find_openie(ds)
    if openie is not None:
        config = with_openie(config, openie)
    index = load_index(cache_folder(ds, config))
    out = {}
    for name, lab in labels.items():
        index.graph["clusters"] = lab.astype(np.int32)
        res = evaluate(dataset, data, index=index, methods="spectral", plots=False)["methods"]["spectral"]
        out[name] = {"R@5": res["overall"]["R@5"], "MRR": res["overall"]["MRR"], "F1": res["overall"]["F1"]}
        print(f"  {dataset} spectral with {name} clusters: {out[name]}", flush=True)
    return out


def index_points(dataset: str, data: str) -> np.ndarray:
    from spectrag.eval.runner import find_openie, resolve_index
    from spectrag.config import IndexConfig, with_openie
    from spectrag.eval.datasets import load_dataset

    ds = load_dataset(dataset, data)
    config = IndexConfig()
    openie = find_openie(ds)
    if openie is not None:
        config = with_openie(config, openie)
    index, _ = resolve_index(ds, None, config, log=print)
    z = np.asarray(index.graph["coordinates"], dtype=np.float64)
    return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--large", action="store_true", help="also 10^6 points")
    ap.add_argument("--eval", default="", help="comma-separated: musique, 2wiki (their data under ../shared/data)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    torch.set_num_threads(int(THREADS))
    data_dirs = {"musique": "../shared/data/musique", "2wiki": "../shared/data/2wiki-dev"}  # as spelled in the README (the eval cache key holds the path)
    rows, evals = [], {}
    for name in [e for e in args.eval.split(",") if e]:
        row = compare(f"{name} index", index_points(name, str(data_dirs[name])), args.repeats)
        rows.append(row)
        evals[name] = eval_with_labels(name, str(data_dirs[name]), {"own": row["own_labels"], "faiss": row["faiss_labels"]})
    for n in (10_000, 100_000) + ((1_000_000,) if args.large else ()):
        rows.append(compare(f"synthetic {n:,}", synthetic(n), args.repeats if n < 10**6 else 1))
    load = os.getloadavg()
    head = (f"Machine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, {THREADS} thread(s), "
            f"median of {args.repeats} (1 at 10^6); load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}.")
    lines = ["# k-means: own (torch) vs faiss.Kmeans", "", "```bash", "python bench/bench_kmeans.py " + " ".join(sys.argv[1:]),
             "```", "", head, "", "| data | n | k | own s | faiss s | own objective | faiss objective | ARI |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['data']} | {r['n']:,} | {r['k']} | {r['own_s']:.3f} | {r['faiss_s']:.3f} | "
                     f"{r['own_objective']:.5f} | {r['faiss_objective']:.5f} | {r['adjusted_rand']:.3f} |")
    if evals:
        lines += ["", "Mode spectral with each labeling (%, the dataset's full question set):", "",
                  "| data | labels | R@5 | MRR | context F1 |", "|---|---|---:|---:|---:|"]
        for name, res in evals.items():
            for lab, m in res.items():
                lines.append(f"| {name} | {lab} | {100 * m['R@5']:.1f} | {100 * m['MRR']:.1f} | {100 * m['F1']:.1f} |")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "kmeans_cpu.md").write_text("\n".join(lines) + "\n")
    for r in rows:
        r.pop("own_labels"), r.pop("faiss_labels")
    (Path(args.out) / "kmeans_cpu.json").write_text(json.dumps({"machine": head, "platform": platform.platform(),
                                                                "rows": rows, "eval": evals}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
