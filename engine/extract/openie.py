"""The preferred source of entities and relations: an extraction file in HippoRAG's OpenIE JSON
format, ``{"docs": [{"title", "text" | "passage", "extracted_entities": [...],
"extracted_triples": [[subject, relation, object], ...]}]}``.

Each record goes to the chunk(s) holding its passage, the chunk text equal to the record's
``text``, else equal after whitespace normalization, else equal to its ``passage``; among
several, those with the record's title. The chunk describes the record's entities and both ends
of its triples (HippoRAG makes triple ends graph nodes too). A triple's relation text is
``subject relation object``. Triples that are not three strings are counted and skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from spectrag.errors import CorpusError
from spectrag.extract.entities import normalize_entity
from spectrag.extract.titles import title_key
from spectrag.types import Extraction, Triple
from spectrag.util.io import read_json


def _ws(text: str) -> str:
    return " ".join(text.split())


def read_openie(path: str | Path) -> list[dict]:
    """The ``docs`` list of an OpenIE file; :class:`CorpusError` names what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such OpenIE file")
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("docs"), list):
        got = type(data).__name__ if not isinstance(data, dict) else f"an object with keys {sorted(data)[:8]}"
        raise CorpusError(f"{path}: not a HippoRAG OpenIE file: expected an object with a 'docs' list, got {got}")
    for n, doc in enumerate(data["docs"]):
        if not isinstance(doc, dict):
            raise CorpusError(f"{path}: docs[{n}] is not a JSON object")
        for fld in ("extracted_entities", "extracted_triples"):
            if not isinstance(doc.get(fld, []), list):
                raise CorpusError(f"{path}: docs[{n}] field {fld!r} is not a list")
        if not isinstance(doc.get("text", doc.get("passage")), str):
            raise CorpusError(f"{path}: docs[{n}] has no string 'text' (or 'passage') field")
        if not isinstance(doc.get("title", ""), str):
            raise CorpusError(f"{path}: docs[{n}] field 'title' is not a string")
    return data["docs"]


def match_chunks(docs: list[dict], chunk_texts: Sequence[str], chunk_titles: Sequence[str]) -> list[list[int]]:
    """The chunk ids of each record (empty when none matches)."""
    exact: dict[str, list[int]] = {}
    loose: dict[str, list[int]] = {}
    for i, text in enumerate(chunk_texts):
        exact.setdefault(text, []).append(i)
        loose.setdefault(_ws(text), []).append(i)
    title_keys = [title_key(t) for t in chunk_titles]
    out = []
    for doc in docs:
        text, title, passage = doc.get("text"), doc.get("title", ""), doc.get("passage")
        if text is None and isinstance(passage, str):
            title_part, _, text = passage.partition("\n")
            title = title or title_part
        cands = exact.get(text) or loose.get(_ws(text))
        if not cands and isinstance(passage, str):
            cands = loose.get(_ws(passage))
        cands = list(cands or [])
        if len(cands) > 1 and isinstance(title, str):
            key = title_key(title)
            same = [i for i in cands if title_keys[i] == key]
            cands = same or cands
        out.append(cands)
    return out


def load_openie(path: str | Path, chunk_texts: Sequence[str], chunk_titles: Sequence[str]) -> Extraction:
    """Entity mentions and triples of the file, on the chunks (:func:`openie_extraction`)."""
    return openie_extraction(read_openie(path), chunk_texts, chunk_titles, source=str(path))


def openie_extraction(docs: list[dict], chunk_texts: Sequence[str], chunk_titles: Sequence[str], *,
                      source: str) -> Extraction:
    """Entity mentions and triples of OpenIE records (a file's ``docs``, or the LLM's), on the
    chunks. Facts: ``file`` (``source``), ``records``, ``unmatched_records``, ``entity_mentions``
    and ``triples`` (as listed, matched records only), ``malformed_triples`` (not three strings)."""
    if len(chunk_texts) != len(chunk_titles):
        raise ValueError(f"{len(chunk_texts)} chunk texts but {len(chunk_titles)} chunk titles")
    mentions: list[list[str]] = [[] for _ in chunk_texts]
    triples: list[Triple] = []
    facts = {"file": source, "records": len(docs), "unmatched_records": 0, "entity_mentions": 0,
             "triples": 0, "malformed_triples": 0}
    for doc, chunks in zip(docs, match_chunks(docs, chunk_texts, chunk_titles)):
        if not chunks:
            facts["unmatched_records"] += 1
            continue
        ents = [e for e in doc.get("extracted_entities", []) if isinstance(e, str)]
        facts["entity_mentions"] += len(ents)
        good = []
        for t in doc.get("extracted_triples", []):
            facts["triples"] += 1
            if isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t):
                good.append(t)
            else:
                facts["malformed_triples"] += 1
        for c in chunks:
            mentions[c].extend(ents)
            triples.extend(Triple(c, s, p, o, f"{s} {p} {o}") for s, p, o in good)
    return Extraction(mentions, triples, facts)


def openie_entity_keys(extraction: Extraction) -> list[list[str]]:
    """The entity edge signal's view of an extraction: the sorted unique normalized entity keys
    of each chunk."""
    return [sorted({k for e in mentions if (k := normalize_entity(e))}) for mentions in extraction.mentions]


def load_openie_entities(
    path: str | Path, chunk_texts: Sequence[str], chunk_titles: Sequence[str]
) -> tuple[list[list[str]], int]:
    """The entity edge signal's view of the file: the sorted unique normalized entity keys of
    each chunk (from :func:`load_openie`'s mentions) and the number of records that matched no
    chunk."""
    extraction = load_openie(path, chunk_texts, chunk_titles)
    return openie_entity_keys(extraction), extraction.facts["unmatched_records"]
