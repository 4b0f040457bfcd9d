"""Benchmark: the first-call cost of the compiled CPU kernels (spectrag.kernels.compiled).

Each run is a fresh Python process that loads an index and times its first and second
``Retriever.retrieve`` of one batch (mode spectral, then hybrid). ``cold``: an empty numba cache
folder (``NUMBA_CACHE_DIR``), so the first call compiles every kernel; ``warm``: the same folder
again, so the first call loads machine code from disk. The second call is the steady state.

    python bench/bench_compile.py --index DIR      # default: the sample corpus, indexed here

Results: bench/results/compile_cpu.md / .json.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from spectrag.retriever import Retriever
from spectrag.config import RetrieverConfig
from spectrag.store import load_index
index = load_index(sys.argv[1])
r = Retriever(index, RetrieverConfig(device="cpu", threads=1))
texts = [c.text.split(".")[0] for c in index.chunks[:64]]
vectors = r.embed(texts)
ready = time.perf_counter()
out = {"import_and_load_s": ready - t0}
for mode in ("spectral", "hybrid"):
    times = []
    for _ in range(2):
        t = time.perf_counter()
        r.score_batch(texts, qvecs=vectors, mode=mode)
        times.append(time.perf_counter() - t)
    out[mode] = {"first_s": times[0], "second_s": times[1]}
print(json.dumps(out))
"""


def run_child(index: str, cache: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", CHILD, index], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", help="index folder (default: the sample corpus, indexed into a temporary folder)")
    ap.add_argument("--rounds", type=int, default=2, help="cold + warm pairs (default: 2)")
    ap.add_argument("--out", default=str(_common.ROOT / "bench" / "results" / "compile_cpu"))
    args = ap.parse_args()
    record = _common.new_record("each figure one fresh process; cold: an empty numba cache, warm: the cache the cold "
                                "run filled")
    with tempfile.TemporaryDirectory() as tmp:
        index = args.index
        if index is None:
            from spectrag import build_index
            from spectrag.cli.demo import sample_corpus

            index = str(build_index(sample_corpus(), Path(tmp) / "sample").path)
        rows = []
        for round_ in range(args.rounds):
            cache = tempfile.mkdtemp(dir=tmp)
            for kind in ("cold", "warm"):
                t = time.perf_counter()
                got = run_child(index, cache)
                rows.append({"round": round_ + 1, "cache": kind, "process_s": time.perf_counter() - t, **got})
                print(rows[-1], flush=True)
    record["rows"] = rows
    _common.finish_record(record)
    lines = _common.results_header("First call of the compiled kernels: cold and warm numba cache", record)
    lines += [f"Index: `{args.index or 'the sample corpus'}`; one batch of 64 queries, one thread.", "",
              "| round | cache | spectral 1st call s | spectral 2nd call s | hybrid 1st call s | hybrid 2nd call s | "
              "import + load s | process s |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['round']} | {r['cache']} | {r['spectral']['first_s']:.2f} | {r['spectral']['second_s']:.3f} | "
              f"{r['hybrid']['first_s']:.2f} | {r['hybrid']['second_s']:.3f} | {r['import_and_load_s']:.1f} | "
              f"{r['process_s']:.1f} |" for r in rows]
    _common.write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
