"""Bring your own docs: index a folder of Markdown files, ask it questions, and serve it.

    python examples/bring_your_own_docs.py [--out DIR]

The folder is ``examples/docs/`` (the documentation of a made-up job queue, Harbor Queue);
point ``DOCS`` at your own folder of .md / .txt / .rst files. The same with the command line
is in examples/README.md. The test suite runs this script (tests/test_examples.py).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import spectrag

DOCS = Path(__file__).resolve().parent / "docs"
QUESTIONS = [
    "How do I rotate an API key without downtime?",
    "What happens to a job that fails five times?",
    "Which environment variable sets how many jobs a worker runs at once?",
]


def main(out: Path) -> None:
    # 1. Index: chunks along the Markdown sections, embeddings, BM25, the chunk graph.
    index = spectrag.build_index(DOCS, out / "harbor-index", overwrite=True)
    print(f"indexed {index.report.documents} documents into {len(index.chunks)} chunks")
    retriever = spectrag.Retriever(index)

    # 2. k results, with their text, title, section and score (k means k, as in FAISS or LangChain).
    for question in QUESTIONS:
        ctx = retriever.retrieve(question, k=3)
        print(f"\n{question}")
        for rank, hit in enumerate(ctx.hits, start=1):
            where = " > ".join(hit.section[1:]) or "-"
            print(f"  {rank}. {hit.score:.3f}  {hit.title} [{where}]  {' '.join(hit.text.split())[:70]}...")

    # 2b. Metadata filters: front matter (or a JSONL record's "metadata") is every chunk's metadata.
    ctx = retriever.retrieve(QUESTIONS[0], k=2, where={"audience": "dev", "version": {"$gte": 2}})
    print(f"\nwhere audience = dev: {[(hit.title, hit.metadata['audience']) for hit in ctx.hits]}")

    # 3. A context for an LLM prompt: as many chunks as 600 tokens hold, grouped by document.
    ctx = retriever.retrieve(QUESTIONS[0], budget=600)
    print(f"\nprompt context: {len(ctx.chunks)} chunks, {ctx.used_tokens} of {ctx.budget} tokens")
    print(ctx.render()[:300] + " ...")

    # 4. The same over HTTP (the `serve` extra): POST /v1/retrieve, here in-process.
    try:
        from fastapi.testclient import TestClient

        from spectrag.serve.app import create_app
    except ImportError:
        print("\n(HTTP: pip install 'spectrag[serve]')")
    else:
        with TestClient(create_app(retriever)) as client:
            answer = client.post("/v1/retrieve", json={"query": QUESTIONS[1], "k": 2}).json()
        print(f"\nHTTP: {[h['title'] for h in answer['results'][0]['hits']]}")

    # 5. As a LangChain retriever (the `langchain` extra): Documents with metadata.
    try:
        from spectrag.adapters.langchain import SpectragRetriever
    except ImportError:
        print("(LangChain: pip install 'spectrag[langchain]')")
    else:
        docs = SpectragRetriever(engine=retriever, k=2).invoke(QUESTIONS[2])
        print(f"LangChain: {[(d.metadata['title'], d.metadata['section']) for d in docs]}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="Keep the index here (default: a temporary folder).")
    args = ap.parse_args()
    if args.out:
        main(args.out)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
