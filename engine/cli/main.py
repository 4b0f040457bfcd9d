"""The ``spectrag`` command line: ``index``, ``add``, ``info``, ``retrieve``, ``demo``.

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

from spectrag.config import MODES, with_openie
from spectrag.errors import SpectragError
from spectrag.index.load import FORMATS


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
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _summary(manifest: dict[str, Any], path: Path) -> dict[str, Any]:
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
        ("index", summary["path"]),
        ("source", f"{summary['source']['path']} ({summary['source']['format']})"),
        ("documents", f"{c['documents']:,}"),
        ("chunks", f"{c['chunks']:,}"),
        ("tokens", f"{c['tokens']:,} ({summary['tokenizer']})"),
        ("chunking", f"{ch['chunk_size']} tokens, {ch['overlap']} overlap, min {ch['min_tokens']}"),
        ("embedding", f"{e['model']} ({e['dim']}-d {e['dtype']})"),
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
@click.option("--preset", type=click.Choice(["default", "fine"]), help="Chunking preset: default 1200/100 tokens, fine 256/64.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="TOML file with [chunk], [embed], [bm25] tables.")
@click.option("--openie", "openie_file", type=click.Path(path_type=Path),
              help="HippoRAG OpenIE JSON: builds the knowledge graph (modes activation, combined) from it and "
                   "feeds the entity edge signal unless graph.entities_file is set.")
@click.option("--overwrite", is_flag=True, help="Replace an existing index folder.")
@click.option("--skip-empty", is_flag=True, help="Leave out empty documents instead of failing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_ray_options
@_friendly
def index_cmd(corpus: Path, out_dir: Path, fmt: str, preset: str | None, config_file: Path | None,
              openie_file: Path | None, overwrite: bool, skip_empty: bool, as_json: bool, ray_address: str | None,
              workers: int) -> None:
    """Build an index (chunks, embeddings, dense and BM25 indexes) of CORPUS."""
    from spectrag.build import build_index
    from spectrag.config import load_config

    config = load_config(config_file, preset=preset)
    if openie_file is not None:
        config = with_openie(config, openie_file)
    build = build_index
    if ray_address is not None:
        from spectrag.distributed.build import build_index_ray  # optional dependency (Ray)

        build = functools.partial(build_index_ray, address=ray_address, workers=workers)
    index = build(corpus, out_dir, config, fmt=fmt, overwrite=overwrite, skip_empty=skip_empty,
                  progress=not as_json and sys.stderr.isatty())
    summary = _summary(index.manifest, out_dir)
    summary["seconds"] = index.report.seconds
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        _print_summary(summary)


@main.command("add")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.argument("corpus", type=click.Path(path_type=Path))
@click.option("--format", "fmt", default="auto", show_default=True, type=click.Choice(["auto", *FORMATS]), help="Corpus format.")
@click.option("--skip-empty", is_flag=True, help="Leave out empty documents instead of failing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_friendly
def add_cmd(index_dir: Path, corpus: Path, fmt: str, skip_empty: bool, as_json: bool) -> None:
    """Add the documents of CORPUS to the index at INDEX_DIR (no rebuild; the old index stays
    until the new one is complete)."""
    from spectrag.incremental import add_documents

    index = add_documents(index_dir, corpus, fmt=fmt, skip_empty=skip_empty, progress=not as_json and sys.stderr.isatty())
    r = index.report
    summary = _summary(index.manifest, index_dir)
    summary["seconds"] = r.seconds
    summary["added"] = {"documents": r.documents, "chunks": r.chunks, "tokens": r.tokens,
                        "embedding_cache_hits": r.cache_hits, "lanczos": r.lanczos}
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        click.echo(f"added {r.documents:,} documents ({r.chunks:,} chunks, {r.tokens:,} tokens)")
        _print_summary(summary)


@main.command("info")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--no-verify", is_flag=True, help="Skip the checksum check of every file.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_friendly
def info_cmd(index_dir: Path, no_verify: bool, as_json: bool) -> None:
    """Describe the index at INDEX_DIR (after checking its files)."""
    from spectrag.store import read_manifest

    summary = _summary(read_manifest(index_dir, verify=not no_verify), index_dir)
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        _print_summary(summary)


@main.command("retrieve")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--queries", "query_file", type=click.Path(path_type=Path), help="Query file: .jsonl, .json list (MuSiQue/HotpotQA) or .txt lines.")
@click.option("-q", "--query", "texts", multiple=True, help="A query (repeatable).")
@click.option("--mode", type=click.Choice(list(MODES)), help="Retrieval mode (default: the config's, spectral); "
              "activation and combined need a knowledge graph (index --openie).")
@click.option("--config", "config_file", type=click.Path(path_type=Path),
              help="TOML file with [retriever] and stage tables ([seed], [expand], [propagate], [bridge], [select], ...).")
@click.option("--budget", type=int, help="Token budget per query (default: the config's, 12,000).")
@click.option("--batch-size", default=256, show_default=True, help="Queries scored together.")
@click.option("-o", "--out", "out_file", type=click.Path(path_type=Path), help="JSONL results (default: stdout).")
@click.option("--trec", "trec_file", type=click.Path(path_type=Path), help="Also write the ranking as a TREC run file.")
@click.option("--no-text", is_flag=True, help="Leave chunk texts out of the JSONL.")
@_ray_options
@_friendly
def retrieve_cmd(index_dir: Path, query_file: Path | None, texts: tuple[str, ...], mode: str | None,
                 config_file: Path | None, budget: int | None, batch_size: int, out_file: Path | None,
                 trec_file: Path | None, no_text: bool, ray_address: str | None, workers: int) -> None:
    """Retrieve a token-budgeted context for every query, in batches."""
    from spectrag.cli.retrieve import (
        run_queries,  # imported on use: `spectrag --help` stays fast
    )
    from spectrag.config import load_retriever_config

    config = load_retriever_config(config_file, **({"mode": mode} if mode else {}))
    run_queries(index_dir, query_file, list(texts), config=config, budget=budget, batch_size=batch_size,
                out_file=out_file, trec_file=trec_file, with_text=not no_text, ray=ray_address, workers=workers)


@main.command("demo")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Keep the sample index here (default: a temporary folder).")
@click.option("-k", "top_k", default=5, show_default=True, help="Chunks shown per question.")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
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
@click.option("--budget", type=int, help="Context tokens per question (default: the retriever's, 12,000).")
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
@_friendly
def eval_cmd(dataset: str, data: Path | None, index_dir: Path | None, methods: str, ablations: bool, sweep: bool,
             budget: int | None, budgets: str, batch_size: int, config_file: Path | None, openie_file: Path | None, no_openie: bool,
             out_dir: Path | None, no_plots: bool, as_json: bool) -> None:
    """Evaluate retrieval methods on DATASET: Recall@k, MRR, nDCG@10 and context P/R/F1."""
    import shlex

    from spectrag.config import load_config, load_retriever_config
    from spectrag.eval import evaluate
    from spectrag.eval.report import markdown

    try:
        more = [int(b) for b in budgets.split(",") if b.strip()]
    except ValueError:
        raise SpectragError(f"--budgets must be comma-separated token counts, got {budgets!r}") from None
    result = evaluate(dataset, data, index=index_dir, methods=methods, ablations=ablations, sweep=sweep, budget=budget,
                      budgets=more, batch_size=batch_size, config=load_config(config_file) if config_file else None,
                      retriever_config=load_retriever_config(config_file) if config_file else None,
                      openie=None if no_openie else openie_file or "auto", out=out_dir,
                      plots=not no_plots, command=shlex.join(["spectrag", *sys.argv[1:]]),
                      log=lambda m: click.echo(m, err=True))
    click.echo(json.dumps(result, indent=2, ensure_ascii=False) if as_json else markdown(result))


if __name__ == "__main__":  # pragma: no cover
    main()
