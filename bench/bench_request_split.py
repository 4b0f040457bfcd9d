"""Benchmark: where a served request's time goes. A server's micro-batches are small (about 8
queries at 16 clients, `bench/results/serve_cpu.md`); this times such a batch in-process,
split into the query embedding (the model), the engine (`Retriever.score_batch` on the given
vectors) and the answer's JSON, at the server's default thread count.

    python bench/bench_request_split.py --index DIR [--batch 8] [--repeats 20]

Results: bench/results/request_split_cpu.md / .json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.ensure_spectrag()

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from spectrag.config import RetrieverConfig  # noqa: E402
from spectrag.eval.datasets import load_dataset  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402
from spectrag.serve.models import result_of  # noqa: E402
from spectrag.store import load_index  # noqa: E402

ROOT = _common.ROOT


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, help="an index of MuSiQue's passages (its questions are the queries)")
    ap.add_argument("--data", default="../shared/data/musique")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "request_split_cpu"))
    args = ap.parse_args()
    record = _common.new_record(f"median over {args.repeats} batches of {args.batch} different questions, "
                                "after one warm-up batch")
    texts = [q.text for q in load_dataset("musique", args.data).questions]
    retriever = Retriever(load_index(args.index), RetrieverConfig())
    retriever.retrieve(texts[: args.batch], k=args.k, budget=args.budget)  # warm-up: model, kernels
    parts: dict[str, list[float]] = {"embed": [], "engine": [], "answer JSON": [], "retrieve (all)": []}
    for i in range(args.repeats):
        batch = [texts[(i * args.batch + j) % len(texts)] for j in range(args.batch)]
        t0 = time.perf_counter()
        vectors = retriever.embed(batch)
        t1 = time.perf_counter()
        retriever.score_batch(batch, qvecs=vectors, budget=args.budget)
        t2 = time.perf_counter()
        contexts = retriever.retrieve(batch, k=args.k, budget=args.budget)
        t3 = time.perf_counter()
        json.dumps([result_of(c).model_dump(exclude_unset=True) for c in contexts])
        t4 = time.perf_counter()
        for name, seconds in zip(parts, (t1 - t0, t2 - t1, t4 - t3, t3 - t2)):
            parts[name].append(1000 * seconds)
    record["rows"] = [{"part": name, "ms": statistics.median(v), "share": statistics.median(v) /
                       statistics.median(parts["retrieve (all)"])} for name, v in parts.items()]
    record = _common.finish_record(record)
    lines = _common.results_header(f"Where a served batch of {args.batch} queries spends its time", record)
    lines += [f"Index: `{args.index}`; mode {retriever.config.mode}, budget {args.budget}, k {args.k}.", ""]
    lines += _common.md_table(record["rows"], [("part", "part", ""), ("ms per batch (median)", "ms", ".1f"),
                                               ("of retrieve (all)", lambda r: f"{100 * r['share']:.0f}%", "")])
    lines += ["", "`retrieve (all)` is `Retriever.retrieve` of the batch's texts (embedding, engine, contexts); "
              "the other rows are its parts timed on their own (answer JSON: building the HTTP answer "
              "models of the contexts and serializing them)."]
    _common.write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
