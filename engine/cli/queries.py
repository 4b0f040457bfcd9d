"""Reading query files: JSONL records, a JSON list (MuSiQue / HotpotQA questions), or plain text
(one query per line, or ``qid<TAB>text`` as in TREC / BEIR topic files). Each query gets an id
(``id`` / ``_id`` / ``qid`` field, the text before the tab, else its line or position)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from spectrag.errors import CorpusError
from spectrag.util.io import check_unicode, iter_json_lines, read_json, read_text

TEXT_FIELDS = ("query", "question", "text")


def _record(path: Path, where: str, record: object, position: int) -> tuple[str, str]:
    if isinstance(record, str):
        return str(position), check_unicode(record, f"{path}: {where}")
    if not isinstance(record, dict):
        raise CorpusError(f"{path}: {where} is neither a string nor an object")
    text = next((record[k] for k in TEXT_FIELDS if isinstance(record.get(k), str)), None)
    if text is None:
        raise CorpusError(f"{path}: {where} has no query text (expected one of {', '.join(TEXT_FIELDS)})")
    qid = next((record[k] for k in ("id", "_id", "qid") if k in record), position)
    return check_unicode(str(qid), f"{path}: {where} id"), check_unicode(text, f"{path}: {where} query text")


def iter_queries(path: str | Path) -> Iterator[tuple[str, str]]:
    """Yield ``(query id, text)`` pairs from a query file."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such query file")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        for lineno, record in iter_json_lines(path):
            yield _record(path, f"line {lineno}", record, lineno - 1)
    elif suffix == ".json":
        data = read_json(path)
        if not isinstance(data, list):
            raise CorpusError(f"{path}: expected a JSON list of queries")
        for i, record in enumerate(data):
            yield _record(path, f"record {i}", record, i)
    else:
        for i, line in enumerate(read_text(path).splitlines()):
            if not line.strip():
                continue
            qid, tab, text = line.partition("\t")
            if tab and not (qid.strip() and text.strip()):
                raise CorpusError(f"{path}: line {i + 1} has a tab but no id before it or no text after it")
            yield (qid.strip(), text.strip()) if tab else (str(i), line.strip())
