"""Reading text and JSON files with errors that name the file, line and column."""

from __future__ import annotations

import json
import os
import stat
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spectrag.errors import CorpusError


def default_cache_dir() -> Path:
    """The root of the project's caches (embeddings, LLM responses, evaluation indexes):
    ``$SPECTRAG_CACHE_DIR``, else ``~/.cache/spectrag``."""
    return Path(os.environ.get("SPECTRAG_CACHE_DIR", Path.home() / ".cache" / "spectrag"))


def printable_path(path: str | os.PathLike) -> str:
    """``path`` as text that is valid Unicode: a file name's bytes that are not UTF-8 (Python
    holds them as lone surrogates, PEP 383) are written ``\\xNN``, so the name can be embedded,
    written to JSON and printed; a UTF-8 name comes back unchanged. (Two names that differ only
    in that spelling would give one id twice, which the build refuses as a duplicate.)"""
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that no file name decodes to (from JSON text, say)
        return os.fspath(path).encode("utf-8", "backslashreplace").decode("utf-8")


def one_line(text: str) -> str:
    """``text`` with control characters and line separators escaped (``\\n``, ``\\x1b``, ...):
    a file name may hold a newline, and an error or note line must stay one line."""
    return "".join(ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
                   for ch in text)


def special_file(path: Path) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (after following links):
    a FIFO, a socket, a device or a broken link; None otherwise. Only ``stat`` is called, so a
    FIFO is never opened (opening one blocks until a writer comes)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if path.is_symlink() else None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file"


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


def _not_json(exc: BaseException) -> str:
    """Why :func:`json.loads` refused a text: a syntax error, nesting too deep for the parser, or
    an integer past Python's 4,300-digit conversion limit."""
    if isinstance(exc, json.JSONDecodeError):
        return f"at line {exc.lineno} column {exc.colno}: {exc.msg}"
    if isinstance(exc, RecursionError):
        return "(nested too deeply to parse)"
    return f"({str(exc).split(';')[0]})"  # Exceeds the limit (4300 digits) for integer string conversion


def read_json(path: Path) -> Any:
    """Parsed JSON of ``path``; :class:`CorpusError` names the file, line and column when invalid."""
    try:
        return json.loads(read_text(path))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise CorpusError(f"{path}: invalid JSON {_not_json(exc)}") from None


def iter_json_lines(path: Path, skipped: list[tuple[str, str]] | None = None) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value)`` of each non-blank line; :class:`CorpusError` names the
    file and line of invalid JSON (with ``skipped``, the line is listed there instead)."""
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            why = f": {exc.msg}" if isinstance(exc, json.JSONDecodeError) else f" {_not_json(exc)}"
            message = f"{path}: invalid JSON on line {lineno}{why}"
            if skipped is None:
                raise CorpusError(message) from None
            skipped.append((f"{path} line {lineno}", message))
            continue
        yield lineno, value


def check_unicode(value: str, where: str) -> str:
    """``value`` unless it holds a lone surrogate (JSON's ``"\\ud800"``): such a string is not
    Unicode text, and every later stage (tokenizer, UTF-8 files) would fail on it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CorpusError(
            f"{where} holds a lone surrogate {value[exc.start]!r} at offset {exc.start} (not valid Unicode text)"
        ) from None
    return value
