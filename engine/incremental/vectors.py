"""Vectors of the chunks an edit adds: given by the caller (an index built from supplied
embeddings), taken from a removed chunk with the same text (an updated document re-embeds only
the chunks whose text changed, with or without the embedding cache), or embedded by the index's
model, opened on first use (a delete embeds nothing)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spectrag.build import check_supplied_unit_rows
from spectrag.errors import CorpusError, SpectragError
from spectrag.index.embed import Embedder
from spectrag.store import Index


class LazyEmbedder:
    """The index's embedding model, opened on the first ``encode`` (and checked against the
    model that embedded the index); ``calls`` and ``texts`` count what it embedded."""

    def __init__(self, old: Index) -> None:
        self.old, self._model, self.calls, self.texts, self.cache_hits = old, None, 0, 0, 0

    def encode(self, texts: list[str], show_progress: bool = False) -> np.ndarray:
        if self._model is None:
            info = self.old.manifest["embedding"]
            model = Embedder(self.old.config.embed)
            if model.fingerprint != info.get("fingerprint"):
                model.close()
                raise SpectragError(
                    f"{self.old.path} was embedded by a model with fingerprint {info.get('fingerprint')}, but "
                    f"{self.old.config.embed.model!r} now has {model.fingerprint}; rebuild the index"
                )
            self._model = model
        self.calls += 1
        self.texts += len(texts)
        out = self._model.encode(texts, show_progress=show_progress)
        self.cache_hits += self._model.last_cache_hits
        return out

    def close(self) -> None:
        if self._model is not None:
            self._model.close()


def new_vectors(old: Index, texts: Sequence[str], supplied: np.ndarray | None, reusable: dict[str, int],
                embedder: LazyEmbedder | None, *, progress: bool = False) -> tuple[np.ndarray, int]:
    """Vectors ``[m, d]`` of the new chunks' embedding ``texts`` and how many came from removed
    chunks: ``supplied`` (one row per text) for an index built from supplied embeddings, else
    the old vector of a removed chunk with the same text (``reusable``: text -> old row), else
    ``embedder``."""
    info = old.manifest["embedding"]
    dim = int(info["dim"])
    if not texts and supplied is None:  # a delete
        return np.zeros((0, dim), dtype=np.float32), 0
    if info.get("fingerprint") == "supplied":
        if supplied is None:
            raise SpectragError(f"{old.path} was built from embeddings supplied by the caller: pass embeddings "
                                f"(float32 [{len(texts)}, {dim}]) for the new chunks")
        vectors = np.ascontiguousarray(supplied, dtype=np.float32)
        if vectors.shape != (len(texts), dim):
            raise CorpusError(f"embeddings has shape {vectors.shape}, expected [{len(texts)} new chunks, {dim}]")
        check_supplied_unit_rows(vectors)
        return vectors, 0
    if supplied is not None:
        raise SpectragError(f"embeddings: {old.path} embeds with the model {info['model']!r}; supplied vectors would not "
                            "match its queries (pass embeddings only to an index built from supplied embeddings)")
    vectors = np.zeros((len(texts), dim), dtype=np.float32)
    rows = np.asarray([reusable.get(t, -1) for t in texts], dtype=np.int64)
    hit = rows >= 0
    if hit.any():
        vectors[hit] = np.asarray(old.embeddings)[rows[hit]]
    todo = np.flatnonzero(~hit)
    if todo.size:
        vectors[todo] = embedder.encode([texts[i] for i in todo.tolist()], show_progress=progress)
    return vectors, int(hit.sum())
