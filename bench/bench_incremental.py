"""Benchmark: adding documents to an index (``spectrag.index.add_documents``) against a full
rebuild of the union, in the same run, on a synthetic corpus with supplied embeddings.

**Data**: ``bench/make_synthetic.py`` (seed 0, ``d = --dim``): one chunk per section, so chunk
``i`` is row ``i`` of its ``embeddings.npy``. The base index holds the documents of the first
``--base`` chunks (rounded up to a whole document); each addition is the next documents
holding about ``--adds`` chunks. Title mentions in the corpus point anywhere, so an addition
also gives old chunks new citation edges.

**Timed** (seconds per stage, as ``AddReport.seconds`` / ``BuildReport.seconds`` and the
manifest's graph seconds record them; median of ``--repeats``): ``add_documents`` on a fresh
copy of the base index, and ``build_index`` of the union. The stages differ in what they hold:
an add's ``verify`` checks every checksum of the old index and its ``write`` rewrites the whole
folder (both O(index size)); a build's ``dense`` and ``bm25`` include saving them.

**Lanczos warm vs cold**: the add's spectrum starts from the previous coordinates, the
rebuild's from a random vector, on the same fused graph (checked equal); both cycles and
matvecs come from the manifests. Separately, the spectrum stage is repeated on that graph with
and without the warm start and timed alone (``spectral_coordinates`` with the index's settings:
Lanczos and k-means). The largest principal angle between the warm start
block and the final subspace says how far the 32 coordinates moved.

**Checks** (same run): identical chunks, max |W_add - W_full|, max eigenvalue difference,
``||U U^T - V V^T||_2`` of the coordinates.

Usage::

    python bench/bench_incremental.py --base 20000 --adds 1000 10000 --threads 1 \\
        --out bench/results/incremental_cpu.md
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import ensure_spectrag, pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import command_line, load_average, machine_info, machine_line, median_seconds  # noqa: E402

ensure_spectrag()


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def split_corpus(corpus: Path, doc_ptr: np.ndarray, base: int, adds: list[int], out: Path) -> dict:
    """JSONL files: base, each addition and each union. Returns chunk counts per part."""
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    d_old = int(np.searchsorted(doc_ptr, base))  # documents [0, d_old) hold >= base chunks
    parts = {"base": (0, d_old)}
    for a in adds:
        d_new = int(np.searchsorted(doc_ptr, doc_ptr[d_old] + a))
        parts[f"add-{a}"] = (d_old, d_new)
        parts[f"union-{a}"] = (0, d_new)
    info = {}
    for name, (lo, hi) in parts.items():
        (out / f"{name}.jsonl").write_text("".join(lines[lo:hi]), encoding="utf-8")
        info[name] = {"documents": hi - lo, "chunks": int(doc_ptr[hi] - doc_ptr[lo]), "first_chunk": int(doc_ptr[lo])}
    return info


def stage_seconds(index) -> dict[str, float]:
    seconds = dict(index.report.seconds)
    for k, v in (index.manifest.get("graph") or {}).get("seconds", {}).items():
        seconds[f"graph: {k}"] = v
    return seconds


def signal_edges(index, name: str) -> set[tuple[int, int]]:
    rows, cols, _ = index.graph["signals"][name]  # as the index maps them
    return set(zip(np.asarray(rows).tolist(), np.asarray(cols).tolist()))


def checks(add_idx, full_idx, old_coords: np.ndarray, vectors: np.ndarray) -> dict:
    """Equality with the rebuild; differing semantic edges with their float64 cosines (a swap
    of two candidates whose float32 scores tie shows as one edge on each side)."""
    from spectrag.incremental import warm_start

    diff: dict[str, int] = {}
    semantic: dict[str, list] = {}
    for name in ("semantic", "adjacency", "section", "entity", "citation"):
        a, b = signal_edges(add_idx, name), signal_edges(full_idx, name)
        diff[name] = len(a ^ b)
        if name == "semantic":
            cos = lambda e: round(float(vectors[e[0]].astype(np.float64) @ vectors[e[1]].astype(np.float64)), 9)  # noqa: E731
            semantic = {"only_in_add": [[*e, cos(e)] for e in sorted(a - b)[:6]],
                        "only_in_rebuild": [[*e, cos(e)] for e in sorted(b - a)[:6]]}
    w1, w2 = add_idx.graph["weights"], full_idx.graph["weights"]
    u = np.linalg.qr(np.asarray(add_idx.graph["coordinates"], np.float64))[0]
    v = np.linalg.qr(np.asarray(full_idx.graph["coordinates"], np.float64))[0]
    start = np.linalg.qr(warm_start(w1, old_coords))[0]
    cos_start = np.linalg.svd(start.T @ v, compute_uv=False)
    return {
        "chunks_equal": add_idx.chunks == full_idx.chunks,
        "signal_edges_differing": diff,
        "semantic_differences": semantic,
        "fused_entries_differing": int(((w1 != 0) != (w2 != 0)).nnz),
        "max_abs_weight_diff": float(abs(w1 - w2).max()),
        "max_abs_weight_diff_common_edges": float(abs((w1 - w2).multiply((w1 != 0).multiply(w2 != 0))).max()),
        "max_eigenvalue_diff": float(np.abs(np.asarray(add_idx.graph["eigenvalues"]) - np.asarray(full_idx.graph["eigenvalues"])).max()),
        # ||U U^T - V V^T||_2 of equal-dimension subspaces: the sine of their largest principal angle
        "projector_diff_2norm": float(np.sqrt(max(0.0, 1.0 - np.linalg.svd(u.T @ v, compute_uv=False).min() ** 2))),
        "warm_start_largest_angle_deg": float(np.degrees(np.arccos(np.clip(cos_start.min(), -1, 1)))),
        "warm_start_mean_cos2": float(np.mean(cos_start**2)),
    }


def time_spectrum(index, old_coords: np.ndarray, repeats: int) -> dict:
    """The spectrum stage alone on the final graph (``spectral_coordinates`` with the index's
    settings: Lanczos + k-means), random start vs the warm start; median seconds."""
    from spectrag.graph.build import spectrum_of
    from spectrag.incremental import warm_start

    w, cfg = index.graph["weights"], index.config.graph
    out = {}
    for name, start in (("cold", None), ("warm", warm_start(w, old_coords))):
        secs, sp_ = median_seconds(lambda: spectrum_of(w, cfg, v0=start), repeats, warmup=False)
        out[name] = {"seconds": round(secs, 3), "cycles": sp_.report["n_iter"],
                     "matvecs": sp_.report["n_matvec"]}
    return out


def run(args) -> dict:
    import faiss
    from make_synthetic import Plan, ensure

    from spectrag import build_index
    from spectrag.config import EmbedConfig, IndexConfig
    from spectrag import add_documents

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    n_total = args.base + max(args.adds) + 64
    corpus_dir = Path(args.corpus or f"/tmp/spectrag-synth-corpus-{n_total}-d{args.dim}")
    meta, reused = ensure(corpus_dir, n_total, dim=args.dim, seed=0, n_queries=16, log=log)
    doc_ptr = Plan(n_total, 0).doc_ptr
    vectors = np.load(corpus_dir / "embeddings.npy", mmap_mode="r")
    config = IndexConfig(embed=EmbedConfig(cache_dir=""))
    work = Path(tempfile.mkdtemp(prefix="spectrag-bench-incremental-"))
    result: dict = {"corpus": {"path": str(corpus_dir), "reused": reused, **meta}, "adds": {}}
    try:
        parts = split_corpus(corpus_dir / "corpus.jsonl", doc_ptr, args.base, args.adds, work)
        result["parts"] = parts
        n_old = parts["base"]["chunks"]
        log(f"base index: {n_old:,} chunks ...")
        t = time.perf_counter()
        base = build_index(work / "base.jsonl", work / "base", config, fmt="jsonl", embeddings=np.asarray(vectors[:n_old]))
        result["base_build_s"] = round(time.perf_counter() - t, 2)
        assert len(base) == n_old, (len(base), n_old)
        old_coords = np.array(base.graph["coordinates"])
        for a in args.adds:
            m = parts[f"add-{a}"]["chunks"]
            rows: dict[str, list] = {"add": [], "full": []}
            add_idx = full_idx = None
            for rep in range(args.repeats):
                target = work / f"inc-{a}-{rep}"
                shutil.copytree(work / "base", target)
                log(f"add {m:,} chunks to {n_old:,} (repeat {rep + 1}) ...")
                t = time.perf_counter()
                add_idx = add_documents(target, work / f"add-{a}.jsonl", fmt="jsonl",
                                        embeddings=np.asarray(vectors[n_old : n_old + m]))
                rows["add"].append({"total": time.perf_counter() - t, **stage_seconds(add_idx), **{
                    f"lanczos {k}": v for k, v in add_idx.report.lanczos.items() if k in ("n_iter", "n_matvec")}})
                log(f"full rebuild of {n_old + m:,} chunks (repeat {rep + 1}) ...")
                t = time.perf_counter()
                full_idx = build_index(work / f"union-{a}.jsonl", work / f"full-{a}-{rep}", config, fmt="jsonl",
                                       embeddings=np.asarray(vectors[: n_old + m]))
                sp_ = full_idx.manifest["graph"]["spectrum"]
                rows["full"].append({"total": time.perf_counter() - t, **stage_seconds(full_idx),
                                     "lanczos n_iter": sp_["n_iter"], "lanczos n_matvec": sp_["n_matvec"]})
            entry = {
                "added_chunks": m, "added_documents": parts[f"add-{a}"]["documents"], "total_chunks": n_old + m,
                "add_median_s": {k: round(statistics.median(r[k] for r in rows["add"]), 3) for k in rows["add"][0]},
                "full_median_s": {k: round(statistics.median(r[k] for r in rows["full"]), 3) for k in rows["full"][0]},
                "runs": rows,
                "checks": checks(add_idx, full_idx, old_coords, vectors),
                "spectrum_alone": time_spectrum(full_idx, old_coords, args.repeats),
            }
            entry["speedup_total"] = round(entry["full_median_s"]["total"] / entry["add_median_s"]["total"], 2)
            result["adds"][str(a)] = entry
            log(json.dumps({k: entry[k] for k in ("add_median_s", "full_median_s", "speedup_total", "checks", "spectrum_alone")}))
            del add_idx, full_idx
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


STAGES = [
    ("verify", "verify (checksums of the old index)"), ("load", "load"), ("chunk", "chunk"), ("embed", "embed (supplied)"),
    ("dense", "dense"), ("bm25", "bm25"), ("graph: semantic", "graph: semantic"), ("graph: adjacency", "graph: adjacency"),
    ("graph: section", "graph: section"), ("graph: entity", "graph: entity"), ("graph: citation", "graph: citation"),
    ("graph: fuse", "graph: fuse"), ("graph: spectrum", "graph: spectrum (Lanczos + k-means)"), ("graph", "graph (all)"),
    ("write", "write"), ("total", "**total (wall)**"), ("lanczos n_iter", "Lanczos cycles"), ("lanczos n_matvec", "Lanczos matvecs"),
]


def render(result: dict, args, header: dict) -> str:
    adds = result["adds"]
    lines = [
        "# Incremental indexing vs a full rebuild (CPU, synthetic corpus)", "",
        f"Command: `{header['command']}`  ",
        f"Date: {header['date']}  ",
        machine_line(header["machine"]) + "  ",
        f"Threads: {args.threads} for torch, BLAS and FAISS/OpenMP. Runs: {args.repeats} per stage (medians). "
        f"Total wall time {header['wall_min']:.1f} min.", "",
        f"Data: `bench/make_synthetic.py` (seed 0, d = {args.dim}, one chunk per section); base index of "
        f"{result['parts']['base']['chunks']:,} chunks ({result['parts']['base']['documents']:,} documents, built in "
        f"{result['base_build_s']} s); embeddings supplied; `IndexConfig()` defaults otherwise.", "",
        "## Seconds per stage: add vs full rebuild of the union", "",
        "| stage | " + " | ".join(f"add {adds[a]['added_chunks']:,} [s] | rebuild {adds[a]['total_chunks']:,} [s]" for a in adds) + " |",
        "|---|" + "---|---|" * len(adds),
    ]
    for key, label in STAGES:
        cells = []
        for a in adds:
            for side in ("add_median_s", "full_median_s"):
                v = adds[a][side].get(key)
                cells.append("" if v is None else (f"{v:,.0f}" if "lanczos" in key else f"{v:.2f}"))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| added | speed-up (rebuild / add, wall) | bm25 share of the add | graph share of the add |", "|---|---|---|---|"]
    for a, e in adds.items():
        add = e["add_median_s"]
        lines.append(f"| {e['added_chunks']:,} | {e['speedup_total']}x | {100 * add['bm25'] / add['total']:.0f} % | "
                     f"{100 * add.get('graph', 0) / add['total']:.0f} % |")
    lines += ["", "## Lanczos: warm start (previous coordinates) vs random start, same graph", "",
              "Spectrum stage alone (Lanczos + k-means), median seconds.", "",
              "| added | cold cycles / matvecs / s | warm cycles / matvecs / s | largest angle warm start -> result | mean cos^2 |",
              "|---|---|---|---|---|"]
    for a, e in adds.items():
        c, w, ch = e["spectrum_alone"]["cold"], e["spectrum_alone"]["warm"], e["checks"]
        lines.append(f"| {e['added_chunks']:,} | {c['cycles']} / {c['matvecs']} / {c['seconds']} | {w['cycles']} / "
                     f"{w['matvecs']} / {w['seconds']} | {ch['warm_start_largest_angle_deg']:.1f} deg | {ch['warm_start_mean_cos2']:.3f} |")
    lines += ["", "## Same result as the rebuild", "",
              "| added | chunks equal | signal edges differing (sem/adj/sec/ent/cit) | fused entries differing | "
              "max abs weight diff (common edges) | max eigenvalue diff | projector diff |",
              "|---|---|---|---|---|---|---|"]
    for a, e in adds.items():
        ch = e["checks"]
        d = "/".join(str(v) for v in ch["signal_edges_differing"].values())
        lines.append(f"| {e['added_chunks']:,} | {ch['chunks_equal']} | {d} | {ch['fused_entries_differing']} | "
                     f"{ch['max_abs_weight_diff']:.1e} ({ch['max_abs_weight_diff_common_edges']:.1e}) | "
                     f"{ch['max_eigenvalue_diff']:.1e} | {ch['projector_diff_2norm']:.1e} |")
    lines += notes(result)
    for a, e in adds.items():
        sem = e["checks"]["semantic_differences"]
        if sem["only_in_add"] or sem["only_in_rebuild"]:
            fmt = lambda es: ", ".join(f"{i}-{j} (cos {c:.9f})" for i, j, c in es)  # noqa: E731
            lines.append(f"\nSemantic edges that differ after adding {e['added_chunks']:,} (float64 cosines): only in the "
                         f"add: {fmt(sem['only_in_add'])}; only in the rebuild: {fmt(sem['only_in_rebuild'])}.")
    return "\n".join(lines) + "\n"


INCREMENTAL = ("chunk", "embed", "dense", "graph: semantic", "graph: adjacency", "graph: section")
GLOBAL = ("bm25", "graph: entity", "graph: citation", "graph: fuse", "graph: spectrum")
OVERHEAD = ("verify", "write")


def notes(result: dict) -> list[str]:
    """What the tables say, with the figures of this run."""
    out = ["", "## Reading", ""]
    saved = ", ".join(
        f"{e['spectrum_alone']['cold']['cycles'] - e['spectrum_alone']['warm']['cycles']:+d} (cold - warm, "
        f"{e['added_chunks']:,} added)" for e in result["adds"].values()
    )
    for e in result["adds"].values():
        add, full = e["add_median_s"], e["full_median_s"]
        part = lambda side, keys: sum(side.get(k, 0.0) for k in keys)  # noqa: E731
        out.append(
            f"* {e['added_chunks']:,} added: the stages that scale with the new chunks (chunk, embed, dense, "
            f"semantic, adjacency, section) take {part(add, INCREMENTAL):.1f} s against {part(full, INCREMENTAL):.1f} s "
            f"in the rebuild; the stages recomputed over all chunks (BM25, entity, citation, fusion, spectrum with "
            f"k-means) take {part(add, GLOBAL):.1f} s against {part(full, GLOBAL):.1f} s and are "
            f"{100 * part(add, GLOBAL) / add['total']:.0f} % of the add; verify + write (O(index size)) "
            f"{part(add, OVERHEAD):.1f} s."
        )
    out += [
        "* BM25 scores are recomputed over all chunks because IDF and the mean chunk length are global (every "
        "stored score changes), but from the token ids the index stores (`bm25/tokens.*`): only the new chunks are "
        "tokenized, and what is left is bm25s's scoring pass. The entity signal is recomputed because its IDF "
        "weights and document-frequency cap depend on n, the citation signal because old chunks may mention a new "
        "title (and a longer new title hides a shorter one inside it); the extracted entity lists are not stored, so "
        "the old chunks are re-extracted: storing them would make that stage proportional to the new chunks plus "
        "one sparse product.",
        "* Embeddings are supplied here, so the embed stage is free. With the model it dominates a rebuild "
        "(see `bench/results/embed_cpu.md`), and an add embeds only the new chunks.",
        "* The warm start (the previous coordinates, new nodes given their old neighbours' mean, orthonormalized and "
        f"summed into one start vector) changes the Lanczos cycle count by {saved} in this run: adding documents "
        "turns some direction of the 32-dimensional subspace by the angle in the table (a direction nearly "
        "orthogonal to the old subspace enters it), and single-vector Lanczos still has to resolve all 32 "
        "directions from one start vector. A block solver started from the whole block (LOBPCG, block "
        "Krylov-Schur) could use it.",
        "* Differences from the rebuild: the kNN lists agree except where two candidates' float32 scores tie; "
        "FAISS's float32 rounding in the rebuild then picks one and the add's merge may pick the other (the "
        "float64 cosines are listed below). The spectrum follows its graph.",
    ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=int, default=20_000, help="chunks of the base index (default: 20000)")
    ap.add_argument("--adds", type=int, nargs="+", default=[1_000, 10_000], help="chunks added (default: 1000 10000)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=int(_THREADS))
    ap.add_argument("--corpus", default=None, help="corpus folder (default: /tmp/spectrag-synth-corpus-<n>-d<dim>)")
    ap.add_argument("--out", default=None, help="results .md (a .json is written beside it)")
    ap.add_argument("--from-json", default=None, help="only re-render the .md of a saved results .json")
    args = ap.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        keys = ("command", "date", "machine", "wall_min")
        header, result = {k: saved[k] for k in keys}, {k: v for k, v in saved.items() if k not in (*keys, "threads")}
        for k, v in result.pop("args", {}).items():
            setattr(args, k, v)
        text = render(result, args, header)
        print(text)
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
        return
    t0 = time.perf_counter()
    header = {"command": command_line(), "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
              "machine": machine_info(packages=("faiss",))}  # before the run: the background's load average
    result = run(args)
    header["machine"]["load_average_end"] = load_average()
    result["args"] = {k: getattr(args, k) for k in ("base", "adds", "dim", "repeats", "threads")}
    header["wall_min"] = (time.perf_counter() - t0) / 60
    text = render(result, args, header)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(text, encoding="utf-8")
        out.with_suffix(".json").write_text(json.dumps({**header, "threads": args.threads, **result}, indent=1) + "\n",
                                            encoding="utf-8")


if __name__ == "__main__":
    main()
