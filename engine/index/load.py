"""Stage 1 of the offline build: read a corpus into :class:`Document` records.

Supported formats (``--format``; ``auto`` detects them):

=============== ==================================================================
``folder``      a folder (or a single file) of ``.md`` / ``.markdown`` / ``.rst`` / ``.txt``
``jsonl``       one JSON record per line with ``text`` (+ ``id``, ``title``, ``url``, ``metadata``)
``json``        a JSON list of such records
``musique``     MuSiQue / HippoRAG corpus: a JSON list of ``{title, text}`` passages
``2wiki``       2WikiMultiHopQA corpus: the same ``{title, text}`` list
``hotpotqa``    HotpotQA corpus: a JSON object ``title -> [sentences]``
``multihop-rag`` MultiHop-RAG ``corpus.json``: a list of ``{title, body, url, source, published_at}``
``beir``        BEIR ``corpus.jsonl``: records ``{_id, title, text, metadata}``
=============== ==================================================================

Benchmark passages (every format but ``folder``/``jsonl``/``json``) are marked
``kind="passage"`` so the chunker keeps each one whole when it fits in a chunk.
Loading is a generator, so large corpora stream through the chunker.

In a folder: Markdown files may open with YAML front matter (``---`` ... ``---``), which is
taken out of the text into the document's ``metadata`` (its keys; dates and times as ISO
strings, other YAML values that JSON lacks as text), its ``title:`` the document's title;
a title is the first level-1 heading (ATX or setext, never one inside an HTML comment) as
plain text; reStructuredText files are parsed by docutils, their sections the section paths.
A symbolic link that leads out of the folder is refused unless ``follow_symlinks=True``.
A FIFO, socket, device or broken link in the folder is skipped with a note (it is never
opened: reading a FIFO would block), and given as the corpus itself it is refused. A file name
that is not UTF-8 is read, its document id and title spelling each such byte ``\\xNN``
(:func:`spectrag.util.io.printable_path`), with a note. Notes go to ``notes`` (a list) when one
is given, else they are issued as :class:`CorpusNote` warnings.
With ``skipped`` (a list), a file or record that cannot be read (not UTF-8, invalid JSON or
YAML, a lone surrogate, unparsable reStructuredText, a link out of the folder) is listed there
as ``(where, why)`` and the rest is read; without it, the first one is a :class:`CorpusError`.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spectrag.config import CorpusConfig
from spectrag.errors import CorpusError, brief
from spectrag.index.files import (SPECIAL, TEXT_SUFFIXES, UNREADABLE, UNSUPPORTED, SkipTally, describe, file_kind,
                                  file_reason, prune_folder, specs)
from spectrag.types import Document
from spectrag.util.io import check_unicode, iter_json_lines, printable_path, read_json, read_text, special_file
from spectrag.util.markdown import comment_spans, plain_title, split_front_matter
from spectrag.util.rst import looks_like_rst, rst_structure

FORMATS = ("folder", "jsonl", "json", "musique", "2wiki", "hotpotqa", "multihop-rag", "beir")


class CorpusNote(UserWarning):
    """Something about a corpus the user may want to know (it is still read): a special file
    skipped, a file name that is not UTF-8."""


@dataclass
class _Options:
    skipped: list[tuple[str, str]] | None = None  # None: the first invalid file or record is an error
    follow_symlinks: bool = False
    notes: list[str] | None = None  # None: notes are CorpusNote warnings
    rules: CorpusConfig = field(default_factory=CorpusConfig)  # which files of a folder are read
    tally: SkipTally = field(default_factory=SkipTally)  # the others, by reason

    def skip(self, where: str, exc: CorpusError) -> None:
        if self.skipped is None:
            raise exc
        self.skipped.append((printable_path(where), printable_path(str(exc))))

    def note(self, message: str) -> None:
        if self.notes is None:
            warnings.warn(message, CorpusNote, stacklevel=4)
        else:
            self.notes.append(message)


def _refuse_special(path: Path) -> None:
    """A corpus given as a FIFO, socket or device is refused before anything opens it."""
    what = special_file(path)
    if what is not None:
        raise CorpusError(f"{printable_path(path)} is {what}, not a corpus file or folder")


def _iter_jsonl(path: Path, options: _Options | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    options = options or _Options()
    for lineno, record in iter_json_lines(path, options.skipped):
        if not isinstance(record, dict):
            options.skip(f"{path} line {lineno}", CorpusError(f"{path}: line {lineno} is not a JSON object"))
            continue
        yield lineno, record


def detect_format(path: str | Path) -> str:
    """Guess the corpus format from the path and the first record; raises if nothing fits."""
    path = Path(path)
    _refuse_special(path)
    if not path.exists():
        raise CorpusError(f"{path}: no such file or folder")
    if path.is_dir() or path.suffix.lower() in TEXT_SUFFIXES:
        return "folder"
    if path.suffix.lower() == ".jsonl":
        for _, record in _iter_jsonl(path):
            return "beir" if "_id" in record else "jsonl"
        raise CorpusError(f"{path}: empty corpus (no records)")
    if path.suffix.lower() == ".json":
        data = read_json(path)
        if isinstance(data, dict):
            values = list(data.values())[:5]
            if values and all(isinstance(v, list) for v in values):
                return "hotpotqa"
            raise CorpusError(
                f"{path}: a JSON object but not HotpotQA's title -> [sentences]; "
                "expected a list of records with 'text' (or 'body'), or that object"
            )
        if isinstance(data, list):
            if not data:
                raise CorpusError(f"{path}: empty corpus (no records)")
            first = data[0]
            if isinstance(first, dict):
                if "body" in first:
                    return "multihop-rag"
                if set(first) == {"title", "text"}:
                    return "musique"
                if "text" in first:
                    return "json"
        raise CorpusError(
            f"{path}: cannot tell the corpus format; expected a list of records with 'text' "
            "(json/musique/2wiki), with 'body' (multihop-rag), or an object title -> [sentences] "
            "(hotpotqa)"
        )
    raise CorpusError(
        f"{path}: unknown corpus file type {path.suffix!r}; expected a folder, .md, .txt, .json "
        "or .jsonl (or pass --format)"
    )


def iter_documents(path: str | Path, fmt: str = "auto", *, skipped: list[tuple[str, str]] | None = None,
                   follow_symlinks: bool = False, notes: list[str] | None = None, rules: CorpusConfig | None = None,
                   tally: SkipTally | None = None) -> Iterator[Document]:
    """Yield the documents of the corpus at ``path`` in a stable order. ``skipped``: a list
    that collects ``(where, why)`` of each file or record that cannot be read, instead of the
    first one raising :class:`CorpusError`. ``follow_symlinks``: read links that lead out of a
    corpus folder (refused by default). ``notes``: a list that collects the notes (special files
    skipped, file names that are not UTF-8) instead of :class:`CorpusNote` warnings. ``rules``:
    which files of a folder are read (default: :class:`~spectrag.config.CorpusConfig`, hidden and
    vendor folders skipped); ``tally``: a :class:`~spectrag.index.files.SkipTally` that counts the
    files and folders left out, by reason."""
    path = Path(path)
    _refuse_special(path)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise CorpusError(f"unknown format {fmt!r}; choose auto or one of {', '.join(FORMATS)}")
    if not path.exists():
        raise CorpusError(f"{path}: no such file or folder")
    reader = _READERS[fmt]
    yield from reader(path, _Options(skipped, follow_symlinks, notes, rules or CorpusConfig(), tally if tally is not None else SkipTally()))


def load_documents(path: str | Path, fmt: str = "auto", **options: Any) -> list[Document]:
    """All documents of a corpus; :class:`CorpusError` if it holds none. ``options``: those of
    :func:`iter_documents`."""
    docs = list(iter_documents(path, fmt, **options))
    if not docs:
        raise CorpusError(f"{path}: empty corpus (no documents)")
    return docs


# --- readers, one per format -------------------------------------------------------------


def _markdown_title(text: str) -> str | None:
    """The first level-1 heading (``# Title`` or ``Title`` over ``===``) outside HTML comments,
    as plain text."""
    hidden = comment_spans(text) if "<!--" in text else []
    pos, k = 0, 0
    previous = ""
    for line in text.splitlines(keepends=True):
        while k < len(hidden) and hidden[k][1] <= pos:
            k += 1
        inside = k < len(hidden) and hidden[k][0] <= pos < hidden[k][1]
        bare = line.rstrip("\r\n")
        if not inside:
            if bare.startswith("# "):
                return plain_title(bare[2:].strip().rstrip("#").strip() or bare[2:].strip())
            if previous.strip() and bare.strip() and set(bare.strip()) == {"="} and len(bare.strip()) >= 3:
                return plain_title(previous.strip())
        previous = "" if inside else bare
        pos += len(line)
    return None


def _record_markup(doc_id: str, url: str, text: str) -> tuple[str, tuple]:
    """Markup and section headings of a record's text (JSON, JSON lines, BEIR): reStructuredText
    (an ``.rst`` id or url, or a text that reads as rst) parsed by docutils, else Markdown (a
    level-1 heading or a ``##`` line), else plain text. A text docutils cannot parse is plain."""
    name = (doc_id.rsplit("/", 1)[-1] + " " + url.split("?")[0].split("#")[0]).lower()
    if ".rst " in name + " " or ".rest " in name + " " or looks_like_rst(text):
        try:
            return "rst", rst_structure(text, doc_id)[1]
        except ValueError:
            return "text", ()
    if _markdown_title(text) is not None or "\n## " in text:
        return "markdown", ()
    return "text", ()


def _text_title(text: str) -> str | None:
    """First line as a title when it is short and set apart by a blank line."""
    lines = text.lstrip().splitlines()
    if len(lines) >= 2 and not lines[1].strip() and 0 < len(lines[0].strip()) <= 120:
        return lines[0].strip()
    return None


def _folder_files(path: Path, options: _Options) -> list[Path]:
    """The text files under ``path`` that ``options.rules`` select, sorted; the others are
    tallied in ``options.tally`` by reason (:mod:`spectrag.index.files`). Hidden and vendor
    folders are not walked at all. A link out of the folder is refused (listed in
    ``options.skipped`` when skipping) unless ``options.follow_symlinks``."""
    root = path.resolve()
    rules, tally = options.rules, options.tally
    include, exclude = specs(rules)
    files, seen = [], set()
    for folder, dirs, names in os.walk(path, followlinks=options.follow_symlinks):
        here = Path(folder)
        real = here.resolve()
        if real in seen:  # a link cycle, followed
            dirs[:] = []
            continue
        seen.add(real)
        base = here.relative_to(path).as_posix()
        rel_of = (lambda n: n) if base == "." else (lambda n: f"{base}/{n}")  # noqa: E731
        kept = []
        for d in sorted(dirs):
            why = prune_folder(d, rel_of(d), rules, exclude)
            if why is None:
                kept.append(d)
            else:
                tally.add(why, printable_path(rel_of(d)) + "/")
        dirs[:] = kept
        for name in list(dirs) + sorted(names):
            entry = here / name
            if not entry.is_symlink() or options.follow_symlinks:
                continue
            target = entry.resolve()
            if not target.is_relative_to(root) and (name in dirs or entry.suffix.lower() in TEXT_SUFFIXES):
                options.skip(entry.relative_to(path).as_posix(), CorpusError(
                    f"{entry} is a symbolic link to {target}, outside the corpus folder {path}; "
                    "pass --follow-symlinks (follow_symlinks=True) to read it"))
                tally.add(UNREADABLE, printable_path(rel_of(name)))
                if name in names:
                    names.remove(name)
                else:
                    dirs.remove(name)
        for n in sorted(names):
            entry, rel = here / n, rel_of(n)
            what = special_file(entry)
            if what is not None:
                options.note(f"{printable_path(rel)} is {what}, not a regular file: skipped")
                tally.add(SPECIAL, printable_path(rel))
                continue
            try:
                size = entry.stat().st_size
            except OSError:  # vanished, or a broken link
                size = 0
            why = file_reason(n, rel, size, rules, include, exclude)
            if why is not None:
                tally.add(why, printable_path(rel), kind=file_kind(n) if why == UNSUPPORTED else None)
            elif entry.is_file():
                files.append(entry)
    return sorted(files)


def _read_file(file: Path, root: Path) -> Document:
    text = read_text(file)
    doc_id = printable_path(file.relative_to(root).as_posix())  # bytes that are not UTF-8 as \xNN
    suffix = file.suffix.lower()
    stem = printable_path(file.stem).replace("_", " ")
    if suffix == ".rst":
        try:
            title, headings = rst_structure(text, str(file))
        except ValueError as exc:
            raise CorpusError(f"{file}: {exc}") from None
        return Document(doc_id=doc_id, title=title or stem, text=text, markup="rst", headings=headings)
    if suffix in (".md", ".markdown"):
        try:
            front, body = split_front_matter(text)
        except ValueError as exc:
            raise CorpusError(f"{file}: {exc}") from None
        metadata = {}
        if front is not None:
            text, metadata = text[body:], json_values(front)
        title = front.get("title") if front else None
        title = plain_title(title) if isinstance(title, str) and title.strip() else _markdown_title(text)
        return Document(doc_id=doc_id, title=title or stem, text=text, markup="markdown", metadata=metadata)
    return Document(doc_id=doc_id, title=_text_title(text) or stem, text=text, markup="text")


def json_values(value: Any) -> Any:
    """``value`` (parsed YAML) with what JSON cannot hold made JSON: dates and times as ISO
    strings, mapping keys as strings, sets and tuples as lists, anything else as its text."""
    if isinstance(value, dict):
        return {str(k): json_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_values(v) for v in value]
    if value is None or isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def _read_folder(path: Path, options: _Options) -> Iterator[Document]:
    if path.is_file():
        files, root = [path], path.parent
    else:
        files, root = _folder_files(path, options), path
        if not files:
            skipped = describe(options.tally.to_dict())
            raise CorpusError(f"{path}: folder holds no .md, .markdown, .rst or .txt files to read"
                              + (f" (skipped: {'; '.join(skipped)})" if skipped else ""))
    for file in files:
        rel = file.relative_to(root).as_posix()
        try:
            doc = _read_file(file, root)
        except CorpusError as exc:
            options.skip(rel, exc)
            options.tally.add(UNREADABLE, printable_path(rel))
            continue
        if doc.doc_id != rel:
            options.note(f"{doc.doc_id}: the file name is not UTF-8; its document id and title write each byte "
                         f"that is not UTF-8 as \\xNN")
        yield doc


def _record(path: Path, where: str, record: Any, *, text_key: str = "text") -> dict[str, Any]:
    if not isinstance(record, dict):
        raise CorpusError(f"{path}: {where} is not a JSON object")
    if text_key not in record:
        raise CorpusError(f"{path}: {where} has no '{text_key}' field (keys: {brief(sorted(record))})")
    if not isinstance(record[text_key], str):
        raise CorpusError(f"{path}: {where} field '{text_key}' is not a string")
    for key in (text_key, "title", "id", "_id", "url"):
        if isinstance(record.get(key), str):
            check_unicode(record[key], f"{path}: {where} field '{key}'")
    return record


def _each(path: Path, items: Iterator[tuple[str, Any]], options: _Options, make) -> Iterator[Document]:
    """``make(where, raw)`` for each record, a bad one skipped (and listed) or raised."""
    for where, raw in items:
        try:
            doc = make(where, raw)
        except CorpusError as exc:
            options.skip(f"{path} {where}", exc)
            continue
        yield doc


def _generic(path: Path, items: Iterator[tuple[str, Any]], options: _Options) -> Iterator[Document]:
    def make(where: str, raw: Any) -> Document:
        record = _record(path, where, raw)
        doc_id = str(record.get("id", record.get("_id", where.split()[-1])))
        title = str(record.get("title") or "")
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise CorpusError(f"{path}: {where} field 'metadata' is not an object")
        text, url = record["text"], str(record.get("url") or "")
        markup, headings = _record_markup(doc_id, url, text)
        return Document(doc_id, title, text, url, markup, "document", metadata, headings=headings)

    yield from _each(path, items, options, make)


def _read_jsonl(path: Path, options: _Options) -> Iterator[Document]:
    yield from _generic(path, ((f"line {n}", r) for n, r in _iter_jsonl(path, options)), options)


def _json_list(path: Path) -> list[Any]:
    data = read_json(path)
    if not isinstance(data, list):
        raise CorpusError(f"{path}: expected a JSON list of records, got a {type(data).__name__}")
    return data


def _read_json_records(path: Path, options: _Options) -> Iterator[Document]:
    yield from _generic(path, ((f"record {i}", r) for i, r in enumerate(_json_list(path))), options)


def _read_passages(path: Path, options: _Options) -> Iterator[Document]:
    """MuSiQue / HippoRAG / 2Wiki: ``[{title, text}]``; ids are list positions (titles repeat)."""

    def make(where: str, raw: Any) -> Document:
        record = _record(path, where, raw)
        title = record.get("title")
        if not isinstance(title, str):
            raise CorpusError(f"{path}: {where} has no string 'title' (expected {{title, text}})")
        return Document(where.split()[-1], title, record["text"], kind="passage")

    yield from _each(path, ((f"record {i}", r) for i, r in enumerate(_json_list(path))), options, make)


def _read_hotpotqa(path: Path, options: _Options) -> Iterator[Document]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: expected HotpotQA's JSON object title -> [sentences]")

    def make(where: str, item: tuple[str, Any]) -> Document:
        title, sentences = item
        if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise CorpusError(f"{path}: entry {brief(title)} is not a list of sentence strings")
        text = check_unicode("".join(sentences), f"{path}: entry {brief(title)}")
        return Document(check_unicode(title, f"{path}: a title"), title, text, kind="passage")

    yield from _each(path, ((f"entry {i}", item) for i, item in enumerate(data.items())), options, make)


def _read_multihop_rag(path: Path, options: _Options) -> Iterator[Document]:
    def make(where: str, raw: Any) -> Document:
        record = _record(path, where, raw, text_key="body")
        metadata = {k: record[k] for k in ("source", "published_at", "category", "author") if k in record}
        return Document(
            where.split()[-1], str(record.get("title") or ""), record["body"], str(record.get("url") or ""),
            kind="passage", metadata=metadata,
        )

    yield from _each(path, ((f"record {i}", r) for i, r in enumerate(_json_list(path))), options, make)


def _read_beir(path: Path, options: _Options) -> Iterator[Document]:
    def make(where: str, raw: Any) -> Document:
        record = _record(path, where, raw)
        if "_id" not in record:
            raise CorpusError(f"{path}: {where} has no '_id' field (BEIR corpus.jsonl)")
        metadata = record.get("metadata") or {}
        doc_id, text, url = str(record["_id"]), record["text"], str(record.get("url") or "")
        markup, headings = _record_markup(doc_id, url, text)
        return Document(doc_id, str(record.get("title") or ""), text, url, markup, kind="passage",
                        metadata=metadata if isinstance(metadata, dict) else {}, headings=headings)

    yield from _each(path, ((f"line {n}", r) for n, r in _iter_jsonl(path, options)), options, make)


_READERS = {
    "folder": _read_folder,
    "jsonl": _read_jsonl,
    "json": _read_json_records,
    "musique": _read_passages,
    "2wiki": _read_passages,
    "hotpotqa": _read_hotpotqa,
    "multihop-rag": _read_multihop_rag,
    "beir": _read_beir,
}
