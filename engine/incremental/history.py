"""The index's history in its manifest: one entry per build, add, delete, update and compact
(``history``), and the state since the last full build (``incremental``): operations, chunks
changed, and whether the spectrum is exact (Lanczos to ``graph.lanczos_tol``) or warm-started
(:mod:`spectrag.graph.warm`). ``spectrag info`` prints both (:func:`history_lines`)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

OPERATIONS = ("build", "add", "delete", "update", "compact")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def history(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's history; an index written before it was kept gets its build (and the
    adds it lists under ``additions``) reconstructed."""
    if isinstance(manifest.get("history"), list):
        return list(manifest["history"])
    additions = manifest.get("additions") or []
    counts = manifest["counts"]
    added_docs = sum(int(a.get("documents", 0)) for a in additions)
    added_chunks = sum(int(a.get("chunks", 0)) for a in additions)
    out = [{"op": "build", "date": manifest.get("created", ""), "documents": counts["documents"] - added_docs,
            "chunks": counts["chunks"] - added_chunks, "source": manifest["source"].get("path", "")}]
    out += [{"op": "add", "date": a.get("created", ""), "documents": int(a.get("documents", 0)),
             "chunks": int(a.get("chunks", 0)), "source": a.get("path", "")} for a in additions]
    return out


def spectrum_state(manifest: dict[str, Any]) -> str:
    """``exact`` or ``warm-started`` (the current coordinates), ``none`` without a graph."""
    graph = manifest.get("graph") or {}
    if not graph:
        return "none"
    return "warm-started" if (graph.get("spectrum") or {}).get("method") == "warm block Rayleigh-Ritz" else "exact"


def record(old: dict[str, Any], new: dict[str, Any], entry: dict[str, Any], *, full: bool) -> dict[str, Any]:
    """``new`` (the edited index's manifest) with the history of ``old`` (the manifest it
    replaces) plus ``entry``, and the ``incremental`` state moved on (reset by a full
    recomputation: ``full``)."""
    entries = history(old)
    state = old.get("incremental") or {"since": entries[0]["date"], "operations": 0, "changed_chunks": 0}
    if full:
        state = {"since": entry["date"], "operations": 0, "changed_chunks": 0}
    else:
        state = {**state, "operations": state["operations"] + 1,
                 "changed_chunks": state["changed_chunks"] + entry.get("chunks_added", 0) + entry.get("chunks_removed", 0)}
    out = {k: v for k, v in new.items() if k != "additions"}
    out.update(history=[*entries, entry], incremental={**state, "spectrum": spectrum_state(new)})
    return out


def history_lines(entries: list[dict[str, Any]], state: dict[str, Any] | None,
                  graph: dict[str, Any] | None) -> list[tuple[str, str]]:
    """``(label, text)`` rows for ``spectrag info``: each :func:`history` entry, then the state
    since the last full build (``state``: the manifest's ``incremental``; ``graph``: its graph
    entry, for the spectrum)."""
    rows = []
    for e in entries:
        if e["op"] == "build":
            what = f"{e.get('documents', 0):,} documents, {e.get('chunks', 0):,} chunks"
        elif e["op"] == "compact":
            what = f"{e.get('chunks', 0):,} chunks: graph, spectrum and knowledge graph recomputed from scratch"
        else:
            what = _change(e)
        rows.append((e["op"], f"{e.get('date', '')}  {what}"))
    if graph:
        sp = graph.get("spectrum") or {}
        spectrum = spectrum_state({"graph": graph})
        residual = f"max residual {sp.get('max_residual', 0):.1e}"
        if not state or not state.get("operations"):
            rows.append(("since full build", f"no edit; spectrum {spectrum} ({residual})"))
        else:
            rows.append(("since full build", f"{state['operations']} edit(s) since {state['since']}, "
                                             f"{state['changed_chunks']:,} chunks changed; spectrum {spectrum} "
                                             f"({residual}); `spectrag compact` recomputes the graph from scratch"))
    return rows


def _change(e: dict[str, Any]) -> str:
    """An edit in words; a replaced document is an update (not an add plus a remove)."""
    parts = []
    replaced = e.get("documents_replaced", 0)
    if replaced:
        parts.append(f"{replaced:,} updated")
    if e.get("documents_added", 0) - replaced:
        parts.append(f"+{e['documents_added'] - replaced:,} documents")
    if e.get("documents_removed", 0) - replaced:
        parts.append(f"-{e['documents_removed'] - replaced:,} documents")
    if e.get("chunks_added") or e.get("chunks_removed"):
        chunks = f"(+{e.get('chunks_added', 0):,} / -{e.get('chunks_removed', 0):,} chunks)"
        parts[-1 if parts else 0:] = [f"{parts[-1]} {chunks}" if parts else chunks]
    if e.get("documents_unchanged"):
        parts.append(f"{e['documents_unchanged']:,} unchanged")
    if e["op"] == "add" and "documents" in e and not parts:  # a reconstructed add
        parts.append(f"+{e['documents']:,} documents (+{e.get('chunks', 0):,} chunks)")
    if e.get("compacted"):
        parts.append("then compacted")
    return ", ".join(parts) or "no change"
