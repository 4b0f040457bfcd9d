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
from spectrag.index.lexical import TOKEN_FILES, BM25Index
from spectrag.kg.store import load_kg
from spectrag.manifest import CHUNKS, EMBEDDINGS, FORMAT, FORMAT_VERSION, MANIFEST, check_listing, check_manifest
from spectrag.types import Chunk
from spectrag.util.checks import check_floats, load_npy


class IndexNote(UserWarning):
    """Something about a loaded index the user may want to act on (it still loads)."""


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


_CHUNK_FIELDS = {"doc_id": str, "title": str, "url": str, "text": str, "n_tokens": int, "start": int, "end": int}


def _chunk_record(line: str, lineno: int) -> Chunk:
    """One chunk-table line, its fields type-checked: ``id`` is the line's position, ``text``
    the slice ``[start, end)`` of its document (so ``end - start`` characters)."""
    row = json.loads(line)
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    if set(row) != {"id", "section", *_CHUNK_FIELDS}:
        raise ValueError(f"fields {sorted(row)}, expected {sorted({'id', 'section', *_CHUNK_FIELDS})}")
    if row.pop("id") != lineno - 1:
        raise ValueError(f"chunk id is not {lineno - 1}")
    for key, kind in _CHUNK_FIELDS.items():
        if not isinstance(row[key], kind) or isinstance(row[key], bool):
            raise ValueError(f"field {key!r} is not a {kind.__name__}")
    if not isinstance(row["section"], list) or not all(isinstance(s, str) for s in row["section"]):
        raise ValueError("field 'section' is not a list of strings")
    if not (0 <= row["start"] <= row["end"] and row["end"] - row["start"] == len(row["text"]) and row["n_tokens"] >= 0):
        raise ValueError("start, end and text do not describe a slice [start, end) of the document")
    row["section"] = tuple(row["section"])
    return Chunk(**row)


def read_chunks(path: Path, n: int | None = None) -> list[Chunk]:
    """The chunk table (``n`` records when given), every record checked (:func:`_chunk_record`)."""
    chunks = []
    with path.open(encoding="utf-8") as fh:
        lineno = 0
        try:
            for lineno, line in enumerate(fh, start=1):
                chunks.append(_chunk_record(line, lineno))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise IndexFormatError(f"{path}: bad chunk record on line {lineno + (lineno == 0)}: {exc}") from None
    if n is not None and len(chunks) != n:
        raise IndexFormatError(f"{path}: {len(chunks)} chunk records, the manifest counts {n}")
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
    if path.is_symlink():
        raise IndexFormatError(f"{path} is a symbolic link (an index folder holds plain files only)")
    if not path.is_file():
        raise IndexFormatError(
            f"{folder}: not a SpectRAG index (no {MANIFEST}; an interrupted build never leaves one)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise IndexFormatError(f"{path}: corrupt manifest ({type(exc).__name__}: {str(exc)[:200]})") from None
    check_manifest(manifest, str(path))
    paths = check_listing(folder, manifest)  # every file of the format listed, inside the folder
    for rel, info in manifest["files"].items():
        file = paths[rel]
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
        files = manifest["files"]  # only listed files are read (read_manifest checked them)
        n, dim = manifest["counts"]["chunks"], manifest["embedding"]["dim"]
        self.chunks = read_chunks(self.path / CHUNKS, n)
        self.embeddings = check_floats(load_npy(self.path / EMBEDDINGS, f"{self.path / EMBEDDINGS}"),
                                       f"{self.path / EMBEDDINGS}", (n, dim))
        if self.embeddings.dtype != np.float32:
            raise IndexFormatError(f"{self.path / EMBEDDINGS}: dtype {self.embeddings.dtype}, the manifest says float32")
        self.dense = DenseIndex.load(self.path, self.embeddings, device=device)
        self.bm25 = BM25Index.load(self.path, self.config.bm25, n_chunks=n,
                                   tokens=all(f"{BM25Index.FOLDER}/{t}" in files for t in TOKEN_FILES))
        self.graph = None
        if manifest.get("graph"):
            self.graph = load_graph(self.path, n=n, signals=list(manifest["graph"]["signal_edges"]),
                                    relations="graph/relations.indptr.npy" in files,
                                    dim=manifest["graph"]["spectrum"]["dim"])
            if self.graph["relations"] is None:  # an index written before the relational graph was stored
                warnings.warn(f"note: {self.path} was built before graph/relations.* were stored; the relational "
                              "graph is computed from the stored signals once per load (rebuild the index to store it)",
                              IndexNote, stacklevel=2)
                self.graph["relations"] = relational_graph(self.graph["signals"], self.config.graph.signal_weights(),
                                                           len(self.chunks))
        self.kg = None  # knowledge graph for spreading activation (kg/, engine/kg/store.py)
        if manifest.get("kg"):
            self.kg = load_kg(self.path, len(self.chunks), dim=dim)
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
            embedder = Embedder(replace(self.config.embed, cache_dir=""))
            check_model(self.manifest, embedder.fingerprint, embedder.dim, self.path)
            self._embedder = embedder
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


def check_model(manifest: dict[str, Any], fingerprint: str, dim: int, where: Path) -> None:
    """The model that embeds queries must be the one that embedded the chunks: same weights
    (fingerprint, :func:`spectrag.index.embed.model_fingerprint`) and dimension."""
    info = manifest["embedding"]
    if info["fingerprint"] != fingerprint or info["dim"] != dim:
        raise IndexFormatError(
            f"{where}: the chunks were embedded by {info['model']!r} (fingerprint {info['fingerprint']}, "
            f"{info['dim']}-d), but the model that would embed the queries has fingerprint {fingerprint} "
            f"({dim}-d); its vectors would not be comparable. Install the same model or rebuild the index"
        )


def load_index(path: str | Path, *, verify: bool = True, device: str = "cpu") -> Index:
    """Open the index at ``path``; :class:`IndexFormatError` names whatever is wrong with it."""
    path = Path(path)
    return Index(path, read_manifest(path, verify=verify), device=device)
