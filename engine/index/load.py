"""Stage 1 of the offline build: read a corpus into :class:`Document` records.

Supported formats (``--format``; ``auto`` detects them):

=============== ==================================================================
``folder``      a folder (or a single file) of ``.md`` / ``.markdown`` / ``.txt``
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
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spectrag.errors import CorpusError
from spectrag.types import Document
from spectrag.util.io import iter_json_lines, read_json, read_text

FORMATS = ("folder", "jsonl", "json", "musique", "2wiki", "hotpotqa", "multihop-rag", "beir")
TEXT_SUFFIXES = (".md", ".markdown", ".txt")


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, record in iter_json_lines(path):
        if not isinstance(record, dict):
            raise CorpusError(f"{path}: line {lineno} is not a JSON object")
        yield lineno, record


def detect_format(path: str | Path) -> str:
    """Guess the corpus format from the path and the first record; raises if nothing fits."""
    path = Path(path)
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


def iter_documents(path: str | Path, fmt: str = "auto") -> Iterator[Document]:
    """Yield the documents of the corpus at ``path`` in a stable order."""
    path = Path(path)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise CorpusError(f"unknown format {fmt!r}; choose auto or one of {', '.join(FORMATS)}")
    if not path.exists():
        raise CorpusError(f"{path}: no such file or folder")
    reader = _READERS[fmt]
    yield from reader(path)


def load_documents(path: str | Path, fmt: str = "auto") -> list[Document]:
    """All documents of a corpus; :class:`CorpusError` if it holds none."""
    docs = list(iter_documents(path, fmt))
    if not docs:
        raise CorpusError(f"{path}: empty corpus (no documents)")
    return docs


# --- readers, one per format -------------------------------------------------------------


def _markdown_title(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return None


def _text_title(text: str) -> str | None:
    """First line as a title when it is short and set apart by a blank line."""
    lines = text.lstrip().splitlines()
    if len(lines) >= 2 and not lines[1].strip() and 0 < len(lines[0].strip()) <= 120:
        return lines[0].strip()
    return None


def _read_folder(path: Path) -> Iterator[Document]:
    if path.is_file():
        files, root = [path], path.parent
    else:
        files = sorted(
            p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
        )
        root = path
        if not files:
            raise CorpusError(f"{path}: folder holds no .md, .markdown or .txt files")
    for file in files:
        text = read_text(file)
        markdown = file.suffix.lower() in (".md", ".markdown")
        title = (_markdown_title(text) if markdown else _text_title(text)) or file.stem.replace("_", " ")
        yield Document(
            doc_id=file.relative_to(root).as_posix(),
            title=title,
            text=text,
            markup="markdown" if markdown else "text",
        )


def _record(path: Path, where: str, record: Any, *, text_key: str = "text") -> dict[str, Any]:
    if not isinstance(record, dict):
        raise CorpusError(f"{path}: {where} is not a JSON object")
    if text_key not in record:
        raise CorpusError(f"{path}: {where} has no '{text_key}' field (keys: {sorted(record)})")
    if not isinstance(record[text_key], str):
        raise CorpusError(f"{path}: {where} field '{text_key}' is not a string")
    return record


def _generic(path: Path, items: Iterator[tuple[str, Any]]) -> Iterator[Document]:
    for where, raw in items:
        record = _record(path, where, raw)
        doc_id = str(record.get("id", record.get("_id", where.split()[-1])))
        title = str(record.get("title") or "")
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise CorpusError(f"{path}: {where} field 'metadata' is not an object")
        text = record["text"]
        markup = "markdown" if _markdown_title(text) is not None or "\n## " in text else "text"
        yield Document(doc_id, title, text, str(record.get("url") or ""), markup, "document", metadata)


def _read_jsonl(path: Path) -> Iterator[Document]:
    yield from _generic(path, ((f"line {n}", r) for n, r in _iter_jsonl(path)))


def _json_list(path: Path) -> list[Any]:
    data = read_json(path)
    if not isinstance(data, list):
        raise CorpusError(f"{path}: expected a JSON list of records, got a {type(data).__name__}")
    return data


def _read_json_records(path: Path) -> Iterator[Document]:
    yield from _generic(path, ((f"record {i}", r) for i, r in enumerate(_json_list(path))))


def _read_passages(path: Path) -> Iterator[Document]:
    """MuSiQue / HippoRAG / 2Wiki: ``[{title, text}]``; ids are list positions (titles repeat)."""
    for i, raw in enumerate(_json_list(path)):
        record = _record(path, f"record {i}", raw)
        title = record.get("title")
        if not isinstance(title, str):
            raise CorpusError(f"{path}: record {i} has no string 'title' (expected {{title, text}})")
        yield Document(str(i), title, record["text"], kind="passage")


def _read_hotpotqa(path: Path) -> Iterator[Document]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: expected HotpotQA's JSON object title -> [sentences]")
    for title, sentences in data.items():
        if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise CorpusError(f"{path}: entry {title!r} is not a list of sentence strings")
        yield Document(title, title, "".join(sentences), kind="passage")


def _read_multihop_rag(path: Path) -> Iterator[Document]:
    for i, raw in enumerate(_json_list(path)):
        record = _record(path, f"record {i}", raw, text_key="body")
        metadata = {k: record[k] for k in ("source", "published_at", "category", "author") if k in record}
        yield Document(
            str(i), str(record.get("title") or ""), record["body"], str(record.get("url") or ""),
            kind="passage", metadata=metadata,
        )


def _read_beir(path: Path) -> Iterator[Document]:
    for lineno, raw in _iter_jsonl(path):
        record = _record(path, f"line {lineno}", raw)
        if "_id" not in record:
            raise CorpusError(f"{path}: line {lineno} has no '_id' field (BEIR corpus.jsonl)")
        metadata = record.get("metadata") or {}
        yield Document(
            str(record["_id"]), str(record.get("title") or ""), record["text"],
            kind="passage", metadata=metadata if isinstance(metadata, dict) else {},
        )


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
