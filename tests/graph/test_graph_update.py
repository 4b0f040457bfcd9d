"""The chunk graph after an edit (spectrag.graph.update, spectrag.graph.entity_update) against a
build of the final chunks: which chunks mention changed titles or link to added documents
(against a scan of every chunk), the citation edges (exactly the build's), the entity keys
(exactly the build's), the recomputed entity rows (exactly the build's), the other entity rows
(their edges mostly the build's), and the semantic, adjacency and section signals (exact)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spectrag.build import embedding_text
from spectrag.config import GraphConfig, IndexConfig
from spectrag.extract.titles import TitleMatcher
from spectrag.graph.build import _entities, build_signals, citation_signal, entity_signal
from spectrag.graph.citations import citation_edges
from spectrag.graph.entity_update import update_entity_signal
from spectrag.graph.signals import knn_index
from spectrag.graph.update import (
    GraphEdit,
    citation_sources,
    link_mentions,
    title_mentions,
    update_citations,
)
from spectrag.index.chunk import chunk_corpus
from spectrag.index.lexical import BM25Index
from spectrag.types import Document

from test_incremental import synthetic_docs

CONFIG = IndexConfig()


def documents(records: list[dict]) -> list[Document]:
    return [Document(doc_id=r["id"], title=r["title"], text=r["text"]) for r in records]


@pytest.fixture(scope="module")
def edit():
    """Old corpus: 80 documents; the edit removes 6 (record 1 among them: it mentions "Skarholt
    Harbour") and adds 20, among them "Skarholt Harbour" (the title nested "Skarholt" hides)."""
    records = synthetic_docs(100, seed=5)
    old_chunks = chunk_corpus(documents(records[:80]), CONFIG.chunk)
    removed = {"doc001", "doc010", "doc020", "doc033", "doc047", "doc079"}
    keep = np.array([c.doc_id not in removed for c in old_chunks])
    new_chunks = chunk_corpus(documents(records[80:]), CONFIG.chunk)
    chunks = [c for c, k in zip(old_chunks, keep) if k] + new_chunks
    remap = np.where(keep, np.cumsum(keep) - 1, -1)
    docs = lambda cs: list(dict.fromkeys((c.doc_id, c.title, c.url) for c in cs))  # noqa: E731
    g = GraphEdit(remap, docs([c for c, k in zip(old_chunks, keep) if not k]), docs(new_chunks))
    bm25 = BM25Index.build([embedding_text(c, CONFIG.embed) for c in chunks], CONFIG.bm25)
    return old_chunks, chunks, g, bm25


def test_title_mentions_equal_a_scan_of_every_chunk(edit):
    _, chunks, g, bm25 = edit
    titles = [t for _, t, _ in g.removed_docs + g.added_docs]
    scope = np.arange(g.n_keep)
    got = title_mentions(chunks, scope, bm25, titles)
    found = TitleMatcher(titles, keep_nested=True).find([chunks[i].text for i in scope])
    want = scope[np.array([bool(f) for f in found])]
    np.testing.assert_array_equal(got, want)
    assert len(want) > 5


def test_link_mentions_hold_every_link_to_an_added_document(edit):
    _, chunks, g, _ = edit
    fresh = citation_edges(chunks)
    added = np.zeros(len(chunks), dtype=bool)
    added[g.n_keep:] = True
    linking = np.unique(fresh.rows[(fresh.kind == 0) & added[fresh.cols] & ~added[fresh.rows]])
    got = link_mentions(chunks, np.arange(g.n_keep), g.added_docs)
    assert set(linking.tolist()) <= set(got.tolist())


def test_updated_citations_are_the_builds(edit):
    old_chunks, chunks, g, bm25 = edit
    _, _, old = citation_signal(old_chunks, GraphConfig())
    titles = [t for _, t, _ in g.removed_docs + g.added_docs]
    retitled = title_mentions(chunks, np.arange(g.n_keep), bm25, titles)
    sources = citation_sources(chunks, g, old, retitled)
    got = update_citations(chunks, g, old, sources, GraphConfig())
    want = citation_edges(chunks)
    for name in ("rows", "cols", "kind"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert len(sources) < len(chunks)  # some chunks kept their stored edges


def test_entity_keys_and_recomputed_rows_are_the_builds(edit):
    old_chunks, chunks, g, bm25 = edit
    config = GraphConfig()
    old_signal, _, old_lists = entity_signal(old_chunks, config)
    upper = sp.triu(old_signal.maximum(old_signal.T), k=1).tocoo()
    titles = sorted({c.title for c in chunks if c.title})
    retitled = title_mentions(chunks, np.arange(g.n_keep), bm25, [t for _, t, _ in g.removed_docs + g.added_docs])
    got, facts, lists = update_entity_signal(chunks, g.remap, old_lists, (upper.row, upper.col, upper.data), retitled,
                                             config, lambda part: _entities(part, config, titles=titles)[0])
    want, _, want_lists = entity_signal(chunks, config)
    assert lists.keys == want_lists.keys
    np.testing.assert_array_equal(lists.indptr, want_lists.indptr)
    np.testing.assert_array_equal(lists.ids, want_lists.ids)
    assert 0 < facts["recomputed_rows"] < len(chunks)
    got, want = got.tocsr(), want.tocsr()
    fresh_rows = np.arange(g.n_keep, len(chunks))  # the new chunks' rows are always recomputed
    np.testing.assert_array_equal((got[fresh_rows] != 0).toarray(), (want[fresh_rows] != 0).toarray())
    assert abs(got[fresh_rows] - want[fresh_rows]).max() <= 1e-6
    a, b = set(zip(*got.nonzero())), set(zip(*want.nonzero()))
    assert len(a & b) >= 0.9 * len(b)  # the untouched rows' lists, with weights of the old corpus
    assert abs((got - want).multiply(got != 0).multiply(want != 0)).max() <= 0.1


def test_semantic_adjacency_and_section_are_the_builds(edit):
    """update_graph's makers through build_signals, against build_signals of the final chunks."""
    from spectrag.graph.build import build_graph
    from spectrag.graph.update import update_graph

    old_chunks, chunks, g, bm25 = edit
    rng = np.random.default_rng(0)
    old_vectors = rng.standard_normal((len(old_chunks), 16)).astype(np.float32)
    old_vectors /= np.linalg.norm(old_vectors, axis=1, keepdims=True)
    new_vectors = rng.standard_normal((len(chunks) - g.n_keep, 16)).astype(np.float32)
    new_vectors /= np.linalg.norm(new_vectors, axis=1, keepdims=True)
    vectors = np.concatenate([old_vectors[g.remap >= 0], new_vectors])
    config = GraphConfig(spectral_dim=8)
    fused, spectrum, _ = build_graph(old_chunks, old_vectors, config)
    old_graph = {"signals": {k: (v.row, v.col, v.data) for k, v in fused.signals.items()},
                 "coordinates": spectrum.coordinates, "clusters": spectrum.clusters}
    new_fused, _, facts = update_graph(old_graph, dict(fused.stored), chunks, g, vectors, knn_index(vectors), bm25, config)
    want, _, _ = build_signals(chunks, vectors, config)
    for name in ("semantic", "adjacency", "section", "citation"):
        a = new_fused.signals[name].tocsr()
        b = sp.triu(want[name].maximum(want[name].T), k=1).tocsr()
        np.testing.assert_array_equal((a != 0).toarray(), (b != 0).toarray(), err_msg=name)
        assert a.nnz == 0 or abs(a - b).max() <= 1e-7, name
    assert facts["update"]["extracted_again"] > 0
