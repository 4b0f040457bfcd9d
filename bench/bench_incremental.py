"""Benchmark: deleting, updating and adding 1 % of an index's documents (``spectrag.incremental``)
against a rebuild, measured in the same run, interleaved; and what the edits do to retrieval
on 2WikiMultiHopQA-dev before and after ``compact``.

**Speed.** For each synthetic size (``bench/make_synthetic.py``, seed 0, supplied embeddings,
``IndexConfig()`` otherwise) and for 2wiki-dev (the model's vectors, from the embedding cache
for both sides): a base index; then per repeat, on a fresh copy of it, a delete of ``--fraction``
of its documents (random), an update of as many others (one sentence appended to each: their
last chunk changes; supplied vectors perturbed for those chunks) and an add of as many new
documents, and one rebuild of the updated corpus (the base's size: the delete's corpus is
``--fraction`` smaller, the add's larger). The order alternates between repeats (edits first,
then rebuild first); every edit runs once untimed first (imports, page cache, embedding cache).
Timed: the wall seconds of the API call (load and checksum the old index, edit, write and swap;
the build: load, chunk, embed, graph, write); medians; the 1-minute load average before each.
An edit here never compacts (``compact_above=None``).

**Quality (2wiki-dev).** Base = the corpus without ``--fraction`` of its passages; the edits add
them, then delete and update ``--fraction`` each (as above); a fresh build of the final corpus
(in the index's order) is the reference. R@5 (passage level, ``spectrag.eval``) of the edited
index and of the fresh build for the methods ``--modes``; then ``compact`` and the number of
questions whose whole ranking equals the fresh build's.

Usage::

    python bench/bench_incremental.py --out bench/results/incremental_cpu.md           # 10^4, 10^5, 2wiki
    python bench/bench_incremental.py --quick                                          # 10^4 and 2wiki, 1 repeat
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
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

from _common import command_line, load_average, machine_info, machine_line  # noqa: E402

ensure_spectrag()

OPS = ("delete", "update", "add")
TWOWIKI = Path(__file__).resolve().parents[2] / "shared" / "data" / "2wiki-dev"
REVISED = "\n\nRevised in 2031 by the editors of the record."


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


class Workload:
    """The documents of one benchmark: ``base`` records, the ``added`` records, the ids to
    delete, the ``updated`` records (changed copies of base records), and the chunk vectors of
    any of them (None: the model embeds)."""

    def __init__(self, base: list[dict], added: list[dict], fraction: float, seed: int, vectors=None) -> None:
        rng = np.random.default_rng(seed)
        k = max(1, int(round(fraction * len(base))))
        picked = rng.choice(len(base), 2 * k, replace=False)
        self.base, self.added = base, added
        self.deleted = [base[i]["id"] for i in picked[:k]]
        self.updated = [dict(base[i], text=base[i]["text"] + REVISED) for i in picked[k:]]
        self.vectors = vectors  # (records) -> [chunks, d] or None

    def final(self, op: str) -> list[dict]:
        """The documents of the index after ``op``, in its order."""
        if op == "delete":
            gone = set(self.deleted)
            return [r for r in self.base if r["id"] not in gone]
        if op == "update":
            changed = {r["id"] for r in self.updated}
            return [r for r in self.base if r["id"] not in changed] + self.updated
        return self.base + self.added


def synthetic_workload(n: int, fraction: float, dim: int, seed: int, corpus_dir: Path | None) -> Workload:
    """Documents of the synthetic corpus holding ``n`` chunks, and ``fraction`` more to add."""
    from make_synthetic import Plan, ensure

    n_total = int(n * (1 + 1.5 * fraction)) + 64
    folder = corpus_dir or Path(f"/tmp/spectrag-synth-corpus-{n_total}-d{dim}")
    ensure(folder, n_total, dim=dim, seed=0, n_queries=16, log=log)
    doc_ptr = Plan(n_total, 0).doc_ptr
    records = [json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    d_base = int(np.searchsorted(doc_ptr, n))
    d_add = int(np.searchsorted(doc_ptr, doc_ptr[d_base] + fraction * n))
    table = np.load(folder / "embeddings.npy", mmap_mode="r")
    row_of = {r["id"]: (int(doc_ptr[i]), int(doc_ptr[i + 1])) for i, r in enumerate(records)}

    def vectors(recs: list[dict]) -> np.ndarray:
        """One chunk per section: a record's rows of the table; a revised record's last row
        perturbed (its last section changed)."""
        rows = []
        for r in recs:
            lo, hi = row_of[r["id"]]
            block = np.array(table[lo:hi], dtype=np.float32)
            if r["text"].endswith(REVISED):
                noise = np.random.default_rng(lo).standard_normal(block.shape[1]).astype(np.float32)
                block[-1] += 0.1 * noise / np.sqrt(block.shape[1])
                block[-1] /= np.linalg.norm(block[-1])
            rows.append(block)
        return np.concatenate(rows)

    return Workload(records[:d_base], records[d_base:d_add], fraction, seed, vectors)


def twowiki_workload(fraction: float, seed: int) -> tuple[Workload, object]:
    """2wiki-dev's passages (ids are their positions) and its questions."""
    from spectrag.eval.datasets import load_dataset
    from spectrag.index.load import iter_documents

    ds = load_dataset("2wiki", TWOWIKI)
    records = [{"id": d.doc_id, "title": d.title, "text": d.text} for d in iter_documents(ds.corpus, ds.fmt)]
    rng = np.random.default_rng(seed + 1)
    out = np.zeros(len(records), dtype=bool)
    out[rng.choice(len(records), max(1, int(round(fraction * len(records)))), replace=False)] = True
    base = [r for r, o in zip(records, out) if not o]
    return Workload(base, [r for r, o in zip(records, out) if o], fraction, seed), ds


# ------------------------------------------------------------------------------------- running


def build(records: list[dict], out: Path, work: Workload, config, root: Path):
    from spectrag import build_index

    corpus = write_jsonl(root / f"{out.name}.jsonl", records)
    supplied = work.vectors(records) if work.vectors else None
    return build_index(corpus, out, config, fmt="jsonl", embeddings=supplied, overwrite=True)


def edit(op: str, index_dir: Path, work: Workload, root: Path):
    from spectrag import add_documents, delete_documents, update_documents

    if op == "delete":
        return delete_documents(index_dir, work.deleted, compact_above=None)
    records = work.updated if op == "update" else work.added
    corpus = write_jsonl(root / f"{op}.jsonl", records)
    supplied = work.vectors(records) if work.vectors else None
    call = update_documents if op == "update" else add_documents
    return call(index_dir, corpus, fmt="jsonl", embeddings=supplied, compact_above=None)


def timed(fn):
    load = os.getloadavg()[0]
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start, load


def speed(name: str, work: Workload, config, repeats: int, root: Path) -> dict:
    """Edits against the rebuild, interleaved (see the module docstring)."""
    base = root / f"{name}-base"
    t0 = time.perf_counter()
    build(work.base, base, work, config, root)
    log(f"{name}: base index of {len(work.base):,} documents in {time.perf_counter() - t0:.1f} s")
    rows: dict[str, list[dict]] = {op: [] for op in (*OPS, "rebuild")}
    results = {}

    def run_edit(op: str, record: bool) -> None:
        target = root / f"{name}-{op}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(base, target)
        index, secs, load = timed(lambda: edit(op, target, work, root))
        if record:
            rows[op].append({"seconds": secs, "load": load, "stages": dict(index.report.seconds),
                             "graph": dict(index.manifest["graph"].get("seconds", {})),
                             "spectrum": index.report.spectrum, "update": index.manifest["graph"].get("update", {}),
                             "entities": index.manifest["graph"].get("entities", {})})
            results[op] = index
        log(f"{name}: {op} {'' if record else '(warm-up) '}{secs:.2f} s (load {load:.2f})")

    def run_rebuild() -> None:
        index, secs, load = timed(lambda: build(work.final("update"), root / f"{name}-rebuild", work, config, root))
        rows["rebuild"].append({"seconds": secs, "load": load, "stages": dict(index.report.seconds),
                                "graph": dict(index.manifest["graph"].get("seconds", {}))})
        results["rebuild"] = index
        log(f"{name}: rebuild {secs:.2f} s (load {load:.2f})")

    for op in OPS:
        run_edit(op, record=False)
    for rep in range(repeats):
        order = [*OPS, "rebuild"] if rep % 2 == 0 else ["rebuild", *OPS]
        for step in order:
            run_rebuild() if step == "rebuild" else run_edit(step, record=True)
    med = {op: statistics.median(r["seconds"] for r in rs) for op, rs in rows.items()}
    out = {"documents": len(work.base), "chunks": len(results["rebuild"]), "edited_documents": len(work.deleted),
           "median_s": {k: round(v, 3) for k, v in med.items()},
           "speedup": {op: round(med["rebuild"] / med[op], 1) for op in OPS},
           "median_load": {op: round(statistics.median(r["load"] for r in rs), 2) for op, rs in rows.items()},
           "stages": {op: {k: round(statistics.median(r["stages"].get(k, 0.0) for r in rs), 3) for k in rs[0]["stages"]}
                      for op, rs in rows.items()},
           "graph_stages": {op: {k: round(statistics.median(r["graph"].get(k, 0.0) for r in rs), 3)
                                 for k in rs[0]["graph"]} for op, rs in rows.items()},
           "spectrum": {op: rows[op][0]["spectrum"] for op in OPS},
           "update_facts": {op: {**rows[op][0]["update"], "entity_rows_recomputed": rows[op][0]["entities"].get(
               "recomputed_rows")} for op in OPS},
           "runs": rows, "checks": checks(results["update"], results["rebuild"])}
    for op in (*OPS, "rebuild"):
        shutil.rmtree(root / f"{name}-{op}", ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)
    return out


EXACT = ["chunks.jsonl", "embeddings.npy", "dense.faiss", "bm25/data.npy", "bm25/indices.npy", "bm25/indptr.npy",
         "bm25/vocab.json", "bm25/tokens.ids.npy", *(f"graph/signals/{s}.{p}.npy" for s in
                                                     ("semantic", "adjacency", "section", "citation")
                                                     for p in ("rows", "cols", "weights"))]


def checks(edited, fresh) -> dict:
    """The updated index against the rebuild of the same corpus: which files are identical, the
    entity edges in common, the spectrum's residual against the stored graph's Laplacian."""
    from spectrag.graph.fuse import signal_matrix
    from spectrag.graph.spectrum import laplacian_csr

    same = [f for f in EXACT if edited.manifest["files"].get(f, {}).get("sha256") ==
            fresh.manifest["files"].get(f, {}).get("sha256")]
    ent = lambda idx: signal_matrix(idx.graph["signals"]["entity"], len(idx), symmetric=False)  # noqa: E731
    a, b = ent(edited), ent(fresh)
    ea, eb = set(zip(*a.nonzero())), set(zip(*b.nonzero()))
    x = np.asarray(edited.graph["coordinates"], np.float64)
    res = np.linalg.norm(laplacian_csr(edited.graph["weights"]) @ x - x * np.asarray(edited.graph["eigenvalues"]), axis=0)
    return {"identical_files": f"{len(same)} of {len(EXACT)}", "differing": sorted(set(EXACT) - set(same)),
            "entity_edges_common": round(len(ea & eb) / max(1, len(eb)), 4),
            "spectrum_max_residual": float(res.max()), "spectrum_method": edited.manifest["graph"]["spectrum"]["method"]}


def quality(work: Workload, ds, modes: list[str], root: Path, config) -> dict:
    """2wiki-dev: the edits in sequence, R@5 against a fresh build, then compact."""
    from spectrag import compact_index
    from spectrag.eval.datasets import Dataset
    from spectrag.eval.run import run_method
    from spectrag.eval.score import make_scorer
    from spectrag.retriever import Retriever

    idx = root / "q-index"
    build(work.base, idx, work, config, root)
    for op in ("add", "delete", "update"):
        edited = edit(op, idx, work, root)
    final = list(dict.fromkeys(c.doc_id for c in edited.chunks))
    records = {r["id"]: r for r in work.base + work.added}
    records.update({r["id"]: r for r in work.updated})
    final_records = [records[i] for i in final]
    fresh = build(final_records, root / "q-fresh", work, config, root)
    final_ds = Dataset("2wiki", write_jsonl(root / "q-final.jsonl", final_records), "jsonl", ds.questions_file,
                       ds.questions)
    texts = [q.text for q in ds.questions]
    qvecs = torch.from_numpy(fresh.embed_queries(texts))
    out: dict = {"documents": len(final), "chunks": len(fresh), "questions": len(texts), "modes": {}}

    def score(index, mode):
        run = run_method(Retriever(index), texts, qvecs, mode, None, 256)
        summary = make_scorer(final_ds, index).summary(run, detail=False)
        return run, summary["overall"]["R@5"]

    runs = {}
    for mode in modes:
        (run_e, r5_e), (run_f, r5_f) = score(edited, mode), score(fresh, mode)
        runs[mode] = run_f
        out["modes"][mode] = {"R@5 edited": r5_e, "R@5 fresh": r5_f, "difference (points)": round(100 * (r5_e - r5_f), 2)}
    compacted = compact_index(idx)
    for mode in modes:
        run_c, r5_c = score(compacted, mode)
        same = sum(bool(torch.equal(a[a >= 0], b[b >= 0])) for a, b in zip(run_c.ranking, runs[mode].ranking))
        out["modes"][mode].update({"R@5 compacted": r5_c, "same ranking after compact": f"{same} of {len(texts)}"})
    out["files identical after compact"] = sum(compacted.manifest["files"][f]["sha256"] == fresh.manifest["files"][f]["sha256"]
                                               for f in fresh.manifest["files"])
    out["files"] = len(fresh.manifest["files"])
    out["spectrum before compact"] = edited.report.spectrum
    return out


# ----------------------------------------------------------------------------------- reporting


def render(result: dict, header: dict) -> str:
    lines = ["# Deleting, updating and adding documents vs a rebuild (CPU)", "",
             f"Command: `{header['command']}`  ", f"Date: {header['date']}  ", machine_line(header["machine"]) + "  ",
             f"Threads: {header['threads']} (torch, BLAS, FAISS/OpenMP). Repeats: {header['repeats']} per figure "
             f"(medians), edits and rebuild interleaved. Total wall time {header['wall_min']:.1f} min. Edited share: "
             f"{100 * header['fraction']:g} % of the documents per operation.", "",
             "## Wall seconds: each edit against a rebuild (medians; load average before each run)", "",
             "| corpus | documents / chunks | rebuild [s] | delete [s] | update [s] | add [s] | "
             "delete speed-up | update speed-up | add speed-up | load (rebuild / edits) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, e in result["speed"].items():
        m, s, ld = e["median_s"], e["speedup"], e["median_load"]
        lines.append(f"| {name} | {e['documents']:,} / {e['chunks']:,} | {m['rebuild']:.2f} | {m['delete']:.2f} | "
                     f"{m['update']:.2f} | {m['add']:.2f} | **{s['delete']}x** | **{s['update']}x** | **{s['add']}x** | "
                     f"{ld['rebuild']} / {ld['delete']}, {ld['update']}, {ld['add']} |")
    lines += ["", "## Where the time goes (median seconds per stage)", ""]
    for name, e in result["speed"].items():
        stages = sorted({k for st in e["stages"].values() for k in st})
        graph = sorted({k for st in e["graph_stages"].values() for k in st})
        lines += [f"**{name}**", "", "| stage | " + " | ".join((*OPS, "rebuild")) + " |", "|---|" + "---|" * 4]
        for k in stages:
            lines.append(f"| {k} | " + " | ".join(f"{e['stages'][op].get(k, 0.0):.2f}" for op in (*OPS, "rebuild")) + " |")
        for k in graph:
            lines.append(f"| graph: {k} | " + " | ".join(f"{e['graph_stages'][op].get(k, 0.0):.2f}"
                                                         for op in (*OPS, "rebuild")) + " |")
        sp = e["spectrum"]
        lines += ["", "Spectrum of each edit: " + "; ".join(
            f"{op}: {sp[op].get('method')} ({sp[op].get('n_matvec')} matvecs, max residual {sp[op].get('max_residual') or 0:.1e})"
            for op in OPS) + ".  ",
            "Work saved: " + "; ".join(f"{op}: {f.get('extracted_again', 0)} chunks' entities extracted again, "
                                       f"{f.get('entity_rows_recomputed')} entity rows recomputed, "
                                       f"{f.get('semantic_rows_searched_again', 0)} kNN rows searched again"
                                       for op, f in e["update_facts"].items()) + ".  ",
            f"The update against the rebuild of the same corpus: {e['checks']['identical_files']} exact files identical"
            f"{' (differing: ' + ', '.join(e['checks']['differing']) + ')' if e['checks']['differing'] else ''}; "
            f"{100 * e['checks']['entity_edges_common']:.1f} % of the rebuild's entity edges present; spectrum "
            f"{e['checks']['spectrum_method']}, max eigen-residual {e['checks']['spectrum_max_residual']:.1e} "
            "(recomputed from the stored graph).", ""]
    q = result.get("quality")
    if q:
        lines += ["## Retrieval on 2wiki-dev after add, delete and update (each "
                  f"{100 * header['fraction']:g} %), before and after `compact`", "",
                  f"{q['questions']} questions; final corpus {q['documents']:,} passages ({q['chunks']:,} chunks). "
                  "Reference: a fresh build of the final corpus in the index's order.", "",
                  "| method | R@5 edited | R@5 fresh build | difference [points] | R@5 after compact | "
                  "same ranking after compact |", "|---|---|---|---|---|---|"]
        for mode, v in q["modes"].items():
            lines.append(f"| {mode} | {v['R@5 edited']:.4f} | {v['R@5 fresh']:.4f} | {v['difference (points)']:+.2f} | "
                         f"{v['R@5 compacted']:.4f} | {v['same ranking after compact']} |")
        lines += ["", f"After compact, {q['files identical after compact']} of {q['files']} index files are "
                  "byte-identical to the fresh build's.", ""]
    lines += ["## Reading", "",
              "* The rebuild is a build of the updated corpus (the base's size); the delete's corpus is 1 % smaller "
              "and the add's 1 % larger, within the spread between repeats. On 2wiki-dev both sides take the chunk "
              "vectors from the embedding cache: a rebuild without the cache embeds every passage (16 passages/s on "
              "this machine, `bench/results/embed_cpu.md`), an edit only the new chunks.",
              "* From `graph.knn_exact_max_n` = 100,000 chunks on, a build's semantic kNN is approximate (IVF); an "
              "edit searches exactly, so at 10^5 the edited index's semantic signal can differ from the rebuild's "
              "(the files listed as differing above): the edit's is the exact one.",
              "* What an edit still pays in proportion to the index: checking and loading the old index (the chunk "
              "table is parsed), fusing the signals, the warm-started spectrum (a few block products), and writing, "
              "hashing and syncing every file of the new version. The rebuild's chunking, BM25 scoring, kNN search, "
              "entity extraction and products and Lanczos are what it saves.",
              "* The machine is shared (the load averages are in the tables): the ratios, measured interleaved, are "
              "the result; the seconds are not."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000], help="synthetic chunk counts")
    ap.add_argument("--fraction", type=float, default=0.01, help="share of the documents each edit touches")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=int(_THREADS))
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--modes", default="spectral,hybrid,dense", help="methods scored on 2wiki-dev")
    ap.add_argument("--no-2wiki", action="store_true", help="skip 2wiki-dev (speed and quality)")
    ap.add_argument("--quick", action="store_true", help="10^4 chunks and 2wiki-dev, one repeat")
    ap.add_argument("--out", default=None, help="results .md (a .json is written beside it)")
    ap.add_argument("--from-json", default=None, help="only re-render the .md of a saved results .json")
    args = ap.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        text = render(saved["result"], saved["header"])
        print(text)
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
        return
    if args.quick:
        args.sizes, args.repeats = [10_000], 1
    import faiss

    from spectrag.config import EmbedConfig, IndexConfig

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    t0 = time.perf_counter()
    header = {"command": command_line(), "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
              "machine": machine_info(packages=("faiss",)), "threads": args.threads, "repeats": args.repeats,
              "fraction": args.fraction}
    result: dict = {"speed": {}}
    root = Path(tempfile.mkdtemp(prefix="spectrag-bench-incremental-"))
    try:
        for n in args.sizes:
            work = synthetic_workload(n, args.fraction, args.dim, 0, None)
            result["speed"][f"synthetic {n:,}"] = speed(f"s{n}", work, IndexConfig(embed=EmbedConfig(cache_dir="")),
                                                        args.repeats, root)
        if not args.no_2wiki and TWOWIKI.is_dir():
            work, ds = twowiki_workload(args.fraction, 0)
            result["speed"]["2wiki-dev"] = speed("w", work, IndexConfig(), args.repeats, root)
            result["quality"] = quality(work, ds, args.modes.split(","), root, IndexConfig())
        elif not args.no_2wiki:
            log(f"2wiki-dev skipped: {TWOWIKI} is absent")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    header["machine"]["load_average_end"] = load_average()
    header["wall_min"] = (time.perf_counter() - t0) / 60
    text = render(result, header)
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(text, encoding="utf-8")
        out.with_suffix(".json").write_text(json.dumps({"header": header, "result": result}, indent=1, default=str) + "\n",
                                            encoding="utf-8")


if __name__ == "__main__":
    main()
