"""The chunk graph after documents are removed and added (:func:`update_graph`): each signal
recomputed where the edit reaches it, then fused, and the spectrum warm-started.

==========  ==================================================================================
signal      what is recomputed
==========  ==================================================================================
semantic    the kept rows' lists lose the removed chunks and merge their nearest new chunks;
            new rows are searched; a row that lost more than its reserve is searched again
            (:mod:`spectrag.graph.lists`: exact)
adjacency   all (a linear pass over the chunks' documents: exact)
section     the kept documents' edges renumbered, the new documents' added (exact)
entity      the rows the edit touches (:mod:`spectrag.graph.entity_update`); the other rows keep
            their weights
citation    the edges from the chunks the edit may change (:func:`citation_sources`: exact)
utility     all, from the stored questions (adds only; removals are refused on such an index)
fuse        all: threshold, degree cap and symmetrization are O(nnz)
spectrum    warm-started from the previous coordinates (:mod:`spectrag.graph.warm`), or from
            scratch when the warm residuals stay above tolerance or ``exact`` is asked
==========  ==================================================================================

Which old chunks an edit touches through titles and links (:func:`title_mentions`,
:func:`link_mentions`) is found from the BM25 posting lists and a scan of the chunks with links,
not by reading every chunk.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from spectrag.config import GraphConfig
from spectrag.extract.entities import extract_entities
from spectrag.extract.titles import TitleMatcher
from spectrag.graph import signals as sig
from spectrag.graph.build import (
    _doc_codes,
    _entities,
    build_graph,
    citation_matrix,
    citation_signal,
    entity_signal,
    spectrum_of,
)
from spectrag.graph.citations import CitationEdges, _url_key, citation_edges, document_titles
from spectrag.graph.entity_update import update_entity_signal
from spectrag.graph.fuse import signal_matrix
from spectrag.graph.lists import lists_from_signal, lists_signal, update_lists
from spectrag.graph.spectrum import Spectrum
from spectrag.graph.stored import citation_edges_of
from spectrag.graph.warm import extend_rows, warm_spectrum
from spectrag.index.lexical import BM25Index
from spectrag.types import Chunk


@dataclass(frozen=True)
class GraphEdit:
    """Which old chunks stay and which documents come and go. ``remap [n_old]``: each old
    chunk's new id (kept chunks keep their order and come first), -1 when removed; documents
    as ``(doc_id, title, url)``."""

    remap: np.ndarray
    removed_docs: list[tuple[str, str, str]] = field(default_factory=list)
    added_docs: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def n_keep(self) -> int:
        return int((np.asarray(self.remap) >= 0).sum())


def title_mentions(chunks: Sequence[Chunk], scope: np.ndarray, bm25: BM25Index, titles: Sequence[str]) -> np.ndarray:
    """The chunks of ``scope`` whose text mentions one of ``titles`` (whole words, any case,
    nested matches included: :class:`spectrag.extract.titles.TitleMatcher`). Candidates come
    from the BM25 posting lists (a chunk holds every term of a title it mentions; the BM25 text
    is the chunk's with its title), then the matcher confirms; a title whose terms do not bound
    the search (no term, or a letter whose casefold differs from its lower case) scans
    ``scope``."""
    matcher = TitleMatcher(list(titles), keep_nested=True)
    if not matcher.n_patterns or not len(scope):
        return np.zeros(0, dtype=np.int64)
    candidates: set[int] = set()
    unique = list(dict.fromkeys(titles))
    for title, terms in zip(unique, bm25._tokenize(unique)):  # one tokenizer call for all titles
        if not terms or title.casefold() != title.lower():
            candidates = set(np.asarray(scope).tolist())
            break
        if any(t not in bm25.vocab for t in terms):
            continue  # a term no chunk holds: no chunk mentions the title
        rows = None
        for t in dict.fromkeys(terms):
            m = bm25.matrix
            hits = m.indices[m.indptr[bm25.vocab[t]] : m.indptr[bm25.vocab[t] + 1]]
            rows = hits if rows is None else np.intersect1d(rows, hits, assume_unique=True)
        candidates.update(np.asarray(rows).tolist())
    inside = np.zeros(len(chunks), dtype=bool)
    inside[np.asarray(scope, dtype=np.int64)] = True
    rows = np.asarray(sorted(i for i in candidates if inside[i]), dtype=np.int64)
    found = matcher.find([chunks[i].text for i in rows.tolist()])
    return rows[np.asarray([bool(f) for f in found], dtype=bool)] if len(rows) else rows


def link_mentions(chunks: Sequence[Chunk], scope: np.ndarray, docs: Sequence[tuple[str, str, str]]) -> np.ndarray:
    """The chunks of ``scope`` with a Markdown link or a URL whose text holds the file stem of
    one of ``docs``' ids or one of their URLs (what a link that resolves to them must hold;
    links written with ``%`` escapes are always included)."""
    keys = set()
    for doc_id, _, url in docs:
        stem = posixpath.splitext(posixpath.basename(doc_id))[0]
        keys.update(k for k in (stem, posixpath.basename(doc_id), _url_key(url) if url else "") if k)
    if not keys or not len(scope):
        return np.zeros(0, dtype=np.int64)
    import ahocorasick  # as the title matcher does

    automaton = ahocorasick.Automaton()
    for key in keys:
        automaton.add_word(key, key)
    automaton.make_automaton()
    out = []
    for i in np.asarray(scope).tolist():
        text = chunks[i].text
        if "](" not in text and "://" not in text:
            continue
        if ("%" in text and "](" in text) or next(automaton.iter(text), None) is not None:
            out.append(i)
    return np.asarray(out, dtype=np.int64)


def citation_sources(chunks: Sequence[Chunk], edit: GraphEdit, old: CitationEdges, retitled: np.ndarray) -> np.ndarray:
    """The chunks whose outgoing citations an edit may change: the new ones, the kept ones that
    cited a removed chunk (its document is gone, or a shorter title it hid now counts), those
    mentioning an added or removed title (``retitled``) and those linking to an added
    document. Every other chunk's citations are its stored ones."""
    remap = np.asarray(edit.remap, dtype=np.int64)
    n_keep = edit.n_keep
    rows, cols = np.asarray(old.rows, dtype=np.int64), np.asarray(old.cols, dtype=np.int64)
    lost = remap[rows[(remap[cols] < 0) & (remap[rows] >= 0)]]
    linked = link_mentions(chunks, np.arange(n_keep), edit.added_docs)
    return np.unique(np.concatenate([lost, retitled, linked, np.arange(n_keep, len(chunks))]).astype(np.int64))


def update_citations(chunks: Sequence[Chunk], edit: GraphEdit, old: CitationEdges, sources: np.ndarray,
                     config: GraphConfig, matcher: TitleMatcher | None = None) -> CitationEdges:
    """The directed citations of ``chunks``: the stored ones of the chunks not in ``sources``
    (renumbered, those into removed chunks dropped) and the recomputed ones of ``sources``
    (``matcher``: a title matcher of :func:`~spectrag.graph.citations.document_titles`)."""
    remap = np.asarray(edit.remap, dtype=np.int64)
    n = len(chunks)
    r, c = remap[np.asarray(old.rows, dtype=np.int64)], remap[np.asarray(old.cols, dtype=np.int64)]
    is_source = np.zeros(n, dtype=bool)
    is_source[sources] = True
    ok = (r >= 0) & (c >= 0)
    ok[ok] = ~is_source[r[ok]]
    fresh = citation_edges(list(chunks), max_targets_per_doc=config.citation_max_targets,
                           title_mentions=config.title_mentions, sources=sources, matcher=matcher)
    rows = np.concatenate([r[ok], fresh.rows])
    cols = np.concatenate([c[ok], fresh.cols])
    kind = np.concatenate([np.asarray(old.kind)[ok], fresh.kind])
    order = np.lexsort((cols, rows))  # sorted by (source, target), as citation_edges returns them
    return citation_edges_of(rows[order], cols[order], kind[order], n)


def _renumbered(old_graph: dict[str, Any], name: str, remap: np.ndarray, n: int) -> sp.csr_matrix:
    """A stored signal's kept edges, renumbered, as symmetric CSR ``[n, n]``."""
    rows, cols, w = (np.asarray(a) for a in old_graph["signals"][name])
    r, c = remap[rows.astype(np.int64)], remap[cols.astype(np.int64)]
    ok = (r >= 0) & (c >= 0)
    return signal_matrix((r[ok], c[ok], w[ok]), n)


def update_graph(
    old_graph: dict[str, Any],
    stored: dict[str, Any],
    chunks: list[Chunk],
    edit: GraphEdit,
    vectors: np.ndarray,
    dense,
    bm25: BM25Index,
    config: GraphConfig,
    *,
    encode: Callable[[list[str]], np.ndarray] | None = None,
    questions=None,
    exact_spectrum: bool = False,
):
    """The chunk graph of ``chunks`` after ``edit``, as :func:`spectrag.graph.build.build_graph`
    returns it (``fused.stored`` updated). ``old_graph``: the old index's graph
    (:func:`spectrag.graph.build.load_graph`); ``stored``: its update files
    (:func:`spectrag.graph.stored.load_stored`; a missing group is derived or recomputed);
    ``dense``: a FAISS inner-product index of ``vectors [n, d]``; ``bm25``: the new BM25 index."""
    remap = np.asarray(edit.remap, dtype=np.int64)
    n_keep = edit.n_keep
    new = chunks[n_keep:]
    titles = document_titles(chunks)
    matcher = TitleMatcher(titles)  # one automaton for the extractor and the citations
    changed_titles = [t for _, t, _ in edit.removed_docs + edit.added_docs if t]
    retitled = title_mentions(chunks, np.arange(n_keep), bm25, changed_titles)  # entities and citations read titles
    facts: dict[str, Any] = {"extracted_again": int(len(retitled))}

    def semantic():
        lists = stored.get("semantic")
        if lists is None:
            lists = lists_from_signal(signal_matrix(old_graph["signals"]["semantic"], len(remap)), config.k_semantic)
        lists, searched = update_lists(lists, remap, vectors, dense, config.k_semantic, min_cos=config.min_cos)
        facts["semantic_rows_searched_again"] = searched
        return lists_signal(lists, config.k_semantic), None, lists

    def section():
        fresh = sig.section_edges([c.doc_id for c in new], [c.section for c in new], band=config.section_band)
        return sp.block_diag((_renumbered(old_graph, "section", remap, n_keep), fresh), format="csr")

    def entity():
        if "entity" not in stored:  # an index written before entity keys were stored: all rows
            return entity_signal(chunks, config)
        if config.entities_file:
            extract = lambda part: _entities(part, config)[0]  # noqa: E731
        else:
            extract = lambda part: extract_entities([c.text for c in part], titles, matcher=matcher)  # noqa: E731
        signal, counts, lists = update_entity_signal(chunks, remap, stored["entity"], old_graph["signals"]["entity"],
                                                     retitled, config, extract)
        return signal, {"source": config.entities_file or "built-in extractor", **counts}, lists

    def citation():
        if "citation" not in stored:
            return citation_signal(chunks, config)
        sources = citation_sources(chunks, edit, stored["citation"], retitled)
        edges = update_citations(chunks, edit, stored["citation"], sources, config, matcher)
        return citation_matrix(edges), {**{k: int(v) for k, v in edges.counts.items()},
                                        "recomputed_sources": int(len(sources))}, edges

    makers = {"semantic": semantic, "adjacency": lambda: sig.adjacency_edges(_doc_codes(chunks)),
              "section": section, "entity": entity, "citation": citation}
    kept = np.flatnonzero(remap >= 0)
    previous = np.asarray(old_graph["coordinates"], dtype=np.float64)[kept]
    labels = np.asarray(old_graph["clusters"])[kept]

    def spectrum(weights: sp.csr_matrix) -> Spectrum:

        warm = None if exact_spectrum or not previous.shape[1] else warm_spectrum(weights, previous, labels, config)
        if warm is not None:
            return warm
        cold = spectrum_of(weights, config, v0=extend_rows(weights, previous) if previous.shape[1] else None)
        cold.report["warm_start"] = False
        return cold

    fused, spec, graph_facts = build_graph(chunks, vectors, config, encode=encode, makers=makers, spectrum_fn=spectrum,
                                           questions=questions)
    graph_facts["knn"] = {"method": "exact", "incremental": True, "a rebuild would use": graph_facts["knn"]["method"]}
    graph_facts["update"] = facts
    return fused, spec, graph_facts
