"""Benchmark: query embedding of a served batch, per runtime, against one plain encode.

Question: how long do 8 queries take to embed through ``Index.embed_queries`` (the retriever's
path) with ``backend = "torch"`` (the per-width recipe) and ``"onnx"`` (the default on the CPU:
each query at its own length in ONNX Runtime, the queries of one token length stacked in one
call, as many calls at once as threads, each on one thread) and ``"onnx-int8"`` (opt-in: an int8
copy of the export, each query alone), against ONE plain ``SentenceTransformer.encode`` of the
same 8 in the same process? Also two earlier ONNX query recipes, rebuilt here for the same-run
comparison: each query alone at its own length (the default until stacking), and queries padded
to fixed-width buckets (16 ... 256 wordpieces), one call per width on all threads.
Each query's vector must be the same alone and in a batch: checked bit for bit here (alone, in
its batch of 8, in a batch of 64) for every runtime, and the cosine to the plain encode is given.

The variants run interleaved, batch by batch (``--batches`` batches of ``--size`` MuSiQue
questions, each timed as the median of ``--repeats`` calls), so a busy machine slows all alike;
reported: the median over batches of each variant's ms and of its ratio to the plain encode.

Usage: ``python bench/bench_embed_runtime.py --index DIR [--batches 12] [--size 8]``
(without ONNX Runtime only torch is measured); ``--questions all`` draws the batches from the
MuSiQue, 2wiki-dev and docs-dev questions (861), for larger batches.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results

DATA = ROOT.parent / "shared" / "data"


def questions_of(which: str) -> list[str]:
    """MuSiQue's questions (``musique``), or with 2wiki-dev's and docs-dev's after them (``all``),
    as the evaluation reads them (:func:`spectrag.eval.datasets.load_dataset`)."""
    from spectrag.eval.datasets import load_dataset

    sets = (("musique", "musique"),) + ((("2wiki", "2wiki-dev"), ("beir", "docs-dev")) if which == "all" else ())
    return [q.text for name, folder in sets for q in load_dataset(name, DATA / folder).questions]


def timed(fn, repeats: int) -> float:
    """Median ms of ``repeats`` calls of ``fn`` (after one untimed call)."""
    fn()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return 1000 * statistics.median(runs)


WIDTHS = (16, 24, 32, 48, 64, 128, 256)  # the previous recipe's padded widths


def bucketed(encoder, export, threads: int):
    """The previous ONNX query recipe on the ``export`` and ``encoder``'s tokenizer: each text
    padded to the smallest of :data:`WIDTHS` that holds it, the texts of one width in one call
    on a session of ``threads`` intra-op threads. ``[B]`` texts -> float32 ``[B, dim]``."""
    from spectrag.index.query_onnx import session_for

    session = session_for(export, threads)

    def encode(texts):
        encodings = encoder.tokenizer.encode_batch([str(t).strip() for t in texts])
        out = np.empty((len(texts), encoder.dim), dtype=np.float32)
        widths = np.array([min(next((w for w in WIDTHS if w >= len(e.ids)), encoder.max_tokens), encoder.max_tokens)
                           for e in encodings])
        for width in np.unique(widths):
            rows = np.flatnonzero(widths == width)
            ids = np.zeros((len(rows), int(width)), dtype=np.int64)
            mask = np.zeros_like(ids)
            for j, i in enumerate(rows):
                ids[j, : len(encodings[i].ids)] = encodings[i].ids
                mask[j, : len(encodings[i].ids)] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            out[rows] = encoder.pool(session.run(None, {k: feed[k] for k in encoder.inputs})[0], mask)
        return out

    return encode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", required=True, help="an index folder (its model embeds the queries)")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--size", type=int, default=8, help="queries per batch (default: 8)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per batch and variant")
    parser.add_argument("--questions", choices=("musique", "all"), default="musique",
                        help="where the batches come from (all: MuSiQue, 2wiki-dev and docs-dev, 861 questions)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "embed_runtime_cpu"))
    args = parser.parse_args()

    import spectrag  # first: it sets OMP_WAIT_POLICY=PASSIVE before torch starts OpenMP
    import torch
    from sentence_transformers import SentenceTransformer
    from spectrag.index.embed import resolve_model_path

    index = spectrag.load_index(args.index)
    record = new_record(f"per batch the median of {args.repeats} calls after one untimed call, variants "
                        "interleaved batch by batch, their order reversed every other batch; the median over batches",
                        packages=("sentence_transformers", "transformers", "onnxruntime"))
    questions = questions_of(args.questions)
    if args.batches * args.size > len(questions):  # an empty batch would time nothing and skew the ratio
        parser.error(f"--batches {args.batches} of --size {args.size}: --questions {args.questions} holds {len(questions)} questions "
                     f"(at most {len(questions) // args.size} batches)")
    plain = SentenceTransformer(str(resolve_model_path(index.config.embed.model)), device="cpu")
    variants = {"plain sentence-transformers encode (one call)":
                lambda t: plain.encode(t, batch_size=64, normalize_embeddings=True)}
    loaded = {}
    for backend in ("torch", "onnx", "onnx-int8"):  # onnx-int8: opt-in, its quality in query_int8_cpu.md
        try:
            start = time.perf_counter()
            index.query_embedder(backend)
            loaded[backend] = time.perf_counter() - start
        except ImportError as exc:
            print(f"{backend}: skipped ({exc})")
            continue
        variants[f"embed_queries, backend={backend}"] = lambda t, b=backend: index.embed_queries(t, backend=b)
    if "onnx" in loaded:
        from pathlib import Path

        from spectrag.index.embed import default_cache_dir, model_fingerprint, onnx_export_path

        light = index.query_embedder("onnx")
        if hasattr(light, "encoder"):
            from dataclasses import replace

            from spectrag.index.embed import query_embedder

            alone = query_embedder(replace(index.config.embed, backend="onnx"))
            alone.encoder.stack = False
            variants["earlier onnx default: each query alone at its own length"] = alone.encode_queries
            path = resolve_model_path(index.config.embed.model)
            export = onnx_export_path(Path(index.config.embed.cache_dir or default_cache_dir()) / "onnx",
                                      model_fingerprint(path), light.encoder.dim)
            variants["previous onnx recipe: fixed-width buckets, one call per width"] = bucketed(
                light.encoder, export, torch.get_num_threads())

    ms = {name: [] for name in variants}
    for b in range(args.batches):
        batch = questions[b * args.size : (b + 1) * args.size]
        # the variants' order reversed every other batch: the plain encode (every ratio's
        # denominator) must not always follow the same variant's calls
        for name, fn in (list(variants.items()) if b % 2 == 0 else list(variants.items())[::-1]):
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
        f"{args.batches} batches of {args.size} questions ({args.questions}); torch threads {torch.get_num_threads()}; "
        f"ONNX Runtime: the default stacks the queries of one token length in one call and runs "
        f"{torch.get_num_threads()} calls at once on one intra-op thread each, the earlier default each query "
        f"alone on the same lanes, the bucket recipe one call per width on {torch.get_num_threads()} intra-op threads. "
        "Invariance: each of 64 questions embedded alone, in "
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
