"""The content-hash cache of chunk vectors (:class:`EmbeddingCache`): a re-index embeds only the
chunks whose text changed. Keyed by the model (fingerprint, dimension, padding recipe) and the
SHA-256 of the text; used by :class:`spectrag.index.embed.Embedder`."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spectrag.errors import ConfigError
from spectrag.util.io import printable_path


# Ours over sqlite3 (standard library): one table of raw float32 bytes; diskcache or sqlitedict
# would add a dependency (and pickle values by default) for the same table.
class EmbeddingCache:
    """SQLite store ``(model key, sha256(text)) -> float32 vector``; safe to share between runs."""

    def __init__(self, folder: str | Path, model_key: str, *, setting: str = "embed.cache_dir") -> None:
        folder = Path(folder)
        self.path = folder / "embeddings.sqlite"
        self.model_key = model_key
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS vectors (model TEXT, hash BLOB, vector BLOB, "
                "PRIMARY KEY (model, hash))"
            )
            with self._db:  # a write, rolled back: a read-only cache fails here, not after the embedding
                self._db.execute("SAVEPOINT probe")
                self._db.execute("INSERT OR REPLACE INTO vectors VALUES ('', x'', x'')")
                self._db.execute("ROLLBACK TO probe")
        except (OSError, sqlite3.Error) as exc:
            what = "a file, not a folder" if folder.exists() and not folder.is_dir() else (
                getattr(exc, "strerror", None) or str(exc))
            raise ConfigError(f"{setting} {printable_path(folder)}: cannot hold the embedding cache ({what}); "
                              "name a writable folder, or '' to embed without a cache") from None

    @staticmethod
    def text_hash(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    def get(self, hashes: Sequence[bytes], dim: int) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        for lo in range(0, len(hashes), 500):
            part = list(hashes[lo : lo + 500])
            rows = self._db.execute(
                f"SELECT hash, vector FROM vectors WHERE model = ? AND hash IN ({','.join('?' * len(part))})",
                [self.model_key, *part],
            )
            for h, blob in rows:
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape == (dim,):
                    found[h] = vec
        return found

    def put(self, hashes: Sequence[bytes], vectors: np.ndarray) -> None:
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                [(self.model_key, h, v.astype(np.float32).tobytes()) for h, v in zip(hashes, vectors)],
            )

    def close(self) -> None:
        self._db.close()
