"""The index manifest's schema and the files of the index format, checked before anything loads.

The manifest is not trusted: a damaged or hand-edited one could list no files (which once
switched the checksums off), list paths outside the index folder, leave out a file that the
loaders would then read unchecked, or lack the keys the loaders read. :func:`check_manifest`
checks its types and required keys; :func:`format_files` says which files an index with this
manifest must have; :func:`check_listing` checks that the manifest lists every one of them, at
paths confined to the folder (relative, no ``..``, no symbolic link anywhere on the way).
Files on disk that the manifest does not list are never loaded; files the manifest lists that
are not part of the format are checksummed like the others and ignored.
"""

from __future__ import annotations

# Ours, not jsonschema or pydantic: a few dozen keys, and errors that name the index file, the
# key path and the value in the project's IndexFormatError wording.
import re
from pathlib import Path
from typing import Any

from spectrag.config import DEFAULT_SIGNAL_WEIGHTS
from spectrag.errors import IndexFormatError, brief
from spectrag.graph.build import FOLDER as GRAPH
from spectrag.graph.stored import GROUPS as UPDATE_GROUPS
from spectrag.index.dense import DenseIndex
from spectrag.index.lexical import TOKEN_FILES, BM25Index
from spectrag.kg.store import FOLDER as KG
from spectrag.kg.store import _ADJ, _REL

FORMAT = "spectrag-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
EMBEDDINGS = "embeddings.npy"

_SHA256 = re.compile(r"[0-9a-f]{64}")
_BM25 = BM25Index.FOLDER


def _int(value: Any, lo: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= lo


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _need(table: Any, where: str, key: str, ok, what: str) -> Any:
    if not isinstance(table, dict) or key not in table:
        raise IndexFormatError(f"{where}: the manifest has no {brief(key)} (a SpectRAG manifest always has one)")
    if not ok(table[key]):
        raise IndexFormatError(f"{where}: manifest field {brief(key)} must be {what}, got {brief(table[key])}")
    return table[key]


def check_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """``manifest`` after checking its types and the keys every reader relies on; raises
    :class:`IndexFormatError` naming the field. ``where``: the manifest's path, for messages."""
    if not isinstance(manifest, dict):
        raise IndexFormatError(f"{where}: not a SpectRAG index manifest (a JSON {type(manifest).__name__}, not an object)")
    if manifest.get("format") != FORMAT:
        raise IndexFormatError(f"{where}: not a SpectRAG index manifest (format is not {FORMAT!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise IndexFormatError(
            f"{Path(where).parent}: index format version {brief(version)}, this engine reads version {FORMAT_VERSION}; "
            "rebuild the index with `spectrag index`"
        )
    is_dict = lambda v: isinstance(v, dict)  # noqa: E731
    is_str = lambda v: isinstance(v, str)  # noqa: E731
    config = _need(manifest, where, "config", is_dict, "a table")
    _need(config, f"{where} (config)", "chunk", is_dict, "a table")  # the build writes every table; info reads this one
    _need(manifest, where, "tokenizer", is_str, "a string")
    source = _need(manifest, where, "source", is_dict, "a table")
    for key in ("path", "format"):
        _need(source, f"{where} (source)", key, is_str, "a string")
    emb = _need(manifest, where, "embedding", is_dict, "a table")
    _need(emb, f"{where} (embedding)", "model", is_str, "a string")
    _need(emb, f"{where} (embedding)", "fingerprint", is_str, "a string")
    _need(emb, f"{where} (embedding)", "dim", lambda v: _int(v, 1), "a positive integer")
    _need(emb, f"{where} (embedding)", "dtype", lambda v: v == "float32", "'float32'")
    counts = _need(manifest, where, "counts", is_dict, "a table")
    for key in ("documents", "chunks", "tokens"):
        _need(counts, f"{where} (counts)", key, _int, "an integer >= 0")
    if counts["chunks"] < 1:
        raise IndexFormatError(f"{where}: manifest counts.chunks is 0; an index holds at least one chunk")
    files = _need(manifest, where, "files", is_dict, "a table of file -> {bytes, sha256}")
    for rel, info in files.items():
        if not (isinstance(info, dict) and _int(info.get("bytes")) and isinstance(info.get("sha256"), str)
                and _SHA256.fullmatch(info["sha256"])):
            raise IndexFormatError(f"{where}: manifest entry for file {brief(rel)} must be {{bytes: integer, sha256: 64 hex digits}}")
    for key in ("seconds", "cpu_seconds", "memory"):
        if key in manifest and not isinstance(manifest[key], dict):
            raise IndexFormatError(f"{where}: manifest field {key!r} must be a table")
    for key in ("seconds", "cpu_seconds"):  # stage -> seconds, printed by `spectrag info`
        if key in manifest and not all(_number(v) for v in manifest[key].values()):
            raise IndexFormatError(f"{where}: manifest field {key!r} must map stages to numbers")
    check_edit_state(manifest, where)  # history, incremental, additions: read by `spectrag info` and the next edit
    if manifest.get("graph"):
        _check_graph_entry(manifest["graph"], counts["chunks"], f"{where} (graph)")
    if manifest.get("llm"):
        _check_llm_entry(manifest["llm"], f"{where} (llm)")
    if manifest.get("kg"):
        kg = _need(manifest, where, "kg", is_dict, "a table or null")
        for key in ("entities", "relations", "describes_links"):
            _need(kg, f"{where} (kg)", key, _int, "an integer >= 0")
        _need(kg, f"{where} (kg)", "source", is_str, "a string")
    return manifest


# --- the edit history (spectrag.incremental.history writes it) ------------------------------
#
# Every field is checked, so that `spectrag info` and an edit read only what they can use:
# an edit refuses a damaged history before it writes anything. Keys not named here are left
# alone (a newer engine's additions); a named key of the wrong type or range is an error.

HISTORY_OPERATIONS = ("build", "add", "delete", "update", "compact")
_COUNT, _TEXT = (_int, "an integer >= 0"), (lambda v: isinstance(v, str), "a string")
_HISTORY_FIELDS = {
    "date": _TEXT, "source": _TEXT, "format": _TEXT,
    "documents": _COUNT, "chunks": _COUNT, "documents_added": _COUNT, "chunks_added": _COUNT,
    "documents_removed": _COUNT, "chunks_removed": _COUNT, "documents_replaced": _COUNT, "documents_unchanged": _COUNT,
    "compacted": (lambda v: isinstance(v, bool), "true or false"),
    "reordered": (lambda v: isinstance(v, bool), "true or false"),
    "seconds": (lambda v: _number(v) and 0 <= v < float("inf"), "a number of seconds >= 0"),
    "spectrum": (lambda v: v is None or isinstance(v, str), "a string or null"),
}
_INCREMENTAL_FIELDS = {
    "since": (_TEXT, True), "operations": (_COUNT, True), "changed_chunks": (_COUNT, True),
    "spectrum": ((lambda v: v in ("exact", "warm-started", "none"), "'exact', 'warm-started' or 'none'"), False),
}
_ADDITION_FIELDS = {"documents": _COUNT, "chunks": _COUNT, "created": _TEXT, "path": _TEXT}


def _check_fields(table: dict[str, Any], fields: dict[str, tuple], where: str, name: str) -> None:
    for key, (ok, what) in fields.items():
        if key in table and not ok(table[key]):
            raise IndexFormatError(f"{where}: manifest field {name}.{key} must be {what}, got {brief(table[key])}")


def check_edit_state(manifest: dict[str, Any], where: str) -> None:
    """``history`` (a non-empty list of entries, each with an ``op`` among
    :data:`HISTORY_OPERATIONS` and a ``date``, every count an integer >= 0), ``incremental``
    (``since``, ``operations``, ``changed_chunks``; ``spectrum``) and the legacy ``additions``,
    each field type- and range-checked; :class:`IndexFormatError` names the field and the value."""
    for key in ("additions", "history"):
        if key in manifest and not (isinstance(manifest[key], list) and all(isinstance(e, dict) for e in manifest[key])):
            raise IndexFormatError(f"{where}: manifest field {key!r} must be a list of tables, got {brief(manifest[key])}")
    if "history" in manifest:
        entries = manifest["history"]
        if not entries:
            raise IndexFormatError(f"{where}: manifest field 'history' is empty; it always begins with the build")
        for i, e in enumerate(entries):
            if e.get("op") not in HISTORY_OPERATIONS:
                raise IndexFormatError(f"{where}: manifest field history[{i}].op must be one of "
                                       f"{', '.join(HISTORY_OPERATIONS)}, got {brief(e.get('op'))}")
            if "date" not in e:
                raise IndexFormatError(f"{where}: manifest field history[{i}] has no 'date' (every entry has one)")
            _check_fields(e, _HISTORY_FIELDS, where, f"history[{i}]")
    for i, a in enumerate(manifest.get("additions") or []):
        _check_fields(a, _ADDITION_FIELDS, where, f"additions[{i}]")
    if "incremental" in manifest and manifest["incremental"] is not None:
        state = manifest["incremental"]
        if not isinstance(state, dict):
            raise IndexFormatError(f"{where}: manifest field 'incremental' must be a table or null, got {brief(state)}")
        for key, ((ok, what), required) in _INCREMENTAL_FIELDS.items():
            if key not in state:
                if required:
                    raise IndexFormatError(f"{where}: manifest field incremental has no {key!r} (an edited index always "
                                           "records it)")
            elif not ok(state[key]):
                raise IndexFormatError(f"{where}: manifest field incremental.{key} must be {what}, got {brief(state[key])}")
        if "history" not in manifest:
            raise IndexFormatError(f"{where}: the manifest has 'incremental' but no 'history' (an edit writes both)")


def _check_llm_entry(llm: Any, where: str) -> None:
    """The ``llm`` entry as `spectrag info` prints it: the model, and per stage the request,
    cache, token, cost and malformed counts (numbers); a stage's facts, when given, a table."""
    if not isinstance(llm, dict):
        raise IndexFormatError(f"{where}: manifest field 'llm' must be a table or null, got {brief(llm)}")
    _need(llm, where, "model", lambda v: isinstance(v, str), "a string")
    usage = _need(llm, where, "usage", lambda v: isinstance(v, dict), "a table")
    stages = _need(usage, f"{where} (usage)", "stages", lambda v: isinstance(v, dict), "a table of stages")
    for name, u in stages.items():
        for key in ("requests", "cached", "prompt_tokens", "completion_tokens", "cost", "malformed"):
            _need(u, f"{where} (usage.stages.{brief(name)})", key, _number, "a number")
        if not isinstance(llm.get(name, {}), dict):
            raise IndexFormatError(f"{where}: manifest field 'llm.{brief(name)}' must be a table, got {brief(llm[name])}")


def _check_graph_entry(graph: Any, n: int, where: str) -> None:
    if not isinstance(graph, dict):
        raise IndexFormatError(f"{where}: manifest field 'graph' must be a table or null")
    _need(graph, where, "nodes", lambda v: v == n, f"the chunk count {n}")
    for key in ("edges", "components", "isolated_nodes"):
        _need(graph, where, key, _int, "an integer >= 0")
    _need(graph, where, "mean_degree", _number, "a number")
    edges = _need(graph, where, "signal_edges", lambda v: isinstance(v, dict) and all(_int(c) for c in v.values()),
                  "a table signal -> edge count")
    unknown = sorted(set(edges) - set(DEFAULT_SIGNAL_WEIGHTS))
    if unknown:
        raise IndexFormatError(f"{where}: signal_edges names unknown signal(s) {brief(unknown)}; signals: {sorted(DEFAULT_SIGNAL_WEIGHTS)}")
    spectrum = _need(graph, where, "spectrum", lambda v: isinstance(v, dict), "a table")
    _need(spectrum, f"{where} (spectrum)", "dim", _int, "an integer >= 0")
    _need(spectrum, f"{where} (spectrum)", "clusters", _int, "an integer >= 0")
    for key, ok, what in (("max_residual", _number, "a number"), ("n_iter", lambda v: v is None or _int(v), "an integer"),
                          ("converged", lambda v: v is None or isinstance(v, bool), "true or false")):
        if key in spectrum:
            _need(spectrum, f"{where} (spectrum)", key, ok, what)


def format_files(manifest: dict[str, Any]) -> tuple[set[str], list[tuple[str, ...]]]:
    """The files an index with ``manifest`` must have, and groups of optional files that an
    older index may lack (all of a group or none)."""
    required = {CHUNKS, EMBEDDINGS, DenseIndex.FILE, *(f"{_BM25}/{n}" for n in ("data.npy", "indices.npy", "indptr.npy", "vocab.json"))}
    optional = [tuple(f"{_BM25}/{n}" for n in TOKEN_FILES)]  # token ids: stored since incremental adds
    graph = manifest.get("graph")
    if graph:
        required |= {f"{GRAPH}/weights.{p}.npy" for p in ("indptr", "indices", "data")}
        required |= {f"{GRAPH}/{n}.npy" for n in ("coordinates", "eigenvalues", "clusters", "rcm_order")}
        required |= {f"{GRAPH}/signals/{s}.{p}.npy" for s in graph["signal_edges"] for p in ("rows", "cols", "weights")}
        optional.append(tuple(f"{GRAPH}/relations.{p}.npy" for p in ("indptr", "indices", "data")))
        optional.append((f"{GRAPH}/questions.vectors.npy", f"{GRAPH}/questions.owners.npy"))  # utility questions
        optional += [tuple(f"{GRAPH}/{f}" for f in group) for group in UPDATE_GROUPS.values()]  # for updates
    if manifest.get("kg"):
        required |= {f"{KG}/entities.json", f"{KG}/relations.json", f"{KG}/incidence.indptr.npy", f"{KG}/incidence.indices.npy",
                     f"{KG}/entity_embeddings.npy", f"{KG}/text_embeddings.npy"}
        required |= {f"{KG}/relations.{n}.npy" for n in _REL} | {f"{KG}/adjacency.{n}.npy" for n in _ADJ}
    return required, optional


def confined(folder: Path, rel: Any) -> Path:
    """``folder / rel`` for a manifest path that stays inside ``folder``: relative, ``/``-separated,
    no ``.`` / ``..`` / empty parts, no symbolic link on the way. Nothing outside is touched."""
    parts = rel.split("/") if isinstance(rel, str) else []
    if (not parts or rel.startswith("/") or "\\" in rel or "\x00" in rel or ":" in parts[0]
            or any(p in ("", ".", "..") for p in parts)):
        raise IndexFormatError(
            f"{folder}: the manifest lists the path {rel!r:.200}, which is not inside the index folder "
            "(paths are relative, '/'-separated, without '..')"
        )
    path = folder
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise IndexFormatError(f"{folder}: {rel} is a symbolic link (an index folder holds plain files only)")
    return path


def check_listing(folder: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """Every listed file's confined path (see :func:`confined`), after checking that the
    manifest lists every file of the format (:func:`format_files`)."""
    files = manifest["files"]
    paths = {rel: confined(folder, rel) for rel in files}
    required, optional = format_files(manifest)
    missing = sorted(required - set(files))
    if missing:
        raise IndexFormatError(
            f"{folder}: the manifest does not list {len(missing)} file(s) of the index format "
            f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}); the index is incomplete or its manifest was edited"
        )
    for group in optional:
        listed = [f for f in group if f in files]
        if listed and len(listed) != len(group):
            raise IndexFormatError(f"{folder}: the manifest lists {', '.join(listed)} without {', '.join(sorted(set(group) - set(listed)))}")
    return paths
