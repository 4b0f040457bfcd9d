"""What the build keeps beside the graph so that an index update recomputes only what changed
(``spectrag.incremental``); each group is optional (an index written before them still loads,
and its first update derives or recomputes them)::

    graph/knn.ids.npy            int64 [n, K]    each chunk's nearest neighbours, with a reserve
    graph/knn.scores.npy         float32 [n, K]  (graph/lists.py), -1 / 0 padded
    graph/entities.indptr.npy    int64 [n + 1]   each chunk's extracted entity keys (before the
    graph/entities.ids.npy       int32 [m]       document-frequency limits), as ids into
    graph/entities.keys.json     [V] strings     the key list
    graph/citations.{rows,cols}.npy  int64 [E]   the directed citation edges (source -> target)
    graph/citations.kind.npy     int32 [E]       and their kind (graph/citations.py)

Loading checks every array against the chunk count (:mod:`spectrag.util.checks`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spectrag.errors import IndexFormatError
from spectrag.extract.entities import entity_ids
from spectrag.graph.citations import CitationEdges
from spectrag.graph.lists import NeighbourLists
from spectrag.util.checks import check_floats, check_indptr, check_ints, check_strings, load_npy

KNN_FILES = ("knn.ids.npy", "knn.scores.npy")
ENTITY_FILES = ("entities.indptr.npy", "entities.ids.npy", "entities.keys.json")
CITATION_FILES = ("citations.rows.npy", "citations.cols.npy", "citations.kind.npy")
#: the optional file groups, by the signal whose update reads them
GROUPS = {"semantic": KNN_FILES, "entity": ENTITY_FILES, "citation": CITATION_FILES}


@dataclass(frozen=True)
class EntityLists:
    """Each chunk's entity keys as ids into ``keys``. Shapes: ``indptr [n + 1]`` int64,
    ``ids [m]`` int32, ``keys [V]``."""

    keys: list[str]
    indptr: np.ndarray
    ids: np.ndarray

    @classmethod
    def from_lists(cls, lists: list[list[str]]) -> "EntityLists":
        indptr, ids, keys = entity_ids(lists)
        return cls(keys, indptr, ids.astype(np.int32))

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def lists(self, rows: np.ndarray | None = None) -> list[list[str]]:
        """The key lists of ``rows`` (default: every chunk)."""
        rows = range(len(self)) if rows is None else rows
        keys, ids, ptr = self.keys, np.asarray(self.ids), np.asarray(self.indptr)
        return [[keys[j] for j in ids[ptr[i] : ptr[i + 1]].tolist()] for i in rows]


def save_stored(folder: Path, stored: dict[str, Any]) -> None:
    """Write the groups in ``stored`` (``semantic``: :class:`NeighbourLists`, ``entity``:
    :class:`EntityLists`, ``citation``: :class:`CitationEdges`) into ``folder`` (the index's
    ``graph/``)."""
    if "semantic" in stored:
        lists = stored["semantic"]
        np.save(folder / KNN_FILES[0], np.asarray(lists.ids, dtype=np.int64))
        np.save(folder / KNN_FILES[1], np.asarray(lists.scores, dtype=np.float32))
    if "entity" in stored:
        ent = stored["entity"]
        np.save(folder / ENTITY_FILES[0], np.asarray(ent.indptr, dtype=np.int64))
        np.save(folder / ENTITY_FILES[1], np.asarray(ent.ids, dtype=np.int32))
        (folder / ENTITY_FILES[2]).write_text(json.dumps(ent.keys, ensure_ascii=False), encoding="utf-8")
    if "citation" in stored:
        cit = stored["citation"]
        np.save(folder / CITATION_FILES[0], np.asarray(cit.rows, dtype=np.int64))
        np.save(folder / CITATION_FILES[1], np.asarray(cit.cols, dtype=np.int64))
        np.save(folder / CITATION_FILES[2], np.asarray(cit.kind, dtype=np.int32))  # (the checks read int32 or int64)


def load_stored(folder: Path, n: int, groups: list[str]) -> dict[str, Any]:
    """The groups named in ``groups`` (those the manifest lists) from ``folder`` (``graph/``),
    every array checked: ids in ``[0, n)`` (or -1 padding), a row pointer over the entity ids,
    ids into the key list, finite scores in ``[0, 1]``."""
    out: dict[str, Any] = {}
    where = lambda name: f"{folder / name}"  # noqa: E731
    if "semantic" in groups:
        ids = check_ints(load_npy(folder / KNN_FILES[0]), where(KNN_FILES[0]), (n, None), -1, max(n, 1))
        scores = check_floats(load_npy(folder / KNN_FILES[1]), where(KNN_FILES[1]), ids.shape, lo=0.0, hi=1.0)
        out["semantic"] = NeighbourLists(np.asarray(ids), np.asarray(scores))
    if "entity" in groups:
        try:
            keys = json.loads((folder / ENTITY_FILES[2]).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError, OSError) as exc:
            raise IndexFormatError(f"{where(ENTITY_FILES[2])}: unreadable ({type(exc).__name__})") from None
        keys = check_strings(keys, where(ENTITY_FILES[2]))
        ids = check_ints(load_npy(folder / ENTITY_FILES[1]), where(ENTITY_FILES[1]), (None,), 0, max(len(keys), 1))
        indptr = check_ints(load_npy(folder / ENTITY_FILES[0]), where(ENTITY_FILES[0]), (n + 1,), 0, ids.shape[0] + 1)
        check_indptr(indptr, where(ENTITY_FILES[0]), n, ids.shape[0])
        out["entity"] = EntityLists(keys, np.asarray(indptr), np.asarray(ids))
    if "citation" in groups:
        rows = check_ints(load_npy(folder / CITATION_FILES[0]), where(CITATION_FILES[0]), (None,), 0, max(n, 1))
        cols = check_ints(load_npy(folder / CITATION_FILES[1]), where(CITATION_FILES[1]), rows.shape, 0, max(n, 1))
        kind = check_ints(load_npy(folder / CITATION_FILES[2]), where(CITATION_FILES[2]), rows.shape, 0, 4)
        out["citation"] = citation_edges_of(np.asarray(rows), np.asarray(cols), np.asarray(kind), n)
    return out


def citation_edges_of(rows: np.ndarray, cols: np.ndarray, kind: np.ndarray, n: int) -> CitationEdges:
    """:class:`CitationEdges` of directed edge arrays (weights 1, counts by kind)."""
    per_kind = np.bincount(kind.astype(np.int64), minlength=4) if kind.size else np.zeros(4, np.int64)
    return CitationEdges(rows=rows.astype(np.int64), cols=cols.astype(np.int64),
                         weights=np.ones(rows.shape[0], dtype=np.float32), kind=kind.astype(np.int8), n_chunks=n,
                         n_link=int(per_kind[0]), n_footnote=int(per_kind[1]), n_url=int(per_kind[2]),
                         n_title=int(per_kind[3]))
