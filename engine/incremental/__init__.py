"""Living indexes: add, delete and update documents of a built index, and compact it
(``spectrag add | delete | update | compact``).

* :func:`add_documents` appends a corpus's documents (an id already in the index is an error);
* :func:`delete_documents` removes documents by id (an id not in the index is an error, and
  nothing is written);
* :func:`update_documents` replaces the documents of a corpus whose ids are in the index and
  whose chunks differ, and adds the others; identical documents are left alone;
* :func:`compact_index` recomputes the graph, the spectrum and the knowledge graph from scratch:
  the index a fresh build of its documents (in its order) gives.

An edit recomputes what the change reaches, not the corpus (:mod:`spectrag.incremental.edit`,
:mod:`spectrag.graph.update`): only new chunks are chunked, tokenized and embedded (a replaced
chunk whose text is unchanged keeps its vector); the dense index, the embeddings and the BM25
statistics are exact (the BM25 files equal a build's); the semantic kNN, adjacency, section and
citation signals are exact; the entity signal is recomputed for the rows the edit touches; the
spectrum is warm-started from the previous coordinates to a stated residual
(:mod:`spectrag.graph.warm`); a knowledge graph is rebuilt (its known vectors reused). Until a
compaction, retrieval may therefore differ slightly from a fresh build (measured:
``bench/results/incremental_cpu.md``); an edit that brings the chunks changed since the last full
build above ``compact_above`` (:data:`~spectrag.incremental.edit.COMPACT_ABOVE`) of the index
compacts as it goes. ``spectrag info`` shows the history and the spectrum's state.

Every edit writes a new generation of the index and makes it current as its last step
(:mod:`spectrag.generations`): an interrupted edit leaves the old index, a kill at any point
leaves the old or the new one, and a reader meanwhile loads one of them whole. Edits and builds of one index hold its
lock (:func:`spectrag.store.index_lock`): concurrent writers run one after the other, each on the
version the previous one wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from spectrag.build import read_corpus, stage_recorder
from spectrag.errors import CorpusError
from spectrag.incremental.edit import COMPACT_ABOVE, EditReport, apply_edit, open_for_edit, refuse_unsupported
from spectrag.incremental.ids import id_prefix, map_ids, refuse_foreign_update
from spectrag.index.chunk import chunk_corpus
from spectrag.store import Index, clean_stale, index_lock
from spectrag.types import Chunk
from spectrag.util.console import showing
from spectrag.util.io import printable_path

__all__ = ["COMPACT_ABOVE", "AddReport", "EditReport", "add_documents", "compact_index", "delete_documents",
           "update_documents"]

AddReport = EditReport  # the name an add's report had

# formats whose document ids are list positions, so that any second file collides
_POSITION_IDS = "musique, 2wiki and multihop-rag files and JSON lists without 'id' number documents from 0"


def _locked(index_dir: Path, what: str, run: Callable[[], Index], progress: bool) -> Index:
    with index_lock(index_dir, what=what), showing(progress):  # concurrent writers run one after the other
        clean_stale(index_dir)  # an interrupted swap put right, dead writers' temporary folders removed
        return run()


def _open(index_dir: Path, operation: str, on_stage: Callable[[str], None] | None):
    """An edit's report, its stage recorder, and the old index (every checksum verified) with its
    manifest's bytes; the ``verify`` stage recorded."""
    report = EditReport(operation=operation)
    stage = stage_recorder(report, on_stage)
    old, manifest_bytes = open_for_edit(index_dir)
    stage("verify")
    return report, stage, old, manifest_bytes


def add_documents(
    index_dir: str | Path,
    source: str | Path,
    *,
    fmt: str = "auto",
    skip_empty: bool = False,
    progress: bool = False,
    embeddings: np.ndarray | None = None,
    on_stage: Callable[[str], None] | None = None,
    skip_invalid: bool = False,
    follow_symlinks: bool = False,
    compact_above: float | None = COMPACT_ABOVE,
    dry_run: bool = False,
) -> Index:
    """Add the documents of the corpus at ``source`` to the index at ``index_dir``; returns the
    new version, loaded (``dry_run``: the old one, its report's ``plan`` listing what would be
    added, and nothing written). A folder under the index's source root gets ids relative to
    that root (:mod:`spectrag.incremental.ids`). ``embeddings`` (float32 ``[m, d]``, one row per new chunk) is required
    exactly when the index was built from supplied embeddings; ``skip_invalid`` and
    ``follow_symlinks`` as in :func:`spectrag.build.build_index`; ``compact_above``: see the
    module docstring (None: never compact here). Raises :class:`SpectragError` subclasses for a
    missing or corrupt index, a document id already in it, or an empty addition."""
    index_dir, source = Path(index_dir), Path(source)

    def run() -> Index:
        report, stage, old, manifest_bytes = _open(index_dir, "add", on_stage)
        fmt_, docs = read_corpus(source, fmt, skip_empty=skip_empty, skip_invalid=skip_invalid,
                                 follow_symlinks=follow_symlinks, report=report)
        docs = map_ids(docs, id_prefix(old.manifest, source, fmt_)[0])
        existing = {c.doc_id for c in old.chunks}
        clash = [d.doc_id for d in docs if d.doc_id in existing]
        if clash:
            raise CorpusError(
                f"{source}: document id {clash[0]!r} is already in the index {index_dir} ({len(clash)} of "
                f"{len(docs)} ids clash); ids must be unique ({_POSITION_IDS}: give the records ids in a JSONL "
                "file), or use `spectrag update` to replace documents")
        report.documents = len(docs)
        stage("load")
        new = chunk_corpus(docs, old.config.chunk, progress=progress)
        report.chunks, report.tokens = len(new), sum(c.n_tokens for c in new)
        stage("chunk")
        if dry_run:
            return _planned(old, report, added=[d.doc_id for d in docs])
        return apply_edit(old, manifest_bytes, keep=np.ones(len(old), dtype=bool), new_chunks=new, report=report,
                          stage=stage, supplied=embeddings, progress=progress, compact_above=compact_above,
                          entry={"source": printable_path(source), "format": fmt_})

    return _locked(index_dir, "added to", run, progress)


def delete_documents(
    index_dir: str | Path,
    doc_ids: Iterable[str],
    *,
    progress: bool = False,
    on_stage: Callable[[str], None] | None = None,
    compact_above: float | None = COMPACT_ABOVE,
    dry_run: bool = False,
) -> Index:
    """Remove the documents ``doc_ids`` (every chunk of each) from the index at ``index_dir``;
    returns the new version, loaded (``dry_run``: the old one with the report's ``plan``). An id
    the index does not hold is a :class:`CorpusError`
    naming it, and nothing is written; so is deleting every document."""
    index_dir = Path(index_dir)
    wanted = list(dict.fromkeys(str(d) for d in doc_ids))
    if not wanted:
        raise CorpusError("no document id to delete was given")

    def run() -> Index:
        report, stage, old, manifest_bytes = _open(index_dir, "delete", on_stage)
        present = {c.doc_id for c in old.chunks}
        unknown = [d for d in wanted if d not in present]
        if unknown:
            shown = ", ".join(repr(d[:80]) for d in unknown[:5])
            raise CorpusError(f"{index_dir}: {len(unknown)} of {len(wanted)} document id(s) to delete are not in the "
                              f"index ({shown}{', ...' if len(unknown) > 5 else ''}); nothing was deleted")
        gone = set(wanted)
        keep = np.fromiter((c.doc_id not in gone for c in old.chunks), dtype=bool, count=len(old))
        report.documents_removed, report.chunks_removed = len(gone), int((~keep).sum())
        if dry_run:
            return _planned(old, report, removed=wanted)
        return apply_edit(old, manifest_bytes, keep=keep, new_chunks=[], report=report, stage=stage,
                          progress=progress, compact_above=compact_above)

    return _locked(index_dir, "edited", run, progress)


def _planned(old: Index, report: EditReport, *, added: list[str] = (), replaced: list[str] = (),
             removed: list[str] = ()) -> Index:
    """The unedited index with ``report`` (its ``plan``: the document ids an edit would add,
    replace and remove); nothing is written."""
    report.plan = {"added": list(added), "replaced": list(replaced), "removed": list(removed)}
    old.report = report
    return old


def _stored_by_doc(chunks: list[Chunk]) -> dict[str, list[Chunk]]:
    out: dict[str, list[Chunk]] = {}
    for c in chunks:
        out.setdefault(c.doc_id, []).append(c)
    return out


def update_documents(
    index_dir: str | Path,
    source: str | Path,
    *,
    fmt: str = "auto",
    skip_empty: bool = False,
    progress: bool = False,
    embeddings: np.ndarray | None = None,
    on_stage: Callable[[str], None] | None = None,
    skip_invalid: bool = False,
    follow_symlinks: bool = False,
    compact_above: float | None = COMPACT_ABOVE,
    dry_run: bool = False,
) -> Index:
    """Bring the index at ``index_dir`` up to date with the corpus at ``source``: a document
    whose id the index holds is replaced when its chunks differ from the stored ones (its new
    chunks go to the end of the chunk order) and left alone when they are the same; a new id is
    added. Documents the corpus lacks are kept (:func:`delete_documents` removes them).
    ``embeddings`` (an index built from supplied embeddings): one row per chunk of the whole
    corpus, in order. With nothing to change, nothing is written (the report counts the
    unchanged documents). A folder under the index's source root gets ids relative to that root;
    one outside it whose ids match none of the index's is refused (:mod:`spectrag.incremental.ids`).
    ``dry_run``: the old index, its report's ``plan`` listing what would be added and replaced,
    and nothing written."""
    index_dir, source = Path(index_dir), Path(source)

    def run() -> Index:
        report, stage, old, manifest_bytes = _open(index_dir, "update", on_stage)
        refuse_unsupported(old, removes=False)  # before the corpus is read (the LLM stage: no edit runs it)
        fmt_, docs = read_corpus(source, fmt, skip_empty=skip_empty, skip_invalid=skip_invalid,
                                 follow_symlinks=follow_symlinks, report=report)
        prefix, root = id_prefix(old.manifest, source, fmt_)
        docs = map_ids(docs, prefix)
        refuse_foreign_update(docs, {c.doc_id for c in old.chunks}, source, root, prefix, index_dir)
        stage("load")
        chunks = chunk_corpus(docs, old.config.chunk, progress=progress)
        stage("chunk")
        stored = _stored_by_doc(old.chunks)
        fresh = _stored_by_doc(chunks)
        changed = [d.doc_id for d in docs if d.doc_id in fresh and stored.get(d.doc_id) != fresh[d.doc_id]]
        replaced = {d for d in changed if d in stored}
        report.documents_replaced = len(replaced)
        report.documents_unchanged = sum(1 for d in docs if d.doc_id in fresh and stored.get(d.doc_id) == fresh[d.doc_id])
        report.documents = len(changed)
        changed_ids = set(changed)
        take = np.fromiter((c.doc_id in changed_ids for c in chunks), dtype=bool, count=len(chunks))
        new = [c for c, t in zip(chunks, take.tolist()) if t]
        report.chunks, report.tokens = len(new), sum(c.n_tokens for c in new)
        supplied = None
        if embeddings is not None:
            if len(embeddings) != len(chunks):
                raise CorpusError(f"embeddings has {len(embeddings)} rows, expected one per chunk of {source} "
                                  f"({len(chunks)})")
            supplied = np.asarray(embeddings)[take]
        if dry_run or not changed:
            return _planned(old, report, added=[d for d in changed if d not in replaced], replaced=sorted(replaced))
        keep = np.fromiter((c.doc_id not in replaced for c in old.chunks), dtype=bool, count=len(old))
        report.documents_removed, report.chunks_removed = len(replaced), int((~keep).sum())
        return apply_edit(old, manifest_bytes, keep=keep, new_chunks=new, report=report, stage=stage, supplied=supplied,
                          progress=progress, compact_above=compact_above, entry={"source": printable_path(source), "format": fmt_})

    return _locked(index_dir, "updated", run, progress)


def compact_index(index_dir: str | Path, *, progress: bool = False,
                  on_stage: Callable[[str], None] | None = None) -> Index:
    """Recompute the graph (every signal, fusion, the spectrum by Lanczos, clusters) and the
    knowledge graph of the index at ``index_dir`` from its chunks and embeddings, as a build
    does. An index built from a folder also gets its chunks back in the order a build reads the
    folder (sorted paths; edits append replaced and added documents at the end): the result is
    the index a fresh build of its documents gives, so rankings agree with one, ties included
    (they are broken by chunk position). Other corpora keep the index's order (a build's order
    of a JSON corpus is its file's, which the index does not know)."""
    index_dir = Path(index_dir)

    def run() -> Index:
        report, stage, old, manifest_bytes = _open(index_dir, "compact", on_stage)
        order = build_order(old)
        if order is None:
            return apply_edit(old, manifest_bytes, keep=np.ones(len(old), dtype=bool), new_chunks=[], report=report,
                              stage=stage, progress=progress, exact=True, entry={"chunks": len(old)})
        supplied = np.asarray(old.embeddings)[order] if old.manifest["embedding"]["fingerprint"] == "supplied" else None
        return apply_edit(old, manifest_bytes, keep=np.zeros(len(old), dtype=bool), new_chunks=[old.chunks[i] for i in order],
                          report=report, stage=stage, supplied=supplied, progress=progress, exact=True,
                          entry={"chunks": len(old), "reordered": True})

    return _locked(index_dir, "compacted", run, progress)


def build_order(index: Index) -> np.ndarray | None:
    """The permutation ``[n]`` that puts the chunks of a folder-built index in a build's order
    (documents by path, compared part by part as the folder reader sorts them; a document's
    chunks in their order), or None when the index is in that order already or cannot be
    reordered (not a folder corpus; utility questions, keyed by chunk ids)."""
    if (index.manifest.get("source") or {}).get("format") != "folder":
        return None
    if (index.graph or {}).get("questions") is not None or index.config.graph.questions_file:
        return None
    keys = [tuple(c.doc_id.split("/")) for c in index.chunks]
    order = np.asarray(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)  # stable: a document's order kept
    return None if np.array_equal(order, np.arange(len(keys))) else order
