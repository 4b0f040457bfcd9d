"""The knowledge graph on disk, under ``kg/`` in the index directory (inside the build's atomic
temporary folder, so the manifest lists a SHA-256 for every file)::

    kg/entities.json                     {"keys", "names", "aliases"} per entity
    kg/relations.json                    {"predicates", "texts"} (distinct strings)
    kg/incidence.{indptr,indices}.npy    chunk -> entity "describes" links, CSR [n_chunks, n_ent]
    kg/relations.{subject,object,predicate,text,chunk}.npy   int64 [n_rel] (COO)
    kg/adjacency.{indptr,indices,relation}.npy   both directions of every relation, CSR over entities
    kg/entity_embeddings.npy             float32 [n_ent, d], L2-normalized (memory-mapped on load)
    kg/text_embeddings.npy               float32 [n_text, d], L2-normalized (one per relation text)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spectrag.errors import IndexFormatError
from spectrag.kg.graph import KnowledgeGraph, check_embeddings

FOLDER = "kg"
_REL = ("subject", "object", "predicate", "text", "chunk")
_ADJ = ("indptr", "indices", "relation")


def save_kg(folder: Path, kg: KnowledgeGraph) -> None:
    """Write ``kg/`` under ``folder`` (embeddings required)."""
    check_embeddings(kg)
    out = Path(folder) / FOLDER
    out.mkdir(parents=True)
    dump = lambda name, obj: (out / name).write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")  # noqa: E731
    dump("entities.json", {"keys": kg.keys, "names": kg.names, "aliases": kg.aliases})
    dump("relations.json", {"predicates": kg.predicates, "texts": kg.texts})
    np.save(out / "incidence.indptr.npy", kg.incidence.indptr.astype(np.int64))
    np.save(out / "incidence.indices.npy", kg.incidence.indices.astype(np.int64))
    for name in _REL:
        np.save(out / f"relations.{name}.npy", getattr(kg, f"rel_{name}").astype(np.int64))
    for name in _ADJ:
        np.save(out / f"adjacency.{name}.npy", getattr(kg, f"adj_{name}").astype(np.int64))
    np.save(out / "entity_embeddings.npy", np.ascontiguousarray(kg.entity_emb, dtype=np.float32))
    np.save(out / "text_embeddings.npy", np.ascontiguousarray(kg.text_emb, dtype=np.float32))


def load_kg(folder: Path, n_chunks: int) -> KnowledgeGraph:
    """The graph of the index at ``folder``, arrays memory-mapped; :class:`IndexFormatError`
    when its parts disagree."""
    src = Path(folder) / FOLDER
    load = lambda name: np.load(src / name, mmap_mode="r")  # noqa: E731
    try:
        ents = json.loads((src / "entities.json").read_text(encoding="utf-8"))
        rels = json.loads((src / "relations.json").read_text(encoding="utf-8"))
        indptr = load("incidence.indptr.npy")
        indices = load("incidence.indices.npy")
        kg = KnowledgeGraph(
            keys=ents["keys"], names=ents["names"], aliases=ents["aliases"],
            incidence=sp.csr_matrix((np.ones(indices.shape[0], dtype=np.float32), indices, indptr),
                                    shape=(n_chunks, len(ents["keys"]))),
            **{f"rel_{name}": load(f"relations.{name}.npy") for name in _REL},
            predicates=rels["predicates"], texts=rels["texts"],
            **{f"adj_{name}": load(f"adjacency.{name}.npy") for name in _ADJ},
            entity_emb=load("entity_embeddings.npy"), text_emb=load("text_embeddings.npy"),
        )
        check_embeddings(kg)
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{folder}: unreadable knowledge graph under {FOLDER}/: {exc}") from None
    if kg.adj_indptr.shape[0] != kg.n_entities + 1 or kg.adj_indices.shape[0] != 2 * kg.n_relations:
        raise IndexFormatError(f"{folder}: {FOLDER}/adjacency does not match {kg.n_entities} entities, {kg.n_relations} relations")
    return kg
