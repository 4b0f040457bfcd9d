"""Benchmark: the index build and batch scoring on a local Ray cluster of this machine, 1 and 2
workers, against the plain single process, in one run; the Ray outputs are checked against the
plain ones (the same index files, the same contexts).

    python bench/bench_ray.py                                  # 10^5 chunks, 10^4 queries
    python bench/bench_ray.py --n 20000 --queries 2000         # a quick run

**Corpus** (``bench/make_synthetic.py``, seed 0): ``--n`` chunks of Markdown documents with
supplied d = 128 embeddings and ``--queries`` queries (texts and vectors), written to
``/tmp/spectrag-synth-corpus-<n>-q<queries>`` and reused. The vectors are supplied, as in
``bench_scale.py`` (embedding 10^5 chunks with all-MiniLM-L6-v2 takes hours on this CPU), so the
build's embed stage runs no model and the Ray build distributes chunking and the graph stages
(kNN tiles, entity extraction and products, section and citation signals); fusion, spectrum,
BM25 and the writing run on the driver in both.

**Build**: ``build_index`` (the plain process: chunking and entity extraction use its own
process pool of the usable CPUs, the rest one thread) and ``build_index_ray`` on a local cluster
started with ``num_cpus`` = workers (1, then 2), each into a fresh folder, once each (a build is
minutes long; the load average says how busy the machine was). Cluster start-up is timed apart.
Each Ray index is compared with the plain one (``spectrag.distributed.build.index_differences``).

**Scoring**: the ``--queries`` queries in batches of ``--batch-size`` with their vectors
(``qvecs``: query embedding excluded), mode ``--mode``, on the plain build's index: the plain
process (``Retriever.score_batch`` + contexts, batch by batch, one thread) and
``RayRetriever.retrieve_batches`` with 1 and 2 actors (one thread each; actor start-up, which
loads the index, included in the wall time and also given alone as the time to the first
batch). In both, the contexts arrive as Python objects in this process (their JSON, made
afterwards for the comparison, is not timed). Every Ray context is compared with the plain one.

Threads: 1 (``--threads``) for torch, OpenMP, MKL and OpenBLAS in the driver; Ray gives each
worker one (``OMP_NUM_THREADS=1``). Results: ``results/ray_cpu.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from _common import ensure_spectrag, pin_threads

_THREADS = pin_threads("1", passive=True)
ensure_spectrag()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _common import ROOT, finish_record, md_table, new_record, results_header, write_results  # noqa: E402
from make_synthetic import ensure, load_queries  # noqa: E402

from spectrag import build_index, load_index  # noqa: E402
from spectrag.contexts import build_contexts  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402

STAGES = ("load", "chunk", "embed", "graph", "dense", "bm25", "write")


def start_ray(workers: int) -> float:
    import ray

    t = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level="WARNING",
             object_store_memory=4 * 2**30)
    return time.perf_counter() - t


def build_runs(corpus: Path, vectors: np.ndarray, out: Path, workers: list[int], log) -> list[dict]:
    import ray

    from spectrag.distributed import build_index_ray
    from spectrag.distributed.build import index_differences

    rows = []
    log("build: plain process")
    t = time.perf_counter()
    plain = build_index(corpus / "corpus.jsonl", out / "plain", embeddings=vectors, overwrite=True)
    rows.append({"run": "plain process", "wall": time.perf_counter() - t, **plain.report.seconds, "same": "(reference)"})
    for w in workers:
        log(f"build: Ray, {w} worker(s)")
        init = start_ray(w)
        try:
            t = time.perf_counter()
            index = build_index_ray(corpus / "corpus.jsonl", out / f"ray{w}", embeddings=vectors, workers=w,
                                    overwrite=True)
            wall = time.perf_counter() - t
        finally:
            ray.shutdown()
        diff = index_differences(plain.path, index.path)
        rows.append({"run": f"Ray, {w} worker{'s' if w > 1 else ''}", "wall": wall, "init": init, **index.report.seconds,
                     "same": "identical" if not diff else "; ".join(diff[:3])})
    return rows


def _plain_contexts(index_dir: Path, batches, vectors, mode: str) -> tuple[list, float, float]:
    retriever = Retriever(load_index(index_dir), None)
    out, first = [], None
    t = time.perf_counter()
    for texts, v in zip(batches, vectors):
        result = retriever.score_batch(texts, mode=mode, qvecs=torch.from_numpy(v))
        out.append(build_contexts(retriever.index, texts, result))
        first = first or time.perf_counter() - t
    return out, time.perf_counter() - t, first


def score_runs(index_dir: Path, texts: list[str], qvecs: np.ndarray, batch: int, mode: str, workers: list[int],
               log) -> list[dict]:
    import ray

    from spectrag.config import RetrieverConfig
    from spectrag.distributed import RayRetriever

    batches = [texts[lo : lo + batch] for lo in range(0, len(texts), batch)]
    vectors = [np.ascontiguousarray(qvecs[lo : lo + batch]) for lo in range(0, len(texts), batch)]
    log(f"score: plain process, {len(texts)} queries")
    t = time.perf_counter()
    want, loop, first = _plain_contexts(index_dir, batches, vectors, mode)
    wall = time.perf_counter() - t
    want = [json.dumps([c.to_json() for c in b]) for b in want]
    rows = [{"run": "plain process", "wall": wall, "first": first + wall - loop, "qps": len(texts) / wall,
             "same": "(reference)"}]
    for w in workers:
        log(f"score: Ray, {w} actor(s)")
        init = start_ray(w)
        try:
            t = time.perf_counter()
            first, got = None, []
            scorer = RayRetriever(index_dir, RetrieverConfig(mode=mode), workers=w)
            for contexts in scorer.retrieve_batches(batches, vectors=vectors):
                first = first or time.perf_counter() - t
                got.append(contexts)
            wall = time.perf_counter() - t
        finally:
            ray.shutdown()
        got = [json.dumps([c.to_json() for c in b]) for b in got]  # untimed, as for the plain run
        same = sum(a == b for a, b in zip(got, want))
        rows.append({"run": f"Ray, {w} actor{'s' if w > 1 else ''}", "wall": wall, "init": init, "first": first,
                     "qps": len(texts) / wall,
                     "same": "identical" if same == len(want) == len(got) else f"{same} of {len(want)} batches equal"})
    return rows


def _work(kind: str, corpus: str, rows: int, barrier, results) -> None:
    """One piece of the build's work, timed after ``barrier`` (set-up untimed): a kNN tile (FAISS
    flat search + re-scoring, FMA-bound) or entity extraction on chunk texts (Python-bound)."""
    if kind == "knn":
        from spectrag.graph import signals as sig

        x = np.ascontiguousarray(np.load(Path(corpus) / "embeddings.npy", mmap_mode="r"), dtype=np.float32)
        index = sig.knn_index(x)
        run = lambda: sig.knn_rows(index, x[:rows], 11, base=x)  # noqa: E731
    else:
        from spectrag.extract.entities import extract_entities

        with open(Path(corpus) / "corpus.jsonl", encoding="utf-8") as fh:
            texts = [json.loads(line)["text"] for _, line in zip(range(rows), fh)]
        run = lambda: extract_entities(texts, workers=1)  # noqa: E731
    barrier.wait()
    t = time.perf_counter()
    run()
    results.put(time.perf_counter() - t)


def _timed(kind: str, corpus: Path, rows: int, copies: int) -> float:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # fresh processes: no threads or pools inherited
    barrier, results = ctx.Barrier(copies), ctx.Queue()
    procs = [ctx.Process(target=_work, args=(kind, str(corpus), rows, barrier, results)) for _ in range(copies)]
    for proc in procs:
        proc.start()
    seconds = [results.get() for _ in procs]
    for proc in procs:
        proc.join()
    return max(seconds)


def core_check(corpus: Path, log) -> list[dict]:
    """Each piece alone in one process, then two copies started together in two processes: the
    pair's speed-up is 2 x alone / together (2.0 when the second core doubles the throughput)."""
    rows = []
    for kind, n, what in (("knn", 8192, "kNN tile: 8,192 rows against all (FAISS flat, float64 re-scoring)"),
                          ("extract", 4000, "entity extraction: 4,000 documents")):
        log(f"core check: {kind}")
        alone, together = _timed(kind, corpus, n, 1), _timed(kind, corpus, n, 2)
        rows.append({"work": what, "alone": alone, "together": together, "speedup": 2 * alone / together})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="chunks (default: 100000)")
    ap.add_argument("--queries", type=int, default=10_000, help="queries scored (default: 10000)")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--mode", default="spectral")
    ap.add_argument("--workers", default="1,2", help="Ray worker counts (default: 1,2)")
    ap.add_argument("--threads", default=_THREADS, help="driver threads (default: 1)")
    ap.add_argument("--work", default="/tmp/spectrag-bench-ray", help="index folders (replaced)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "ray_cpu"))
    args = ap.parse_args()
    torch.set_num_threads(int(args.threads))
    workers = [int(w) for w in args.workers.split(",")]
    log = lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    record = new_record("each build and each scoring run once (minutes long); Ray cluster start-up timed apart",
                        packages=("faiss", "ray"))
    corpus = Path(f"/tmp/spectrag-synth-corpus-{args.n}-q{args.queries}")
    meta, reused = ensure(corpus, args.n, n_queries=args.queries, log=log)
    vectors = np.load(corpus / "embeddings.npy", mmap_mode="r")
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    record["corpus"] = {"path": str(corpus), "reused": reused, **{k: meta.get(k) for k in ("n_chunks", "documents", "dim")}}
    record["cores"] = core_check(corpus, log)
    record["build"] = build_runs(corpus, vectors, work, workers, log)
    texts, qvecs, _ = load_queries(corpus)
    record["score"] = score_runs(work / "plain", texts, qvecs, args.batch_size, args.mode, workers, log)
    finish_record(record)
    lines = results_header(f"Ray on one machine: build of {args.n:,} synthetic chunks and scoring of "
                           f"{args.queries:,} queries, 1 vs 2 workers", record)
    lines += [f"Corpus: `{corpus}` ({meta.get('documents', '?'):,} documents, d = {meta.get('dim')}, supplied "
              f"embeddings). Queries in batches of {args.batch_size}, mode `{args.mode}`, query vectors given.", "",
              "## Build (seconds)", ""]
    lines += md_table(record["build"], [("run", "run", ""), ("wall", "wall", ".1f"), ("cluster start", "init", ".1f"),
                                        *[(s, s, ".1f") for s in STAGES], ("same index as plain", "same", "")])
    lines += ["", "## Scoring", ""]
    score_table = md_table(record["score"], [("run", "run", ""), ("wall [s]", "wall", ".1f"),
                                             ("cluster start [s]", "init", ".1f"), ("first batch [s]", "first", ".1f"),
                                             ("queries/s", "qps", ".1f"), ("same contexts as plain", "same", "")])
    lines += score_table
    lines += ["", "## What a second core gives on this machine, measured in the same run", "",
              "The same piece of work alone in one process, then two copies at once in two processes "
              "(speed-up of the pair = 2 x alone / together; 2.0 = two full cores).", ""]
    lines += md_table(record["cores"], [("work", "work", ""), ("alone [s]", "alone", ".2f"),
                                        ("two at once [s]", "together", ".2f"), ("speed-up of the pair", "speedup", ".2f")])
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
