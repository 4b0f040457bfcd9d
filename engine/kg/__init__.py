"""Offline step 7: the knowledge graph for spreading activation (SA-RAG 3.4), in data order:
sources (``openie``, ``extract``) -> ``graph`` (merge entities, relations as arrays) ->
``build`` (embed) -> ``store`` (``kg/`` in the index directory)."""

from spectrag.kg.build import build_kg
from spectrag.kg.graph import KnowledgeGraph, assemble
from spectrag.kg.store import load_kg, save_kg
from spectrag.types import Extraction, Triple

__all__ = ["Extraction", "KnowledgeGraph", "Triple", "assemble", "build_kg", "load_kg", "save_kg"]
