"""SpectRAG: a batched graph-retrieval tensor engine.

Offline: :func:`build_index` turns a corpus into a persisted index; :func:`add_documents` adds
documents to one; :func:`load_index` opens it.
"""

import importlib

from spectrag.config import BM25Config, ChunkConfig, EmbedConfig, IndexConfig, load_config
from spectrag.errors import ConfigError, CorpusError, IndexFormatError, SpectragError

# imported on first use (PEP 562): the build pulls in tiktoken, bm25s and FAISS, which the query
# kernels and the GPU check must not need (the GPU machine may have none of them)
_LAZY = {"build_index": "spectrag.build", "add_documents": "spectrag.incremental",
         "Index": "spectrag.store", "load_index": "spectrag.store"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "BM25Config",
    "ChunkConfig",
    "ConfigError",
    "CorpusError",
    "EmbedConfig",
    "Index",
    "IndexConfig",
    "IndexFormatError",
    "SpectragError",
    "add_documents",
    "build_index",
    "load_config",
    "load_index",
]
