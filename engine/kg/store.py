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
from spectrag.util.checks import check_array, check_csr, check_floats, check_ints, check_strings, load_npy

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


def load_kg(folder: Path, n_chunks: int, *, dim: int | None = None) -> KnowledgeGraph:
    """The graph of the index at ``folder``, arrays memory-mapped; :class:`IndexFormatError`
    when a part is malformed or the parts disagree: every id array in range of what it points
    at (entities, predicates, relation texts, chunks, relations), the CSR row pointers sound,
    the embeddings ``[rows, dim]`` and L2-normalized."""
    src = Path(folder) / FOLDER
    where = f"{folder}: {FOLDER}/"
    load = lambda name: load_npy(src / name, f"{where}{name}")  # noqa: E731
    try:
        ents = json.loads((src / "entities.json").read_text(encoding="utf-8"))
        rels = json.loads((src / "relations.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise IndexFormatError(f"{where}: unreadable knowledge graph: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(ents, dict) or not isinstance(rels, dict):
        raise IndexFormatError(f"{where}entities.json / relations.json: expected JSON objects")
    keys = check_strings(ents.get("keys"), f"{where}entities.json keys")
    n_ent = len(keys)
    names = check_strings(ents.get("names"), f"{where}entities.json names", length=n_ent)
    aliases = ents.get("aliases")
    if not isinstance(aliases, list) or len(aliases) != n_ent:
        raise IndexFormatError(f"{where}entities.json aliases: expected {n_ent} lists of strings")
    for a in aliases:
        check_strings(a, f"{where}entities.json aliases")
    predicates = check_strings(rels.get("predicates"), f"{where}relations.json predicates")
    texts = check_strings(rels.get("texts"), f"{where}relations.json texts")
    indptr, indices = load("incidence.indptr.npy"), load("incidence.indices.npy")
    check_csr(indptr, indices, None, f"{where}incidence.{{indptr,indices}}.npy", (n_chunks, n_ent))
    rel = {name: load(f"relations.{name}.npy") for name in _REL}
    n_rel = check_array(rel["subject"], f"{where}relations.subject.npy", kinds="iu", shape=(None,)).shape[0]
    for name, hi in (("subject", n_ent), ("object", n_ent), ("predicate", len(predicates)), ("text", len(texts)),
                     ("chunk", n_chunks)):
        check_ints(rel[name], f"{where}relations.{name}.npy", (n_rel,), 0, hi)
    adj = {name: load(f"adjacency.{name}.npy") for name in _ADJ}
    check_csr(adj["indptr"], adj["indices"], None, f"{where}adjacency.{{indptr,indices}}.npy", (n_ent, n_ent))
    if adj["indices"].shape[0] != 2 * n_rel:
        raise IndexFormatError(f"{folder}: {FOLDER}/adjacency does not match {n_ent} entities, {n_rel} relations")
    check_ints(adj["relation"], f"{where}adjacency.relation.npy", (2 * n_rel,), 0, max(n_rel, 1))
    entity_emb = check_floats(load("entity_embeddings.npy"), f"{where}entity_embeddings.npy", (n_ent, dim),
                              unit_rows=True)
    text_emb = check_floats(load("text_embeddings.npy"), f"{where}text_embeddings.npy", (len(texts), entity_emb.shape[1]),
                            unit_rows=True)
    return KnowledgeGraph(
        keys=keys, names=names, aliases=aliases,
        incidence=sp.csr_matrix((np.ones(indices.shape[0], dtype=np.float32), indices, indptr), shape=(n_chunks, n_ent)),
        **{f"rel_{name}": rel[name] for name in _REL},
        predicates=predicates, texts=texts,
        **{f"adj_{name}": adj[name] for name in _ADJ},
        entity_emb=entity_emb, text_emb=text_emb,
    )
