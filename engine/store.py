"""Stage 5 of the offline build: the persisted, versioned index directory, and :class:`Index`.

Layout of an index directory::

    manifest.json     format version, config, tokenizer, model, counts, checksums, versions
    chunks.jsonl      the chunk table, one JSON object per chunk, in chunk-id order
    embeddings.npy    float32 [n, d], L2-normalized (memory-mapped on load)
    dense.faiss       FAISS IndexFlatIP over the same vectors
    bm25/             BM25 term x chunk score matrix (CSR as .npy), vocabulary (JSON), chunk token ids
    kg/               knowledge graph for spreading activation, when built (engine/kg/store.py)

No pickle anywhere. A build writes into a hidden temporary sibling folder and renames it into
place at the end, so an interrupted build never leaves a folder that loads. ``manifest.json``
is written last and lists a SHA-256 for every other file; loading checks the format version,
that every listed file exists, and (by default) every checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from spectrag.config import IndexConfig
from spectrag.errors import IndexFormatError, SpectragError
from spectrag.graph.build import load_graph
from spectrag.graph.relational import relational_graph
from spectrag.index.dense import DenseIndex
from spectrag.index.embed import Embedder
from spectrag.index.lexical import BM25Index
from spectrag.kg.store import load_kg
from spectrag.types import Chunk


class IndexNote(UserWarning):
    """Something about a loaded index the user may want to act on (it still loads)."""


FORMAT = "spectrag-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
EMBEDDINGS = "embeddings.npy"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as fh:
                os.fsync(fh.fileno())


def refuse_existing(out_dir: Path, *, overwrite: bool) -> None:
    if Path(out_dir).exists() and not overwrite:
        raise SpectragError(f"{out_dir} already exists; pass --overwrite (overwrite=True) to replace it")


@contextmanager
def atomic_directory(out_dir: Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; on success it replaces ``out_dir``.

    On any exception the temporary folder is removed and ``out_dir`` is left as it was.
    """
    out_dir = Path(out_dir)
    refuse_existing(out_dir, overwrite=overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        _fsync_tree(tmp)
        old = None
        if out_dir.exists():
            old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
            out_dir.rename(old)
        tmp.rename(out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_chunks(path: Path, chunks: list[Chunk]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i, c in enumerate(chunks):
            row = {"id": i, **asdict(c), "section": list(c.section)}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_chunks(path: Path) -> list[Chunk]:
    chunks = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            try:
                row = json.loads(line)
                row.pop("id")
                row["section"] = tuple(row["section"])
                chunks.append(Chunk(**row))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise IndexFormatError(f"{path}: bad chunk record on line {lineno}: {exc}") from None
    return chunks


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        files[rel] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, **manifest, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_manifest(folder: Path, *, verify: bool = True) -> dict[str, Any]:
    """The manifest of the index at ``folder``, after checking version, files and checksums."""
    folder = Path(folder)
    if not folder.is_dir():
        raise IndexFormatError(f"{folder}: no such index folder")
    path = folder / MANIFEST
    if not path.exists():
        raise IndexFormatError(
            f"{folder}: not a SpectRAG index (no {MANIFEST}; an interrupted build never leaves one)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IndexFormatError(f"{path}: corrupt manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise IndexFormatError(f"{path}: not a SpectRAG index manifest (format is not {FORMAT!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise IndexFormatError(
            f"{folder}: index format version {version}, this engine reads version {FORMAT_VERSION}; "
            "rebuild the index with `spectrag index`"
        )
    for rel, info in manifest.get("files", {}).items():
        file = folder / rel
        if not file.is_file():
            raise IndexFormatError(f"{folder}: file {rel} listed in the manifest is missing")
        if file.stat().st_size != info["bytes"]:
            raise IndexFormatError(
                f"{folder}: file {rel} has {file.stat().st_size} bytes, the manifest says {info['bytes']}"
            )
        if verify and sha256_file(file) != info["sha256"]:
            raise IndexFormatError(f"{folder}: file {rel} is corrupt (SHA-256 does not match the manifest)")
    return manifest


class Index:
    """A loaded index: chunk table, embeddings, dense and BM25 search.

    Shapes: ``embeddings`` float32 ``[n, d]`` (memory-mapped); searches take ``B`` queries and
    return scores and chunk ids ``[B, k]``.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], *, device: str = "cpu") -> None:
        self.path = Path(path)
        self.manifest = manifest
        self.config = IndexConfig.from_dict(manifest["config"], source=str(self.path / MANIFEST))
        self.chunks = read_chunks(self.path / CHUNKS)
        self.embeddings = np.load(self.path / EMBEDDINGS, mmap_mode="r")
        if self.embeddings.shape[0] != len(self.chunks):
            raise IndexFormatError(
                f"{self.path}: {len(self.chunks)} chunks but {self.embeddings.shape[0]} embeddings"
            )
        self.dense = DenseIndex.load(self.path, self.embeddings, device=device)
        self.bm25 = BM25Index.load(self.path, self.config.bm25)
        self.graph = None
        if manifest.get("graph"):
            self.graph = load_graph(self.path)
            if self.graph["relations"] is None:  # an index written before the relational graph was stored
                warnings.warn(f"note: {self.path} was built before graph/relations.* were stored; the relational "
                              "graph is computed from the stored signals once per load (rebuild the index to store it)",
                              IndexNote, stacklevel=2)
                self.graph["relations"] = relational_graph(self.graph["signals"], self.config.graph.signal_weights(),
                                                           len(self.chunks))
        self.kg = None  # knowledge graph for spreading activation (kg/, engine/kg/store.py)
        if manifest.get("kg"):
            self.kg = load_kg(self.path, len(self.chunks))
        self._embedder = None

    def __len__(self) -> int:
        return len(self.chunks)

    def __repr__(self) -> str:
        c = self.manifest["counts"]
        return f"Index({str(self.path)!r}, documents={c['documents']}, chunks={c['chunks']})"

    @property
    def embedder(self):
        """The index's embedding model, loaded on first use."""
        if self._embedder is None:
            if self.manifest["embedding"].get("fingerprint") == "supplied":
                raise SpectragError(
                    f"{self.path}: built from embeddings supplied by the caller; pass query vectors, not strings"
                )
            # queries are rarely repeated: skip the content-hash cache on this path
            self._embedder = Embedder(replace(self.config.embed, cache_dir=""))
        return self._embedder

    def embed_queries(self, queries: list[str]) -> np.ndarray:
        """Shapes: ``B`` strings -> float32 ``[B, d]``."""
        return self.embedder.encode(list(queries))

    def dense_search(self, queries: list[str] | np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Exact inner-product top-k for query strings or query vectors ``[B, d]``."""
        xq = queries if isinstance(queries, np.ndarray) else self.embed_queries(queries)
        return self.dense.search(xq, k)

    def bm25_search(self, queries: list[str], k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-k; slots beyond the matching chunks hold id -1."""
        return self.bm25.search(list(queries), k)


def load_index(path: str | Path, *, verify: bool = True, device: str = "cpu") -> Index:
    """Open the index at ``path``; :class:`IndexFormatError` names whatever is wrong with it."""
    path = Path(path)
    return Index(path, read_manifest(path, verify=verify), device=device)
