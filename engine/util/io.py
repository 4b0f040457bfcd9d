"""Reading text and JSON files with errors that name the file, line and column."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spectrag.errors import CorpusError


def read_text(path: Path) -> str:
    """UTF-8 text of ``path``; a clear :class:`CorpusError` for unreadable or non-UTF-8 files."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read file ({exc.strerror})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{path}: not UTF-8 text (invalid byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None


def read_json(path: Path) -> Any:
    """Parsed JSON of ``path``; :class:`CorpusError` names the file, line and column when invalid."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise CorpusError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None


def iter_json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` of each non-blank line; :class:`CorpusError` names the
    file and line of invalid JSON."""
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}: invalid JSON on line {lineno}: {exc.msg}") from None
