"""Adding documents to an existing index (issue 7): the new version equals a full build of the
old corpus followed by the new documents. Only the new chunks are chunked, embedded, tokenized
and searched for neighbours; what depends on the whole corpus (BM25 scores, entity and citation
signals, fusion, spectrum) is recomputed, and those stages dominate the cost
(``bench/results/incremental_cpu.md``).

New chunks get ids ``n_old .. n_old + m - 1``, in the order the added corpus gives them: the
order a full build of "old documents, then new documents" gives. (A full build of one folder
orders its files by path: unless the new files sort after the old ones, it is the same index
modulo that permutation of chunk ids, except where a top-k cut breaks a tie by chunk id.) A
document id already in the index is an error: ids must stay unique for adjacency, section and
citation edges, and a corpus whose ids are list positions (musique, 2wiki, multihop-rag, a JSON
list without ``id``) collides with itself.

Stage by stage, what is reused and what is recomputed:

==========  ==============================  ==================================================
stage       reused                          recomputed
==========  ==============================  ==================================================
chunks      the old chunk table             the new documents, chunked
embed       the old embeddings              the new chunks only
dense       the old FAISS IndexFlatIP       the new vectors appended (``add``)
bm25        the old chunks' token ids       the new chunks tokenized; scores over all from
            (``bm25/tokens.*``)             the token ids (IDF, mean chunk length are global);
                                            an index without them is rebuilt in full
semantic    each old row's k nearest        new rows against all; each old row's list merged
            (from the stored signal)        with its k nearest among the new rows (exact)
adjacency,  the old edges                   the new documents' edges (they stay inside a
section                                     document)
entity      --                              all: IDF weights and the df cap depend on n
citation    --                              all: old chunks may mention a new title, and a new
                                            longer title hides a shorter one inside it
utility     --                              all (only with ``graph.questions_file``; an index whose
                                            questions or KG came from the LLM is refused)
fuse        --                              all: threshold, degree cap, symmetrization, O(nnz)
spectrum    the old eigenvectors            Lanczos started from them; k-means; RCM order
kg          --                              all, when the index has one (entity merging is
                                            global; names already embedded hit the cache)
==========  ==============================  ==================================================

The kNN update is exact. When the configuration would give the union an approximate (IVF)
kNN (``graph.knn = "ivf"``, or ``"auto"`` above ``graph.knn_exact_max_n`` chunks), a rebuild
differs from the add by that approximation; the manifest's ``graph.knn`` says which was used.

Why an old row's stored edges give its neighbour list: the stored semantic signal is the
symmetrized kNN graph, so row i holds i's own k nearest plus the rows that have i among theirs,
which are no nearer; its k strongest entries are i's list (up to exact ties).

The new version is written into a temporary folder beside the index and swapped in
(:func:`spectrag.store.atomic_directory`): an interrupted add leaves the old index as it was,
and a kill at any point leaves an index that loads at the path. Adds hold the index's lock
(:func:`spectrag.store.index_lock`), so concurrent adds run one after the other, each on the
version the previous one wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from spectrag.build import (
    BuildReport,
    _versions,
    check_supplied_unit_rows,
    embedding_text,
    read_corpus,
    stage_recorder,
    uses_llm,
)
from spectrag.config import GraphConfig
from spectrag.errors import CorpusError, SpectragError
from spectrag.graph import signals as sig
from spectrag.graph.build import _doc_codes, build_graph, file_questions, save_graph, spectrum_of
from spectrag.graph.fuse import signal_matrix
from spectrag.graph.signals import coo, knn_index, knn_rows, top_k_per_row
from spectrag.index.chunk import chunk_corpus
from spectrag.index.dense import DenseIndex, load_faiss
from spectrag.index.embed import Embedder
from spectrag.index.lexical import BM25Index
from spectrag.kg.build import build_kg
from spectrag.kg.store import save_kg
from spectrag.store import (
    CHUNKS,
    EMBEDDINGS,
    MANIFEST,
    Index,
    atomic_directory,
    clean_stale,
    index_lock,
    load_index,
    write_chunks,
    write_manifest,
)
from spectrag.types import Chunk, Document
from spectrag.util.io import printable_path

# formats whose document ids are list positions, so that any second file collides
_POSITION_IDS = "musique, 2wiki and multihop-rag files and JSON lists without 'id' number documents from 0"


@dataclass
class AddReport(BuildReport):
    """What an add did: the added documents, chunks and tokens, seconds per stage, and the
    warm-started Lanczos run (``cycles``, ``matvecs``)."""

    lanczos: dict[str, Any] = field(default_factory=dict)


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
) -> Index:
    """Add the documents of the corpus at ``source`` to the index at ``index_dir``; returns the
    new version, loaded. ``skip_invalid`` and ``follow_symlinks`` as in
    :func:`spectrag.build.build_index`.

    ``embeddings`` (float32 ``[m, d]``, one row per new chunk) is required exactly when the index
    was built from supplied embeddings. Raises :class:`SpectragError` subclasses for a missing
    or corrupt index, a document id already in it, or an empty addition.
    """
    index_dir, source = Path(index_dir), Path(source)
    with index_lock(index_dir, what="added to"):  # concurrent adds run one after the other
        clean_stale(index_dir)  # an interrupted swap put right, dead adds' temporary folders removed
        return _add(index_dir, source, fmt=fmt, skip_empty=skip_empty, progress=progress, embeddings=embeddings,
                    on_stage=on_stage, skip_invalid=skip_invalid, follow_symlinks=follow_symlinks)


def _add(index_dir: Path, source: Path, *, fmt: str, skip_empty: bool, progress: bool, embeddings: np.ndarray | None,
         on_stage: Callable[[str], None] | None, skip_invalid: bool, follow_symlinks: bool) -> Index:
    report = AddReport()
    stage = stage_recorder(report, on_stage)

    old = load_index(index_dir)  # format version and every checksum: a corrupt index is refused
    manifest_bytes = (index_dir / MANIFEST).read_bytes()
    config, n_old = old.config, len(old)
    if uses_llm(config):
        raise SpectragError(f"{index_dir} was built with the LLM stage (utility questions or kg.source = 'llm'); "
                            "`spectrag add` does not run it yet: rebuild the index with the new documents")
    stage("verify")

    fmt, docs = read_corpus(source, fmt, skip_empty=skip_empty, skip_invalid=skip_invalid,
                            follow_symlinks=follow_symlinks, report=report)
    _check_new_ids(docs, old.chunks, source, index_dir)
    report.documents = len(docs)
    stage("load")

    new_chunks = chunk_corpus(docs, config.chunk, progress=progress)  # the build's chunker (process pool when large)
    report.chunks, report.tokens = len(new_chunks), sum(c.n_tokens for c in new_chunks)
    chunks = old.chunks + new_chunks
    new_texts = [embedding_text(c, config.embed.include_title) for c in new_chunks]
    stage("chunk")

    embedder, new_vectors = _embed(old, new_texts, embeddings, report, progress)
    encode = embedder.encode if embedder is not None else None
    try:
        vectors = np.concatenate([np.asarray(old.embeddings, dtype=np.float32), new_vectors])
        stage("embed")

        dense = load_faiss().read_index(str(index_dir / DenseIndex.FILE))
        dense.add(new_vectors)  # IndexFlatIP: exactly the index a full build makes of all vectors
        stage("dense")
        if old.bm25.tokens is not None:  # the old chunks' token ids are stored: tokenize only the new
            bm25 = BM25Index.extend(old.bm25, new_texts, config.bm25)
        else:  # an index written before token ids were stored
            bm25 = BM25Index.build([embedding_text(c, config.embed.include_title) for c in chunks], config.bm25)
        stage("bm25")

        graph = questions = None
        if old.manifest.get("graph"):
            questions = file_questions(chunks, config.graph, encode)  # stored again for utility seeding
            graph = update_graph(old.graph, chunks, vectors, n_old, config.graph, dense, encode=encode,
                                 questions=questions)
            report.lanczos = {k: graph[2]["spectrum"].get(k) for k in ("method", "n_iter", "n_matvec", "converged")}
            stage("graph")
        kg = None
        if old.manifest.get("kg"):  # no incremental path yet (entity merging is global): rebuilt in full

            kg = build_kg(chunks, config.kg, encode=encode, progress=progress)
            stage("kg")
    finally:
        if embedder is not None:
            embedder.close()

    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = {k: v for k, v in old.manifest.items() if k not in ("format", "format_version", "files")}
    counts = dict(manifest["counts"])
    counts.update(
        documents=counts["documents"] + report.documents,
        chunks=len(chunks),
        tokens=counts["tokens"] + report.tokens,
        skipped_empty_documents=counts.get("skipped_empty_documents", 0) + report.skipped_empty,
        skipped_invalid=counts.get("skipped_invalid", 0) + len(report.skipped_invalid),
        embedding_cache_hits=report.cache_hits,
    )
    addition = {"path": printable_path(source), "format": fmt, "created": created, "documents": report.documents,
                "skipped_invalid": [list(x) for x in report.skipped_invalid[:1000]],
                "chunks": report.chunks, "first_chunk": n_old, "seconds": report.seconds,
                "cpu_seconds": report.cpu_seconds, "peak_rss_mib": report.peak_rss_mib}
    manifest.update(counts=counts, additions=[*manifest.get("additions", []), addition], versions=_versions())
    with atomic_directory(index_dir, overwrite=True) as tmp:
        np.save(tmp / EMBEDDINGS, vectors)
        load_faiss().write_index(dense, str(tmp / DenseIndex.FILE))
        bm25.save(tmp)
        write_chunks(tmp / CHUNKS, chunks)
        if graph is not None:

            fused, spectrum, facts = graph
            manifest["graph"] = {**facts, "order": save_graph(tmp, fused, spectrum, config.graph, questions)}
        if kg is not None:

            save_kg(tmp, kg[0])
            manifest["kg"] = kg[1]
        write_manifest(tmp, manifest)
        if (index_dir / MANIFEST).read_bytes() != manifest_bytes:
            raise SpectragError(f"{index_dir} changed while documents were being added; nothing was written")
        stage("write")
    del old
    index = load_index(index_dir, verify=False)
    index.report = report
    return index


def _check_new_ids(docs: list[Document], old_chunks: list[Chunk], source: Path, index_dir: Path) -> None:
    existing = {c.doc_id for c in old_chunks}
    clash = [d.doc_id for d in docs if d.doc_id in existing]
    if clash:
        raise CorpusError(
            f"{source}: document id {clash[0]!r} is already in the index {index_dir} ({len(clash)} of "
            f"{len(docs)} ids clash); ids must be unique ({_POSITION_IDS}: give the records ids in a JSONL file)"
        )


def _embed(old: Index, texts: list[str], supplied: np.ndarray | None, report: AddReport, progress: bool):
    """The new chunks' vectors ``[m, d]`` (and the embedder, kept open for the utility signal)."""
    info = old.manifest["embedding"]
    if info.get("fingerprint") == "supplied":
        if supplied is None:
            raise SpectragError(
                f"{old.path} was built from embeddings supplied by the caller: pass embeddings "
                f"(float32 [{len(texts)}, {info['dim']}]) for the new chunks"
            )
        vectors = np.ascontiguousarray(supplied, dtype=np.float32)
        if vectors.shape != (len(texts), info["dim"]):
            raise CorpusError(
                f"embeddings has shape {vectors.shape}, expected [{len(texts)} new chunks, {info['dim']}]"
            )
        check_supplied_unit_rows(vectors)
        return None, vectors
    if supplied is not None:
        raise SpectragError(
            f"embeddings: {old.path} embeds with the model {info['model']!r}; supplied vectors would not "
            "match its queries (pass embeddings only to an index built from supplied embeddings)"
        )

    embedder = Embedder(old.config.embed)
    if embedder.fingerprint != info.get("fingerprint"):
        embedder.close()
        raise SpectragError(
            f"{old.path} was embedded by a model with fingerprint {info.get('fingerprint')}, but "
            f"{old.config.embed.model!r} now has {embedder.fingerprint}; rebuild the index"
        )
    try:
        vectors = embedder.encode(texts, show_progress=progress)
    except BaseException:
        embedder.close()
        raise
    report.cache_hits = embedder.last_cache_hits
    return embedder, vectors


# --------------------------------------------------------------------------------------- graph


def update_graph(
    old_graph: dict[str, Any],
    chunks: list[Chunk],
    vectors: np.ndarray,
    n_old: int,
    config: GraphConfig,
    dense,
    *,
    encode: Callable[[list[str]], np.ndarray] | None = None,
    questions=None,
):
    """The chunk graph of ``chunks`` whose first ``n_old`` have the graph ``old_graph``
    (:func:`spectrag.graph.build.load_graph`), as :func:`spectrag.graph.build.build_graph` returns
    it. ``dense`` is the FAISS index of all ``vectors [n, d]``; ``questions`` the embedded
    utility questions of all chunks, if any."""

    new = chunks[n_old:]
    old = lambda name, size: stored_signal(old_graph, name, n_old, size)  # noqa: E731
    new_sections = lambda: sig.section_edges(  # noqa: E731
        [c.doc_id for c in new], [c.section for c in new], band=config.section_band
    )
    # entity, citation and utility change globally and are rebuilt; these three are updated
    makers = {
        "semantic": lambda: semantic_update(old("semantic", n_old), vectors, n_old, config.k_semantic,
                                            min_cos=config.min_cos, index=dense),
        # old chunks' edges and the new chunks' own: the two diagonal blocks
        "adjacency": lambda: sp.block_diag((old("adjacency", n_old), sig.adjacency_edges(_doc_codes(new))), format="csr"),
        "section": lambda: sp.block_diag((old("section", n_old), new_sections()), format="csr"),
    }
    previous = np.asarray(old_graph["coordinates"])
    fused, spectrum, facts = build_graph(chunks, vectors, config, encode=encode, makers=makers,
                                         spectrum_fn=lambda w: warm_spectrum(w, previous, config), questions=questions)
    facts["knn"] = {"method": "exact", "incremental": True, "a rebuild would use": facts["knn"]["method"]}
    return fused, spectrum, facts


def stored_signal(old_graph: dict[str, Any], name: str, n_old: int, n: int) -> sp.csr_matrix:
    """The old index's symmetric signal ``name`` as CSR ``[n, n]`` (zero past ``n_old``)."""
    if name not in old_graph["signals"]:
        raise SpectragError(f"the index has no stored {name!r} signal (graph/signals/{name}.*.npy)")
    rows, cols, _ = old_graph["signals"][name]
    if len(rows) and max(rows.max(), cols.max()) >= n_old:
        raise SpectragError(f"graph/signals/{name}: edges reach chunk {max(rows.max(), cols.max())} of {n_old}")
    return signal_matrix(old_graph["signals"][name], n)


def semantic_update(
    old_sym: sp.csr_matrix,
    vectors: np.ndarray,
    n_old: int,
    k: int,
    *,
    min_cos: float = 0.0,
    index=None,
    tile: int = 16_384,
) -> sp.csr_matrix:
    """The exact cosine kNN graph of ``vectors [n, d]``, given that of its first ``n_old`` rows.

    ``old_sym [n_old, n_old]`` is the stored, symmetrized semantic signal; ``index`` a FAISS
    IndexFlatIP of all ``vectors`` (built here when None). New rows are searched against all
    rows, as :func:`spectrag.graph.signals.semantic_edges` does; each old row keeps the ``k``
    strongest of its old list and its ``k`` nearest new rows. Cost ``O((n + n_old) m d)`` for
    ``m = n - n_old`` new rows, against ``O(n^2 d)`` for a rebuild. Shapes: -> ``[n, n]``.
    """

    n = vectors.shape[0]
    if index is None:
        index = knn_index(vectors, "exact", tile=tile)
    old = top_k_per_row(old_sym, k).tocoo()  # each old row's own list
    rows, cols, weights = [old.row.astype(np.int64)], [old.col.astype(np.int64)], [old.data]
    r, c, w = knn_rows(index, vectors[n_old:], min(k + 1, n), first=n_old, min_cos=min_cos, tile=tile, base=vectors)
    rows += r
    cols += c
    weights += w
    if n_old:
        new_index = knn_index(vectors[n_old:], "exact", tile=tile)
        r, c, w = knn_rows(new_index, vectors[:n_old], min(k, n - n_old), offset=n_old, min_cos=min_cos, tile=tile,
                           base=vectors[n_old:])
        rows += r
        cols += c
        weights += w
    return top_k_per_row(coo(np.concatenate(rows), np.concatenate(cols), np.concatenate(weights), n), k)


def warm_start(weights: sp.csr_matrix, previous: np.ndarray) -> np.ndarray:
    """The previous coordinates ``[n_old, m]`` extended to all ``n`` nodes: a new node gets the
    weighted mean of its old neighbours' rows (zero without any). Shapes: -> ``[n, m]``."""
    n_old = previous.shape[0]
    block = weights[n_old:, :n_old]  # (m_new, n_old)
    degree = np.asarray(block.sum(axis=1)).ravel()
    new = (block @ previous.astype(np.float64)) / np.where(degree > 0, degree, 1.0)[:, None]
    return np.vstack([previous.astype(np.float64), new])


def warm_spectrum(weights: sp.csr_matrix, previous: np.ndarray, config: GraphConfig):
    """:func:`spectrag.graph.spectrum.spectral_coordinates` of ``weights`` with the settings
    ``build_graph`` uses, Lanczos started from the previous coordinates ``[n_old, m]``
    (:func:`warm_start`) instead of a random vector: the same eigenpairs to ``tol``."""

    v0 = warm_start(weights, previous) if previous.shape[1] else None
    spectrum = spectrum_of(weights, config, v0=v0)
    spectrum.report["warm_start"] = v0 is not None
    return spectrum
