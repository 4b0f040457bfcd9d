"""Benchmark: query embedding of a served batch, per runtime, against one plain encode.

Question: how long do 8 queries take to embed through ``Index.embed_queries`` (the retriever's
path) with ``backend = "torch"`` (the per-width recipe) and ``"onnx"`` (the default on the CPU:
queries padded to fixed-width buckets in ONNX Runtime; also with the previous release's coarser
buckets, and each query alone two at a time), against ONE plain ``SentenceTransformer.encode`` of the same 8 in the same process?
Each query's vector must be the same alone and in a batch: checked bit for bit here (alone, in
its batch of 8, in a batch of 64) for every runtime, and the cosine to the plain encode is given.

The variants run interleaved, batch by batch (``--batches`` batches of ``--size`` MuSiQue
questions, each timed as the median of ``--repeats`` calls), so a busy machine slows all alike;
reported: the median over batches of each variant's ms and of its ratio to the plain encode.

Usage: ``python bench/bench_embed_runtime.py --index DIR [--batches 20] [--size 8]``
(without ONNX Runtime only torch is measured).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results

QUESTIONS = ROOT.parent / "shared" / "data" / "musique" / "musique_train.json"


def timed(fn, repeats: int) -> float:
    """Median ms of ``repeats`` calls of ``fn`` (after one untimed call)."""
    fn()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return 1000 * statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", required=True, help="an index folder (its model embeds the queries)")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--size", type=int, default=8, help="queries per batch (default: 8)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per batch and variant")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "embed_runtime_cpu"))
    args = parser.parse_args()

    import spectrag  # first: it sets OMP_WAIT_POLICY=PASSIVE before torch starts OpenMP
    import torch
    from sentence_transformers import SentenceTransformer
    from spectrag.index.embed import resolve_model_path

    index = spectrag.load_index(args.index)
    record = new_record(f"per batch the median of {args.repeats} calls after one untimed call, variants "
                        "interleaved batch by batch; the median over batches",
                        packages=("sentence_transformers", "transformers", "onnxruntime"))
    questions = [q["question"] for q in json.loads(QUESTIONS.read_text())]
    plain = SentenceTransformer(str(resolve_model_path(index.config.embed.model)), device="cpu")
    variants = {"plain sentence-transformers encode (one call)":
                lambda t: plain.encode(t, batch_size=64, normalize_embeddings=True)}
    loaded = {}
    for backend in ("torch", "onnx"):
        try:
            start = time.perf_counter()
            index.query_embedder(backend)
            loaded[backend] = time.perf_counter() - start
        except ImportError as exc:
            print(f"{backend}: skipped ({exc})")
            continue
        variants[f"embed_queries, backend={backend}"] = lambda t, b=backend: index.embed_queries(t, backend=b)
    if "onnx" in loaded:
        from dataclasses import replace

        from spectrag.index.embed import Embedder, query_embedder

        # the buckets of the previous release (32, 64, 128, 256 wordpieces), for the same-run comparison
        coarse = query_embedder(replace(index.config.embed, backend="onnx"))
        if hasattr(coarse, "encoder"):
            coarse.encoder.widths = (32, 64, 128, 256)
            variants["embed_queries, onnx, buckets 32/64/128/256"] = coarse.encode_queries
        # the alternative: two queries side by side, one ONNX Runtime thread each
        side = Embedder(replace(index.config.embed, backend="onnx"), cache_vectors=False, query_workers=2)
        variants["Embedder.encode_queries, onnx, 2 queries side by side x 1 thread"] = side.encode_queries

    ms = {name: [] for name in variants}
    for b in range(args.batches):
        batch = questions[b * args.size : (b + 1) * args.size]
        for name, fn in variants.items():
            ms[name].append(timed(lambda: fn(batch), args.repeats))
        print(f"batch {b + 1}/{args.batches}", {k: round(v[-1], 1) for k, v in ms.items()}, flush=True)

    base = next(iter(variants))
    probe = questions[: 64]
    reference = variants[base](probe)
    rows = []
    for name, fn in variants.items():
        alone = np.stack([fn([q])[0] for q in probe])
        in8 = np.concatenate([fn(probe[lo : lo + 8]) for lo in range(0, 64, 8)])
        in64 = fn(probe)
        rows.append({"variant": name, "ms": statistics.median(ms[name]),
                     "ratio": statistics.median(np.array(ms[name]) / np.array(ms[base])),
                     "invariant": bool(np.array_equal(alone, in8) and np.array_equal(alone, in64)),
                     "differing": int((~(alone == in64).all(axis=1)).sum()),
                     "min_cos": float((alone * reference).sum(axis=1).min())})
    record.update(batches=args.batches, size=args.size, threads=torch.get_num_threads(), results=rows,
                  load_seconds=loaded)
    finish_record(record)
    lines = results_header(f"Query embedding, batches of {args.size}: runtimes vs one plain encode", record) + [
        f"{args.batches} batches of {args.size} MuSiQue questions; torch threads {torch.get_num_threads()}; "
        f"ONNX Runtime intra-op threads the same. Invariance: each of 64 questions embedded alone, in "
        "batches of 8 and in one batch of 64, compared bit for bit (rows differing alone vs in 64).",
        "",
        *md_table(rows, [("variant", "variant", ""), ("ms per batch", "ms", ".1f"),
                         ("ratio to the plain encode", "ratio", ".3f"),
                         ("same bits alone / in 8 / in 64", "invariant", ""),
                         ("rows differing", "differing", "d"),
                         ("min cosine to the plain encode", "min_cos", ".7f")]),
        "",
        "Embedder load (s, first use, ONNX export cached): "
        + ", ".join(f"{k} {v:.1f}" for k, v in loaded.items()),
    ]
    write_results(args.out, lines, record)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
