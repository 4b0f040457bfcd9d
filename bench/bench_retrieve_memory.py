"""Benchmark: peak memory of retrieving many queries in one call, split into batches or not.

Question: does ``Retriever.retrieve`` stay memory-bounded whatever the number of queries? Each
case runs in a fresh process (so its peak RSS is its own, read from ``wait4``): the index is
loaded, the queries retrieved in one call, the process exits.

- ``api N``: ``Retriever(index).retrieve(N queries)`` with the default ``batch_size=256``;
- ``api N, one batch``: the same with ``batch_size=N`` (what one call did before it batched);
- ``cli N``: ``spectrag retrieve INDEX --queries FILE --batch-size B -o FILE`` (streams batches).

Queries: the MuSiQue questions (``../shared/data/musique/musique_train.json``, 100 of them)
repeated to N (a repeat costs what a new question costs: the same pipeline work). Index: a
MuSiQue index built by ``spectrag index ../shared/data/musique/musique_train_corpus.json -o DIR``
(``--index DIR``). Mode ``spectral``, a 12,000-token budget (the earlier default; the largest contexts).

Usage: ``python bench/bench_retrieve_memory.py --index DIR [--cases api:4000,api:10000,cli:10000:10000]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results

QUESTIONS = ROOT.parent / "shared" / "data" / "musique" / "musique_train.json"

API = """
import json, sys, time
import spectrag
n, batch_size = int(sys.argv[1]), int(sys.argv[2])
qs = [q["question"] for q in json.load(open(sys.argv[3]))]
retriever = spectrag.Retriever(sys.argv[4])
start = time.perf_counter()
contexts = retriever.retrieve([qs[i % len(qs)] for i in range(n)], budget=12_000, batch_size=batch_size)
print(json.dumps({"seconds": time.perf_counter() - start, "contexts": len(contexts),
                  "chunks": sum(len(c.chunks) for c in contexts)}))
"""


def run_case(cmd: list[str]) -> dict:
    """Run ``cmd``; its wall seconds, peak RSS (MiB) and the JSON it printed last, if any."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    row = {"wall_s": time.perf_counter() - start, "peak_rss_mib": usage.ru_maxrss / 1024}
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if lines:
        row.update(json.loads(lines[-1]))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, help="a MuSiQue index folder")
    ap.add_argument("--cases", default="api:4000:256,api:10000:256,api:4000:4000,cli:10000:256,cli:10000:10000",
                    help="comma-separated kind:N:batch_size")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "retrieve_memory_cpu"))
    args = ap.parse_args()
    if not QUESTIONS.is_file():
        raise SystemExit(f"{QUESTIONS} is absent: this benchmark needs the MuSiQue questions")
    record = new_record("one process per case, peak RSS from wait4, one run each")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        qs = [q["question"] for q in json.loads(QUESTIONS.read_text())]
        for case in args.cases.split(","):
            kind, n, batch_size = case.split(":")
            n, batch_size = int(n), int(batch_size)
            if kind == "api":
                cmd = [sys.executable, "-c", API, str(n), str(batch_size), str(QUESTIONS), args.index]
                what = f"`Retriever.retrieve` of {n:,} queries, batch_size={batch_size:,}"
            else:
                qfile = Path(tmp) / f"q{n}.tsv"
                qfile.write_text("".join(f"q{i}\t{qs[i % len(qs)]}\n" for i in range(n)))
                cmd = ["spectrag", "retrieve", args.index, "--queries", str(qfile), "--batch-size", str(batch_size),
                       "--budget", "12000", "-o", str(Path(tmp) / "out.jsonl")]
                what = f"`spectrag retrieve --batch-size {batch_size:,}`, {n:,} queries"
            print(what, flush=True)
            row = {"case": what, "n": n, "batch_size": batch_size, **run_case(cmd)}
            row["queries_per_s"] = n / row["seconds"] if "seconds" in row else n / row["wall_s"]
            print(f"  peak {row['peak_rss_mib']:.0f} MiB, {row['wall_s']:.0f} s", flush=True)
            rows.append(row)
    record["rows"] = rows
    finish_record(record)
    lines = results_header("Peak memory of one retrieve call (MuSiQue, mode spectral, budget 12,000)", record)
    lines += md_table(rows, [("case", "case", ""), ("peak RSS MiB", "peak_rss_mib", ".0f"),
                             ("process wall s", "wall_s", ".0f"), ("queries/s (retrieval)", "queries_per_s", ".1f")])
    lines += ["", "The process wall time includes loading the index and the model (and, for the CLI, writing the "
              "JSONL with chunk texts); queries/s is over the retrieval call alone for the API cases."]
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
