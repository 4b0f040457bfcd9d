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
The measurements that chose the embedder's defaults are in ``results/embed_defaults_cpu.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the model hub

import numpy as np  # noqa: E402
from _common import ROOT, ensure_spectrag, finish_record, load_average, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
from spectrag.config import EmbedConfig  # noqa: E402
from spectrag.index.embed import Embedder, resolve_model_path  # noqa: E402

MUSIQUE = ROOT.parent / "shared" / "data" / "musique" / "musique_train_corpus.json"
SAMPLE = ROOT / "engine" / "sample" / "corpus"

DEFAULTS = "results/embed_defaults_cpu.md"  # the development measurements behind the defaults


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



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="passages to embed (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per variant (default: 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "embed_cpu.md",
                        help="Markdown results path; the JSON goes alongside (default: %(default)s)")
    parser.add_argument("--no-onnx", action="store_true", help="skip the ONNX Runtime variant")
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer
    texts, source = load_texts(args.n)
    n_texts = len(texts)
    model_path = str(resolve_model_path(EmbedConfig().model))
    reference = SentenceTransformer(model_path, device="cpu")
    n_tokens = int(sum(len(ids) for ids in reference.tokenizer(
        texts, truncation=True, max_length=reference.max_seq_length)["input_ids"]))

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

    record = new_record(f"median of {args.repeats} interleaved passes per variant after a warm-up",
                        packages=("sentence_transformers", "transformers", "onnxruntime"))
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
    record.update(texts={"source": source, "passages": n_texts, "tokens": n_tokens}, repeats=args.repeats,
                  results=rows, thread_costs_s_per_token=thread_costs, onnx_note=onnx_note)
    finish_record(record)
    lines = results_header("CPU embedding throughput: Embedder vs SentenceTransformer.encode", record) + [
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
    lines += ["", f"What was tried while choosing the defaults (development measurements): `{DEFAULTS}`."]
    print("\n".join(lines))
    write_results(args.out, lines, record)
    for e in embedders.values():
        e.close()


if __name__ == "__main__":
    main()
