"""``spectrag answer``: questions in batches through :func:`spectrag.generate.answer`."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import click

from spectrag.cli.queries import iter_queries
from spectrag.config import LLMConfig, RetrieverConfig
from spectrag.errors import SpectragError
from spectrag.generate import answer
from spectrag.retriever import Retriever
from spectrag.store import load_index
from spectrag.util.console import progress_on


def run_answers(index_dir: Path, query_file: Path | None, texts: list[str], *, config: RetrieverConfig, llm: LLMConfig,
                budget: int | None, rounds: int, batch_size: int, out_file: Path | None, as_json: bool) -> int:
    """One JSON line per question to ``out_file`` (or stdout with ``as_json``), else a readable
    summary; the LLM's usage per stage goes to stderr. Returns the number of questions."""
    if not texts and query_file is None:
        raise SpectragError("no questions: pass --queries FILE or -q TEXT")
    if batch_size < 1:
        raise SpectragError(f"--batch-size must be >= 1, got {batch_size}")
    if not llm.enabled:
        raise SpectragError("spectrag answer needs an LLM endpoint: pass --llm-base-url URL (and --llm-model NAME)")
    queries = itertools.chain(((str(i), t) for i, t in enumerate(texts)), iter_queries(query_file) if query_file else ())
    retriever = Retriever(load_index(index_dir), config, llm=llm)
    out = out_file.open("w", encoding="utf-8") if out_file else sys.stdout
    progress = progress_on()
    done = 0
    try:
        while batch := list(itertools.islice(queries, batch_size)):
            ids, batch_texts = zip(*batch)
            for qid, a in zip(ids, answer(retriever, list(batch_texts), rounds=rounds, budget=budget, progress=progress)):
                if out_file is not None or as_json:
                    out.write(json.dumps({"id": qid, **a.to_json()}, ensure_ascii=False) + "\n")
                else:
                    cited = ", ".join(str(c) for c in a.citations) or "none"
                    follow = "".join(f"\n  follow-up: {q}" for q in a.queries[1:])
                    out.write(f"{qid}. {a.question}{follow}\n  answer: {a.answer}\n  cited chunks: {cited}\n")
            done += len(batch)
    finally:
        if out_file:
            out.close()
    usage = retriever.llm.report()
    for name, u in usage["stages"].items():
        click.echo(f"llm {name}: {u['requests']} requests ({u['cached']} cached), {u['prompt_tokens']:,} + "
                   f"{u['completion_tokens']:,} tokens, cost {u['cost']:.4f}, {u['malformed']} malformed", err=True)
    return done
