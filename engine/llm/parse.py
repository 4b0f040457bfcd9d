"""Reading what a model wrote. Every parser returns ``None`` (or drops the bad part and counts
it) instead of raising: malformed output is counted and skipped by the stages, never a crash.

Models wrap JSON in prose or Markdown fences, so :func:`json_object` takes the first balanced
``{...}`` that parses; answers end in an ``Answer:`` line (bold or not), iterative steps in an
``Answer:`` or a ``Follow-up question:`` line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)
_ANSWER = re.compile(r"^\W*answer\W*:\s*(.*)$", re.I)
_FOLLOW = re.compile(r"^\W*follow[- ]?up(?: question)?\W*:\s*(.*)$", re.I)
_NOTES = re.compile(r"^\W*notes?\W*:\s*(.*)$", re.I)
_CITE = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def json_object(text: str) -> Any | None:
    """The first JSON value (object or list) in ``text``: the whole text, a fenced block, or the
    first balanced ``{...}`` / ``[...]`` span that parses; None when there is none."""
    candidates = [text.strip()] + [m.strip() for m in _FENCE.findall(text)]
    for cand in candidates:
        try:
            return json.loads(cand)
        except json.JSONDecodeError:
            pass
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(text, i)
                return value
            except json.JSONDecodeError:
                continue
    return None


def _strings(values: Any) -> tuple[list[str], int]:
    """The non-empty strings of a list (stripped) and how many items were not."""
    if not isinstance(values, list):
        return [], 1
    good = [v.strip() for v in values if isinstance(v, str) and v.strip()]
    return good, len(values) - len(good)


def questions(text: str, limit: int) -> list[str] | None:
    """``{"questions": [...]}`` (or a bare list) -> at most ``limit`` distinct questions; None
    when the output holds no question."""
    data = json_object(text)
    if isinstance(data, dict):
        data = data.get("questions")
    found, _ = _strings(data)
    found = list(dict.fromkeys(found))[:limit]
    return found or None


@dataclass
class OpenIE:
    """One chunk's extraction: entities and triples that are well formed, and what was dropped."""

    entities: list[str]
    triples: list[list[str]]
    bad_entities: int = 0
    bad_triples: int = 0


def openie(text: str) -> OpenIE | None:
    """``{"named_entities": [...], "triples": [[s, p, o], ...]}`` -> :class:`OpenIE`; triples that
    are not three non-empty strings, and entities that are not strings, are dropped and counted.
    None when the output is not such an object."""
    data = json_object(text)
    if not isinstance(data, dict) or not ({"named_entities", "triples"} & set(data)):
        return None
    entities, bad_entities = _strings(data.get("named_entities", []))
    triples, bad = [], 0
    raw = data.get("triples", [])
    for t in raw if isinstance(raw, list) else []:
        if isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) and x.strip() for x in t):
            triples.append([x.strip() for x in t])
        else:
            bad += 1
    if not isinstance(raw, list):
        bad += 1
    return OpenIE(list(dict.fromkeys(entities)), triples, bad_entities, bad)


def citations(text: str) -> list[int]:
    """Chunk ids cited as ``[3]`` or ``[3, 7]``, in order of first citation."""
    ids: list[int] = []
    for group in _CITE.findall(text):
        ids += [int(x) for x in group.split(",")]
    return list(dict.fromkeys(ids))


def _clean(answer: str) -> str:
    answer = re.sub(r"\s*\[\d+(?:\s*,\s*\d+)*\]", "", answer)  # citations
    return re.sub(r"^[\s*_`]+|[\s*_`.]+$", "", answer)  # Markdown emphasis, a final full stop


def final_answer(text: str) -> str | None:
    """The short answer of an ``Answer: ...`` line (the last one), citations and bold stripped;
    None when there is none."""
    found = None
    for line in text.splitlines():
        m = _ANSWER.match(line)
        if m and m.group(1).strip():
            found = m.group(1)
    return _clean(found) if found is not None else None


@dataclass
class Step:
    """One iterative step: its notes, and either an answer or a follow-up question."""

    notes: str
    answer: str | None
    follow_up: str | None


def step(text: str) -> Step | None:
    """An iterative step's reply; None when it has neither an answer nor a follow-up question."""
    notes, answer, follow = [], None, None
    for line in text.splitlines():
        if m := _FOLLOW.match(line):
            follow = m.group(1).strip() or follow
        elif m := _ANSWER.match(line):
            answer = m.group(1) if m.group(1).strip() else answer
        elif m := _NOTES.match(line):
            notes.append(m.group(1).strip())
        elif notes and line.strip() and answer is None and follow is None:
            notes.append(line.strip())  # notes running over several lines
    if answer is None and not follow:
        return None
    return Step(" ".join(n for n in notes if n), _clean(answer) if answer is not None else None,
                None if answer is not None else follow)
