"""Benchmark: int8 query vectors (``retriever.embed_backend = "onnx-int8"``). What does ONNX
Runtime's dynamic int8 quantization of the query encoder cost in retrieval quality, and what
does it save?

The product's path: ``Index.embed_queries(backend="onnx-int8")``, the int8 copy of the verified
float32 ONNX export (``quantize_dynamic``: int8 weights per output channel, every MatMul node but
the feed-forward down-projections; activations quantized per call), made once in the cache
folder and checked against torch
(:meth:`spectrag.index.embed.Embedder.int8_query_encoder`). Dynamic quantization scales a
call's activations by that call's own range; the query encoder runs each query alone (one call
each), so its vector stays a function of its text. Reported per dev set: the cosine of the int8
vectors to the default ones, and R@2 / R@5 / MRR and the context's recall at the default
budget of ``dense``, ``hybrid`` and ``spectral`` with either vectors (paired bootstrap
intervals of the change); then the time to embed batches of 8 questions with the two query
embedders as a retriever uses them (``embed_backend`` ``onnx`` against ``onnx-int8``: as many
queries at once as threads, one intra-op thread each).

Usage: ``python bench/bench_query_int8.py [--sets docs,musique,2wiki,sample]``
"""

from __future__ import annotations

import _common  # noqa: F401  (before numpy / torch: thread pinning)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results  # noqa: E402
from bench_quality import METRICS, Bench  # noqa: E402
from spectrag.eval.metrics import paired_bootstrap_ci  # noqa: E402

MODES = ("dense", "hybrid", "spectral")
FIGURES = (("R@2", "R@2"), ("R@5", "R@5"), ("MRR", "MRR"), ("R", "context recall"))  # R: the default budget's


def quality(bench: Bench, name: str) -> tuple[list[dict], dict]:
    default = bench.qvecs.clone()
    vectors = {"default": default, "int8": torch.from_numpy(bench.index.embed_queries(bench.texts, backend="onnx-int8"))}
    cos = (vectors["default"] * vectors["int8"]).sum(1)
    rows = []
    for mode in MODES:
        per = {}
        for label, q in vectors.items():
            bench.qvecs = q
            per[label] = bench.scorer.per_question(bench.run(mode, {}, None))
        valid = bench.scorer.gold.n_gold > 0
        row = {"set": name, "mode": mode}
        for m, label in FIGURES:
            col = METRICS.index(m)
            a, b = (100 * float(per[v][valid, col].mean()) for v in vectors)
            lo, hi = paired_bootstrap_ci((per["int8"] - per["default"])[valid, col])
            row[label] = f"{a:.1f} -> {b:.1f} ({b - a:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}])"
        rows.append(row)
        print(row, flush=True)
    bench.qvecs = default
    return rows, {"set": name, "questions": len(bench.texts), "cos_min": float(cos.min()),
                  "cos_median": float(cos.median()), "texts": bench.texts}


def speed(texts: list[str], index, batches: int, repeats: int) -> dict:
    groups = [texts[i : i + 8] for i in range(0, 8 * batches, 8)]
    variants = {"onnx": index.query_embedder("onnx").encode_queries,
                "onnx-int8": index.query_embedder("onnx-int8").encode_queries}
    for fn in variants.values():
        fn(groups[0])
    per = {k: [] for k in variants}
    for i, group in enumerate(groups):  # interleaved batch by batch, the order alternating
        for key, fn in (list(variants.items()) if i % 2 == 0 else list(variants.items())[::-1]):
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                fn(group)
                times.append(time.perf_counter() - t)
            per[key].append(statistics.median(times))
    return {k: 1000 * statistics.median(v) for k, v in per.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="docs,musique,2wiki,sample")
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "query_int8_cpu"))
    args = ap.parse_args()
    record = new_record(f"quality: one pass per set, mode and vectors; speed: one untimed call per variant, then "
                        f"per batch of 8 the median of {args.repeats} calls, variants interleaved batch by batch "
                        f"in alternating order, the median over {args.batches} batches", packages=("onnxruntime",))
    rows, sets = [], []
    for name in args.sets.split(","):
        bench = Bench(name, True, None)  # its query vectors: the default runtime (exported at first use)
        got, info = quality(bench, name)
        rows += got
        sets.append(info)
    texts = [t for s in sets for t in s["texts"]]
    timing = speed(texts, bench.index, args.batches, args.repeats)
    lanes = torch.get_num_threads()  # the query embedders' lanes (embed.num_threads 0: torch's count)
    record.update(rows=rows, sets=[{k: v for k, v in s.items() if k != "texts"} for s in sets], speed_ms=timing,
                  lanes=lanes)
    finish_record(record)
    lines = results_header("int8 query vectors (ONNX Runtime dynamic quantization) against the default", record)
    lines += ["Cosine of each question's int8 vector to its default one: " + "; ".join(
        f"{s['set']} ({s['questions']} questions) min {s['cos_min']:.4f}, median {s['cos_median']:.4f}" for s in sets),
        "", "Quality, default -> int8 (change, 95% paired bootstrap interval):", ""]
    lines += md_table(rows, [("set", "set", ""), ("mode", "mode", "")] + [(label, label, "") for _, label in FIGURES])
    base = timing["onnx"]
    lines += ["", f"Embedding batches of 8 questions, {lanes} at once on one ONNX Runtime thread each "
              "(`Index.query_embedder`, as a retriever runs it):", ""]
    lines += md_table([{"variant": k, "ms": v, "ratio": v / base} for k, v in timing.items()],
                      [("variant", "variant", ""), ("ms per batch", "ms", ".1f"), ("ratio", "ratio", ".3f")])
    write_results(args.out, lines, record)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
