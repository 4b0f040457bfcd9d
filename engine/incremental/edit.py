"""One edit of an index: some old chunks kept (their documents' order unchanged), new chunks
appended, and every stored structure brought to the new corpus (:func:`apply_edit`), written
as a new generation of the index and made current last (:mod:`spectrag.generations`; files
an edit leaves unchanged are hard-linked from the old generation).

Chunk ids are positions: the kept chunks are renumbered ``0 .. n_keep - 1`` in their old order
and the new ones follow, which is the order a full build of "the remaining documents, then the
new ones" gives. ``exact`` (``spectrag compact``, or an edit past the compaction threshold)
recomputes the graph, the spectrum and the knowledge graph from scratch, as a build does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from spectrag.build import BuildReport, _versions, embedding_text
from spectrag.errors import CorpusError, SpectragError
from spectrag.graph.build import build_graph, file_questions, save_graph
from spectrag.graph.stored import GROUPS, load_stored
from spectrag.graph.update import GraphEdit, update_graph
from spectrag.incremental.chunk_table import write_edited_chunks
from spectrag.incremental.history import now, record
from spectrag.incremental.vectors import LazyEmbedder, new_vectors
from spectrag.index.dense import DenseIndex, load_faiss
from spectrag.index.lexical import BM25Index
from spectrag.kg.build import build_kg
from spectrag.kg.store import save_kg
from spectrag.generations import collect, link_file, new_generation
from spectrag.store import (
    CHUNKS,
    MANIFEST,
    EMBEDDINGS,
    Index,
    current_generation,
    load_index,
    sha256_file,
    write_manifest,
)
from spectrag.types import Chunk

_package_versions = lru_cache(maxsize=1)(_versions)  # importlib.metadata lookups: 0.1 s each time

#: an edit that brings the chunks changed since the last full build (added + removed) above this
#: share of the index recomputes the graph from scratch, as ``spectrag compact`` does
COMPACT_ABOVE = 0.25


@dataclass
class EditReport(BuildReport):
    """What an edit did: ``documents``, ``chunks``, ``tokens`` added (as a build counts them),
    documents and chunks removed, replaced and unchanged documents (an update), vectors taken
    from removed chunks with the same text, texts the model embedded, the spectrum solve, and
    whether the edit recomputed the graph from scratch (``compacted``)."""

    operation: str = ""
    documents_removed: int = 0
    chunks_removed: int = 0
    documents_replaced: int = 0
    documents_unchanged: int = 0
    vectors_reused: int = 0
    embedded: int = 0
    spectrum: dict[str, Any] = field(default_factory=dict)
    compacted: bool = False
    plan: dict[str, list[str]] | None = None  # a dry run (or an update with nothing to change): ids it would add, replace, remove


def refuse_unsupported(old: Index, removes: bool) -> None:
    """What an edit cannot keep up to date: the LLM stage's outputs (nothing here runs it), and
    utility questions, keyed by chunk ids that removals shift."""
    from spectrag.build import uses_llm

    if uses_llm(old.config):
        raise SpectragError(f"{old.path} was built with the LLM stage (utility questions or kg.source = 'llm'); "
                            "adds, deletes, updates and compaction do not run it: rebuild the index")
    if removes and ((old.graph or {}).get("questions") is not None or old.config.graph.questions_file):
        raise SpectragError(f"{old.path} has utility questions (graph.questions_file), keyed by chunk ids that removing "
                            "documents would shift: rebuild the index with the new corpus and questions file")


def _kg_encoder(old: Index, embedder: LazyEmbedder | None) -> Callable[..., np.ndarray]:
    """An encoder that takes entity-name and relation-text vectors from the old knowledge graph
    where the text is the same, and embeds only the others."""
    known: dict[str, np.ndarray] = {}
    if old.kg is not None:
        known.update(zip(old.kg.names, np.asarray(old.kg.entity_emb)))
        known.update(zip(old.kg.texts, np.asarray(old.kg.text_emb)))

    def encode(texts: list[str], show_progress: bool = False) -> np.ndarray:
        dim = old.manifest["embedding"]["dim"]
        out = np.zeros((len(texts), dim), dtype=np.float32)
        todo = [i for i, t in enumerate(texts) if t not in known]
        for i, t in enumerate(texts):
            if t in known:
                out[i] = known[t]
        if todo:
            out[todo] = embedder.encode([texts[i] for i in todo], show_progress=show_progress)
        return out

    return encode


def apply_edit(old: Index, manifest_bytes: bytes, *, keep: np.ndarray, new_chunks: list[Chunk], report: EditReport,
               stage: Callable[[str], None], supplied: np.ndarray | None = None, progress: bool = False,
               compact_above: float | None = COMPACT_ABOVE, exact: bool = False,
               entry: dict[str, Any] | None = None) -> Index:
    """The index ``old`` with the chunks where ``keep [n_old]`` is false removed and
    ``new_chunks`` appended, written as a new generation of ``old.path``; returns it loaded. ``supplied``: the new
    chunks' vectors (an index built from supplied embeddings); ``manifest_bytes``: the old
    manifest as read (the write is refused if another writer changed it meanwhile)."""
    config, keep = old.config, np.asarray(keep, dtype=bool)
    removed = np.flatnonzero(~keep)
    refuse_unsupported(old, removes=bool(removed.size))
    chunks = [c for c, k in zip(old.chunks, keep.tolist()) if k] + list(new_chunks)
    if not chunks:
        raise CorpusError(f"{old.path}: the edit would leave the index without chunks (remove the folder instead)")
    state = old.manifest.get("incremental") or {}
    changed = state.get("changed_chunks", 0) + removed.size + len(new_chunks)
    if not exact and compact_above is not None and changed > compact_above * len(chunks):
        exact = report.compacted = True
    remap = np.where(keep, np.cumsum(keep) - 1, -1)
    new_texts = [embedding_text(c, config.embed) for c in new_chunks]
    model = old.manifest["embedding"].get("fingerprint") != "supplied"
    embedder = LazyEmbedder(old) if model else None
    try:
        reusable = {embedding_text(old.chunks[i], config.embed): int(i) for i in removed.tolist()}
        fresh, report.vectors_reused = new_vectors(old, new_texts, supplied, reusable, embedder, progress=progress)
        vectors = np.ascontiguousarray(np.concatenate([np.asarray(old.embeddings)[keep], fresh]), dtype=np.float32)
        stage("embed")
        dense = load_faiss().IndexFlatIP(vectors.shape[1])
        dense.add(vectors)  # what a build's IndexFlatIP of these vectors holds
        stage("dense")
        if old.bm25.tokens is not None:  # only the new chunks are tokenized
            bm25 = BM25Index.update(old.bm25, keep, new_texts, config.bm25)
        else:  # an index written before token ids were stored
            bm25 = BM25Index.build([embedding_text(c, config.embed) for c in chunks], config.bm25)
        stage("bm25")
        graph = questions = None
        encode = embedder.encode if embedder is not None else None
        if old.manifest.get("graph"):
            questions = file_questions(chunks, config.graph, encode)  # adds only (removals were refused)
            if exact:
                graph = build_graph(chunks, vectors, config.graph, encode=encode, questions=questions)
            else:
                files = old.manifest["files"]
                groups = [g for g, names in GROUPS.items() if all(f"graph/{f}" in files for f in names)]
                edit = GraphEdit(remap, _documents(old.chunks[i] for i in removed.tolist()), _documents(new_chunks))
                graph = update_graph(old.graph, load_stored(old.folder / "graph", len(old), groups), chunks, edit,
                                     vectors, dense, bm25, config.graph, encode=encode, questions=questions)
            report.spectrum = {k: graph[2]["spectrum"].get(k) for k in
                               ("method", "n_iter", "n_matvec", "converged", "max_residual", "warm_start")}
            stage("graph")
        kg = None
        if old.manifest.get("kg"):  # entity merging is global: rebuilt, known vectors reused
            kg = build_kg(chunks, config.kg, encode=_kg_encoder(old, embedder), progress=progress)
            stage("kg")
    finally:
        if embedder is not None:
            report.embedded, report.cache_hits = embedder.texts, embedder.cache_hits
            embedder.close()

    manifest = _edited_manifest(old, report, chunks, graph, kg, entry={
        "op": report.operation, "date": now(), **(entry or {}), "documents_added": report.documents,
        "chunks_added": len(new_chunks), "documents_removed": report.documents_removed,
        "chunks_removed": int(removed.size), "documents_replaced": report.documents_replaced,
        "documents_unchanged": report.documents_unchanged, "compacted": report.compacted,
        "seconds": round(sum(report.seconds.values()), 3)}, exact=exact)
    root, base = old.path, old.folder
    same_rows = bool(keep.all()) and not new_chunks  # a compaction: only the graph and kg change
    with new_generation(root) as tmp:  # made current as the very last step (CURRENT replaced)
        known: dict[str, dict[str, Any]] = {}
        if same_rows and _link_unchanged(base, tmp, old.manifest["files"], known):
            pass  # embeddings, dense index, BM25 and chunk table: the old generation's files, linked
        else:
            np.save(tmp / EMBEDDINGS, vectors)
            load_faiss().write_index(dense, str(tmp / DenseIndex.FILE))
            bm25.save(tmp)
            write_edited_chunks(tmp / CHUNKS, base / CHUNKS, keep, list(new_chunks))
        if graph is not None:
            fused, spectrum, facts = graph
            manifest["graph"] = {**facts, "order": save_graph(tmp, fused, spectrum, config.graph, questions)}
        if kg is not None:
            save_kg(tmp, kg[0])
        _share_equal_files(base, tmp, old.manifest["files"], known)
        write_manifest(tmp, manifest, known)
        if current_generation(root) != old.generation:
            raise SpectragError(f"{root} changed while it was being edited; nothing was written")
        stage("write")
    old.release()
    del old
    collect(root)  # the generation just replaced, unless a reader holds it (then the next edit's)
    index = load_index(root, verify=False, chunks=chunks)  # the generation just written; its table not parsed again
    index.report = report
    return index


# the files an edit that keeps every row in place leaves as they were
_ROW_FILES = (CHUNKS, EMBEDDINGS, DenseIndex.FILE)


def _link_unchanged(base: Path, tmp: Path, files: dict[str, dict[str, Any]], known: dict[str, dict[str, Any]]) -> bool:
    """Hard-link the row files (chunk table, embeddings, dense index, BM25) of generation
    ``base`` into ``tmp``; their manifest entries go to ``known``. False (and nothing linked)
    where the file system cannot link."""
    rels = [r for r in files if r in _ROW_FILES or r.startswith(f"{BM25Index.FOLDER}/")]
    done = []
    for rel in rels:
        if not link_file(base / rel, tmp / rel):
            for r in done:
                (tmp / r).unlink()
            return False
        done.append(rel)
    known.update({rel: files[rel] for rel in rels})
    return True


def _share_equal_files(base: Path, tmp: Path, files: dict[str, dict[str, Any]], known: dict[str, dict[str, Any]]) -> None:
    """Replace each written file of ``tmp`` whose bytes equal the same file of generation
    ``base`` (size, then SHA-256, which the manifest needs anyway) by a hard link to it: the
    generations share it on disk. Entries hashed here go to ``known``."""
    for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
        rel = path.relative_to(tmp).as_posix()
        if rel in known:
            continue
        size = path.stat().st_size
        entry = {"bytes": size, "sha256": sha256_file(path)}
        known[rel] = entry
        if files.get(rel) == entry and (base / rel).is_file():
            spare = path.with_name(path.name + ".link")
            if link_file(base / rel, spare):
                spare.replace(path)


def _documents(chunks) -> list[tuple[str, str, str]]:
    """The documents of ``chunks`` as ``(doc_id, title, url)``, in order, once each."""
    return list(dict.fromkeys((c.doc_id, c.title, c.url) for c in chunks))


def _edited_manifest(old: Index, report: EditReport, chunks: list[Chunk], graph, kg, *, entry: dict[str, Any],
                     exact: bool) -> dict[str, Any]:
    """The new version's manifest: the old one with the counts, the graph and knowledge-graph
    facts, the versions, and ``entry`` recorded in the history (:func:`record`)."""
    manifest = {k: v for k, v in old.manifest.items() if k not in ("format", "format_version", "files")}
    counts = dict(manifest["counts"])
    counts.update(
        documents=len({c.doc_id for c in chunks}), chunks=len(chunks), tokens=sum(c.n_tokens for c in chunks),
        skipped_empty_documents=counts.get("skipped_empty_documents", 0) + report.skipped_empty,
        skipped_invalid=counts.get("skipped_invalid", 0) + len(report.skipped_invalid),
        embedding_cache_hits=report.cache_hits,
    )
    manifest.update(counts=counts, modified=now(), versions=dict(_package_versions()))
    if graph is not None:
        manifest["graph"] = graph[2]
    if kg is not None:
        manifest["kg"] = kg[1]
    entry["spectrum"] = (manifest.get("graph") or {}).get("spectrum", {}).get("method")
    return record(old.manifest, manifest, entry, full=exact)


def open_for_edit(index_dir: Path) -> tuple[Index, bytes]:
    """The index at ``index_dir`` (its current generation, held), every checksum verified, and
    its manifest's bytes."""
    old = load_index(index_dir)  # format version and every checksum: a corrupt index is refused
    return old, (old.folder / MANIFEST).read_bytes()
