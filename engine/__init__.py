"""SpectRAG: a batched graph-retrieval tensor engine.

Offline, in the order data flows (``engine/`` installs as ``spectrag``)::

    index/    load -> chunk -> embed -> dense (FAISS) and lexical (BM25)
    extract/  entities, titles, OpenIE, relations    (shared by graph/ and kg/)
    graph/    signals -> fuse -> spectrum, the relational graph
    kg/       the knowledge graph for spreading activation
    build.py  build_index        store.py  the index on disk
    incremental/  add_documents, delete_documents, update_documents, compact_index

Online, for a batch of queries at once::

    seed/ -> expand/ -> propagate/ -> rescore/ -> select/     stages on tensors
    state.py (QueryState)   pipeline.py (run)   retriever.py (Retriever)   contexts.py

Normal use needs only the names below (``__all__``; ``dir(spectrag)`` lists them)::

    index = spectrag.build_index("docs/", "my-index")
    ctx = spectrag.Retriever("my-index").retrieve("who built it?", k=5)   # 5 hits with text
"""

import os as _os
import sys as _sys

# OpenMP's default wait policy keeps idle worker threads spinning after every parallel region;
# on a machine other processes load they steal the cores the work needs, and two threads ran
# many times slower than one (bench/results/peers_cpu.md). Sleeping workers cost little on an
# idle machine. The policy is read when torch's OpenMP runtime starts, so it can only be set
# before torch is imported; an explicit OMP_WAIT_POLICY is kept.
if "torch" not in _sys.modules:
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
del _os, _sys

from spectrag.config import (  # noqa: E402
    ActivationConfig,
    BaselineSelectConfig,
    BM25Config,
    BridgeConfig,
    ChunkConfig,
    EmbedConfig,
    ExpandConfig,
    GraphConfig,
    IndexConfig,
    KGConfig,
    LLMConfig,
    PropagateConfig,
    RetrieverConfig,
    SeedConfig,
    SelectConfig,
    load_config,
    load_llm_config,
    load_retriever_config,
)
from spectrag.errors import ConfigError, CorpusError, IndexFormatError, SpectragError  # noqa: E402

# Imported on first use (PEP 562): the build pulls in tiktoken, bm25s, pyahocorasick and FAISS,
# which the kernels and the device stages must not need (a GPU machine may have none of them).
_LAZY = {
    "build_index": "spectrag.build",
    "add_documents": "spectrag.incremental",
    "delete_documents": "spectrag.incremental",
    "update_documents": "spectrag.incremental",
    "compact_index": "spectrag.incremental",
    "Index": "spectrag.store",
    "load_index": "spectrag.store",
    "Retriever": "spectrag.retriever",
    "Context": "spectrag.contexts",
    "ContextChunk": "spectrag.contexts",
    "Hit": "spectrag.contexts",
    "QueryState": "spectrag.state",
    "run": "spectrag.pipeline",
    "evaluate": "spectrag.eval.runner",
    "answer": "spectrag.generate",
    "LLMClient": "spectrag.llm",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'spectrag' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API (the lazy names included), not the modules the package body uses."""
    return sorted([*__all__, "__version__"])


__version__ = "0.1.0"

__all__ = [
    "ActivationConfig",
    "BM25Config",
    "BaselineSelectConfig",
    "BridgeConfig",
    "ChunkConfig",
    "ConfigError",
    "Context",
    "ContextChunk",
    "CorpusError",
    "EmbedConfig",
    "ExpandConfig",
    "GraphConfig",
    "Hit",
    "Index",
    "IndexConfig",
    "IndexFormatError",
    "KGConfig",
    "LLMClient",
    "LLMConfig",
    "PropagateConfig",
    "QueryState",
    "Retriever",
    "RetrieverConfig",
    "SeedConfig",
    "SelectConfig",
    "SpectragError",
    "add_documents",
    "answer",
    "build_index",
    "compact_index",
    "delete_documents",
    "evaluate",
    "load_config",
    "load_index",
    "load_llm_config",
    "load_retriever_config",
    "run",
    "update_documents",
]
