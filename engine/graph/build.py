"""Offline steps 4-6: edge signals -> fused chunk graph -> spectral coordinates, persisted under
``graph/`` in the index directory::

    graph/weights.{indptr,indices,data}.npy      fused symmetric W as CSR (chunk-id order)
    graph/relations.{indptr,indices,data}.npy    the relational graph bridging walks (graph/relational.py)
    graph/signals/<name>.{rows,cols,weights}.npy each signal's undirected edges (i < j)
    graph/coordinates.npy  float32 [n, m]         spectral coordinates (eq. 13)
    graph/eigenvalues.npy  float64 [m]
    graph/clusters.npy     int32 [n]              k-means labels of the row-normalized coordinates
    graph/rcm_order.npy    int64 [n]              reverse Cuthill-McKee order of W (for SpMM locality)
    graph/questions.*.npy                         utility-question vectors and owners, when the index
                                                  has questions (graph/questions.py)

Chunk ids already follow document reading order, which keeps adjacency, section and most
entity edges near the diagonal; the RCM order is stored beside it so kernels can relabel the
graph where it pays (its effect on SpMM is measured in ``bench/``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from spectrag.config import GraphConfig
from spectrag.errors import ConfigError, IndexFormatError
from spectrag.extract.entities import entity_incidence, extract_entities
from spectrag.extract.openie import load_openie_entities, openie_entity_keys, openie_extraction
from spectrag.graph import signals as sig
from spectrag.graph.citations import CitationEdges, citation_edges
from spectrag.graph.fuse import FusedGraph, fuse_signals
from spectrag.graph.lists import NeighbourLists, semantic_lists
from spectrag.graph.questions import QuestionSet, embed_questions, load_questions, read_questions_file, save_questions
from spectrag.graph.relational import relational_graph
from spectrag.graph.spectrum import Spectrum, spectral_coordinates
from spectrag.graph.stored import EntityLists, save_stored
from spectrag.types import Chunk
from spectrag.util import usage
from spectrag.util.checks import check_csr, check_floats, check_ints, check_symmetric, load_npy
from spectrag.util.console import bar

FOLDER = "graph"


def _doc_codes(chunks: Sequence[Chunk]) -> np.ndarray:
    codes: dict[str, int] = {}
    return np.fromiter((codes.setdefault(c.doc_id, len(codes)) for c in chunks), dtype=np.int64, count=len(chunks))


def _entities(chunks: Sequence[Chunk], config: GraphConfig, openie_docs: list[dict] | None = None,
              extract=extract_entities, titles: Sequence[str] | None = None) -> tuple[list[list[str]], dict[str, Any]]:
    """Entity keys per chunk: ``graph.entities_file``, else the LLM's OpenIE records (when the
    build made them), else ``extract`` (the built-in extractor, or a distributed build's) with
    the corpus ``titles`` (default: those of ``chunks``; an update extracts some chunks of a
    larger corpus)."""
    texts = [c.text for c in chunks]
    if config.entities_file:
        path = Path(config.entities_file)
        if not path.is_file():
            raise ConfigError(f"graph.entities_file {path} does not exist")
        lists, unmatched = load_openie_entities(path, texts, [c.title for c in chunks])
        return lists, {"source": str(path), "unmatched_records": unmatched}
    if openie_docs is not None:
        ext = openie_extraction(openie_docs, texts, [c.title for c in chunks], source="llm")
        return openie_entity_keys(ext), {"source": "llm OpenIE", "unmatched_records": ext.facts["unmatched_records"]}
    if titles is None:
        titles = sorted({c.title for c in chunks if c.title})
    return extract(texts, list(titles)), {"source": "built-in extractor"}


def file_questions(chunks: Sequence[Chunk], config: GraphConfig,
                   encode: Callable[[list[str]], np.ndarray] | None) -> QuestionSet | None:
    """The questions of ``graph.questions_file``, embedded (None without a file or without a
    utility weight)."""
    if not config.questions_file or config.signal_weights().get("utility", 0) <= 0:
        return None
    if encode is None:
        raise ConfigError("graph.questions_file needs the embedding model to embed the questions")
    return embed_questions(read_questions_file(config.questions_file, len(chunks)), len(chunks), encode)


def graph_device(config: GraphConfig):
    """Where the kNN search and the spectrum run (``graph.device``): a CUDA ``torch.device``, or
    None for the CPU (FAISS's search, the CPU Lanczos: the CPU build unchanged)."""
    import torch

    if config.device == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else None
    if config.device == "cpu":
        return None
    if not torch.cuda.is_available():
        raise ConfigError(f"graph.device is {config.device!r} but no CUDA device is available")
    return torch.device(config.device)


def knn_method(n: int, config: GraphConfig) -> str:
    """The semantic kNN search for ``n`` chunks: ``graph.knn``, with ``auto`` resolved by size."""
    return config.knn if config.knn != "auto" else ("exact" if n <= config.knn_exact_max_n else "ivf")


def build_signals(
    chunks: Sequence[Chunk],
    embeddings: np.ndarray,
    config: GraphConfig,
    *,
    encode: Callable[[list[str]], np.ndarray] | None = None,
    makers: Mapping[str, Callable[[], Any]] | None = None,
    questions: QuestionSet | None = None,
    openie_docs: list[dict] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> tuple[dict[str, sp.csr_matrix], dict[str, Any], dict[str, Any]]:
    """Every enabled edge signal as a directed sparse ``[n, n]`` matrix, build facts, and what
    an index update reads beside them (:mod:`spectrag.graph.stored`: neighbour lists, entity
    keys, directed citations). ``makers``: signals built another way (an index update
    updates the stored ones; a distributed build gathers them from its workers), timed and
    ordered like the others; a maker may return ``(signal, facts)`` or ``(signal, facts,
    stored)``, the facts (when not None) stored as the built-in maker's are (:data:`FACTS`).
    ``questions``: embedded utility questions (default: those of ``graph.questions_file``, if
    any); ``openie_docs``: the LLM's OpenIE records, for the entity signal when
    ``graph.entities_file`` is not set. ``on_step(name)``: called as each signal starts (a
    progress bar's label)."""

    n = len(chunks)
    weights = config.signal_weights()
    makers = makers or {}
    info: dict[str, Any] = {"seconds": {}, "cpu_seconds": {}, "peak_rss_mib": {}}
    out: dict[str, sp.csr_matrix] = {}
    stored: dict[str, Any] = {}

    def timed(name: str, make: Callable[[], Any]) -> None:
        if weights.get(name, 0) <= 0:
            return
        if on_step is not None:
            on_step(name)
        mark = usage.begin()
        made = makers.get(name, make)()
        if isinstance(made, tuple):  # (signal, its facts for the manifest[, what an update reads])
            made, facts, *extra = made
            if facts is not None:
                info[FACTS[name]] = facts
            if extra and extra[0] is not None:
                stored[name] = extra[0]
        out[name] = made
        _record(info, name, mark)

    knn = knn_method(n, config)
    device = graph_device(config)
    info["knn"] = {"method": knn, "device": str(device) if device is not None and knn == "exact" else "cpu"}
    if knn == "ivf":
        info["knn"].update(nlist=config.knn_nlist or sig.ivf_nlist(n), nprobe=config.knn_nprobe)
    timed("semantic", lambda: semantic_signal(embeddings, config, knn))
    timed("adjacency", lambda: sig.adjacency_edges(_doc_codes(chunks)))
    timed("section", lambda: sig.section_edges([c.doc_id for c in chunks], [c.section for c in chunks], band=config.section_band))

    timed("entity", lambda: entity_signal(chunks, config, openie_docs=openie_docs))
    timed("citation", lambda: citation_signal(chunks, config))
    if questions is None:
        questions = file_questions(chunks, config, encode)
    if questions is not None and weights.get("utility", 0) > 0:
        q_sums, has = questions.chunk_sums(n)
        timed("utility", lambda: sig.utility_edges(q_sums, has, config.k_semantic))
        info["questions"] = {"questions": int(len(questions.owners)), "chunks": int(has.sum())}
    return out, info, stored


#: the manifest key of the facts a signal's maker may return beside it (see :func:`build_signals`)
FACTS = {"entity": "entities", "citation": "citations"}


def semantic_signal(embeddings: np.ndarray, config: GraphConfig, method: str) -> tuple[sp.csr_matrix, None, NeighbourLists]:
    """The semantic kNN signal ``[n, n]`` (by ``method``, :func:`knn_method`) and each chunk's
    neighbour list with its reserve (:mod:`spectrag.graph.lists`)."""
    signal, lists = semantic_lists(np.asarray(embeddings), config.k_semantic, min_cos=config.min_cos, method=method,
                                   nlist=config.knn_nlist, nprobe=config.knn_nprobe, seed=config.seed,
                                   device=graph_device(config))
    return signal, None, lists


def entity_signal(
    chunks: Sequence[Chunk],
    config: GraphConfig,
    *,
    openie_docs: list[dict] | None = None,
    extract: Callable[[list[str], list[str]], list[list[str]]] = extract_entities,
    edges: Callable[..., sp.csr_matrix] = sig.entity_edges,
) -> tuple[sp.csr_matrix, dict[str, Any], EntityLists]:
    """The entity signal ``[n, n]``, its manifest facts and each chunk's entity keys. ``openie_docs``: the LLM's OpenIE
    records (see :func:`_entities`); ``extract(texts, titles)`` (the built-in extractor's entity
    lists) and ``edges(incidence, idf, top_k=)`` are
    :func:`spectrag.extract.entities.extract_entities` and :func:`spectrag.graph.signals.entity_edges`
    unless a distributed build runs them on its workers."""
    lists, facts = _entities(chunks, config, openie_docs, extract)
    inc = entity_incidence(lists, max_df=config.entity_max_df, max_count=config.entity_max_count or None)
    facts = {**facts, "kept": len(inc.vocab), "dropped_frequent": inc.dropped_frequent, "mentions": int(inc.matrix.nnz)}
    return edges(inc.matrix, inc.idf, top_k=config.entity_top_k), facts, EntityLists.from_lists(lists)


def citation_signal(chunks: Sequence[Chunk], config: GraphConfig) -> tuple[sp.csr_matrix, dict[str, Any], CitationEdges]:
    """The citation signal ``[n, n]``, its manifest facts (counts by kind) and the directed edges."""
    edges = citation_edges(list(chunks), max_targets_per_doc=config.citation_max_targets,
                           title_mentions=config.title_mentions)
    return citation_matrix(edges), {k: int(v) for k, v in edges.counts.items()}, edges


def citation_matrix(edges: CitationEdges) -> sp.csr_matrix:
    """The citation signal ``[n, n]`` of directed citation edges."""
    return sig.coo(edges.rows, edges.cols, edges.weights, edges.n_chunks)


def _record(info: dict[str, Any], name: str, mark: usage.Mark) -> None:
    """Wall seconds, CPU seconds and peak RSS of one graph stage into ``info``."""
    wall, cpu, peak = usage.end(mark)
    info["seconds"][name] = wall
    info.setdefault("cpu_seconds", {})[name] = cpu
    info.setdefault("peak_rss_mib", {})[name] = peak


def spectrum_of(weights, config: GraphConfig, *, v0=None):
    """:func:`spectral_coordinates` of ``weights`` with the configured dimension, tolerance,
    clusters, seed, dtype and ordering: the one call the build, ``spectrag add`` (with ``v0``, the
    warm start) and the evaluation's re-fused graphs share."""
    device = graph_device(config)
    return spectral_coordinates(weights, config.spectral_dim, tol=config.lanczos_tol, clusters=config.clusters,
                                seed=config.seed, dtype=config.lanczos_dtype, reorder=config.lanczos_reorder, v0=v0,
                                device="cpu" if device is None else device)


def build_graph(
    chunks: Sequence[Chunk],
    embeddings: np.ndarray,
    config: GraphConfig,
    *,
    encode: Callable[[list[str]], np.ndarray] | None = None,
    makers: Mapping[str, Callable[[], sp.csr_matrix]] | None = None,
    spectrum_fn: Callable[[sp.csr_matrix], Spectrum] | None = None,
    questions: QuestionSet | None = None,
    openie_docs: list[dict] | None = None,
) -> tuple[FusedGraph, Spectrum, dict[str, Any]]:
    """Signals, fusion and spectrum for one index; the dict is the manifest's ``graph`` entry.
    ``makers`` (see :func:`build_signals`) and ``spectrum_fn`` (fused weights -> spectrum;
    default :func:`spectrum_of`) let an incremental add reuse the stored graph; ``questions``
    and ``openie_docs`` as in :func:`build_signals`."""
    steps = sum(w > 0 for w in config.signal_weights().values()) + 2  # the signals, fuse, spectrum
    with bar(total=steps, desc="graph", unit="step") as shown:

        def step(name: str) -> None:  # the step now running is the bar's label; the one before it is done
            if getattr(shown, "postfix", None):  # a disabled bar has none until set
                shown.update()
            shown.set_postfix_str(name)

        signals, info, stored = build_signals(chunks, embeddings, config, encode=encode, makers=makers,
                                              questions=questions, openie_docs=openie_docs, on_step=step)
        step("fuse")
        mark = usage.begin()
        fused = fuse_signals(signals, config.signal_weights(), tau=config.tau, max_degree=config.max_degree)
        fused.stored.update(stored)  # written beside the graph for index updates (graph/stored.py)
        del signals  # fused.signals keeps each signal's upper triangle
        _record(info, "fuse", mark)
        step("spectrum")
        mark = usage.begin()
        spectrum = spectrum_fn(fused.weights) if spectrum_fn is not None else spectrum_of(fused.weights, config)
        _record(info, "spectrum", mark)
        shown.update()
    return fused, spectrum, graph_facts(info, fused, spectrum, config)


def graph_facts(info: dict[str, Any], fused: FusedGraph, spectrum: Spectrum, config: GraphConfig) -> dict[str, Any]:
    """``info`` (signal facts and seconds) completed with the graph's counts: the manifest entry."""
    w = fused.weights
    info.update(
        nodes=int(w.shape[0]),
        edges=int(w.nnz // 2),
        mean_degree=round(float(w.nnz / max(1, w.shape[0])), 3),
        signal_edges=fused.signal_edges,
        signal_histograms=fused.signal_histograms,
        fused_histogram=fused.fused_histogram,
        histogram_bins="10 equal bins over [0, 1]",
        components=spectrum.components,
        isolated_nodes=spectrum.isolated,
        spectrum=spectrum.report,
        signal_weights=config.signal_weights(),
        normalization="none: every signal is in [0, 1] by construction (see engine/graph/fuse.py)",
    )
    return info


def _bandwidth(matrix: sp.csr_matrix) -> int:
    coo = matrix.tocoo()
    return int(np.abs(coo.row - coo.col).max(initial=0))


def _save_csr(out: Path, name: str, m: sp.csr_matrix) -> None:
    np.save(out / f"{name}.indptr.npy", m.indptr.astype(np.int64))
    np.save(out / f"{name}.indices.npy", m.indices.astype(np.int64))
    np.save(out / f"{name}.data.npy", m.data.astype(np.float32))


def save_graph(folder: Path, fused: FusedGraph, spectrum: Spectrum, config: GraphConfig,
               questions: QuestionSet | None = None) -> dict[str, Any]:
    """Write ``graph/`` under ``folder`` (with the utility questions' vectors, when given, for
    utility-question seeding); returns order facts for the manifest."""
    out = folder / FOLDER
    (out / "signals").mkdir(parents=True)
    w = fused.weights
    _save_csr(out, "weights", w)
    stored = {}
    for name, upper in fused.signals.items():
        stored[name] = (upper.row.astype(np.int64), upper.col.astype(np.int64), upper.data.astype(np.float32))
        for part, array in zip(("rows", "cols", "weights"), stored[name]):
            np.save(out / "signals" / f"{name}.{part}.npy", array)
    # from the signals as stored (float32), so a load of an older index computes the same graph
    _save_csr(out, "relations", relational_graph(stored, config.signal_weights(), w.shape[0]))
    np.save(out / "coordinates.npy", spectrum.coordinates)
    np.save(out / "eigenvalues.npy", spectrum.eigenvalues)
    np.save(out / "clusters.npy", spectrum.clusters)
    order = spectrum.order  # the order the spectrum was solved in, when it was reordered
    if order is None or len(order) != w.shape[0]:
        order = reverse_cuthill_mckee(w, symmetric_mode=True).astype(np.int64)
    np.save(out / "rcm_order.npy", order)
    if questions is not None and len(questions.owners):
        save_questions(out, questions)
    save_stored(out, fused.stored)
    return {"bandwidth": _bandwidth(w), "rcm_bandwidth": _bandwidth(w[order][:, order])}


WEIGHT_TOL = 1e-4  # float32 rounding of stored weights above their bound


def load_graph(folder: Path, *, n: int | None = None, signals: Sequence[str] | None = None,
               relations: bool | None = None, dim: int | None = None, questions: bool | None = None,
               embedding_dim: int | None = None, max_weight: float | None = None) -> dict[str, Any]:
    """Memory-mapped graph arrays: ``weights`` and ``relations`` (scipy CSR over the maps; the
    relations are None in an index written before they were stored), coordinates, clusters.

    Every array is checked before use (:mod:`spectrag.util.checks`): CSR parts over ``n`` nodes
    (default: the stored row pointer's) with indices in ``[0, n)``, symmetric, without
    self-loops, weights finite and in ``[0, max_weight]`` for the fused graph (the sum of the
    fusion weights; default: no upper bound) and ``[0, 1]`` for the relational one; each
    signal's edges ``i < j`` in ``[0, n)`` with weights in ``[0, 1]``; coordinates ``[n, dim]``
    finite and eigenvalues ``[dim]`` in ``[0, 2]`` (those of ``L_sym``); clusters in ``[0, n)``;
    the RCM order a permutation; utility-question vectors L2-normalized. ``signals`` names the stored signals to read (default: those on disk);
    ``relations`` whether to read the relational graph, ``questions`` the utility questions
    (default: when present; their vectors ``[Q, embedding_dim]`` when it is given)."""
    src = folder / FOLDER
    load = lambda name: load_npy(src / name)  # noqa: E731
    if n is None:
        n = int(load("weights.indptr.npy").shape[0]) - 1

    def csr(name: str, hi: float | None) -> sp.csr_matrix:
        indptr, indices, data = (load(f"{name}.{part}.npy") for part in ("indptr", "indices", "data"))
        where = f"{src}/{name}.{{indptr,indices,data}}.npy"
        check_csr(indptr, indices, data, where, (n, n), lo=0.0, hi=hi)
        check_symmetric(indptr, indices, data, where, n)
        return sp.csr_matrix((data, indices, indptr), shape=(n, n))

    weights = csr("weights", None if max_weight is None else max_weight + WEIGHT_TOL)
    if relations is None:
        relations = (src / "relations.indptr.npy").exists()
    if signals is None:
        signals = sorted(p.name[: -len(".rows.npy")] for p in (src / "signals").glob("*.rows.npy"))
    stored = {}
    for name in signals:
        where = f"{src}/signals/{name}"
        rows, cols, w = (load(f"signals/{name}.{part}.npy") for part in ("rows", "cols", "weights"))
        check_ints(rows, f"{where}.rows.npy", (None,), 0, n)
        check_ints(cols, f"{where}.cols.npy", (rows.shape[0],), 0, n)
        check_floats(w, f"{where}.weights.npy", (rows.shape[0],), lo=0.0, hi=1.0 + WEIGHT_TOL)
        if rows.shape[0] and bool((np.asarray(rows) >= np.asarray(cols)).any()):
            raise IndexFormatError(f"{where}.rows/cols.npy: an edge with row >= column (edges are stored once, i < j)")
        stored[name] = (rows, cols, w)
    coords = check_floats(load("coordinates.npy"), f"{src}/coordinates.npy", (n, dim))
    m = coords.shape[1]
    clusters = check_ints(load("clusters.npy"), f"{src}/clusters.npy", (n,), 0, max(n, 1))
    order = check_ints(load("rcm_order.npy"), f"{src}/rcm_order.npy", (n,), 0, max(n, 1))
    if n and not (np.bincount(np.asarray(order), minlength=n) == 1).all():
        raise IndexFormatError(f"{src}/rcm_order.npy: not a permutation of the {n} nodes")
    return {
        "weights": weights,
        "relations": csr("relations", 1.0 + WEIGHT_TOL) if relations else None,
        "signals": stored,  # name -> (rows, cols, weights): each signal's undirected edges, i < j
        "coordinates": coords,
        "eigenvalues": check_floats(load("eigenvalues.npy"), f"{src}/eigenvalues.npy", (m,), lo=-1e-3, hi=2 + 1e-3),
        "clusters": clusters,
        "rcm_order": order,
        "questions": load_questions(src, n=n, dim=embedding_dim) if questions is not False else None,
    }
