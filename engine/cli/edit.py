"""What ``spectrag add | delete | update | compact`` print, and the ids ``delete`` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spectrag.errors import CorpusError


def read_ids(values: tuple[str, ...], given: tuple[str, ...]) -> list[str]:
    """Document ids from ``--ids`` values (an existing file: one id per line, blank lines
    skipped; ``-``: the same from standard input; anything else: an id) and positional ids."""
    import sys

    out: list[str] = []
    for value in values:
        path = Path(value)
        if value == "-":
            out += [line.strip() for line in sys.stdin.read().splitlines() if line.strip()]
        elif path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise CorpusError(f"--ids {path}: cannot read it as UTF-8 text ({exc})") from None
            out += [line.strip() for line in text.splitlines() if line.strip()]
        else:
            out.append(value)
    out += list(given)
    if not out:
        raise CorpusError("no document id to delete: give ids, or --ids FILE (one id per line)")
    return out


def plan_lines(plan: dict[str, list[str]], index_dir: Path, shown: int = 20) -> list[str]:
    """What ``--dry-run`` prints: the ids an edit would add, replace and remove (the first
    ``shown`` of each), and that nothing was written."""
    out = [f"dry run: nothing was written to {index_dir}"]
    for verb in ("added", "replaced", "removed"):
        ids = plan.get(verb, [])
        out.append(f"  would be {verb}: {len(ids):,} document(s)")
        out += [f"    {i}" for i in ids[:shown]] + ([f"    ... and {len(ids) - shown:,} more"] if len(ids) > shown else [])
    return out


def edit_summary(index) -> dict[str, Any]:
    """The ``edit`` part of the JSON summary: what the operation changed and how."""
    r = index.report
    return {"operation": r.operation, "documents_added": r.documents, "chunks_added": r.chunks, "tokens_added": r.tokens,
            "documents_removed": r.documents_removed, "chunks_removed": r.chunks_removed,
            "documents_replaced": r.documents_replaced, "documents_unchanged": r.documents_unchanged,
            "vectors_reused": r.vectors_reused, "embedded": r.embedded, "embedding_cache_hits": r.cache_hits,
            "spectrum": r.spectrum, "compacted": r.compacted, "seconds": r.seconds}


def count(n: int, word: str) -> str:
    """``1 document``, ``2 documents``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def edit_line(index) -> str:
    """One line saying what the operation did: ``update: updated 1 document, added 2 documents
    (5 chunks added, 1 removed), ...``; a replaced document is an update, not an add and a delete."""
    r = index.report
    parts = []
    if r.documents_replaced:
        parts.append(f"updated {count(r.documents_replaced, 'document')}")
    added = r.documents - r.documents_replaced
    if added:
        parts.append(f"added {count(added, 'document')}")
    if r.documents_removed - r.documents_replaced:
        parts.append(f"deleted {count(r.documents_removed - r.documents_replaced, 'document')}")
    if r.chunks or r.chunks_removed:
        note = f"({count(r.chunks, 'chunk')} added, {r.chunks_removed:,} removed)"
        if parts:
            parts[-1] += " " + note
        else:
            parts.append(note)
    if r.documents_unchanged:
        parts.append(f"{count(r.documents_unchanged, 'document')} unchanged")
    if r.operation == "compact" or r.compacted:
        parts.append("graph recomputed from scratch (compacted)")
    elif r.spectrum:
        parts.append(f"spectrum {'warm-started' if r.spectrum.get('method', '').startswith('warm') else 'solved'} "
                     f"(max residual {r.spectrum.get('max_residual') or 0:.1e})")
    if not parts:
        parts.append("nothing to change")
    return f"{r.operation}: " + ", ".join(parts) + f" in {sum(r.seconds.values()):.2f} s"
