"""The knowledge graph of SA-RAG (paper 3.4) as arrays, and its assembly from extractions.

Nodes: entities (normalized key, display name, aliases) and chunks (the index's chunk ids).
Links: chunk -> entity "describes" (a binary ``[n_chunks, n_entities]`` CSR) and entity --
entity "related_to" (a relation list in COO form: subject, object, predicate, the text that is
embedded, the chunk it came from). Embeddings: one row per entity (of its name: our sources give
no descriptions) and one per *distinct* relation text, float32, L2-normalized.

Entities are merged by normalized key (:func:`spectrag.extract.entities.normalize_entity`) and by
alias (``alias -> key``, e.g. an acronym defined in the text), so "The Northern Rail
Authority", "northern rail authority" and "NRA" are one node, as the paper merges entities whose
name or alias overlaps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spectrag.extract.entities import normalize_entity
from spectrag.types import Extraction, Triple


@dataclass
class KnowledgeGraph:
    """Shapes: ``keys/names/aliases [n_ent]``; ``incidence`` CSR ``[n_chunks, n_ent]``;
    ``rel_*`` int64 ``[n_rel]``; ``predicates [n_pred]``, ``texts [n_text]``; adjacency CSR over
    entities with both directions of every relation (``adj_indptr [n_ent + 1]``,
    ``adj_indices/adj_relation [2 n_rel]``, sorted by (source, target, relation));
    ``entity_emb [n_ent, d]``, ``text_emb [n_text, d]`` float32 or None before embedding."""

    keys: list[str]
    names: list[str]
    aliases: list[list[str]]
    incidence: sp.csr_matrix
    rel_subject: np.ndarray
    rel_object: np.ndarray
    rel_predicate: np.ndarray
    rel_text: np.ndarray
    rel_chunk: np.ndarray
    predicates: list[str]
    texts: list[str]
    adj_indptr: np.ndarray
    adj_indices: np.ndarray
    adj_relation: np.ndarray
    entity_emb: np.ndarray | None = None
    text_emb: np.ndarray | None = None

    @property
    def n_entities(self) -> int:
        return len(self.keys)

    @property
    def n_relations(self) -> int:
        return int(self.rel_subject.shape[0])

    def alias_map(self) -> dict[str, int]:
        """Normalized key or alias -> entity id."""
        out = {normalize_entity(a): i for i, names in enumerate(self.aliases) for a in names}
        out.update((k, i) for i, k in enumerate(self.keys))
        out.pop("", None)
        return out

    def line(self, relation: int) -> str:
        """``subject predicate object`` of one relation, with display names."""
        r = int(relation)
        s, o = self.names[int(self.rel_subject[r])], self.names[int(self.rel_object[r])]
        return f"{s} {self.predicates[int(self.rel_predicate[r])]} {o}"

    def counts(self) -> dict[str, int]:
        return {
            "entities": self.n_entities,
            "relations": self.n_relations,
            "relation_texts": len(self.texts),
            "predicates": len(self.predicates),
            "describes_links": int(self.incidence.nnz),
            "chunks_with_entities": int(np.count_nonzero(np.diff(self.incidence.indptr))),
            "entities_with_relations": int(np.count_nonzero(np.diff(self.adj_indptr))),
        }


def adjacency(n_entities: int, subject: np.ndarray, obj: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both directions of every relation as CSR over entities: ``indptr [n + 1]``, neighbour and
    relation id ``[2 R]``, sorted by (source, target, relation). Relations are undirected for
    spreading: a triple's direction is an artefact of its wording (SA-RAG links entities that
    are "related"; a multi-hop question may walk a relation either way)."""
    rel = np.arange(subject.shape[0], dtype=np.int64)
    src, dst, rid = np.concatenate([subject, obj]), np.concatenate([obj, subject]), np.concatenate([rel, rel])
    order = np.lexsort((rid, dst, src))
    indptr = np.zeros(n_entities + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n_entities), out=indptr[1:])
    return indptr, dst[order].astype(np.int64), rid[order].astype(np.int64)


def assemble(extraction: Extraction, n_chunks: int, aliases: Mapping[str, str] | None = None) -> tuple[KnowledgeGraph, dict[str, int]]:
    """Merge surface forms into entities and deduplicate relations.

    ``aliases`` maps a normalized alias to the normalized key it stands for. Entities are
    sorted by key; a display name is the most frequent surface form (ties: first seen);
    relations are deduplicated on (subject, object, predicate, text), keeping the first chunk,
    and relations whose ends merge into one entity (self-loops) or normalize to nothing are
    dropped. Returns the graph (no embeddings yet) and drop counts.
    """
    aliases = dict(aliases or {})

    def key_of(surface: str) -> str:
        key = normalize_entity(surface)
        return aliases.get(key, key)

    surfaces: dict[str, Counter] = {}
    first_seen: dict[str, dict[str, int]] = {}
    order = 0

    def see(key: str, surface: str) -> None:
        nonlocal order
        surface = " ".join(surface.split())
        surfaces.setdefault(key, Counter())[surface] += 1
        first_seen.setdefault(key, {}).setdefault(surface, order)
        order += 1

    chunk_keys: list[set[str]] = [set() for _ in range(n_chunks)]
    for c, forms in enumerate(extraction.mentions):
        for s in forms:
            k = key_of(s)
            if k:
                see(k, s)
                chunk_keys[c].add(k)
    kept: list[tuple[str, str, Triple]] = []
    drops = {"empty_endpoint": 0, "self_loop": 0, "duplicate": 0}
    for t in extraction.triples:
        ks, ko = key_of(t.subject), key_of(t.object)
        if not ks or not ko:
            drops["empty_endpoint"] += 1
            continue
        see(ks, t.subject)
        see(ko, t.object)
        chunk_keys[t.chunk].update((ks, ko))  # the chunk describes both ends
        if ks == ko:
            drops["self_loop"] += 1
            continue
        kept.append((ks, ko, t))

    keys = sorted(surfaces)
    ids = {k: i for i, k in enumerate(keys)}
    names, alias_lists = [], []
    for k in keys:
        counts, seen = surfaces[k], first_seen[k]
        name = min(counts, key=lambda s: (-counts[s], seen[s]))
        names.append(name)
        alias_lists.append(sorted(set(counts) - {name}))
    for alias, key in sorted(aliases.items()):
        if key in ids and alias not in ids:
            alias_lists[ids[key]] = sorted(set(alias_lists[ids[key]]) | {alias})

    rows = np.repeat(np.arange(n_chunks, dtype=np.int64), [len(s) for s in chunk_keys])
    cols = np.fromiter((ids[k] for s in chunk_keys for k in sorted(s)), dtype=np.int64, count=rows.shape[0])
    incidence = sp.csr_matrix((np.ones(rows.shape[0], dtype=np.float32), (rows, cols)), shape=(n_chunks, len(keys)))
    incidence.sort_indices()

    predicates: dict[str, int] = {}
    texts: dict[str, int] = {}
    seen_rel: set[tuple[int, int, int, int]] = set()
    cols_out: list[tuple[int, int, int, int, int]] = []
    for ks, ko, t in kept:
        p = predicates.setdefault(" ".join(t.predicate.split()), len(predicates))
        x = texts.setdefault(" ".join(t.text.split()), len(texts))
        sig = (ids[ks], ids[ko], p, x)
        if sig in seen_rel:
            drops["duplicate"] += 1
            continue
        seen_rel.add(sig)
        cols_out.append((*sig, t.chunk))
    rel = np.asarray(cols_out, dtype=np.int64).reshape(-1, 5)
    indptr, nbr, rid = adjacency(len(keys), rel[:, 0], rel[:, 1])
    kg = KnowledgeGraph(
        keys=keys, names=names, aliases=alias_lists, incidence=incidence,
        rel_subject=rel[:, 0].copy(), rel_object=rel[:, 1].copy(), rel_predicate=rel[:, 2].copy(),
        rel_text=rel[:, 3].copy(), rel_chunk=rel[:, 4].copy(),
        predicates=list(predicates), texts=list(texts),
        adj_indptr=indptr, adj_indices=nbr, adj_relation=rid,
    )
    return kg, drops


def check_embeddings(kg: KnowledgeGraph, dim: int | None = None) -> None:
    """Raise ``ValueError`` unless both embedding matrices are present and match the graph."""
    for name, mat, rows in (("entity_emb", kg.entity_emb, kg.n_entities), ("text_emb", kg.text_emb, len(kg.texts))):
        if mat is None or mat.ndim != 2 or mat.shape[0] != rows or (dim is not None and mat.shape[1] != dim):
            got = None if mat is None else mat.shape
            raise ValueError(f"{name} must be [{rows}, {dim or 'd'}], got {got}")

