"""Benchmark: what a metadata filter (``where=``) costs a batch of B = 256 queries, against the
same batch without one, interleaved in one process (so the machine's load hits both alike).

    python bench/bench_filters.py                       # 20,000 synthetic chunks, B = 256
    python bench/bench_filters.py --n 5000 --modes dense,spectral --repeats 3

**Index.** ``make_synthetic.generate``'s corpus of ``--n`` one-section chunks with its supplied
clustered embeddings (d = 128), built once under ``bench/indexes/filters-<n>`` (git-ignored) and
reused. Every document gets metadata in memory: ``lang`` (one of 3, by document), ``year``
(2015-2024), ``tags`` (a list of 1-3 of 8).

**Filters** (B = 256 query vectors given, so embedding is excluded):

* ``none``: no filter (the baseline);
* ``same``: ``{"lang": "en"}`` for every query (about a third of the chunks);
* ``per-query``: 256 different filters, ``{"year": {"$gte": y}, "tags": t}`` and the like,
  one per query, compiled once and then cached (the steady state of a server);
* ``narrow``: ``{"lang": "de", "year": 2019, "tags": "t3"}`` (about 1 % of the chunks; k is
  still filled);
* ``compile``: the ``per-query`` filters compiled from cold columns (``MetadataColumns.mask``,
  the first time a field is used), reported alone.

Each round times every variant once, in order; the figure is the median over ``--repeats``
rounds after one warm-up round. Results: ``bench/results/filters_cpu.md`` / ``.json``.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (ROOT, bench_parser, finish_record, limit_threads, md_table, new_record,  # noqa: E402
                     results_header, write_results)

import numpy as np  # noqa: E402


def build(n: int):
    import make_synthetic

    from spectrag.build import build_index
    from spectrag.config import EmbedConfig, IndexConfig
    from spectrag.store import load_index

    corpus = ROOT / "bench" / "indexes" / f"filters-corpus-{n}"
    path = ROOT / "bench" / "indexes" / f"filters-{n}"
    make_synthetic.ensure(corpus, n, n_queries=256)
    if not any((path / name).exists() for name in ("CURRENT", "manifest.json")):  # built already (generations or flat)
        t0 = time.perf_counter()
        build_index(corpus / "corpus.jsonl", path, IndexConfig(embed=EmbedConfig(cache_dir="")), fmt="jsonl",
                    embeddings=np.load(corpus / "embeddings.npy"), overwrite=True)
        print(f"built {path} in {time.perf_counter() - t0:.0f} s", flush=True)
    texts, qvecs, _ = make_synthetic.load_queries(corpus)
    return load_index(path), texts[:256], qvecs[:256]


def with_metadata(index):
    docs = {d: i for i, d in enumerate(dict.fromkeys(c.doc_id for c in index.chunks))}
    rng = np.random.default_rng(5)
    years, tags = rng.integers(2015, 2025, len(docs)), [list(rng.choice(8, rng.integers(1, 4), replace=False))
                                                           for _ in docs]
    meta = {d: {"lang": ["en", "de", "fr"][i % 3], "year": int(years[i]), "tags": [f"t{t}" for t in tags[i]]}
            for d, i in docs.items()}
    index.chunks = [replace(c, metadata=meta[c.doc_id]) for c in index.chunks]
    return index


def per_query_filters(b: int) -> list[dict]:
    out = []
    for i in range(b):
        kind = i % 4
        out.append({"year": {"$gte": 2015 + i % 10}, "tags": f"t{i % 8}"} if kind == 0 else
                   {"lang": {"$in": [["en", "de", "fr"][i % 3], "xx"]}, "year": {"$lt": 2016 + i % 9}} if kind == 1 else
                   {"$or": [{"tags": f"t{i % 8}"}, {"year": 2015 + i % 10}]} if kind == 2 else
                   {"lang": {"$ne": ["en", "de", "fr"][i % 3]}, "tags": {"$nin": [f"t{i % 8}"]}})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser(__doc__, "filters_cpu", threads="2")
    ap.add_argument("--n", type=int, default=20_000, help="chunks (default: 20,000)")
    ap.add_argument("--modes", default="dense,bm25,hybrid,spectral")
    ap.add_argument("--backends", default="compiled,torch")
    args = ap.parse_args(argv)
    args.repeats = max(args.repeats, 5) if args.repeats == 3 else args.repeats
    from spectrag.config import RetrieverConfig
    from spectrag.reference.where import matches
    from spectrag.retriever import Retriever
    from spectrag.util.where import MetadataColumns

    record = new_record(f"per variant the median of {args.repeats} interleaved rounds after one warm-up round; "
                        f"query vectors given (no embedding); B = 256")
    with limit_threads(args.threads):
        index, texts, qvecs = build(args.n)
        index = with_metadata(index)
        qvecs = __import__("torch").from_numpy(np.ascontiguousarray(qvecs))
        variants = {"none": None, "same": {"lang": "en"}, "per-query": per_query_filters(len(texts)),
                    "narrow": {"lang": "de", "year": 2019, "tags": "t3"}}
        t0 = time.perf_counter()
        cold = MetadataColumns([c.metadata for c in index.chunks])
        cold.batch_mask(variants["per-query"])
        compile_s = time.perf_counter() - t0
        allowed_share = {name: 1.0 if f is None else
                         float(cold.batch_mask(f if isinstance(f, list) else [f]).float().mean())
                         for name, f in variants.items()}
        sample = index.chunks[:: max(1, len(index.chunks) // 500)]  # the compiled masks agree with the reference
        for w in variants["per-query"][:8] + [variants["same"], variants["narrow"]]:
            want = [matches(c.metadata, w) for c in sample]
            assert cold.mask(w)[:: max(1, len(index.chunks) // 500)].tolist() == want, w
        rows = []
        for backend in args.backends.split(","):
            retriever = Retriever(index, RetrieverConfig(device="cpu", backend=backend, threads=args.threads))
            for mode in args.modes.split(","):
                times: dict[str, list[float]] = {v: [] for v in variants}
                for round_ in range(args.repeats + 1):
                    # reversed every other round: the baseline must not always follow the narrowest filter
                    order = list(variants.items()) if round_ % 2 == 0 else list(variants.items())[::-1]
                    for name, where in order:
                        t = time.perf_counter()
                        retriever.score_batch(texts, mode=mode, qvecs=qvecs, where=where)
                        if round_:
                            times[name].append(time.perf_counter() - t)
                base = statistics.median(times["none"])
                for name in variants:
                    med = statistics.median(times[name])
                    rows.append({"backend": backend, "mode": mode, "filter": name, "ms": 1000 * med,
                                 "qps": len(texts) / med, "ratio": med / base, "share": allowed_share[name]})
                    print(rows[-1], flush=True)
    record = finish_record(record)
    record.update(n=len(index.chunks), rows=rows, compile_seconds=compile_s, threads=args.threads)
    lines = results_header(f"Metadata filters at B = 256 ({len(index.chunks):,} synthetic chunks)", record)
    lines += [f"Load average at the start {record['machine']['load_average_start']}, at the end "
              f"{record['machine']['load_average_end']}; torch / numba threads {args.threads}.", "",
              "`ratio`: the batch's time with the filter over its time without (the goal: <= 1.10). "
              "`allowed`: the share of chunks a filter allows (sampled).", ""]
    lines += md_table(rows, [("backend", "backend", ""), ("mode", "mode", ""), ("filter", "filter", ""),
                             ("allowed", "share", ".2f"), ("ms / batch", "ms", ".1f"), ("q/s", "qps", ".0f"),
                             ("ratio", "ratio", ".3f")])
    lines += ["", f"Compiling the 256 per-query filters from cold columns (each field's columns built on first "
              f"use): {1000 * compile_s:.1f} ms, once; repeated filters are cached."]
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
