"""``spectrag demo``: index the bundled sample corpus and retrieve context for its questions.

Retrieval here is the hybrid baseline (dense + BM25, reciprocal rank fusion) over the index;
the graph stages plug into the same loop as they land.
"""

from __future__ import annotations

import json
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import click
import torch

from spectrag.build import build_index
from spectrag.seed.rrf import reciprocal_rank_fusion

SAMPLE = Path(__file__).resolve().parents[1] / "sample"


def sample_corpus() -> Path:
    return SAMPLE / "corpus"


def sample_questions() -> list[dict[str, Any]]:
    return json.loads((SAMPLE / "questions.json").read_text(encoding="utf-8"))


def hybrid_search(index, queries: list[str], k: int, depth: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense top-``depth`` and BM25 top-``depth`` fused by RRF. Shapes: -> ``[B, k]``."""

    _, dense_ids = index.dense_search(queries, depth)
    _, bm25_ids = index.bm25_search(queries, depth)
    return reciprocal_rank_fusion([torch.from_numpy(dense_ids), torch.from_numpy(bm25_ids)], top=k)


def run_demo(out_dir: Path | None, *, top_k: int = 5, as_json: bool = False) -> list[dict[str, Any]]:

    questions = sample_questions()
    with tempfile.TemporaryDirectory(prefix="spectrag-demo-") as tmp:
        target = out_dir or Path(tmp) / "sample-index"
        if not as_json:
            click.echo(f"Indexing the sample corpus ({sample_corpus()}) into {target} ...")
        index = build_index(sample_corpus(), target, overwrite=out_dir is not None)
        r = index.report
        if not as_json:
            click.echo(f"  {r.documents} documents, {r.chunks} chunks, {r.tokens:,} tokens; "
                       f"embedded in {r.seconds['embed']:.1f} s\n")
        queries = [q["question"] for q in questions]
        scores, ids = hybrid_search(index, queries, top_k)
        results = []
        for q, row_s, row_i in zip(questions, scores.tolist(), ids.tolist()):
            hits = [
                {"chunk": i, "doc_id": index.chunks[i].doc_id, "title": index.chunks[i].title,
                 "section": list(index.chunks[i].section), "score": round(s, 5),
                 "gold": index.chunks[i].doc_id in q["gold_docs"], "text": index.chunks[i].text}
                for s, i in zip(row_s, row_i) if i >= 0
            ]
            found = sorted({h["doc_id"] for h in hits if h["gold"]})
            results.append({"id": q["id"], "question": q["question"], "answer": q["answer"],
                            "gold_docs": q["gold_docs"], "gold_found": found, "hits": hits})
        if as_json:
            click.echo(json.dumps(results, indent=2, ensure_ascii=False))
        else:
            _print(results, top_k)
    return results


def _print(results: list[dict[str, Any]], top_k: int) -> None:
    total = sum(len(r["gold_docs"]) for r in results)
    found = sum(len(r["gold_found"]) for r in results)
    for r in results:
        click.secho(f"{r['id']}  {r['question']}", bold=True)
        click.echo(f"     answer: {r['answer']}   gold: {', '.join(r['gold_docs'])}")
        for rank, h in enumerate(r["hits"], start=1):
            mark = click.style("*", fg="green") if h["gold"] else " "
            where = " > ".join(h["section"][1:] or h["section"]) or "-"
            click.echo(f"  {mark} {rank}. {h['doc_id']} [{where}]  rrf={h['score']:.4f}")
            snippet = " ".join(h["text"].split())[:150]
            click.echo(textwrap.indent(snippet + ("..." if len(h["text"]) > 150 else ""), "       "))
        click.echo()
    click.echo(f"Gold documents in the top {top_k} chunks (hybrid dense+BM25): {found}/{total}. "
               "(* marks a chunk of a gold document.)")
