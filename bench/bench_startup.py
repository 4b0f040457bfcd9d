"""Benchmark: how long commands that need no model take to start, and a first query, from a cold Python.

Questions: do ``spectrag --help``, ``spectrag info`` of a missing index and ``spectrag retrieve``
argument errors answer without importing torch or the model? How long do ``import spectrag``,
``Retriever(index)`` and the first query take in a fresh process, with the default query encoder
(ONNX Runtime on the CPU, its export cached) and with the torch one (sentence-transformers)? Each
runs ``--runs`` times as a fresh process; reported: the median wall time and the heavy modules
imported (``python -X importtime`` for the commands, ``sys.modules`` for the first query).

Usage: ``python bench/bench_startup.py [--runs 5]`` (the first query runs on the bundled sample
corpus, indexed once into a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results

COMMANDS = {
    "spectrag --help": ["--help"],
    "spectrag info MISSING": ["info", "/nonexistent/index"],
    "spectrag retrieve MISSING -q who?": ["retrieve", "/nonexistent/index", "-q", "who?"],
    "spectrag retrieve MISSING -q who? -k 0": ["retrieve", "/nonexistent/index", "-q", "who?", "-k", "0"],
}
ENTRY = "import sys; from spectrag.cli import main; sys.argv = ['spectrag', *sys.argv[1:]]; main()"
FIRST_QUERY = """
import json, sys, time
t0 = time.perf_counter()
from spectrag import Retriever, RetrieverConfig
t1 = time.perf_counter()
r = Retriever(sys.argv[1], RetrieverConfig(embed_backend=sys.argv[2]))
t2 = time.perf_counter()
r.retrieve("How does the index stay consistent while it is edited?")
t3 = time.perf_counter()
heavy = [m for m in ("sentence_transformers", "transformers", "sklearn") if m in sys.modules]
print(json.dumps({"import_s": t1 - t0, "retriever_s": t2 - t1, "first_query_s": t3 - t2, "total_s": t3 - t0,
                  "heavy": heavy}))
"""


def first_queries(runs: int) -> list[dict]:
    """Median of ``runs`` fresh processes per query encoder: import, Retriever(index), first query."""
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "sample"
        subprocess.run([sys.executable, "-c", ENTRY, "demo", "--out", str(index), "--quiet"], check=True,
                       capture_output=True, timeout=900)
        for backend in ("auto", "torch"):  # the first auto run exports the model once, when no export is cached
            subprocess.run([sys.executable, "-c", FIRST_QUERY, str(index), backend], check=True, capture_output=True,
                           timeout=900)
        rows = []
        for backend, label in (("auto", "default (auto: ONNX Runtime, export cached)"),
                               ("torch", "embed_backend = torch (sentence-transformers)")):
            runs_out = [json.loads(subprocess.run([sys.executable, "-c", FIRST_QUERY, str(index), backend], check=True,
                                                  capture_output=True, text=True, timeout=900).stdout)
                        for _ in range(runs)]
            row = {"encoder": label, "heavy": ", ".join(runs_out[-1]["heavy"]) or "none"}
            for key in ("import_s", "retriever_s", "first_query_s", "total_s"):
                row[key] = statistics.median(r[key] for r in runs_out)
            rows.append(row)
            print(row, flush=True)
        return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "startup_cpu"))
    args = ap.parse_args()
    record = new_record(f"median of {args.runs} fresh processes per command")
    rows = []
    for name, argv in COMMANDS.items():
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", ENTRY, *argv], capture_output=True, timeout=300)
            times.append(time.perf_counter() - start)
        trace = subprocess.run([sys.executable, "-X", "importtime", "-c", ENTRY, *argv], capture_output=True,
                               text=True, timeout=300).stderr
        heavy = [m for m in ("torch", "numpy", "sentence_transformers", "tqdm") if f"| {m}\n" in trace + "\n"
                 or any(line.rstrip().endswith(f"| {m}") for line in trace.splitlines())]
        rows.append({"command": name, "median_s": statistics.median(times), "min_s": min(times),
                     "heavy": ", ".join(heavy) or "none"})
        print(rows[-1], flush=True)
    record["results"] = rows
    record["first_query"] = queries = first_queries(args.runs)
    finish_record(record)
    lines = results_header("Start-up of commands that need no model", record) + [
        "Each command a fresh `python -c 'from spectrag.cli import main; main()'` process.", "",
        *md_table(rows, [("command", "command", ""), ("median s", "median_s", ".2f"), ("min s", "min_s", ".2f"),
                         ("heavy modules imported", "heavy", "")]),
        "", "## A first query from a cold Python", "",
        "`import spectrag`, `Retriever(index)` and one `retrieve` in a fresh process, on the bundled sample "
        "corpus (indexed once before), median of the runs; the heavy modules are those in `sys.modules` after it.", "",
        *md_table(queries, [("query encoder", "encoder", ""), ("import s", "import_s", ".2f"),
                            ("Retriever s", "retriever_s", ".2f"), ("first query s", "first_query_s", ".2f"),
                            ("total s", "total_s", ".2f"), ("heavy modules imported", "heavy", "")]),
    ]
    write_results(args.out, lines, record)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
