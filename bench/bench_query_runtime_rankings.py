"""Benchmark: do the query runtimes rank alike? The top-k of every question of a dev set, with the
queries embedded by ``embed_backend = "torch"`` and by ``"onnx"``, on the same index.

Question: does ONNX Runtime's query embedding change what is retrieved? Where every question's
top-k chunks are the same, R@k and every recall metric at that depth are identical; each
question whose top-k differs is counted (and the first few printed). Also: the largest
difference between the two query vectors and their smallest cosine.

Usage: ``python bench/bench_query_runtime_rankings.py --index DIR --questions FILE [--modes dense,spectral] [--k 5]``
(``--questions``: a MuSiQue/2Wiki JSON list with ``question`` fields, or a JSONL with ``text``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from _common import ROOT, finish_record, md_table, new_record, results_header, write_results


def read_questions(path: Path) -> list[str]:
    if path.suffix == ".jsonl":
        return [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]
    return [q["question"] for q in json.loads(path.read_text())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--questions", required=True, type=Path)
    ap.add_argument("--modes", default="dense,spectral")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "query_runtime_rankings"))
    args = ap.parse_args()

    import spectrag
    import torch
    from spectrag import RetrieverConfig

    index = spectrag.load_index(args.index)
    questions = read_questions(args.questions)
    record = new_record("one pass per backend and mode", packages=("onnxruntime", "sentence_transformers"))
    vectors = {b: index.embed_queries(questions, backend=b) for b in ("torch", "onnx")}
    rows = []
    for mode in args.modes.split(","):
        top = {}
        for backend in ("torch", "onnx"):
            retriever = spectrag.Retriever(index, RetrieverConfig(mode=mode, device="cpu"))
            qvecs = torch.from_numpy(vectors[backend])
            ranking = []
            for lo in range(0, len(questions), 256):
                part = questions[lo : lo + 256]
                result = retriever.score_batch(part, qvecs=qvecs[lo : lo + 256])
                ranking.extend(result.ranking()[:, : args.k].tolist())
            top[backend] = ranking
        differ = [i for i, (a, b) in enumerate(zip(top["torch"], top["onnx"])) if a != b]
        rows.append({"mode": mode, "questions": len(questions), "differ": len(differ),
                     "first": ", ".join(str(i) for i in differ[:5])})
        print(mode, "questions whose top", args.k, "differ:", len(differ), differ[:5], flush=True)
    diff = np.abs(vectors["torch"] - vectors["onnx"])
    cos = (vectors["torch"] * vectors["onnx"]).sum(axis=1)
    record.update(results=rows, k=args.k, max_abs_diff=float(diff.max()), min_cosine=float(cos.min()),
                  index=str(args.index), questions_file=str(args.questions))
    finish_record(record)
    lines = results_header(f"Query runtimes: top-{args.k} with torch vs ONNX Runtime query vectors", record) + [
        f"Index `{args.index}`, {len(questions)} questions of `{args.questions.name}`; the same index, the "
        f"queries embedded by each runtime; query vectors: max abs difference {diff.max():.2e}, min cosine "
        f"{cos.min():.7f}.", "",
        *md_table(rows, [("mode", "mode", ""), ("questions", "questions", "d"),
                         (f"top-{args.k} differs", "differ", "d"), ("first such questions", "first", "")]),
    ]
    write_results(args.out, lines, record)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
