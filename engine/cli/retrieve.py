"""``spectrag retrieve``: queries through the Retriever in batches (``-k`` and ``--budget`` as
:meth:`Retriever.retrieve`'s ``k`` and ``budget``), as JSON lines or text, with a TREC run (chunk
or document level, from each query's ranking and its scores) beside them."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from spectrag.cli.queries import iter_queries
from spectrag.config import RetrieverConfig
from spectrag.errors import SpectragError, brief
from spectrag.limits import check_index_folder, check_k
from spectrag.types import Chunk
from spectrag.util.console import bar as console_bar
from spectrag.util.console import progress_on
from spectrag.util.io import check_unicode

if TYPE_CHECKING:
    from spectrag.contexts import Context

TEXT_HITS = 5  # hits shown per query by --format text when -k is not given


def query_ids(texts: Sequence[str], file_queries: Sequence[tuple[str, str]], source: str = "") -> list[tuple[str, str]]:
    """``(id, text)`` for the ``-q`` texts (``q1``, ``q2``, ..., skipping ids the file uses) and then
    the file's queries; a file id used twice is an error (a TREC run needs unique query ids)."""
    seen: dict[str, int] = {}
    for i, (qid, _) in enumerate(file_queries):
        if qid in seen:
            raise SpectragError(f"{source}: query id {brief(qid)} appears twice (queries {seen[qid] + 1} and {i + 1}); "
                                "query ids must be unique")
        seen[qid] = i
    out, n = [], 0
    for text in texts:
        n += 1
        while f"q{n}" in seen:
            n += 1
        out.append((f"q{n}", text))
    return out + list(file_queries)


def doc_hits(ranked: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """Max-passage document ranking from ``(doc_id, score)`` pairs, best first: each document at
    its best chunk's score (first seen wins a tie)."""
    best: dict[str, float] = {}
    for doc_id, score in ranked:  # best first, so a document's first chunk is its best
        best.setdefault(doc_id, score)
    return sorted(best.items(), key=lambda kv: -kv[1])  # stable: equal scores keep their first-seen order


def _docno(doc_id: str) -> str:
    return re.sub(r"\s", "_", doc_id) or "_"  # TREC fields are split on white space


def trec_lines(qid: str, ctx: Context, *, depth: int, level: str, tag: str,
               table: Sequence[Chunk] | None = None) -> list[str]:
    """The run lines of one query from its ranking: ``qid Q0 docno rank score tag``, ``depth``
    deep (at most the candidate pool); ``level="doc"`` needs the chunk ``table`` for doc ids."""
    ranked = list(zip(ctx.ranking, ctx.ranking_scores))
    rows = [(str(c), s) for c, s in ranked] if level == "chunk" else \
        [(_docno(d), s) for d, s in doc_hits((table[c].doc_id, s) for c, s in ranked)]
    return [f"{qid} Q0 {docno} {rank} {score:.6f} {tag}" for rank, (docno, score) in enumerate(rows[:depth], start=1)]


def _text_block(qid: str, ctx: Context, k: int) -> str:
    """A query's hits for reading: rank, score, ids, title > section, the text's start."""
    used = f"{ctx.used_tokens:,} tokens (top {len(ctx.chunks)})" if ctx.budget is None else \
        f"{ctx.used_tokens:,} of {ctx.budget:,} tokens"
    cut = ", the best chunk cut to the budget" if ctx.truncated else ""
    lines = [f"[{qid}] {ctx.query}\n    {ctx.mode}: {len(ctx.chunks)} chunks, {used}{cut}, {len(ctx.ranking)} ranked"]
    chosen = {c.chunk_id for c in ctx.chunks}
    for rank, h in enumerate(ctx.hits[:k], start=1):
        section = h.section[1:] if h.section and h.section[0] == h.title else h.section  # the title once
        where = " > ".join([h.title, *section]) if h.title else " > ".join(section)
        mark = "" if h.chunk_id in chosen else "  (ranked, not in the context)"
        lines.append(f"  {rank:>3}  {h.score:8.4f}  doc {h.doc_id}  chunk {h.chunk_id}  {where}{mark}\n"
                     f"         {' '.join(h.text.split())[:100]}")
        if h.metadata:
            lines.append(f"         {_metadata_line(h.metadata)}")
    return "\n".join(lines) + "\n\n"


def _metadata_line(metadata: dict) -> str:
    """``key=value`` pairs (values as JSON, strings bare), cut to a line."""
    pairs = [f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}" for k, v in metadata.items()]
    line = "  ".join(pairs)
    return line if len(line) <= 100 else line[:97] + "..."


def parse_where(text: str | None) -> dict | None:
    """``--where``'s JSON, checked (:func:`spectrag.util.where.check_where`)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SpectragError(f"--where is not JSON ({exc}): {brief(text)}") from None
    from spectrag.util.where import check_where  # numpy: only once a filter is given

    return check_where(value, label="--where")


def _json_row(qid: str, ctx: Context, with_text: bool) -> str:
    row = {"id": qid, **ctx.to_json()}
    if not with_text:
        for c in row["chunks"] + row["hits"]:
            c.pop("text")
    return json.dumps(row, ensure_ascii=False) + "\n"


def run_queries(index_dir: Path, query_file: Path | None, texts: list[str], *, config: RetrieverConfig,
                budget: int | None, batch_size: int, out_file: Path | None, trec_file: Path | None,
                with_text: bool, k: int | None = None, fmt: str = "jsonl", depth: int = 1000, level: str = "chunk",
                progress: bool | None = None, llm=None, ray: str | None = None, workers: int = 0,
                where: str | None = None) -> int:
    """Write one JSON line (or a text block) per query, and optionally a TREC run; returns the
    number of queries. ``progress`` (default: :func:`~spectrag.util.console.progress_on`) counts queries as their
    batch is written. ``ray``: score on a Ray cluster at that address (``local``, ``auto``,
    ``ray://host:port``) with ``workers`` actors (:mod:`spectrag.distributed`); the output is the
    same. ``where``: a metadata filter for every query (JSON text, ``--where``)."""
    if not texts and query_file is None:
        raise SpectragError("no queries: pass --queries FILE or -q TEXT")
    for name, value in (("--batch-size", batch_size), ("-k", k), ("--depth", depth)):
        if value is not None and value < 1:
            raise SpectragError(f"{name} must be >= 1, got {value}")
    for i, text in enumerate(texts):  # argv bytes that are not UTF-8 arrive as lone surrogates
        check_unicode(text, f"-q argument {i + 1} (bytes that are not UTF-8?)")
    for option, path in (("-o/--out", out_file), ("--trec", trec_file)):
        check_output_file(option, path)
    queries = query_ids(texts, list(iter_queries(query_file)) if query_file else [], str(query_file))
    if not queries:  # an empty query file is an error, found before the index loads
        raise SpectragError(f"no queries: {query_file} holds none (blank lines are not queries)")
    if ray is not None and config.mode == "hyde":
        raise SpectragError("--ray does not run mode 'hyde' (its LLM calls are made by one process)")
    check_k(k, config)  # before the index loads
    filter_ = parse_where(where)
    if filter_ is not None and ray is not None:
        raise SpectragError("--where does not run with --ray yet; filter on one machine")
    texts_only = [t for _, t in queries]
    check_index_folder(index_dir)

    from spectrag.retriever import Retriever  # the model and torch: only once the arguments are checked
    from spectrag.store import load_index

    if ray is None:
        retriever = Retriever(load_index(index_dir), config, llm=llm if config.mode == "hyde" else None)
        table = retriever.index.chunks
        batches = retriever.batches(texts_only, k, budget=budget, batch_size=batch_size, where=filter_)
    else:
        from spectrag.distributed.score import scored_batches  # optional dependency (Ray)

        table = load_index(index_dir).chunks if trec_file is not None and level == "doc" else None
        parts = [queries[lo : lo + batch_size] for lo in range(0, len(queries), batch_size)]
        batches = (contexts for _, contexts in scored_batches(index_dir, config, parts, k=k, budget=budget,
                                                               address=ray, workers=workers))
    out: IO[str] = out_file.open("w", encoding="utf-8") if out_file else sys.stdout
    trec = trec_file.open("w", encoding="utf-8") if trec_file else None
    tag = f"spectrag-{config.mode}"
    done = 0
    try:
        with console_bar(total=len(queries), unit=" queries", desc="queries", leave=True,
                         show=progress_on() if progress is None else progress) as bar:
            for contexts in batches:
                for (qid, _), ctx in zip(queries[done : done + len(contexts)], contexts):
                    out.write(_text_block(qid, ctx, k or TEXT_HITS) if fmt == "text" else _json_row(qid, ctx, with_text))
                    if trec is not None:
                        trec.writelines(line + "\n" for line in trec_lines(qid, ctx, depth=depth, level=level, tag=tag,
                                                                             table=table))
                done += len(contexts)
                out.flush()
                bar.update(len(contexts))
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
