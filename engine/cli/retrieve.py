"""``spectrag retrieve``: stream a query file through the Retriever in batches."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import click

from spectrag.cli.queries import iter_queries
from spectrag.config import RetrieverConfig
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever
from spectrag.store import load_index


def run_queries(index_dir: Path, query_file: Path | None, texts: list[str], *, config: RetrieverConfig,
                budget: int | None, batch_size: int, out_file: Path | None, trec_file: Path | None,
                with_text: bool, ray: str | None = None, workers: int = 0) -> int:
    """Write one JSON line per query (and optionally a TREC run); returns the number of queries.
    ``ray``: score on a Ray cluster at that address (``local``, ``auto``, ``ray://host:port``)
    with ``workers`` actors (:mod:`spectrag.distributed`); the output is the same."""
    mode = config.mode

    if not texts and query_file is None:
        raise SpectragError("no queries: pass --queries FILE or -q TEXT")
    if batch_size < 1:
        raise SpectragError(f"--batch-size must be >= 1, got {batch_size}")
    queries = itertools.chain(((str(i), t) for i, t in enumerate(texts)), iter_queries(query_file) if query_file else ())
    batches = iter(lambda: list(itertools.islice(queries, batch_size)), [])
    if ray is None:
        retriever = Retriever(load_index(index_dir), config)
        scored = ((b, retriever.retrieve([t for _, t in b], budget=budget)) for b in batches)
    else:
        from spectrag.distributed.score import scored_batches  # optional dependency (Ray)

        scored = scored_batches(index_dir, config, batches, budget=budget, address=ray, workers=workers)
    out = out_file.open("w", encoding="utf-8") if out_file else sys.stdout
    trec = trec_file.open("w", encoding="utf-8") if trec_file else None
    progress = out_file is not None and sys.stderr.isatty()
    done = 0
    try:
        with click.progressbar(length=0, label="queries", file=sys.stderr) if progress else _null() as bar:
            for batch, contexts in scored:
                for (qid, _), ctx in zip(batch, contexts):
                    row = {"id": qid, **ctx.to_json()}
                    if not with_text:
                        for c in row["chunks"]:
                            c.pop("text")
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
                    if trec is not None:
                        for rank, cid in enumerate(ctx.ranking, start=1):
                            trec.write(f"{qid} Q0 {cid} {rank} {len(ctx.ranking) - rank + 1} spectrag-{mode}\n")
                done += len(batch)
                if progress:
                    bar.update(len(batch))
    finally:
        if out_file:
            out.close()
        if trec is not None:
            trec.close()
    return done


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
