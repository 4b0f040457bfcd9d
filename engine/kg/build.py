"""Offline step 7: the knowledge graph of an index (source -> merge -> embed).

Sources, in order of preference (``kg.source = auto`` takes the first available):

1. an OpenIE extraction file (:mod:`spectrag.extract.openie`, ``kg.openie_file`` / ``--openie``);
2. the LLM-free extractor with co-occurrence relations (:mod:`spectrag.extract.relations`);
3. an LLM (``kg.source = llm``): named entities and triples per chunk from the ``[llm]``
   endpoint (:func:`spectrag.llm.tasks.openie_records`, run by the build), read as an OpenIE file.

Entity names and relation texts are embedded with the build's embedder (content-hash cache
included), so query vectors and KG vectors share one space.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from spectrag.config import KGConfig
from spectrag.errors import ConfigError
from spectrag.extract.openie import load_openie, openie_extraction
from spectrag.extract.relations import acronym_aliases, extract
from spectrag.kg.graph import KnowledgeGraph, assemble
from spectrag.types import Chunk, Extraction

LLM_MISSING = ("kg.source = 'llm' needs an LLM endpoint: pass --llm-base-url URL (and --llm-model NAME), or set "
               "base_url in the [llm] table; or use kg.source = 'openie' with an extraction file, or 'extractor'")
NEEDS_MODEL = ("kg.enabled needs the embedding model, but this build was given precomputed "
               "embeddings; set kg.enabled = false (or embed with the model)")


def check_kg_inputs(config: KGConfig, *, embeddings_supplied: bool, has_llm: bool = False) -> None:
    """Refuse, before a build does any work, a knowledge graph it could not build: the LLM
    source without an LLM, a missing OpenIE file, or supplied embeddings (names and relations
    need the model)."""
    if not config.enabled:
        return
    if config.source == "llm" and not has_llm:
        raise ConfigError(LLM_MISSING)
    if config.source in ("openie", "auto") and config.openie_file and not Path(config.openie_file).is_file():
        raise ConfigError(f"kg.openie_file {config.openie_file} does not exist")
    if embeddings_supplied:
        raise ConfigError(NEEDS_MODEL)


def llm_extraction(chunks: Sequence[Chunk], openie_docs: list[dict] | None) -> Extraction:
    """Entities and triples from the LLM's OpenIE records (SA-RAG 3.4), read as an OpenIE file is."""
    if openie_docs is None:
        raise ConfigError(LLM_MISSING)
    return openie_extraction(openie_docs, [c.text for c in chunks], [c.title for c in chunks], source="llm")


def extraction(chunks: Sequence[Chunk], config: KGConfig, openie_docs: list[dict] | None = None) -> Extraction:
    """The configured source's entities and triples on the chunks (``openie_docs``: the LLM's
    records, for ``kg.source = llm``)."""
    source = config.source
    if source == "auto":
        source = "openie" if config.openie_file else "extractor"
    if source == "openie":
        path = Path(config.openie_file)
        if not path.is_file():
            raise ConfigError(f"kg.openie_file {path} does not exist")
        ext = load_openie(path, [c.text for c in chunks], [c.title for c in chunks])
    elif source == "extractor":
        titles = sorted({c.title for c in chunks if c.title})
        ext = extract([c.text for c in chunks], titles, window=config.window)
    else:
        ext = llm_extraction(chunks, openie_docs)
    ext.facts = {"source": source, **ext.facts}
    return ext


def build_kg(
    chunks: Sequence[Chunk],
    config: KGConfig,
    *,
    encode: Callable[..., np.ndarray] | None,
    progress: bool = False,
    openie_docs: list[dict] | None = None,
) -> tuple[KnowledgeGraph, dict[str, Any]]:
    """The knowledge graph of ``chunks`` with embeddings; the dict is the manifest's ``kg``
    entry (source facts, counts, drops, seconds). ``encode`` is the build's
    ``Embedder.encode`` (texts -> float32 ``[n, d]``, L2-normalized); ``openie_docs`` the LLM's
    OpenIE records (``kg.source = llm``)."""
    if encode is None:
        raise ConfigError(NEEDS_MODEL)
    seconds: dict[str, float] = {}
    tick = time.perf_counter()
    ext = extraction(chunks, config, openie_docs)
    aliases, ambiguous = acronym_aliases([c.text for c in chunks]) if config.acronym_aliases else ({}, 0)
    kg, drops = assemble(ext, len(chunks), aliases)
    seconds["extract"] = round(time.perf_counter() - tick, 3)
    tick = time.perf_counter()
    texts = kg.names + kg.texts
    vectors = encode(texts, show_progress=progress) if texts else np.zeros((0, 1), np.float32)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    kg.entity_emb, kg.text_emb = vectors[: kg.n_entities], vectors[kg.n_entities :]
    seconds["embed"] = round(time.perf_counter() - tick, 3)
    facts = {
        **ext.facts,
        **kg.counts(),
        "dropped": drops,
        "acronym_aliases": {"defined": len(aliases), "ambiguous": ambiguous},
        "embedded": {"entity": "name", "relation": "relation text (subject relation object, or the sentence)"},
        "seconds": seconds,
    }
    return kg, facts
