"""Benchmark: whether an embedding is a function of its text alone with MKL's default code paths
and with its strict reproducibility mode (``MKL_CBWR=AUTO,STRICT``, which an embedder asks for:
``spectrag.index.embed.reproducible_products``), and what the mode costs.

Each setting runs in a fresh process (MKL reads ``MKL_CBWR`` at its first call), at 1 and 2
threads: the model's linear-layer shapes as products of 8 / 16 / 24 / 40 / 64 rows against the
same rows inside 2-16x as many (rows that differ in any bit); the index embedder on the test
suite's 20 texts, each alone against batches of 2, 5 and 20 (vectors that differ); and the time
to embed the first ``--passages`` MuSiQue passages (median of 3 after a warm-up, no cache).

    python bench/bench_embed_invariance.py [--passages 512]

Results: bench/results/embed_invariance_cpu.md / .json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _common

ROOT = _common.ROOT
MUSIQUE = ROOT.parent / "shared" / "data" / "musique" / "musique_train_corpus.json"
CHILD = r"""
import json, os, statistics, sys, time
import torch
threads, n_pass = int(sys.argv[1]), int(sys.argv[2])
os.environ["MKL_CBWR"] = sys.argv[5]  # read at MKL's first product, below; the embedder keeps it
torch.set_num_threads(threads)
from spectrag.config import EmbedConfig
from spectrag.index.embed import Embedder
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/index"]  # the suite's texts (test_embed imports conftest)
from test_embed import TEXTS
import numpy as np
e = Embedder(EmbedConfig(cache_dir="", device="cpu", num_threads=threads))
shapes = sorted({(m.in_features, m.out_features) for m in e.model.modules() if isinstance(m, torch.nn.Linear)})
gen = torch.Generator().manual_seed(0)
rows_differ = rows_total = 0
for k_in, k_out in shapes:
    w, x = torch.randn(k_out, k_in, generator=gen), torch.randn(2048, k_in, generator=gen)
    for rows in (8, 16, 24, 40, 64):
        alone = x[:rows] @ w.T
        for k in (2, 3, 5, 8, 16):
            rows_total += 1
            rows_differ += not torch.equal((x[: rows * k] @ w.T)[:rows], alone)
alone = np.concatenate([e.encode_window([t]) for t in TEXTS])
vec_differ = 0
for size in (2, 5, len(TEXTS)):
    got = np.concatenate([e.encode_window(TEXTS[lo:lo + size]) for lo in range(0, len(TEXTS), size)])
    vec_differ += int((got != alone).any(axis=1).sum())
texts = [p["text"] for p in json.load(open(sys.argv[4]))[:n_pass]] if n_pass else []
times = []
if texts:
    e.encode_window(texts[:64])
    for _ in range(3):
        t0 = time.perf_counter()
        e.encode_window(texts)
        times.append(time.perf_counter() - t0)
print(json.dumps({"products_differ": rows_differ, "products": rows_total, "vectors_differ": vec_differ,
                  "vectors": 3 * len(TEXTS), "seconds": statistics.median(times) if times else None}))
"""


def child(setting: str, threads: int, passages: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(threads), str(passages), str(ROOT / "tests"),
                          str(MUSIQUE), setting], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(record: dict) -> list[str]:
    lines = _common.results_header("Embeddings as a function of the text alone: MKL's default paths and its strict mode",
                                   record)
    lines += _common.md_table(record["rows"], [
        ("MKL_CBWR", lambda r: f"`{r['setting']!r}`", ""), ("threads", "threads", "d"),
        ("products with a row that differs", lambda r: f"{r['products_differ']} / {r['products']}", ""),
        ("texts whose vector differs from its own alone", lambda r: f"{r['vectors_differ']} / {r['vectors']}", ""),
        (f"s to embed {record['passages']} MuSiQue passages", "seconds", ".2f")])
    lines += ["", "Products: each linear-layer shape of the model (384 -> 384, 384 -> 1,536, 1,536 -> 384) on 8, 16, 24, "
              "40 and 64 rows, against the same rows inside 2, 3, 5, 8 and 16 times as many. Texts: the test suite's "
              "20 texts, each embedded alone against in windows of 2, 5 and 20 (the recipe of README \"Batch "
              "invariance\": each text padded to its own width, batched with texts of that width)."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=512)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "embed_invariance_cpu"))
    args = ap.parse_args()
    record = _common.new_record("one fresh process per setting and thread count; embedding time: median of 3 "
                                "after a warm-up, no cache")
    record["passages"], record["rows"] = args.passages, []
    for threads in (1, 2):
        for setting in ("", "AUTO,STRICT"):  # "": MKL's own paths
            row = {"setting": setting, "threads": threads, **child(setting, threads, args.passages)}
            print(row, flush=True)
            record["rows"].append(row)
    _common.finish_record(record)
    _common.write_results(args.out, markdown(record), record)


if __name__ == "__main__":
    main()
