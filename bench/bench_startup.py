"""Benchmark: how long commands that need no model take to start, from a cold Python.

Question: do ``spectrag --help``, ``spectrag info`` of a missing index and ``spectrag retrieve``
argument errors answer without importing torch or the model? Each command runs ``--runs``
times as a fresh process; reported: the median wall time and whether torch was imported
(``python -X importtime``, one more run).

Usage: ``python bench/bench_startup.py [--runs 5]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results

COMMANDS = {
    "spectrag --help": ["--help"],
    "spectrag info MISSING": ["info", "/nonexistent/index"],
    "spectrag retrieve MISSING -q who?": ["retrieve", "/nonexistent/index", "-q", "who?"],
    "spectrag retrieve MISSING -q who? -k 0": ["retrieve", "/nonexistent/index", "-q", "who?", "-k", "0"],
}
ENTRY = "import sys; from spectrag.cli import main; sys.argv = ['spectrag', *sys.argv[1:]]; main()"


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
    finish_record(record)
    lines = results_header("Start-up of commands that need no model", record) + [
        "Each command a fresh `python -c 'from spectrag.cli import main; main()'` process.", "",
        *md_table(rows, [("command", "command", ""), ("median s", "median_s", ".2f"), ("min s", "min_s", ".2f"),
                         ("heavy modules imported", "heavy", "")]),
    ]
    write_results(args.out, lines, record)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
