"""Benchmark: CPU embedding throughput of ``spectrag.index.embed.Embedder`` vs plain sentence-transformers.

Texts: the MuSiQue train corpus (``../shared/data/musique/musique_train_corpus.json``, 1,890
passages, embedded as ``title + newline + text``); when that file is absent the benchmark says
so and falls back to the 30 files of the bundled sample corpus (``engine/sample/corpus``).

Reference: ``SentenceTransformer(path, device="cpu").encode(texts, batch_size=32,
normalize_embeddings=True)`` (its defaults). Ours: ``Embedder(EmbedConfig(cache_dir="",
device="cpu"))`` (the cache off, so every text is embedded), plus ``backend="onnx"`` when
onnxruntime and onnx are installed. Each variant is warmed up once on a few texts, then the
variants run interleaved (reference, ours, ...) ``--repeats`` times in the same process, so
they share whatever else the machine is doing; passages/s is the median over the repeats.
Accuracy: max |difference| and min cosine between each variant's vectors and the reference's.

Usage: ``python bench/bench_embed.py [--n 1890] [--repeats 3] [--out bench/results/embed_cpu.md]``
(writes the Markdown table to ``--out`` and the raw figures to the same path with ``.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the model hub

from _common import cpu_model
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spectrag.config import EmbedConfig  # noqa: E402
from spectrag.index.embed import Embedder, resolve_model_path  # noqa: E402

MUSIQUE = ROOT.parent / "shared" / "data" / "musique" / "musique_train_corpus.json"
SAMPLE = ROOT / "engine" / "sample" / "corpus"

# What was measured while choosing the defaults (2-core AMD EPYC VM shared with other jobs,
# torch 2.13 CPU); kept here so the results file says why the code is the way it is.
FINDINGS = """\
## What was tried (development measurements, same machine)

CPU seconds per pass are the steadiest measure on a shared machine, so single-thread variants
were compared by passages per CPU-second (300 MuSiQue passages, median of 3):

| variant (1 thread) | passages / CPU-s |
| --- | --- |
| sentence-transformers, batch 8 / 16 / 32 / 64 (sorted by characters) | 22.6 / 20.2 / 19.2 / 16.1 |
| token-sorted, token budget 512 / 1024 / 2048 / 4096 padded tokens | 23.0 / 24.5 / 25.0 / 23.2 |
| token budget 1024 / 2048 with `attn_implementation="eager"` instead of sdpa | 24.5 / 22.0 |
| torch.compile(dynamic=True), budget 2048 | about +3 %, after a 151 s compile |
| ONNX Runtime 1.32 (own export), budget 2048 | same CPU time as torch (MKL and MLAS GEMMs tie) |
| ONNX Runtime with its transformer optimizer (fused Attention/SkipLayerNorm/BiasGelu) | no faster |

* Padding: sentence-transformers sorts by characters; at batch 32 its batches run 23 % more
  tokens than the MuSiQue passages have, token-sorted batches 2 % more. A budget of ~2,048 padded tokens keeps the
  activations of a layer in the caches; bigger batches are slower per token.
* Threads: 2 threads ran 1.7x faster than 1 while the machine was nearly idle, and 1.5-2.5x
  *slower* while other processes used the cores (OpenMP threads wait on each other; 2 threads
  burned 40 % more CPU time). Hence the embedder times its batches and picks the faster of
  torch's thread count and half of it, re-timing the other after 8 batches, then less often
  while the choice holds (up to every 64). `OMP_WAIT_POLICY=PASSIVE` did not help.
* ONNX Runtime with its threads' spinning disabled lost less than torch at 2 threads on a busy
  machine, but in the full run above it was slower than the default torch path with its thread
  choice, so it stays an option (`backend="onnx"`), off by default.
* Not used: int8 dynamic quantization (slower here, min cosine 0.86) and bf16 (10x slower
  without AMX), both measured before this benchmark.
"""


def load_texts(n: int | None) -> tuple[list[str], str]:
    if MUSIQUE.exists():
        records = json.loads(MUSIQUE.read_text(encoding="utf-8"))
        texts = [f"{r['title']}\n{r['text']}" for r in records]
        source = f"MuSiQue train corpus ({MUSIQUE.name}, title + newline + text)"
    else:
        print(f"SKIP MuSiQue: {MUSIQUE} is absent; falling back to the sample corpus in {SAMPLE}")
        files = sorted(p for p in SAMPLE.iterdir() if p.suffix in (".md", ".txt"))
        texts = [f"{p.stem.replace('_', ' ')}\n{p.read_text(encoding='utf-8')}" for p in files]
        source = f"sample corpus (engine/sample/corpus, {len(files)} files, stem + newline + text)"
    if n is not None:
        texts = texts[:n]
    return texts, source




def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="passages to embed (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per variant (default: 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "embed_cpu.md",
                        help="Markdown results path; the JSON goes alongside (default: %(default)s)")
    parser.add_argument("--no-onnx", action="store_true", help="skip the ONNX Runtime variant")
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer
    import sentence_transformers
    import transformers

    texts, source = load_texts(args.n)
    n_texts = len(texts)
    model_path = str(resolve_model_path(EmbedConfig().model))
    reference = SentenceTransformer(model_path, device="cpu")
    n_tokens = int(sum(len(ids) for ids in reference.tokenizer(
        texts, truncation=True, max_length=reference.max_seq_length)["input_ids"]))
    threads = torch.get_num_threads()

    variants: dict[str, object] = {
        "sentence-transformers encode (reference)": lambda t: reference.encode(
            t, batch_size=32, normalize_embeddings=True),
    }
    ours = Embedder(EmbedConfig(cache_dir="", device="cpu"))
    variants["Embedder (default: torch)"] = lambda t: ours.encode(t)
    embedders = {"Embedder (default: torch)": ours}
    onnx_note = ""
    if not args.no_onnx:
        try:
            ours_onnx = Embedder(EmbedConfig(cache_dir="", device="cpu", backend="onnx"))
        except ImportError as exc:
            onnx_note = f"ONNX variant skipped: {exc}"
            print(onnx_note)
        else:
            variants["Embedder (backend=onnx)"] = lambda t: ours_onnx.encode(t)
            embedders["Embedder (backend=onnx)"] = ours_onnx

    load_before = load_average()
    warm = texts[: min(64, n_texts)]
    for fn in variants.values():
        fn(warm)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    vectors: dict[str, np.ndarray] = {}
    for rep in range(args.repeats):
        for name, fn in variants.items():
            start = time.perf_counter()
            vecs = fn(texts)
            elapsed = time.perf_counter() - start
            seconds[name].append(elapsed)
            vectors[name] = np.asarray(vecs, dtype=np.float32)
            print(f"repeat {rep + 1}/{args.repeats}  {name:42s} {elapsed:8.1f} s  "
                  f"{n_texts / elapsed:7.1f} passages/s  (load {load_average()})", flush=True)
    load_after = load_average()

    ref_name = next(iter(variants))
    ref_rate = n_texts / statistics.median(seconds[ref_name])
    rows = []
    for name in variants:
        rate = n_texts / statistics.median(seconds[name])
        diff = np.abs(vectors[name] - vectors[ref_name])
        cos = (vectors[name] * vectors[ref_name]).sum(axis=1)
        rows.append({
            "variant": name,
            "seconds": seconds[name],
            "median_seconds": statistics.median(seconds[name]),
            "passages_per_s": rate,
            "ratio_vs_reference": rate / ref_rate,
            "max_abs_diff": float(diff.max()),
            "min_cosine": float(cos.min()),
        })

    thread_costs = {name: {str(k): v for k, v in e._thread_cost.items()} for name, e in embedders.items()}
    machine = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": threads,
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "load_average_before": load_before,
        "load_average_after": load_after,
    }
    try:
        import onnxruntime

        machine["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass

    lines = [
        "# CPU embedding throughput: Embedder vs SentenceTransformer.encode",
        "",
        f"Machine: {machine['cpu']}, {machine['logical_cpus']} logical CPUs, torch {machine['torch']} "
        f"({threads} threads), sentence-transformers {machine['sentence_transformers']}, "
        f"transformers {machine['transformers']}"
        + (f", onnxruntime {machine['onnxruntime']}" if "onnxruntime" in machine else "")
        + f", Python {machine['python']}.",
        f"Load average (1/5/15 min) before / after: {load_before} / {load_after}.",
        f"Texts: {n_texts} passages of {source}; {n_tokens} tokens after truncation to "
        f"{reference.max_seq_length} ({n_tokens / n_texts:.0f} per passage).",
        f"Model: all-MiniLM-L6-v2 from the local package; median of {args.repeats} interleaved passes "
        "after a warm-up.",
        "",
        "| variant | passages/s | ratio vs reference | median s | max abs diff | min cosine |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        accuracy = ("(reference) | (reference)" if r["variant"] == ref_name
                    else f"{r['max_abs_diff']:.1e} | {r['min_cosine']:.7f}")
        lines.append(
            f"| {r['variant']} | {r['passages_per_s']:.1f} | {r['ratio_vs_reference']:.2f}x | "
            f"{r['median_seconds']:.1f} | {accuracy} |"
        )
    lines.append("")
    per_pass = "; ".join(
        f"{r['variant']}: " + ", ".join(f"{n_texts / s:.1f}" for s in r["seconds"]) for r in rows)
    lines.append(f"Per pass (passages/s, in run order): {per_pass}.")
    for name, costs in thread_costs.items():
        if costs:
            shown = ", ".join(f"{k} threads {v * 1e6:.0f} µs" for k, v in sorted(costs.items()))
            lines.append(f"{name}: last measured cost per padded token: {shown}.")
    if onnx_note:
        lines.append(onnx_note)
    table = "\n".join(lines) + "\n"
    print()
    print(table)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table + "\n" + FINDINGS, encoding="utf-8")
    json_path = args.out.with_suffix(".json")
    json_path.write_text(json.dumps({
        "machine": machine, "texts": {"source": source, "passages": n_texts, "tokens": n_tokens},
        "repeats": args.repeats, "results": rows, "thread_costs_s_per_token": thread_costs,
        "onnx_note": onnx_note,
    }, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out} and {json_path}")
    for e in embedders.values():
        e.close()


if __name__ == "__main__":
    main()
