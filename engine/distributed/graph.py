"""The graph stages that split by rows, as Ray tasks; fusion and the spectrum stay on the driver.

Inputs go into Ray's object store once (``ray.put``: on one node, shared memory that every task
maps without a copy) and each task works on a row range:

* semantic kNN: the FAISS index is built (an IVF one trained) once on the driver, serialized into
  the store, and each task searches its tile of rows against it
  (:func:`spectrag.graph.lists.search_lists`, float64 re-scored, so the tiling changes nothing);
* entity: the built-in extractor on blocks of chunk texts, the incidence matrix on the driver
  (it needs every chunk's entities for the document frequencies), the products ``X X^T`` by row
  tiles (:func:`spectrag.graph.signals.entity_tile`);
* section and citation: one task each, running beside the others.

Adjacency and the utility signal are built on the driver, as in :func:`~spectrag.graph.build.build_graph`,
which receives the rest as ``makers`` and fuses, solves the spectrum and writes the facts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from spectrag.config import GraphConfig
from spectrag.distributed.cluster import MAX_TASK_RETRIES, require_ray
from spectrag.extract.entities import extract_entities
from spectrag.graph import signals as sig
from spectrag.graph.build import build_graph, citation_signal, entity_signal, knn_method
from spectrag.graph.lists import KNN_RESERVE, NeighbourLists, lists_signal, search_lists
from spectrag.index.dense import load_faiss
from spectrag.kernels.screen import ScreenedSearch
from spectrag.types import Chunk

#: rows per kNN task, per entity-product task and texts per extraction task (a few tasks per worker)
KNN_ROWS = 16_384
ENTITY_ROWS = 16_384
EXTRACT_TEXTS = 4_096


def _bounds(n: int, size: int, workers: int) -> list[tuple[int, int]]:
    """Row ranges of at most ``size`` rows, and at least ``workers`` of them when ``n`` allows."""
    size = max(1, min(size, -(-n // max(1, workers))))
    return [(lo, min(n, lo + size)) for lo in range(0, n, size)]


def _knn_tile(index_bytes: np.ndarray | None, vectors: np.ndarray, lo: int, hi: int, width: int, min_cos: float):
    # no bytes: the exact search is the bfloat16 screen (or a float32 one where this worker's CPU
    # lacks bfloat16), made here from the shared vectors; the same lists either way
    index = ScreenedSearch(vectors) if index_bytes is None else load_faiss().deserialize_index(index_bytes)
    return search_lists(index, vectors, np.arange(lo, hi), width, min_cos=min_cos)  # ids, scores [hi - lo, width]


def _extract(texts: list[str], titles: list[str]) -> list[list[str]]:
    return extract_entities(texts, titles, workers=1)


def _entity_tile(x: sp.csr_matrix, xt: sp.csr_matrix, lo: int, hi: int, top_k: int) -> sp.csr_matrix:
    return sig.entity_tile(x, xt, lo, hi, top_k)


def _section(doc_ids: list[str], sections: list[tuple[str, ...]], band: int) -> sp.csr_matrix:
    return sig.section_edges(doc_ids, sections, band=band)


class RayGraph:
    """``build_graph`` with the row-splittable signals on Ray tasks (module docstring);
    ``knn_rows`` / ``entity_rows`` / ``extract_texts`` size the tasks."""

    def __init__(self, workers: int, *, knn_rows: int = KNN_ROWS, entity_rows: int = ENTITY_ROWS,
                 extract_texts: int = EXTRACT_TEXTS) -> None:
        self.workers = workers
        self.knn_rows, self.entity_rows, self.extract_texts = knn_rows, entity_rows, extract_texts

    def __call__(self, chunks: Sequence[Chunk], embeddings: np.ndarray, config: GraphConfig, *,
                 encode: Callable[[list[str]], np.ndarray] | None = None, questions=None,
                 openie_docs: list[dict] | None = None):
        ray = require_ray()
        task = lambda fn: ray.remote(max_retries=MAX_TASK_RETRIES)(fn)  # noqa: E731
        n = len(chunks)
        weights = config.signal_weights()
        makers: dict[str, Callable[[], Any]] = {}
        # tasks start now and run while the driver waits on them one by one, in build_signals' order
        if weights.get("semantic", 0) > 0 and n:
            makers["semantic"] = self._semantic(task, embeddings, config)
        if weights.get("section", 0) > 0:
            section = task(_section).remote([c.doc_id for c in chunks], [c.section for c in chunks], config.section_band)
            makers["section"] = lambda: ray.get(section)
        if weights.get("citation", 0) > 0:
            citation = task(citation_signal).remote(list(chunks), config)
            makers["citation"] = lambda: ray.get(citation)
        if weights.get("entity", 0) > 0:
            extract = task(_extract)
            tile = task(_entity_tile)

            def extract_blocks(texts: list[str], titles: list[str]) -> list[list[str]]:
                titles_ref = ray.put(titles)
                parts = [extract.remote(texts[lo:hi], titles_ref) for lo, hi in _bounds(len(texts), self.extract_texts, self.workers)]
                return [lists for part in ray.get(parts) for lists in part]

            def edges(incidence: sp.csr_matrix, idf: np.ndarray, *, top_k: int) -> sp.csr_matrix:
                x, xt, bounds = sig.entity_tiles(incidence, idf)
                x_ref, xt_ref = ray.put(x), ray.put(xt)
                rows = [(lo + a, lo + b) for lo, hi in bounds for a, b in _bounds(hi - lo, self.entity_rows, self.workers)]
                return sig.stack_entity_tiles(ray.get([tile.remote(x_ref, xt_ref, lo, hi, top_k) for lo, hi in rows]), n)

            makers["entity"] = lambda: entity_signal(chunks, config, openie_docs=openie_docs, extract=extract_blocks,
                                                     edges=edges)
        return build_graph(chunks, embeddings, config, encode=encode, makers=makers, questions=questions,
                           openie_docs=openie_docs)

    def _semantic(self, task, embeddings: np.ndarray, config: GraphConfig) -> Callable[[], Any]:
        ray = require_ray()
        n = embeddings.shape[0]
        method = knn_method(n, config)
        index_ref = None  # the screen: each task makes it from the shared vectors
        if not sig.screens(method):
            index = sig.knn_index(embeddings, method, nlist=config.knn_nlist, nprobe=config.knn_nprobe, seed=config.seed)
            index_ref = ray.put(load_faiss().serialize_index(index))
            del index
        vectors_ref = ray.put(np.ascontiguousarray(embeddings, dtype=np.float32))
        search = task(_knn_tile)
        parts = [search.remote(index_ref, vectors_ref, lo, hi, config.k_semantic + KNN_RESERVE, config.min_cos)
                 for lo, hi in _bounds(n, self.knn_rows, self.workers)]

        def gather():  # the single-process build's signal and neighbour lists (graph/lists.py)
            got = ray.get(parts)
            lists = NeighbourLists(np.vstack([ids for ids, _ in got]), np.vstack([scores for _, scores in got]))
            return lists_signal(lists, config.k_semantic), None, lists

        return gather
