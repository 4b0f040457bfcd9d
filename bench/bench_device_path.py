"""Benchmark: each stage of the torch (device) path of ``spectrag.pipeline.run`` for a batch of
queries on a given index, and the host synchronizations one batch makes.

    python bench/bench_device_path.py --index bench/indexes/musique --device cpu
    python bench/bench_device_path.py --index IDX --vectors Q.npy --texts Q.json --device cuda --sizes 80,1024

The queries: ``--texts`` (a JSON list of strings, or the MuSiQue questions file) and their
vectors ``--vectors`` (``.npy [m, d]``; default: embedded once here, before any timing), tiled
to B. Each (mode, B): the batch is encoded once (term counts, named documents: host work on the
query text, outside the timing), one warm-up call, then the median over ``--repeats`` calls of
each stage's seconds (``BatchResult.seconds``; on CUDA the pipeline synchronizes at each stage
mark so each stage's device work is counted where it runs). The host synchronizations are
counted on one further call by :class:`spectrag.util.syncs.SyncCounter` (every ``.item()``,
``.cpu()``, ``.tolist()``, ``.numpy()``, ``nonzero``, boolean-mask index, data-sized op ...),
per stage. Results: ``--out`` (default ``bench/results/device_path_<device>``) ``.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _common import ROOT, ensure_spectrag, pin_threads

_THREADS = pin_threads("1", passive=True)
ensure_spectrag()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from spectrag.config import RetrieverConfig  # noqa: E402
from spectrag import pipeline  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402
from spectrag.store import load_index  # noqa: E402
from spectrag.util.syncs import SyncCounter  # noqa: E402


def load_texts(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return [q["question"] if isinstance(q, dict) else str(q) for q in data]


def tiled(xs, b: int):
    reps = -(-b // len(xs))
    return (xs * reps)[:b] if isinstance(xs, list) else xs.repeat(reps, 1)[:b]


def stage_syncs(state, batch, config) -> tuple[SyncCounter, dict[str, int]]:
    """One batch under the counter; the count at each stage mark (the pipeline's ``_Timer``)."""
    marks: dict[str, int] = {}
    original = pipeline._Timer.__call__
    counter = SyncCounter()

    def mark(timer, name):
        original(timer, name)
        marks[name] = marks.get(name, 0) + counter.total - sum(marks.values())

    pipeline._Timer.__call__ = mark
    try:
        with counter:
            pipeline.run(state, batch, config)
    finally:
        pipeline._Timer.__call__ = original
    return counter, marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", default=str(ROOT / "bench" / "indexes" / "musique"))
    ap.add_argument("--texts", default=str(ROOT.parent / "shared" / "data" / "musique" / "musique_train.json"))
    ap.add_argument("--vectors", default="", help=".npy query vectors (default: embed the texts once)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sizes", default="80,1024")
    ap.add_argument("--modes", default="spectral,hybrid")
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=int(_THREADS))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()
    dev = torch.device(args.device)
    index = load_index(args.index, verify=False)
    texts = load_texts(args.texts)
    if args.vectors:
        qv = torch.from_numpy(np.load(args.vectors).astype(np.float32))
        texts = texts[: qv.shape[0]]
    else:
        qv = torch.from_numpy(index.embed_queries(texts))
    retriever = Retriever(index, RetrieverConfig(device=str(dev), backend="torch"))
    rows = []
    for mode in args.modes.split(","):
        config = retriever.config.replace(mode=mode)
        for b in [int(s) for s in args.sizes.split(",")]:
            bt, bv = tiled(texts, b), tiled(qv, b)
            t0 = time.perf_counter()
            batch = retriever.encode(bt, bv, named=mode in pipeline.PROPAGATION_MODES)
            encode_s = time.perf_counter() - t0
            pipeline.run(retriever.state, batch, config, budget=args.budget)  # warm-up
            runs = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                res = pipeline.run(retriever.state, batch, config, budget=args.budget)
                runs.append((time.perf_counter() - t0, res.seconds))
            total = statistics.median(r[0] for r in runs)
            stages = {k: statistics.median(r[1].get(k, 0.0) for r in runs) for k in runs[0][1]}
            counter, marks = stage_syncs(retriever.state, batch, config)
            rows.append(dict(mode=mode, B=b, total_ms=1e3 * total, qps=b / total, encode_host_ms=1e3 * encode_s,
                             stages_ms={k: round(1e3 * v, 2) for k, v in stages.items()},
                             syncs=counter.total, syncs_by_kind=dict(counter.counts), syncs_by_stage=marks))
            print(f"{mode} B={b}: {1e3 * total:.1f} ms, {b / total:.0f} q/s, syncs {counter.total}: {marks}",
                  file=sys.stderr)
    record = dict(command=" ".join(["python", *sys.argv]), device=str(dev), threads=args.threads,
                  torch=torch.__version__, index=args.index, chunks=len(index.chunks), budget=args.budget,
                  loadavg_start=load0, loadavg_end=os.getloadavg(), rows=rows)
    out = args.out or str(ROOT / "bench" / "results" / f"device_path_{dev.type}")
    with open(out + ".json", "w") as f:
        json.dump(record, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(markdown(record))
    print(markdown(record))


def markdown(r: dict) -> str:
    stages = sorted({k for row in r["rows"] for k in row["stages_ms"]}, key=list(r["rows"][0]["stages_ms"]).index
                    if r["rows"] else None)
    lines = [
        f"# The torch (device) path, stage by stage: {r['device']}",
        "",
        f"Command: `{r['command']}`; torch {r['torch']}, {r['threads']} thread(s); index `{r['index']}` "
        f"({r['chunks']} chunks), budget {r['budget']}; load average {r['loadavg_start'][0]:.2f} at the start, "
        f"{r['loadavg_end'][0]:.2f} at the end. Medians of the timed calls after one warm-up; query vectors "
        "given, the batch encoded (term counts, named documents) outside the timing (`encode (host)`).",
        "Host syncs: counted on one more call by `spectrag.util.syncs.SyncCounter` (each `.item()`, `.cpu()`, "
        "`.tolist()`, `.numpy()`, `nonzero`, boolean-mask index, data-sized op), per stage.",
        "",
        "| mode | B | ms / batch | q/s | encode (host) ms | " + " | ".join(stages) + " | host syncs (by stage) |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(stages) + "---|",
    ]
    for row in r["rows"]:
        by_stage = ", ".join(f"{k} {v}" for k, v in row["syncs_by_stage"].items() if v)
        lines.append(f"| {row['mode']} | {row['B']} | {row['total_ms']:.1f} | {row['qps']:.0f} | "
                     f"{row['encode_host_ms']:.1f} | " + " | ".join(f"{row['stages_ms'].get(s, 0):.1f}" for s in stages)
                     + f" | {row['syncs']} ({by_stage}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
