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
from spectrag.util.io import check_unicode


def run_queries(index_dir: Path, query_file: Path | None, texts: list[str], *, config: RetrieverConfig,
                budget: int | None, batch_size: int, out_file: Path | None, trec_file: Path | None,
                with_text: bool) -> int:
    """Write one JSON line per query (and optionally a TREC run); returns the number of queries."""
    mode = config.mode

    if not texts and query_file is None:
        raise SpectragError("no queries: pass --queries FILE or -q TEXT")
    if batch_size < 1:
        raise SpectragError(f"--batch-size must be >= 1, got {batch_size}")
    for i, text in enumerate(texts):  # argv bytes that are not UTF-8 arrive as lone surrogates
        check_unicode(text, f"-q argument {i + 1} (bytes that are not UTF-8?)")
    for option, path in (("-o/--out", out_file), ("--trec", trec_file)):
        check_output_file(option, path)
    queries = itertools.chain(((str(i), t) for i, t in enumerate(texts)), iter_queries(query_file) if query_file else ())
    first = list(itertools.islice(queries, 1))  # an empty query file is an error, found before the index loads
    if not first:
        raise SpectragError(f"no queries: {query_file} holds none (blank lines are not queries)")
    queries = itertools.chain(first, queries)
    retriever = Retriever(load_index(index_dir), config)
    out = out_file.open("w", encoding="utf-8") if out_file else sys.stdout
    trec = trec_file.open("w", encoding="utf-8") if trec_file else None
    progress = out_file is not None and sys.stderr.isatty()
    done = 0
    try:
        with click.progressbar(length=0, label="queries", file=sys.stderr) if progress else _null() as bar:
            while batch := list(itertools.islice(queries, batch_size)):
                ids, batch_texts = zip(*batch)
                for qid, ctx in zip(ids, retriever.retrieve(list(batch_texts), budget=budget)):
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


def check_output_file(option: str, path: Path | None) -> None:
    """An output file can be written: its folder exists and it is not a folder itself."""
    if path is None:
        return
    if path.is_dir():
        raise SpectragError(f"{option} {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise SpectragError(f"{option} {path}: the folder {path.parent} does not exist")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
