"""Stage 5 of the offline build: the persisted, versioned index directory, and :class:`Index`.

Layout of an index directory: ``CURRENT`` names the current generation, ``generations/<id>/``
holds it (:mod:`spectrag.generations`: readers see one whole generation; edits add a new one
and swap ``CURRENT`` last). A generation folder (or a whole index folder written before
generations, read as generation 0) holds::

    manifest.json     format version, config, tokenizer, model, counts, checksums, versions
    chunks.jsonl      the chunk table, one JSON object per chunk, in chunk-id order (``metadata``: its
                      document's, optional; an index written without it loads with none)
    embeddings.npy    float32 [n, d], L2-normalized (memory-mapped on load; every row's norm checked)
    dense.faiss       FAISS IndexFlatIP over the same vectors
    bm25/             BM25 term x chunk score matrix (CSR as .npy), vocabulary (JSON), chunk token ids
    kg/               knowledge graph for spreading activation, when built (engine/kg/store.py)

No pickle anywhere. A new index is written into a hidden temporary sibling folder and renamed
into place at the end; a build over an existing index writes a new generation in it
(:func:`index_writer`), so an interrupted build never leaves a folder that loads and a replaced
index is never missing. ``manifest.json`` is written
last and lists a SHA-256 for every other file. Loading trusts none of it: the manifest's schema
and file listing (:mod:`spectrag.manifest`), then (by default) every checksum, then the
structure of every array each part's loader reads (:mod:`spectrag.util.checks`), so a damaged
file whose checksum was rewritten to match is an :class:`IndexFormatError`, not a crash.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import time
import uuid
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from spectrag.config import IndexConfig
from spectrag.errors import IndexFormatError, SpectragError
from spectrag.generations import FLAT, POINTER, Generation, collect, new_generation, read_pointer, resolve, write_pointer
from spectrag.graph.build import load_graph
from spectrag.graph.relational import relational_graph
from spectrag.index.dense import DenseIndex
from spectrag.index.embed import query_embedder
from spectrag.index.lexical import TOKEN_FILES, BM25Index
from spectrag.kg.store import load_kg
from spectrag.manifest import CHUNKS, EMBEDDINGS, FORMAT, FORMAT_VERSION, MANIFEST, check_listing, check_manifest
from spectrag.types import Chunk
from spectrag.util.checks import check_floats, load_npy
from spectrag.util.console import bar


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


# --- replacing an index: never an empty path, a lock per index, stale temporaries cleaned -----
#
# A new version is written into a hidden sibling ``.<name>.tmp-<pid>-<id>`` and swapped in:
# on Linux by one renameat2(RENAME_EXCHANGE), which exchanges the two folders atomically (the
# path always holds the old or the new index); elsewhere by three renames, tmp -> ``.new-``,
# index -> ``.old-``, ``.new-`` -> index, where a kill between the last two leaves the path empty
# for a moment and the next open of the path (load, build, add) puts the ``.new-`` (complete:
# it was renamed only once written and synced) or else the ``.old-`` folder back
# (:func:`recover_index`). Siblings of these names whose process is gone are removed when a
# build or add of that index starts (:func:`clean_stale`); one of another name is never touched.
# A build or add holds ``.<name>.lock`` (a sibling file, locked by ``filelock``), so
# concurrent adds to one index run one after the other.

_SIBLING = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|new|old)-(?:(?P<pid>\d+)-)?[0-9a-f]{8}")
_LEGACY_STALE_S = 24 * 3600  # a sibling without a process id (an older engine) is stale after a day


def _kill_point(name: str) -> None:
    """Testing hook: ``SPECTRAG_KILL_AT=name`` ends the process here as a kill -9 would."""
    if os.environ.get("SPECTRAG_KILL_AT") == name:
        os._exit(137)


def _sibling(out_dir: Path, kind: str) -> Path:
    return out_dir.parent / f".{out_dir.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _exchange(a: Path, b: Path) -> bool:
    """Exchange the folders ``a`` and ``b`` in one atomic step (Linux renameat2); False where
    the system or the file system cannot (the caller falls back to renames)."""
    if sys.platform != "linux" or os.environ.get("SPECTRAG_NO_RENAME_EXCHANGE"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(tmp: Path, out_dir: Path) -> None:
    """Make the complete folder ``tmp`` the index at ``out_dir`` (see the comment above)."""
    if not out_dir.exists():
        tmp.rename(out_dir)
        return
    if _exchange(tmp, out_dir):  # tmp now holds the old version
        _kill_point("swap:exchanged")
        shutil.rmtree(tmp, ignore_errors=True)
        return
    new, old = _sibling(out_dir, "new"), _sibling(out_dir, "old")
    tmp.rename(new)
    _kill_point("swap:renamed-new")
    out_dir.rename(old)
    _kill_point("swap:between-renames")
    new.rename(out_dir)
    _kill_point("swap:before-cleanup")
    shutil.rmtree(old, ignore_errors=True)


def _siblings(out_dir: Path) -> list[tuple[Path, str, int | None]]:
    """This index's hidden siblings: (path, kind, process id or None)."""
    out = []
    if not out_dir.parent.is_dir():
        return out
    for entry in out_dir.parent.iterdir():
        m = _SIBLING.fullmatch(entry.name)
        if m and m["name"] == out_dir.name and entry.is_dir() and not entry.is_symlink():
            out.append((entry, m["kind"], int(m["pid"]) if m["pid"] else None))
    return sorted(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _stale(path: Path, pid: int | None) -> bool:
    if pid is None:
        try:
            return time.time() - path.stat().st_mtime > _LEGACY_STALE_S
        except OSError:
            return False
    return pid != os.getpid() and not _alive(pid)


def recover_index(out_dir: str | Path) -> bool:
    """Put an interrupted swap right: when ``out_dir`` is missing but a ``.new-`` (complete) or
    ``.old-`` sibling of a process that is gone is there, rename it into place. Returns whether
    it did. Safe to call at any time: it never touches a present index."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        return False
    found = {kind: path for path, kind, pid in _siblings(out_dir) if kind in ("new", "old") and _stale(path, pid)}
    for kind in ("new", "old"):
        if kind in found and (found[kind] / MANIFEST).is_file():
            try:
                found[kind].rename(out_dir)
            except OSError:  # another process recovered it first
                return out_dir.exists()
            return True
    return False


def clean_stale(out_dir: str | Path) -> list[Path]:
    """Remove the hidden siblings of ``out_dir`` left by processes that are gone (after
    :func:`recover_index`), and the generations in it that no reader holds; returns the
    siblings removed. Only names this module makes are touched."""
    out_dir = Path(out_dir)
    recover_index(out_dir)
    removed = []
    for path, _, pid in _siblings(out_dir):
        if _stale(path, pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if out_dir.is_dir():
        collect(out_dir)  # generations no reader holds, and a killed writer's (the caller holds the lock)
    return removed


@contextmanager
def index_lock(out_dir: str | Path, *, what: str = "changed") -> Iterator[None]:
    """Hold the lock of the index at ``out_dir`` (``.<name>.lock`` beside it, by ``filelock``:
    an OS file lock, released when the process ends however it ends): builds and adds of one
    index run one at a time; a second one waits for the first. The file is removed when the
    holder is done, whether the command succeeded or failed (filelock >= 4.3 makes this safe: a
    waiter that locks a file removed meanwhile sees it unlinked and locks the path anew); only a
    killed process leaves it behind, harmlessly."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    path = out_dir.parent / f".{out_dir.name}.lock"
    lock = FileLock(path)
    try:
        lock.acquire()
    except OSError as exc:
        raise SpectragError(f"{out_dir}: cannot create its lock file to be {what} ({exc.strerror})") from None
    try:
        yield
    finally:
        try:
            with suppress(OSError):  # removed while held: no other holder can be using it
                path.unlink()
        finally:
            lock.release()


@contextmanager
def atomic_directory(out_dir: Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; on success it replaces ``out_dir``
    (:func:`_swap_in`: the path never lacks an index, even if the process is killed).

    On any exception the temporary folder is removed and ``out_dir`` is left as it was.
    """
    out_dir = Path(out_dir)
    refuse_existing(out_dir, overwrite=overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(out_dir, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        _kill_point("swap:written")
        _fsync_tree(tmp)
        _kill_point("swap:synced")
        refuse_existing(out_dir, overwrite=overwrite)  # appeared while this one was being built
        _swap_in(tmp, out_dir)
        _kill_point("swap:done")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def is_index_folder(path: Path) -> bool:
    """Whether ``path`` holds an index, in either layout (a generation pointer or a manifest)."""
    return (path / POINTER).is_file() or (path / MANIFEST).is_file()


@contextmanager
def index_writer(out_dir: Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield the folder a build writes its files into. Over an existing index (``overwrite``):
    a new generation of it, made current at the end (readers and servers on the old one keep
    it; :mod:`spectrag.generations`). Otherwise a new index folder (its generation 1), written
    beside ``out_dir`` and renamed into place (:func:`atomic_directory`). The caller holds the
    index lock."""
    out_dir = Path(out_dir)
    if out_dir.is_dir() and not out_dir.is_symlink() and is_index_folder(out_dir):
        refuse_existing(out_dir, overwrite=overwrite)
        with new_generation(out_dir) as folder:
            yield folder
        collect(out_dir)
        return
    with atomic_directory(out_dir, overwrite=overwrite) as tmp:
        folder = tmp / "generations" / "1"
        folder.mkdir(parents=True)
        yield folder
        write_pointer(tmp, "1")


def write_chunks(path: Path, chunks: list[Chunk]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i, c in enumerate(chunks):
            fh.write(json.dumps(c.to_row(i), ensure_ascii=False) + "\n")


_CHUNK_FIELDS = {"doc_id": str, "title": str, "url": str, "text": str, "n_tokens": int, "start": int, "end": int}


def _chunk_record(line: str, lineno: int) -> Chunk:
    """One chunk-table line, its fields type-checked: ``id`` is the line's position, ``text``
    the slice ``[start, end)`` of its document (so ``end - start`` characters)."""
    row = json.loads(line)
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    if set(row) - {"metadata"} != {"id", "section", *_CHUNK_FIELDS}:  # metadata: optional (absent: none)
        raise ValueError(f"fields {sorted(row)}, expected {sorted({'id', 'section', *_CHUNK_FIELDS})} "
                         "and optionally 'metadata'")
    if row.pop("id") != lineno - 1:
        raise ValueError(f"chunk id is not {lineno - 1}")
    for key, kind in _CHUNK_FIELDS.items():
        if not isinstance(row[key], kind) or isinstance(row[key], bool):
            raise ValueError(f"field {key!r} is not a {kind.__name__}")
    if not isinstance(row["section"], list) or not all(isinstance(s, str) for s in row["section"]):
        raise ValueError("field 'section' is not a list of strings")
    if not (0 <= row["start"] <= row["end"] and row["end"] - row["start"] == len(row["text"])):
        raise ValueError("start, end and text do not describe a slice [start, end) of the document")
    if row["n_tokens"] < 1:  # a chunk is never blank
        raise ValueError(f"n_tokens is {row['n_tokens']}; every chunk has at least one token")
    if not isinstance(row.get("metadata", {}), dict):
        raise ValueError("field 'metadata' is not a JSON object")
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


def write_manifest(folder: Path, manifest: dict[str, Any], known: dict[str, dict[str, Any]] | None = None) -> None:
    """``manifest.json`` of ``folder``, listing every file with its size and SHA-256 (``known``:
    the entries of files already hashed, e.g. hard-linked from a verified generation)."""
    files = {}
    known = known or {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        files[rel] = known[rel] if rel in known else {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, **manifest, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_manifest(folder: Path, *, verify: bool = True) -> dict[str, Any]:
    """The manifest of the index at ``folder`` (its current generation), after checking
    version, files and checksums."""
    generation = open_generation(folder)
    try:
        return read_generation_manifest(generation.folder, verify=verify)
    finally:
        generation.release()


def open_generation(path: str | Path) -> Generation:
    """The current generation of the index at ``path``, held (:func:`spectrag.generations.resolve`);
    an interrupted folder swap is put right first."""
    path = Path(path)
    if not path.exists():
        recover_index(path)  # a swap killed between two renames (the fallback path)
    return resolve(path)


def read_generation_manifest(folder: Path, *, verify: bool = True) -> dict[str, Any]:
    """The manifest of the generation folder ``folder``, checked (see :func:`read_manifest`)."""
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
    for rel, info in bar(manifest["files"].items(), desc="checking index files", unit=" files",
                         total=len(manifest["files"]), disable=not verify):
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

    def __init__(self, path: Path, manifest: dict[str, Any], *, device: str = "cpu",
                 chunks: list[Chunk] | None = None, generation: Generation | None = None) -> None:
        self.path = Path(path)  # the index folder; its files are read from ``folder``
        self.generation = generation.id if generation is not None else FLAT
        self.folder = generation.folder if generation is not None else self.path
        self._held = generation
        if generation is not None:  # the generation stays ours until release() or the object goes
            weakref.finalize(self, generation.release)
        self.manifest = manifest
        self.config = IndexConfig.from_dict(_as_built(manifest["config"]), source=str(self.folder / MANIFEST))
        files = manifest["files"]  # only listed files are read (read_manifest checked them)
        n, dim = manifest["counts"]["chunks"], manifest["embedding"]["dim"]
        shown = bar(total=4, desc="loading index", unit=" parts", postfix="chunks")  # a stage of 10^6 chunks takes seconds
        # ``chunks``: the table when the caller holds it (an index edit that has just written it)
        self.chunks = read_chunks(self.folder / CHUNKS, n) if chunks is None or len(chunks) != n else chunks
        self.embeddings = check_floats(load_npy(self.folder / EMBEDDINGS, f"{self.folder / EMBEDDINGS}"),
                                       f"{self.folder / EMBEDDINGS}", (n, dim), unit_rows=True)
        if self.embeddings.dtype != np.float32:
            raise IndexFormatError(f"{self.folder / EMBEDDINGS}: dtype {self.embeddings.dtype}, the manifest says float32")
        shown.update()
        shown.set_postfix_str("dense, BM25")
        self.dense = DenseIndex.load(self.folder, self.embeddings, device=device)
        self.bm25 = BM25Index.load(self.folder, self.config.bm25, n_chunks=n,
                                   tokens=all(f"{BM25Index.FOLDER}/{t}" in files for t in TOKEN_FILES))
        shown.update()
        shown.set_postfix_str("graph")
        self.graph = None
        if manifest.get("graph"):
            self.graph = load_graph(self.folder, n=n, signals=list(manifest["graph"]["signal_edges"]),
                                    relations="graph/relations.indptr.npy" in files,
                                    dim=manifest["graph"]["spectrum"]["dim"],
                                    questions="graph/questions.vectors.npy" in files, embedding_dim=dim,
                                    max_weight=sum(self.config.graph.signal_weights().values()))
            if self.graph["relations"] is None:  # an index written before the relational graph was stored
                warnings.warn(f"note: {self.path} was built before graph/relations.* were stored; the relational "
                              "graph is computed from the stored signals once per load (rebuild the index to store it)",
                              IndexNote, stacklevel=2)
                self.graph["relations"] = relational_graph(self.graph["signals"], self.config.graph.signal_weights(),
                                                           len(self.chunks))
        shown.update()
        shown.set_postfix_str("knowledge graph")
        self.kg = None  # knowledge graph for spreading activation (kg/, engine/kg/store.py)
        if manifest.get("kg"):
            self.kg = load_kg(self.folder, len(self.chunks), dim=dim)
        shown.update()
        shown.close()
        self._embedders: dict = {}  # backend -> Embedder, loaded on first use

    def __len__(self) -> int:
        return len(self.chunks)

    def release(self) -> None:
        """Let writers remove this generation's folder (its files are not read after this; the
        memory maps stay valid). Called when the index goes, if not before."""
        if self._held is not None:
            self._held.release()

    def __repr__(self) -> str:
        c = self.manifest["counts"]
        return f"Index({str(self.path)!r}, generation={self.generation}, documents={c['documents']}, chunks={c['chunks']})"

    @property
    def embedder(self):
        """The index's embedding model (its own ``embed.backend``), loaded on first use."""
        return self.query_embedder()

    def query_embedder(self, backend: str | None = None):
        """The embedding model with ``backend`` (``torch`` / ``onnx`` / ``onnx-int8``: the
        queries on the int8 copy of the ONNX export; None: the index's own), loaded on first
        use and kept."""
        backend = backend or self.config.embed.backend
        if backend not in self._embedders:
            if self.manifest["embedding"].get("fingerprint") == "supplied":
                raise SpectragError(
                    f"{self.path}: built from embeddings supplied by the caller; pass query vectors, not strings"
                )
            # queries are rarely repeated: no content-hash cache of vectors (an ONNX export is still cached)
            # ONNX Runtime: each query at its own length, stacked with those of its length, as many calls
            # at once as threads, one thread each, largest first (bench/results/embed_runtime_cpu_xeon.md)
            int8 = backend == "onnx-int8"
            embedder = query_embedder(replace(self.config.embed, backend="onnx" if int8 else backend), int8=int8)
            check_model(self.manifest, embedder.fingerprint, embedder.dim, self.path)
            self._embedders[backend] = embedder
        return self._embedders[backend]

    def embed_queries(self, queries: list[str], *, backend: str | None = None) -> np.ndarray:
        """Shapes: ``B`` strings -> float32 ``[B, d]``; each query's vector is the same alone and
        in any batch (:meth:`spectrag.index.embed.Embedder.encode_queries`)."""
        return self.query_embedder(backend).encode_queries(list(queries))

    def dense_search(self, queries: list[str] | np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """Exact inner-product top-k for query strings or query vectors ``[B, d]``."""
        xq = queries if isinstance(queries, np.ndarray) else self.embed_queries(queries)
        return self.dense.search(xq, k)

    def bm25_search(self, queries: list[str], k: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-k; slots beyond the matching chunks hold id -1."""
        return self.bm25.search(list(queries), k)


def _as_built(config: dict[str, Any]) -> dict[str, Any]:
    """A manifest's index configuration with the settings it predates at the values its index
    was built with: an index written before ``embed.include_headings`` embedded no headings
    (an edit must embed its new chunks the same way)."""
    embed = config.get("embed") if isinstance(config, dict) else None
    if isinstance(embed, dict) and "include_headings" not in embed:
        return {**config, "embed": {**embed, "include_headings": False}}
    return config


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


def current_generation(path: str | Path) -> str:
    """The id of the generation the index at ``path`` names now (``0``: the flat layout)."""
    return read_pointer(path) or FLAT


def load_index(path: str | Path, *, verify: bool = True, device: str = "cpu",
               chunks: list[Chunk] | None = None) -> Index:
    """Open the index at ``path``: CURRENT is read once and only that generation is read, so an
    edit meanwhile is seen whole or not at all (:mod:`spectrag.generations`); the index holds
    its generation until it goes (or :meth:`Index.release`). :class:`IndexFormatError` names
    whatever is wrong with it. ``chunks``: the chunk table, when the caller has just written it
    (used when its length matches, instead of parsing the file)."""
    path = Path(path)
    generation = open_generation(path)
    try:
        manifest = read_generation_manifest(generation.folder, verify=verify)
        return Index(path, manifest, device=device, generation=generation, chunks=chunks)
    except OSError as exc:  # a file vanished after the manifest was checked (a flat index replaced meanwhile)
        generation.release()
        raise IndexFormatError(f"{path}: could not read {exc.filename or 'a file'} ({exc.strerror}); "
                               "was the index replaced while it was loading? Load it again") from None
    except BaseException:
        generation.release()
        raise
