"""SpectRAG: a batched graph-retrieval tensor engine.

Offline: :func:`build_index` turns a corpus into a persisted index; :func:`add_documents` adds
documents to one; :func:`load_index` opens it.
"""

from engine.config import BM25Config, ChunkConfig, EmbedConfig, IndexConfig, load_config
from engine.errors import ConfigError, CorpusError, IndexFormatError, SpectragError
from engine.index.build import build_index
from engine.index.incremental import add_documents
from engine.index.store import Index, load_index

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
