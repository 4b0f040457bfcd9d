"""Evaluation datasets: where the corpus and the questions are, and each question's gold evidence.

=============== ================================================ ===============================
dataset         ``--data`` (a folder, or the questions file)     gold evidence, question groups
=============== ================================================ ===============================
``musique``     ``X.json`` + ``X_corpus.json`` (HippoRAG layout)  ``paragraphs`` with
                                                                  ``is_supporting``; hops from the
                                                                  id prefix (``2hop``, ``3hop``..)
``2wiki``       ``X.json`` + ``X_corpus.json``                    ``supporting_facts`` titles ->
                                                                  their ``context`` passage; type
``hotpotqa``    ``X.json`` + ``X_corpus.json``                    as 2wiki; type and level
``multihop-rag`` ``MultiHopRAG.json`` + ``corpus.json``           ``evidence_list`` articles;
                                                                  ``question_type``
``beir``        ``corpus.jsonl``, ``queries.jsonl``, ``qrels/``   qrels rows with score > 0
                (``test.tsv``, else ``dev``, else ``train``)      (graded gains); type from
                                                                  a query's ``metadata.type``
``sample``      ``engine/sample`` (the default)                   ``gold_docs`` file names; type
=============== ================================================ ===============================

A gold item names its passage by lookup keys tried in order (see :mod:`spectrag.eval.gold`):
``("passage", title, text)`` with all whitespace removed from the text (so sentence lists
joined with or without spaces match the same passage), ``("doc", doc_id)``,
``("title_url", title, url)`` and ``("title", title)`` (used only when the title is unique).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spectrag.errors import CorpusError
from spectrag.util.io import iter_json_lines, read_json, read_text

DATASETS = ("musique", "2wiki", "hotpotqa", "multihop-rag", "beir", "sample")
SAMPLE = Path(__file__).resolve().parents[1] / "sample"

Key = tuple[str, ...]


def squash(text: str) -> str:
    """Text without any whitespace: the identity of a passage's text across join styles."""
    return re.sub(r"\s+", "", text)


def passage_key(title: str, text: str) -> Key:
    return ("passage", title.strip(), squash(text))


@dataclass(frozen=True)
class GoldItem:
    """One piece of gold evidence: lookup ``keys`` tried in order, a ``label`` for reports and
    a relevance ``gain`` (1 unless the dataset grades relevance)."""

    keys: tuple[Key, ...]
    label: str
    gain: float = 1.0


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    gold: tuple[GoldItem, ...]
    groups: dict[str, str] = field(default_factory=dict)  # grouping name -> value, e.g. hops -> 2hop
    answers: tuple[str, ...] = ()  # gold short answers (MuSiQue: answer + answer_aliases), for --generate


@dataclass(frozen=True)
class Dataset:
    name: str
    corpus: Path
    fmt: str  # corpus format of spectrag.index.load
    questions_file: Path
    questions: list[Question]


# --- file discovery ------------------------------------------------------------------------


def _hipporag_files(name: str, data: Path) -> tuple[Path, Path]:
    """``X.json`` (questions) and ``X_corpus.json`` from a folder or from either file."""
    if data.is_file():
        if data.stem.endswith("_corpus"):
            corpus, questions = data, data.with_name(data.stem[: -len("_corpus")] + ".json")
        else:
            questions, corpus = data, data.with_name(data.stem + "_corpus.json")
    elif data.is_dir():
        corpora = sorted(data.glob("*_corpus.json"))
        if len(corpora) != 1:
            found = ", ".join(p.name for p in corpora) or "none"
            raise CorpusError(
                f"{data}: expected exactly one *_corpus.json for dataset {name!r}, found {found}; "
                "pass the questions file as --data instead"
            )
        corpus = corpora[0]
        questions = corpus.with_name(corpus.stem[: -len("_corpus")] + ".json")
    else:
        raise CorpusError(f"{data}: no such file or folder (--data of dataset {name!r})")
    for path, what in ((questions, "questions"), (corpus, "corpus")):
        if not path.is_file():
            raise CorpusError(f"{path}: {what} file of dataset {name!r} not found")
    return corpus, questions


def _one_of(folder: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        hits = [p for p in folder.iterdir() if p.name.lower() == name.lower()]
        if hits:
            return hits[0]
    raise CorpusError(f"{folder}: no {what} (looked for {', '.join(names)})")


def _json_list(path: Path) -> list[Any]:
    data = read_json(path)
    if not isinstance(data, list):
        raise CorpusError(f"{path}: expected a JSON list of questions, got a {type(data).__name__}")
    return data


def _field(path: Path, i: int, record: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(record, dict):
        raise CorpusError(f"{path}: question {i} is not a JSON object")
    if name not in record or not isinstance(record[name], kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise CorpusError(f"{path}: question {i} has no {names} field {name!r} (keys: {sorted(record)})")
    return record[name]


# --- question parsers ------------------------------------------------------------------------


def _supporting_paragraphs(path: Path, i: int, record: dict[str, Any]) -> tuple[GoldItem, ...]:
    """MuSiQue ``paragraphs`` (or HippoRAG 2 ``contexts``) entries with ``is_supporting``."""
    key = "paragraphs" if "paragraphs" in record else "contexts"
    items = []
    for j, p in enumerate(_field(path, i, record, key, list)):
        if not isinstance(p, dict) or not isinstance(p.get("title"), str):
            raise CorpusError(f"{path}: question {i} {key}[{j}] has no string 'title'")
        if not p.get("is_supporting"):
            continue
        text = p.get("paragraph_text", p.get("text"))
        if not isinstance(text, str):
            raise CorpusError(f"{path}: question {i} {key}[{j}] has no 'paragraph_text' (or 'text') string")
        items.append(GoldItem((passage_key(p["title"], text),), p["title"]))
    return tuple(items)


def _supporting_facts(path: Path, i: int, record: dict[str, Any]) -> tuple[GoldItem, ...]:
    """HotpotQA / 2Wiki: the titles of ``supporting_facts``, each with its ``context`` passage."""
    facts = _field(path, i, record, "supporting_facts", list)
    context: dict[str, list[str]] = {}
    for j, entry in enumerate(record.get("context") or []):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], list)):
            raise CorpusError(f"{path}: question {i} context[{j}] is not [title, [sentences]]")
        context.setdefault(entry[0], entry[1])
    titles: list[str] = []
    for j, fact in enumerate(facts):
        if not (isinstance(fact, list) and fact and isinstance(fact[0], str)):
            raise CorpusError(f"{path}: question {i} supporting_facts[{j}] is not [title, sentence index]")
        if fact[0] not in titles:
            titles.append(fact[0])
    items = []
    for title in titles:
        keys: tuple[Key, ...] = (("title", title.strip()),)
        if title in context:
            keys = (passage_key(title, "".join(map(str, context[title]))),) + keys
        items.append(GoldItem(keys, title))
    return tuple(items)


def _answers(record: dict[str, Any]) -> tuple[str, ...]:
    """The gold answer and its aliases (``answer``, ``answer_aliases``), strings only."""
    found = [record.get("answer")] + list(record.get("answer_aliases") or [])
    return tuple(dict.fromkeys(str(a).strip() for a in found if isinstance(a, (str, int, float)) and str(a).strip()))


def _hops(qid: str) -> str:
    """MuSiQue hop count from the id prefix: ``3hop1__...`` -> ``3hop``."""
    m = re.match(r"(\d+hop)", qid)
    return m.group(1) if m else "unknown"


def _load_hipporag(name: str, data: Path) -> Dataset:
    corpus, qfile = _hipporag_files(name, data)
    questions = []
    for i, r in enumerate(_json_list(qfile)):
        qid = str(r.get("id", r.get("_id", i))) if isinstance(r, dict) else str(i)
        text = _field(qfile, i, r, "question", str)
        if "supporting_facts" in r:
            gold = _supporting_facts(qfile, i, r)
        else:
            gold = _supporting_paragraphs(qfile, i, r)
        if name == "musique":
            groups = {"hops": _hops(qid)}
        elif name == "hotpotqa":
            groups = {k: str(r[k]) for k in ("type", "level") if k in r}
        else:
            groups = {"type": str(r["type"])} if "type" in r else {}
        questions.append(Question(qid, text, gold, groups, _answers(r)))
    return Dataset(name, corpus, name, qfile, questions)


def _load_multihop_rag(data: Path) -> Dataset:
    folder = data.parent if data.is_file() else data
    if not folder.is_dir():
        raise CorpusError(f"{data}: no such file or folder (--data of dataset 'multihop-rag')")
    qfile = data if data.is_file() else _one_of(folder, ("MultiHopRAG.json",), "MultiHopRAG.json questions file")
    corpus = _one_of(folder, ("corpus.json", "multihoprag_corpus.json"), "corpus.json")
    questions = []
    for i, r in enumerate(_json_list(qfile)):
        text = _field(qfile, i, r, "query", str)
        gold = []
        for j, ev in enumerate(_field(qfile, i, r, "evidence_list", list)):
            if not isinstance(ev, dict) or not isinstance(ev.get("title"), str):
                raise CorpusError(f"{qfile}: question {i} evidence_list[{j}] has no string 'title'")
            title, url = ev["title"].strip(), str(ev.get("url") or "").strip()
            gold.append(GoldItem((("title_url", title, url), ("title", title)), title))
        kind = str(r.get("question_type", "unknown")).removesuffix("_query")
        questions.append(Question(str(r.get("id", i)), text, tuple(gold), {"type": kind}, _answers(r)))
    return Dataset("multihop-rag", corpus, "multihop-rag", qfile, questions)


def _load_beir(data: Path) -> Dataset:
    if not data.is_dir():
        raise CorpusError(f"{data}: a BEIR dataset is a folder with corpus.jsonl, queries.jsonl and qrels/")
    corpus = _one_of(data, ("corpus.jsonl",), "corpus.jsonl")
    qfile = _one_of(data, ("queries.jsonl",), "queries.jsonl")
    qrels_dir = data / "qrels"
    if not qrels_dir.is_dir():
        raise CorpusError(f"{data}: no qrels/ folder")
    qrels = _one_of(qrels_dir, ("test.tsv", "dev.tsv", "train.tsv"), "qrels file")
    texts: dict[str, str] = {}
    kinds: dict[str, str] = {}  # metadata.type, when the queries carry one (docs-dev: single / two-doc / howto)
    for lineno, r in iter_json_lines(qfile):
        if not isinstance(r, dict) or "_id" not in r or not isinstance(r.get("text"), str):
            raise CorpusError(f"{qfile}: line {lineno} needs '_id' and a string 'text'")
        texts[str(r["_id"])] = r["text"]
        meta = r.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("type"), (str, int)) and str(meta["type"]).strip():
            kinds[str(r["_id"])] = str(meta["type"]).strip()
    gold: dict[str, list[GoldItem]] = {}
    rows = list(csv.reader(read_text(qrels).splitlines(), delimiter="\t"))
    for lineno, row in enumerate(rows, start=1):
        if not row or (lineno == 1 and row[0] == "query-id"):
            continue
        if len(row) != 3:
            raise CorpusError(f"{qrels}: line {lineno} is not query-id<TAB>corpus-id<TAB>score")
        try:
            score = float(row[2])
        except ValueError:
            raise CorpusError(f"{qrels}: line {lineno} score {row[2]!r} is not a number") from None
        items = gold.setdefault(row[0], [])  # a query with only score-0 rows has no gold
        if score > 0:
            items.append(GoldItem((("doc", row[1]),), row[1], score))
    missing = [q for q in gold if q not in texts]
    if missing:
        raise CorpusError(f"{qrels}: query {missing[0]!r} is not in {qfile.name} ({len(missing)} missing)")
    questions = [Question(q, texts[q], tuple(items), {"type": kinds.get(q, "none")} if kinds else {})
                 for q, items in gold.items()]
    return Dataset("beir", corpus, "beir", qfile, questions)


def _load_sample(data: Path) -> Dataset:
    qfile, corpus = data / "questions.json", data / "corpus"
    if not qfile.is_file() or not corpus.is_dir():
        raise CorpusError(f"{data}: the sample dataset is a folder with corpus/ and questions.json")
    questions = []
    for i, r in enumerate(_json_list(qfile)):
        docs = _field(qfile, i, r, "gold_docs", list)
        gold = tuple(GoldItem((("doc", str(d)),), str(d)) for d in docs)
        groups = {"type": str(r["type"])} if "type" in r else {}
        questions.append(Question(str(r.get("id", i)), _field(qfile, i, r, "question", str), gold, groups, _answers(r)))
    return Dataset("sample", corpus, "folder", qfile, questions)


def load_dataset(name: str, data: str | Path | None = None) -> Dataset:
    """Questions and gold evidence of dataset ``name`` (one of :data:`DATASETS`) at ``data``."""
    if name not in DATASETS:
        raise CorpusError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if data is None:
        if name != "sample":
            raise CorpusError(f"dataset {name!r} needs --data (a folder or its questions file)")
        data = SAMPLE
    data = Path(data)
    if not data.exists():
        raise CorpusError(f"{data}: no such file or folder (--data of dataset {name!r})")
    if name == "sample":
        ds = _load_sample(data)
    elif name == "multihop-rag":
        ds = _load_multihop_rag(data)
    elif name == "beir":
        ds = _load_beir(data)
    else:
        ds = _load_hipporag(name, data)
    if not ds.questions:
        raise CorpusError(f"{ds.questions_file}: no questions")
    seen: set[str] = set()
    for q in ds.questions:
        if not q.text.strip():
            raise CorpusError(f"{ds.questions_file}: question {q.qid!r} has empty text")
        if q.qid in seen:
            raise CorpusError(f"{ds.questions_file}: question id {q.qid!r} occurs twice")
        seen.add(q.qid)
    return ds
