"""The ``spectrag`` command line: ``index``, ``add``, ``delete``, ``update``, ``compact``, ``info``, ``retrieve``, ``answer``, ``serve``, ``view``, ``demo``, ``eval``.

User errors (:class:`spectrag.errors.SpectragError`) print one ``error:`` line and exit with
status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable

import click

from spectrag.cli.llm_options import llm_config, llm_options
from spectrag.config import EMBED_BACKENDS, KG_SOURCES, MODES, load_retriever_config, with_llm_stages, with_openie
from spectrag.errors import SpectragError, brief
from spectrag.index.load import FORMATS
from spectrag.util.console import LEVELS, LOGGER, configure_logging, progress_on, showing
from spectrag.util.io import one_line, printable_path


MAX_ERROR_CHARS = 2000  # an error line longer than this is cut (with its length)


def _retriever_config(config_file: Path | None, mode: str | None, device: str | None = None,
                      embed_backend: str | None = None):
    """The online config from ``--config`` with the ``--mode`` / ``--device`` / ``--embed-backend``
    flags given on top."""
    flags = {"mode": mode, "device": device, "embed_backend": embed_backend}
    return load_retriever_config(config_file, **{k: v for k, v in flags.items() if v})


EMBED_BACKEND_HELP = ("The queries' encoder (default: the config's, auto: ONNX Runtime on the CPU); onnx-int8: "
                      "an int8 copy whose queries embed about 1.7x faster, at some cost in quality (README, 'int8 query vectors').")


def _friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn user errors into one clear line and a non-zero exit, unless --debug."""

    @click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
    @functools.wraps(fn)
    def wrapper(*args: Any, debug: bool, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpectragError as exc:
            if debug:
                raise
            # values in it are brief (errors.brief); file names that are not UTF-8 spelled \xNN; capped
            message = one_line(printable_path(str(exc)))
            if len(message) > MAX_ERROR_CHARS:
                message = f"{message[:MAX_ERROR_CHARS]}... ({len(message):,} characters)"
            click.echo(f"error: {message}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


def _console(fn: Callable[..., Any] | None = None, *, level: str = "info") -> Any:
    """``--quiet`` and ``--log-level``: on a terminal, progress bars and stage lines (``level``,
    default info) on stderr; elsewhere (a pipe, a file, CI) only warnings and errors unless
    ``--log-level`` says otherwise (``info``: the stage lines, and a progress line every few
    seconds with counts, rate and time left in place of each bar). The results on stdout are the
    same either way."""
    if fn is None:
        return functools.partial(_console, level=level)

    @click.option("--log-level", type=click.Choice(list(LEVELS)),
                  help=f"Messages on stderr at this level and above; stage lines are info (default: {level} on a "
                       "terminal, else warning).")
    @click.option("--quiet", is_flag=True, help="No progress bars and no stage lines on stderr: warnings and errors only.")
    @functools.wraps(fn)
    def wrapper(*args: Any, quiet: bool, log_level: str | None, **kwargs: Any) -> Any:
        terminal = sys.stderr.isatty()
        configure_logging(log_level or (level if terminal else "warning"), quiet=quiet)
        with showing(not quiet):  # bars on a terminal, else log lines (spectrag.util.console.LogBar)
            return fn(*args, **kwargs)

    return wrapper


def _report_skipped(skipped: list[tuple[str, str]], shown: int = 10) -> None:
    """``--skip-invalid``: how many files or records were left out, and the first few, on stderr."""
    if not skipped:
        return
    click.echo(f"skipped {len(skipped):,} invalid file(s) or record(s) (listed in the manifest's source.skipped_invalid):",
               err=True)
    for where, why in skipped[:shown]:
        click.echo(f"  {where}: {why}", err=True)
    if len(skipped) > shown:
        click.echo(f"  ... and {len(skipped) - shown:,} more", err=True)


def _report_notes(notes: list[str], shown: int = 10) -> None:
    """The corpus notes (special files skipped, file names that are not UTF-8), one line each on stderr."""
    for note in notes[:shown]:
        click.echo(f"note: {one_line(note)}", err=True)
    if len(notes) > shown:
        click.echo(f"note: ... and {len(notes) - shown:,} more (listed in the manifest's source.notes)", err=True)


def _report_file_skips(skipped: dict[str, dict]) -> None:
    """What a corpus folder held that was not read, one line per reason (the manifest's
    source.skipped and the --json summary's source have the same)."""
    from spectrag.index.files import describe

    if skipped:  # info, as the stage lines: on a terminal by default, in a log with --log-level info, not --quiet
        total = sum(e["count"] for e in skipped.values())
        LOGGER.info(f"skipped {total:,} file(s) and folder(s) of the corpus (the manifest's source.skipped):")
        for line in describe(skipped):
            LOGGER.info(f"  {line}")


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _summary(manifest: dict[str, Any], path: Path) -> dict[str, Any]:
    from spectrag.incremental.history import history  # on use: the package pulls in the build

    return {
        "path": str(path),
        "format_version": manifest["format_version"],
        "source": manifest["source"],
        "counts": manifest["counts"],
        "tokenizer": manifest["tokenizer"],
        "embedding": manifest["embedding"],
        "chunking": manifest["config"]["chunk"],
        "seconds": manifest.get("seconds", {}),
        "bytes": sum(f["bytes"] for f in manifest["files"].values()),
        "graph": _graph_summary(manifest.get("graph")),
        "kg": manifest.get("kg"),
        "llm": manifest.get("llm"),
        "history": history(manifest),
        "incremental": manifest.get("incremental"),
    }


def _graph_summary(graph: dict[str, Any] | None) -> dict[str, Any] | None:
    if not graph:
        return None
    keys = ("nodes", "edges", "mean_degree", "signal_edges", "components", "isolated_nodes", "spectrum",
            "entities", "citations", "order", "seconds")
    return {k: graph[k] for k in keys if k in graph}


def _print_summary(summary: dict[str, Any]) -> None:
    c, e, ch = summary["counts"], summary["embedding"], summary["chunking"]
    rows = [
        ("index", summary["path"] + (f" (generation {summary['generation']})" if "generation" in summary else "")),
        ("source", f"{summary['source']['path']} ({summary['source']['format']})"),
        ("documents", f"{c['documents']:,}"),
        ("chunks", f"{c['chunks']:,}"),
        ("tokens", f"{c['tokens']:,} ({summary['tokenizer']})"),
        ("chunking", f"{ch['chunk_size']} tokens, {ch['overlap']} overlap, min {ch['min_tokens']}"),
        ("embedding", f"{e['model']} ({e['dim']}-d {e['dtype']})" + (f"; {e['languages']}" if e.get("languages") else "")),
        ("size", f"{summary['bytes'] / 1e6:.1f} MB"),
    ]
    g = summary.get("graph")
    if g:
        sp = g["spectrum"]
        rows += [
            ("graph", f"{g['nodes']:,} nodes, {g['edges']:,} edges (mean degree {g['mean_degree']})"),
            ("edges by signal", ", ".join(f"{k} {v:,}" for k, v in g["signal_edges"].items())),
            ("components", f"{g['components']:,} with edges, {g['isolated_nodes']:,} isolated nodes"),
            ("spectrum", f"{sp['dim']} coordinates, " + (
                f"Lanczos {'converged' if sp.get('converged') else 'NOT converged'} in {sp.get('n_iter')} cycles, "
                f"max residual {sp.get('max_residual', 0):.1e}" if sp["dim"] else "none") + f", {sp['clusters']} clusters"),
        ]
    kg = summary.get("kg")
    if kg:
        rows.append(("knowledge graph", f"{kg['entities']:,} entities, {kg['relations']:,} relations, "
                                        f"{kg['describes_links']:,} chunk links ({kg['source']})"))
    llm = summary.get("llm")
    if llm:
        for name, u in llm["usage"]["stages"].items():
            facts = llm.get(name, {})
            rows.append((f"llm {name}", f"{u['requests']:,} requests ({u['cached']:,} cached), {u['prompt_tokens']:,} + "
                                        f"{u['completion_tokens']:,} tokens, cost {u['cost']:.4f}, "
                                        f"{facts.get('malformed', u['malformed']):,} malformed ({llm['model']})"))
    from spectrag.incremental.history import history_lines

    rows += history_lines(summary["history"], summary["incremental"], g)
    rows += [(f"{stage} s", f"{secs:.2f}") for stage, secs in summary["seconds"].items()]
    click.echo(_table(rows))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="spectrag")
def main() -> None:
    """SpectRAG: batched graph retrieval (spectral diffusion, PPR, spreading activation)."""


def _ray_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--ray [ADDRESS]`` and ``--workers N``: run the command on a Ray cluster (spectrag.distributed)."""
    fn = click.option("--workers", default=0, show_default=True, type=click.IntRange(min=0),
                      help="With --ray: workers (actors, task fan-out); 0 = one per cluster CPU (per GPU when present).")(fn)
    return click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                        help="Run on Ray: alone, a local cluster of this machine's CPUs; 'auto' or ray://host:port, an "
                             "existing cluster. Same output as without. Needs: pip install 'spectrag[ray]'.")(fn)


@main.command("index")
@click.argument("corpus", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Index folder to create.")
@click.option("--format", "fmt", default="auto", show_default=True, type=click.Choice(["auto", *FORMATS]), help="Corpus format.")
@click.option("--preset", type=click.Choice(["default", "fine"]), help="Chunking preset: default 256/32 tokens, fine 256/64.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML file with [chunk], [embed], [bm25] tables.")
@click.option("--openie", "openie_file", type=click.Path(path_type=Path),
              help="HippoRAG OpenIE JSON: builds the knowledge graph (modes activation, combined) from it and "
                   "feeds the entity edge signal unless graph.entities_file is set.")
@click.option("--utility-questions", is_flag=True,
              help="Generate utility questions per chunk with the LLM (the utility edge signal and utility-question "
                   "seeding; kept as llm/questions.json).")
@click.option("--kg", "kg_source", type=click.Choice(list(KG_SOURCES)),
              help="Build the knowledge graph from this source; llm: named entities and triples per chunk from the "
                   "LLM (kept as llm/openie.json, a reusable --openie file).")
@click.option("--overwrite", is_flag=True, help="Replace an existing index folder.")
@click.option("--skip-empty", is_flag=True, help="Leave out empty documents instead of failing.")
@click.option("--skip-invalid", is_flag=True, help="Leave out (count and list) files and records that cannot be read "
              "(not UTF-8, invalid JSON or YAML, unparsable) instead of failing.")
@click.option("--follow-symlinks", is_flag=True, help="Read symbolic links that lead out of a corpus folder (refused by default).")
@click.option("--device", help="auto, cpu or cuda[:i]: where the embedder, the kNN search and the spectrum run "
                               "(embed.device and graph.device; default: the config's, auto: CUDA when present).")
@click.option("--include", "include", multiple=True, metavar="GLOB",
              help="Read only the files of a corpus folder this glob matches (.gitignore semantics, relative to the "
                   "folder; repeatable; replaces the config's corpus.include).")
@click.option("--exclude", "exclude", multiple=True, metavar="GLOB",
              help="Never read the files or folders this glob matches (repeatable; replaces corpus.exclude).")
@click.option("--hidden", is_flag=True, help="Also read hidden files and folders (names starting with '.'; skipped by default).")
@click.option("--vendor", is_flag=True, help="Also read vendor / build folders (node_modules, _build, build, dist, "
              "__pycache__, site-packages, ...; skipped by default).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@llm_options
@_ray_options
@_console
@_friendly
def index_cmd(corpus: Path, out_dir: Path, fmt: str, preset: str | None, config_file: Path | None,
              openie_file: Path | None, utility_questions: bool, kg_source: str | None, overwrite: bool,
              skip_empty: bool, skip_invalid: bool, follow_symlinks: bool, device: str | None,
              include: tuple[str, ...], exclude: tuple[str, ...], hidden: bool, vendor: bool, as_json: bool,
              llm_flags: dict, ray_address: str | None, workers: int) -> None:
    """Build an index (chunks, embeddings, dense and BM25 indexes) of CORPUS.

    In a folder, hidden files and folders, vendor / build folders and files other than .md,
    .markdown, .rst and .txt are skipped, and counted by reason on stderr and in the manifest.
    The default embedding model, all-MiniLM-L6-v2, is English-only: set embed.model to a
    multilingual one for other languages."""
    import dataclasses

    from spectrag.build import build_index, with_file_patterns
    from spectrag.config import load_config, with_device

    config = load_config(config_file, preset=preset)
    if device is not None:
        config = with_device(config, device)
    config = with_file_patterns(config, include=include or None, exclude=exclude or None)
    if hidden or vendor:
        config = dataclasses.replace(config, corpus=dataclasses.replace(
            config.corpus, skip_hidden=config.corpus.skip_hidden and not hidden,
            skip_vendor=config.corpus.skip_vendor and not vendor))
    if openie_file is not None:
        config = with_openie(config, openie_file)
    config = with_llm_stages(config, utility_questions=utility_questions, kg_source=kg_source)
    build = build_index
    if ray_address is not None:
        from spectrag.distributed.build import build_index_ray  # optional dependency (Ray)

        build = functools.partial(build_index_ray, address=ray_address, workers=workers)
    index = build(corpus, out_dir, config, fmt=fmt, overwrite=overwrite, skip_empty=skip_empty,
                  skip_invalid=skip_invalid, follow_symlinks=follow_symlinks,
                  progress=not as_json and progress_on(), llm=llm_config(config_file, llm_flags))
    _report_skipped(index.report.skipped_invalid)
    _report_notes(index.report.notes)
    _report_file_skips(index.report.skipped)
    summary = _summary(index.manifest, out_dir)
    summary["seconds"] = index.report.seconds
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        _print_summary(summary)


def _dry_run_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--dry-run`` of ``add``, ``delete`` and ``update``."""
    return click.option("--dry-run", is_flag=True,
                        help="Print the document ids that would be added, replaced and removed; write nothing.")(fn)


def _edit_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--compact-above`` and ``--json`` of the commands that edit an index."""
    fn = click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")(fn)
    return click.option("--compact-above", type=click.FloatRange(min=0), default=None,
                        help="Recompute the graph from scratch (as `compact`) when the chunks changed since the last "
                             "full build exceed this share of the index (default: 0.25).")(fn)


def _corpus_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """How ``add`` and ``update`` read CORPUS: ``--format``, ``--skip-empty``, ``--skip-invalid``,
    ``--follow-symlinks``."""
    fn = click.option("--follow-symlinks", is_flag=True, help="Read symbolic links that lead out of a corpus folder.")(fn)
    fn = click.option("--skip-invalid", is_flag=True,
                      help="Leave out (count and list) files and records that cannot be read.")(fn)
    fn = click.option("--skip-empty", is_flag=True, help="Leave out empty documents instead of failing.")(fn)
    return click.option("--format", "fmt", default="auto", show_default=True, type=click.Choice(["auto", *FORMATS]),
                        help="Corpus format.")(fn)


def _edited(index, index_dir: Path, as_json: bool, dry_run: bool = False) -> None:
    from spectrag.cli.edit import edit_line, edit_summary, plan_lines

    _report_skipped(index.report.skipped_invalid)
    _report_notes(index.report.notes)
    if dry_run:
        if as_json:
            click.echo(json.dumps({"dry_run": True, **index.report.plan}, indent=2, ensure_ascii=False))
        else:
            click.echo("\n".join(plan_lines(index.report.plan, index_dir)))
        return
    summary = _summary(index.manifest, index_dir)
    summary["seconds"] = index.report.seconds
    summary["edit"] = edit_summary(index)
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        click.echo(edit_line(index))
        _print_summary(summary)


def _compact_above(value: float | None) -> dict[str, float]:
    return {} if value is None else {"compact_above": value}


@main.command("add")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.argument("corpus", type=click.Path(path_type=Path))
@_corpus_options
@_edit_options
@_dry_run_option
@_console
@_friendly
def add_cmd(index_dir: Path, corpus: Path, fmt: str, skip_empty: bool, skip_invalid: bool, follow_symlinks: bool,
            compact_above: float | None, as_json: bool, dry_run: bool) -> None:
    """Add the documents of CORPUS to the index at INDEX_DIR (no rebuild; the old index stays
    until the new one is complete; concurrent edits of one index wait for each other)."""
    from spectrag.incremental import add_documents

    index = add_documents(index_dir, corpus, fmt=fmt, skip_empty=skip_empty, skip_invalid=skip_invalid,
                          follow_symlinks=follow_symlinks, progress=not as_json and progress_on(),
                          dry_run=dry_run, **_compact_above(compact_above))
    _edited(index, index_dir, as_json, dry_run)


@main.command("delete")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.argument("doc_ids", nargs=-1)
@click.option("--ids", "id_values", multiple=True, metavar="FILE|ID",
              help="A file of document ids (one a line; - reads standard input) or an id; repeatable.")
@_edit_options
@_dry_run_option
@_console
@_friendly
def delete_cmd(index_dir: Path, doc_ids: tuple[str, ...], id_values: tuple[str, ...], compact_above: float | None,
               as_json: bool, dry_run: bool) -> None:
    """Delete the documents DOC_IDS (and those of --ids) from the index at INDEX_DIR. An id the
    index does not hold is an error and nothing is deleted."""
    from spectrag.cli.edit import read_ids
    from spectrag.incremental import delete_documents

    index = delete_documents(index_dir, read_ids(id_values, doc_ids), progress=not as_json and progress_on(),
                             dry_run=dry_run, **_compact_above(compact_above))
    _edited(index, index_dir, as_json, dry_run)


@main.command("update")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.argument("corpus", type=click.Path(path_type=Path))
@_corpus_options
@_edit_options
@_dry_run_option
@_console
@_friendly
def update_cmd(index_dir: Path, corpus: Path, fmt: str, skip_empty: bool, skip_invalid: bool, follow_symlinks: bool,
               compact_above: float | None, as_json: bool, dry_run: bool) -> None:
    """Replace the documents of CORPUS whose ids the index at INDEX_DIR holds (when they changed)
    and add the others; documents CORPUS lacks stay (see `delete`)."""
    from spectrag.incremental import update_documents

    index = update_documents(index_dir, corpus, fmt=fmt, skip_empty=skip_empty, skip_invalid=skip_invalid,
                             follow_symlinks=follow_symlinks, progress=not as_json and progress_on(),
                             dry_run=dry_run, **_compact_above(compact_above))
    _edited(index, index_dir, as_json, dry_run)


@main.command("compact")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_console
@_friendly
def compact_cmd(index_dir: Path, as_json: bool) -> None:
    """Recompute the graph, the spectrum and the knowledge graph of INDEX_DIR from scratch: the
    index a fresh build of its documents gives."""
    from spectrag.incremental import compact_index

    _edited(compact_index(index_dir, progress=not as_json and progress_on()), index_dir, as_json)


@main.command("info")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--no-verify", is_flag=True, help="Skip the checksum check of every file.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_friendly
def info_cmd(index_dir: Path, no_verify: bool, as_json: bool) -> None:
    """Describe the index at INDEX_DIR (after checking its files)."""
    from spectrag.limits import check_index_folder

    check_index_folder(index_dir)  # a missing folder is refused before the store (and torch) loads
    from spectrag.store import open_generation, read_generation_manifest

    generation = open_generation(index_dir)  # CURRENT read once: one generation described whole
    try:
        summary = _summary(read_generation_manifest(generation.folder, verify=not no_verify), index_dir)
    finally:
        generation.release()
    summary["generation"] = generation.id
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        _print_summary(summary)


@main.command("retrieve")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--queries", "query_file", type=click.Path(path_type=Path),
              help="Query file: .jsonl, .json list (MuSiQue/HotpotQA), or text lines (`qid<TAB>text` or one query a line).")
@click.option("-q", "--query", "texts", multiple=True, help="A query (repeatable; ids q1, q2, ...).")
@click.option("--mode", type=click.Choice(list(MODES)), help="Retrieval mode (default: the config's, spectral); "
              "activation and combined need a knowledge graph (index --openie).")
@click.option("--config", "config_file", type=click.Path(path_type=Path),
              help="TOML file with [retriever] and stage tables ([seed], [expand], [propagate], [bridge], [select], ...).")
@click.option("--device", help="auto, cpu or cuda[:i] (default: the config's, auto).")
@click.option("--embed-backend", type=click.Choice(list(EMBED_BACKENDS)), help=EMBED_BACKEND_HELP)
@click.option("--budget", type=int, help="Token budget per query: the context is the budgeted selection (default without "
              "-k: the config's, 2,000).")
@click.option("-k", "top_k", type=int, help="Results per query: the top k (`hits`, with text) and, without --budget, "
              "a context of those k chunks.")
@click.option("--format", "fmt", default="jsonl", show_default=True, type=click.Choice(["jsonl", "text"]),
              help="jsonl: one JSON object per query; text: the top hits of each query for reading.")
@click.option("--batch-size", default=256, show_default=True, help="Queries scored together (memory grows with it).")
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), help="Write the results here (default: stdout).")
@click.option("--trec", "trec_file", type=click.Path(path_type=Path),
              help="Also write the ranking as a TREC run (qid Q0 docno rank score tag) with its final scores.")
@click.option("--depth", default=1000, show_default=True, help="Ranks per query in the TREC run.")
@click.option("--level", default="chunk", show_default=True, type=click.Choice(["chunk", "doc"]),
              help="TREC docno: the chunk id, or the document id at its best chunk's score (max-passage).")
@click.option("--no-text", is_flag=True, help="Leave chunk texts out of the JSONL.")
@click.option("--where", "where", help='Metadata filter for every query, a JSON object: \'{"lang": "en"}\', '
              '\'{"year": {"$gte": 2020}}\' ($eq $ne $gt $gte $lt $lte $in $nin $and $or).')
@llm_options
@_ray_options
@_console
@_friendly
def retrieve_cmd(index_dir: Path, query_file: Path | None, texts: tuple[str, ...], mode: str | None,
                 config_file: Path | None, device: str | None, embed_backend: str | None, budget: int | None,
                 top_k: int | None, fmt: str,
                 batch_size: int, out_file: Path | None, trec_file: Path | None, depth: int, level: str,
                 no_text: bool, where: str | None, llm_flags: dict, ray_address: str | None, workers: int) -> None:
    """Retrieve for every query, in batches: the top k results with text (-k) and a context of those
    k chunks, or the context a token budget holds (--budget; the default without -k)."""
    from spectrag.cli.retrieve import (
        run_queries,  # imported on use: `spectrag --help` stays fast
    )
    config = _retriever_config(config_file, mode, device, embed_backend)
    run_queries(index_dir, query_file, list(texts), config=config, budget=budget, batch_size=batch_size,
                out_file=out_file, trec_file=trec_file, with_text=not no_text, k=top_k, fmt=fmt, depth=depth,
                level=level, llm=llm_config(config_file, llm_flags), ray=ray_address, workers=workers, where=where)


@main.command("serve")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, help="Port to listen on.")
@click.option("--mode", type=click.Choice(list(MODES)), help="Default retrieval mode (a request may set its own).")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML file with [retriever] and stage tables.")
@click.option("--device", help="auto, cpu or cuda[:i] (default: the config's, auto).")
@click.option("--embed-backend", type=click.Choice(list(EMBED_BACKENDS)), help=EMBED_BACKEND_HELP)
@click.option("--max-batch", default=256, show_default=True, help="Queries scored together (and the most in one request).")
@click.option("--max-wait-ms", default=5.0, show_default=True, help="How long a batch's first request waits for others.")
@click.option("--no-batching", is_flag=True, help="Score every request alone (for comparison).")
@click.option("--no-overlap", is_flag=True,
              help="Embed a batch after the one before is scored, not while it is (for a machine of one core).")
@click.option("--max-k", default=1000, show_default=True, help="Largest k a request may ask for.")
@click.option("--max-body-bytes", default=1 << 20, show_default=True, help="Largest request body.")
@click.option("--body-timeout-s", default=30.0, show_default=True, help="A request body must arrive in full within this (else 408).")
@click.option("--header-timeout-s", default=10.0, show_default=True,
              help="A request's line and headers must arrive within this many seconds (else 408, connection closed).")
@click.option("--graceful-s", default=30.0, show_default=True,
              help="On SIGTERM / Ctrl-C: seconds to finish open requests (then 503 for those left) before exiting.")
@click.option("--log-level", default="info", show_default=True, type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              help="The server's (uvicorn's) and the engine's messages at this level and above.")
@click.option("--quiet", is_flag=True, help="Warnings and errors only (as --log-level warning).")
@click.option("--follow-s", default=2.0, show_default=True,
              help="Seconds between looks for a new index generation written by an edit (0: only POST /v1/reload).")
@_friendly
def serve_cmd(index_dir: Path, host: str, port: int, mode: str | None, config_file: Path | None, device: str | None,
              embed_backend: str | None, max_batch: int, max_wait_ms: float, no_batching: bool, no_overlap: bool, max_k: int, max_body_bytes: int,
              body_timeout_s: float, header_timeout_s: float, graceful_s: float, log_level: str, quiet: bool,
              follow_s: float) -> None:
    """Serve retrieval over HTTP (POST /retrieve, GET /healthz, GET /info), batching concurrent requests."""
    from spectrag.retriever import Retriever
    from spectrag.serve.app import ServeSettings, serve  # the `serve` extra
    from spectrag.store import load_index

    log_level = "warning" if quiet else log_level
    configure_logging(log_level if log_level in LEVELS else "error")
    for name, value in (("--max-batch", max_batch), ("--max-k", max_k), ("--max-body-bytes", max_body_bytes)):
        if value < 1:
            raise SpectragError(f"{name} must be >= 1, got {value}")
    for name, value, lo, unit in (("--max-wait-ms", max_wait_ms, 0.0, "milliseconds"), ("--graceful-s", graceful_s, 0.0, "seconds"),
                                  ("--body-timeout-s", body_timeout_s, 1e-3, "seconds"),
                                  ("--header-timeout-s", header_timeout_s, 1e-3, "seconds"),
                                  ("--follow-s", follow_s, 0.0, "seconds")):
        if not lo <= value <= 86_400:  # NaN too
            raise SpectragError(f"{name} must be in [{lo:g}, 86400] {unit}, got {value}")
    with showing(sys.stderr.isatty() and not quiet):  # the load's progress bars
        retriever = Retriever(load_index(index_dir), _retriever_config(config_file, mode, device, embed_backend))
        # load the model, touch the state and compile (or load from numba's cache) the kernels before the first request
        retriever.retrieve("warm-up")
    settings = ServeSettings(max_batch=max_batch, max_wait_ms=max_wait_ms, batching=not no_batching,
                             overlap=not no_overlap, max_k=max_k,
                             max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s,
                             header_timeout_s=header_timeout_s, follow_s=follow_s)
    LOGGER.info(f"serving {index_dir} generation {retriever.index.generation} ({len(retriever.index.chunks):,} chunks, "
                f"mode {retriever.config.mode}, device {retriever.state.device}) on http://{host}:{port}")
    handed = [retriever]
    del retriever  # not held by this frame: after a reload the old generation's memory goes
    serve(handed.pop(), settings, host=host, port=port, graceful_s=graceful_s, log_level=log_level)


@main.command("view")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_file", required=True, type=click.Path(path_type=Path), help="The HTML page to write.")
@click.option("--query", help="Highlight this query's seeds, expanded candidates and selected context.")
@click.option("--mode", type=click.Choice(list(MODES)), help="Retrieval mode for --query (default: the config's).")
@click.option("--budget", type=int, help="Token budget for --query's context (default: the config's, 2,000).")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML file with [retriever] and stage tables.")
@click.option("--max-nodes", default=3000, show_default=True, help="Chunks drawn at most (beyond: a seeded sample).")
@click.option("--seed", default=0, show_default=True, help="Seed of the sample and the layout.")
@_console
@_friendly
def view_cmd(index_dir: Path, out_file: Path, query: str | None, mode: str | None, budget: int | None,
             config_file: Path | None, max_nodes: int, seed: int) -> None:
    """Write a self-contained HTML page of the chunk graph (no network needed to open it)."""
    from spectrag.store import load_index
    from spectrag.view import write_view

    if max_nodes < 1:
        raise SpectragError(f"--max-nodes must be >= 1, got {max_nodes}")
    if budget is not None and budget < 1:
        raise SpectragError(f"--budget must be >= 1, got {budget}")
    if query is not None and not query.strip():
        raise SpectragError("--query is empty")
    index = load_index(index_dir)
    if index.graph is None:
        raise SpectragError(f"{index_dir}: the index has no chunk graph to draw (built with graph.enabled = false)")
    config = _retriever_config(config_file, mode)
    summary = write_view(index, out_file, query=query, config=config, budget=budget, max_nodes=max_nodes, seed=seed)
    click.echo(f"wrote {summary['path']}: {summary['nodes']:,} of {summary['total_nodes']:,} chunks, "
               f"{summary['edges']:,} edges ({summary['bytes'] / 1e6:.1f} MB)")


@main.command("answer")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--queries", "query_file", type=click.Path(path_type=Path), help="Question file: .jsonl, .json list or .txt lines.")
@click.option("-q", "--query", "texts", multiple=True, help="A question (repeatable).")
@click.option("--mode", type=click.Choice(list(MODES)), help="Retrieval mode (default: the config's, spectral).")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML file with [retriever], stage tables and [llm].")
@click.option("--budget", type=int, help="Context tokens per question and retrieval round (default: the config's, 2,000).")
@click.option("--rounds", default=1, show_default=True,
              help="Retrieval rounds: above 1 the model may ask a follow-up question after each (iterative CoT retrieval).")
@click.option("--batch-size", default=256, show_default=True, help="Questions answered together.")
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), help="JSONL answers (default: a readable summary on stdout).")
@click.option("--json", "as_json", is_flag=True, help="Print the answers as JSON lines.")
@llm_options
@_console
@_friendly
def answer_cmd(index_dir: Path, query_file: Path | None, texts: tuple[str, ...], mode: str | None, config_file: Path | None,
               budget: int | None, rounds: int, batch_size: int, out_file: Path | None, as_json: bool, llm_flags: dict) -> None:
    """Answer questions from the retrieved context with the LLM, citing chunk ids."""
    from spectrag.cli.answer import run_answers

    config = _retriever_config(config_file, mode)
    run_answers(index_dir, query_file, list(texts), config=config, llm=llm_config(config_file, llm_flags), budget=budget,
                rounds=rounds, batch_size=batch_size, out_file=out_file, as_json=as_json)


@main.command("bench")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--queries", "query_file", type=click.Path(path_type=Path),
              help="Queries to time (JSONL, JSON list or text, as retrieve --queries; default: 512 made from the index's chunks).")
@click.option("--modes", default="spectral,hybrid,dense", show_default=True, help="Comma-separated retrieval modes.")
@click.option("--batch-sizes", default="1,64,256", show_default=True, help="Comma-separated queries per batch.")
@click.option("--threads", "thread_counts", default="", help="Comma-separated CPU thread counts (default: 1 and all cores).")
@click.option("--repeats", default=5, show_default=True, help="Timed batches per figure, after one warm-up.")
@click.option("--latency-queries", default=100, show_default=True, help="Queries timed one at a time (batch-1 latency).")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML file with [retriever] and stage tables.")
@click.option("--device", help="auto, cpu or cuda[:i] (default: the config's, auto).")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON instead of tables.")
@_console
@_friendly
def bench_cmd(index_dir: Path, query_file: Path | None, modes: str, batch_sizes: str, thread_counts: str, repeats: int,
              latency_queries: int, config_file: Path | None, device: str | None, as_json: bool) -> None:
    """Time retrieval on an index: queries/s per mode, batch size and thread count, ms per stage,
    batch-1 latency, with the machine, threads, load average and versions."""
    import os

    from spectrag.cli.queries import iter_queries
    from spectrag.eval.throughput import BenchSettings, format_table, run_bench, sample_queries
    from spectrag.store import load_index

    def ints(text: str, what: str) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise SpectragError(f"--{what} must be comma-separated integers, got {text!r}") from None

    config = _retriever_config(config_file, None, device)
    unknown = [m for m in modes.split(",") if m not in MODES]
    if unknown:
        raise SpectragError(f"--modes: unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    threads = ints(thread_counts, "threads") or tuple(sorted({1, os.cpu_count() or 1}))
    settings = BenchSettings(tuple(modes.split(",")), ints(batch_sizes, "batch-sizes"), threads, repeats, latency_queries)
    index = load_index(index_dir)
    queries = [t for _, t in iter_queries(query_file)] if query_file else sample_queries(index, 512)
    record = run_bench(index, queries, settings, config, log=LOGGER.info)
    click.echo(json.dumps(record, indent=1) if as_json else format_table(record))


@main.command("demo")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Keep the sample index here (default: a temporary folder).")
@click.option("-k", "top_k", default=5, show_default=True, help="Chunks shown per question.")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@_console(level="warning")  # the demo reports its own steps on stdout
@_friendly
def demo_cmd(out_dir: Path | None, top_k: int, as_json: bool) -> None:
    """Index the bundled sample corpus and retrieve context for its questions."""
    from spectrag.cli.demo import run_demo

    run_demo(out_dir, top_k=top_k, as_json=as_json)


@main.command("eval")
@click.argument("dataset", type=click.Choice(["musique", "2wiki", "hotpotqa", "multihop-rag", "beir", "sample"]))
@click.option("--data", "data", type=click.Path(path_type=Path), help="Dataset folder or questions file (default for sample: the bundled one).")
@click.option("--index", "index_dir", type=click.Path(path_type=Path), help="Reuse this index (default: build or reuse one in ~/.cache/spectrag/eval).")
@click.option("--methods", default="all", show_default=True, help="all, or a comma-separated list of retrieval modes.")
@click.option("--ablations", is_flag=True, help="Also run the full pipeline with one stage or edge signal switched off at a time.")
@click.option("--sweep", is_flag=True, help="Also vary propagate.alpha/t/damping, expand.n_seeds/max_candidates and "
              "activation.k/tau_d one at a time.")
@click.option("--budget", type=int, help="Context tokens per question (default: 12,000, the budget of the published figures).")
@click.option("--budgets", default="", help="More budgets (comma-separated) for a context P/R/F1 table, e.g. 500,1000,2000.")
@click.option("--batch-size", default=256, show_default=True, help="Questions scored together.")
@click.option("--config", "config_file", type=click.Path(path_type=Path),
              help="TOML config: its index tables when the index is built, its [retriever] and stage tables for retrieval.")
@click.option("--openie", "openie_file", type=click.Path(path_type=Path),
              help="When the index is built: OpenIE JSON for the knowledge graph and entity signal, as index --openie "
                   "(default: the dataset folder's openie_*.json, if any).")
@click.option("--no-openie", is_flag=True, help="Build the index without an OpenIE file.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Write eval_<dataset>.md/.json, TREC runs and plots here.")
@click.option("--no-plots", is_flag=True, help="With --out, skip the PNG plots (no matplotlib needed).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of the Markdown report.")
@click.option("--generate", is_flag=True, help="Also answer every question from each method's context with the LLM and "
              "report EM, token F1 and answer containment.")
@click.option("--rounds", default=1, show_default=True, help="With --generate: retrieval rounds per question "
              "(above 1: iterative CoT retrieval).")
@llm_options
@_console
@_friendly
def eval_cmd(dataset: str, data: Path | None, index_dir: Path | None, methods: str, ablations: bool, sweep: bool,
             budget: int | None, budgets: str, batch_size: int, config_file: Path | None, openie_file: Path | None, no_openie: bool,
             out_dir: Path | None, no_plots: bool, as_json: bool, generate: bool, rounds: int, llm_flags: dict) -> None:
    """Evaluate retrieval methods on DATASET: Recall@k, MRR, nDCG@10 and context P/R/F1."""
    import shlex

    from spectrag.config import load_config
    from spectrag.eval import evaluate
    from spectrag.eval.report import markdown
    from spectrag.eval.run import progress_bars

    try:
        more = [int(b) for b in budgets.split(",") if b.strip()]
    except ValueError:
        raise SpectragError(f"--budgets must be comma-separated token counts, got {brief(budgets)}") from None
    with progress_bars(progress_on()):  # a bar per run, counting questions
        result = evaluate(dataset, data, index=index_dir, methods=methods, ablations=ablations, sweep=sweep, budget=budget,
                          budgets=more, batch_size=batch_size, config=load_config(config_file) if config_file else None,
                          retriever_config=load_retriever_config(config_file) if config_file else None,
                          openie=None if no_openie else openie_file or "auto", out=out_dir,
                          plots=not no_plots, command=shlex.join(["spectrag", *sys.argv[1:]]),
                          log=LOGGER.info, llm=llm_config(config_file, llm_flags),
                          generate=generate, rounds=rounds)
    click.echo(json.dumps(result, indent=2, ensure_ascii=False) if as_json else markdown(result))


if __name__ == "__main__":  # pragma: no cover
    main()
