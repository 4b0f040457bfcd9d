"""Benchmark: the graph modes against the baselines on the bundled sample corpus (what
``spectrag demo`` shows a newcomer), and which feature decides it.

Builds the sample index (the demo's default config) in a temporary folder and counts, per
method and per variant of the default ``spectral`` pipeline, the gold documents among the
top 5 chunks of each of the 12 questions (the demo's own measure): the baselines; spectral with
each feature of its relevance model and graph evidence switched off in turn; everything of
issue 28 off (the pipeline before it, on today's index); bridging without the same-document
(adjacency, section) edges.

    python bench/bench_sample.py

Results: bench/results/sample_cpu.md / .json.
"""

from __future__ import annotations

import argparse
import tempfile

from _common import ROOT, ensure_spectrag, pin_threads  # noqa: E402

pin_threads("1", passive=True)

from _common import finish_record, md_table, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
import spectrag  # noqa: E402
from spectrag.cli.demo import sample_corpus, sample_questions  # noqa: E402
from spectrag.config import RetrieverConfig  # noqa: E402
from spectrag.graph.relational import relational_graph  # noqa: E402

K = 5


def gold_found(retriever, texts: list[str], golds: list[set[str]], mode: str | None = None) -> list[int]:
    """Gold documents among each question's top-K chunks."""
    contexts = retriever.retrieve(texts, k=K, mode=mode)
    return [len({h.doc_id for h in c.hits} & g) for c, g in zip(contexts, golds)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "sample_cpu"))
    args = ap.parse_args()
    record = new_record("each variant once (retrieval is deterministic)")
    questions = sample_questions()
    texts, golds = [q["question"] for q in questions], [set(q["gold_docs"]) for q in questions]
    with tempfile.TemporaryDirectory() as tmp:
        index = spectrag.build_index(sample_corpus(), f"{tmp}/index", spectrag.load_config())
        signals, alpha = index.graph["signals"], index.config.graph.weights

        def spectral(drop: tuple[str, ...] = (), **overrides) -> list[int]:
            retriever = spectrag.Retriever(index, RetrieverConfig().replace(**overrides))
            if drop:  # the relational graph without the dropped signals, as the build would store it
                kept = {name: edges for name, edges in signals.items() if name not in drop}
                retriever.state.relations = relational_graph(kept, alpha, len(index.chunks))
            return gold_found(retriever, texts, golds)

        base = spectrag.Retriever(index)
        rows = [{"method": m, "per": gold_found(base, texts, golds, mode=m)} for m in ("hybrid", "bm25", "dense")]
        before = dict(seed__lexical_weight=0.0, seed__named_specificity=0.0, bridge__anchors="top",
                      bridge__other_documents=False, bridge__named_best_chunk=False, bridge__cited=False)
        rows += [
            {"method": "spectral (default)", "per": spectral()},
            {"method": "spectral, no lexical relevance (seed.lexical_weight 0)", "per": spectral(seed__lexical_weight=0.0)},
            {"method": "spectral, every title names (seed.named_specificity 0)", "per": spectral(seed__named_specificity=0.0)},
            {"method": "spectral, bridging from any top candidate (bridge.anchors top)", "per": spectral(bridge__anchors="top")},
            {"method": "spectral, bridges into the same document, every chunk", "per": spectral(bridge__other_documents=False)},
            {"method": "spectral, every chunk of a named document protected", "per": spectral(bridge__named_best_chunk=False)},
            {"method": "spectral, no cited documents (bridge.cited false)", "per": spectral(bridge__cited=False)},
            {"method": "spectral, no named-document protection", "per": spectral(bridge__protect_named=False)},
            {"method": "spectral, no bridging", "per": spectral(bridge__rounds=0)},
            {"method": "spectral, bridging without adjacency and section edges", "per": spectral(drop=("adjacency", "section"))},
            {"method": "spectral, everything of issue 28 off", "per": spectral(**before)},
        ]
    total = sum(len(g) for g in golds)
    for r in rows:
        r["found"] = sum(r["per"])
    record.update(questions=len(texts), gold_documents=total, k=K, chunks=len(index.chunks), rows=rows)
    finish_record(record)
    lines = results_header("The bundled sample corpus: gold documents in the top 5 chunks", record)
    lines += [f"{len(texts)} questions, {total} gold documents, {len(index.chunks)} chunks (`engine/sample/`).", ""]
    lines += md_table(rows, [("method", "method", ""), (f"gold found (of {total})", "found", "d"),
                             ("per question", lambda r: " ".join(map(str, r["per"])), "")])
    write_results(args.out, lines, record)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
