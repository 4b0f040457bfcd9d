"""Metadata filters: a Mongo / Chroma-like ``where`` compiled into a boolean mask over chunks.

Syntax (``where`` is a JSON object)::

    {"lang": "en"}                                   equality (a list field: any element equal)
    {"lang": {"$eq": "en"}}, {"$ne": "en"}           equal / not equal (a chunk without the field is "not equal")
    {"year": {"$gte": 2020, "$lt": 2024}}            ranges on numbers, or on strings (lexicographic: ISO dates)
    {"lang": {"$in": ["en", "de"]}}, {"$nin": [..]}  one of / none of
    {"$and": [where, ...]}, {"$or": [where, ...]}    conjunction / disjunction
    {"lang": "en", "year": 2024}                     several fields: all must hold

Values compared are strings, numbers and booleans (``true`` is never the number 1). A field
holding a list matches when any element does (so ``$ne`` / ``$nin`` hold when no element
matches); other values (objects, null) match nothing but ``$ne`` / ``$nin``.

:class:`MetadataColumns` keeps each field as flat columns over its (chunk, value) entries,
built on first use: a compiled filter is a few numpy comparisons over those arrays, never a
Python loop over chunks. Shapes: masks ``[n]`` bool (one per filter); a batch's ``[B, n]``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from spectrag.errors import SpectragError

COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
LOGICAL = ("$and", "$or")


class FilterError(SpectragError, ValueError):
    """A ``where`` filter that is not valid; the message names the field, operator and value."""


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, bool, int, float)) and not (isinstance(value, float) and value != value)


def check_where(where: Any, *, label: str = "where") -> dict[str, Any] | None:
    """``where`` checked (None or ``{}``: no filter -> None); :class:`FilterError` names the
    first problem's place (``where.$and[1].year.$gte``), the operator and the value."""
    if where is None:
        return None
    _check(where, label)
    return where or None


def _check(where: Any, at: str) -> None:
    if not isinstance(where, dict):
        raise FilterError(f"{at} must be an object like {{\"lang\": \"en\"}}, got {_show(where)}")
    for key, value in where.items():
        if not isinstance(key, str) or not key:
            raise FilterError(f"{at}: field names are non-empty strings, got {_show(key)}")
        if key.startswith("$"):
            if key not in LOGICAL:
                raise FilterError(f"{at}: unknown operator {key!r} (fields are compared with {', '.join(COMPARISONS)};"
                                  f" {', '.join(LOGICAL)} combine filters)")
            if not isinstance(value, list) or not value:
                raise FilterError(f"{at}.{key} takes a non-empty list of filters, got {_show(value)}")
            for i, part in enumerate(value):
                _check(part, f"{at}.{key}[{i}]")
            continue
        if isinstance(value, dict):
            if not value:
                raise FilterError(f"{at}.{key}: an empty operator object; use e.g. {{\"$eq\": ...}}")
            for op, operand in value.items():
                _check_operand(f"{at}.{key}", op, operand)
        elif isinstance(value, list):
            raise FilterError(f"{at}.{key}: a list is not a value to compare; use {{\"$in\": {_show(value)}}}")
        elif not _scalar(value):
            raise FilterError(f"{at}.{key}: compare with a string, number or boolean, got {_show(value)}")


def _check_operand(at: str, op: Any, operand: Any) -> None:
    if op not in COMPARISONS:
        raise FilterError(f"{at}: unknown operator {_show(op)}; allowed: {', '.join(COMPARISONS)}")
    if op in ("$in", "$nin"):
        if not isinstance(operand, list) or not operand or not all(_scalar(v) for v in operand):
            raise FilterError(f"{at}.{op} takes a non-empty list of strings, numbers or booleans, got {_show(operand)}")
    elif op in ("$eq", "$ne"):
        if not _scalar(operand):
            raise FilterError(f"{at}.{op} takes a string, number or boolean, got {_show(operand)}")
    elif isinstance(operand, bool) or not isinstance(operand, (str, int, float)) or operand != operand:
        raise FilterError(f"{at}.{op} takes a number or a string, got {_show(operand)}")


class _Column:
    """One field's entries: ``rows [M]`` (the chunk of each entry; a list field has one entry per
    element), ``numbers [M]`` float64 (NaN: not a number), ``codes [M]`` int64 (rank of the string
    in the sorted ``vocab``; -1: not a string), ``flags [M]`` int8 (0/1 a boolean, -1 not one)."""

    def __init__(self, values: list[Any], n: int) -> None:
        rows, items = [], []
        for i, v in enumerate(values):
            for x in (v if isinstance(v, list) else (v,)):
                if x is not _MISSING:
                    rows.append(i)
                    items.append(x)
        self.n = n
        self.rows = np.asarray(rows, dtype=np.int64)
        self.numbers = np.array([float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else np.nan
                                 for x in items], dtype=np.float64)
        strings = sorted({x for x in items if isinstance(x, str)})
        self.vocab = np.array(strings, dtype=object)
        where = {s: i for i, s in enumerate(strings)}
        self.codes = np.array([where[x] if isinstance(x, str) else -1 for x in items], dtype=np.int64)
        self.flags = np.array([int(x) if isinstance(x, bool) else -1 for x in items], dtype=np.int8)

    def any_rows(self, hit: np.ndarray) -> np.ndarray:
        """The chunks with at least one entry where ``hit [M]``. -> bool ``[n]``."""
        out = np.zeros(self.n, dtype=np.bool_)
        out[self.rows[hit]] = True
        return out

    def equal(self, value: Any) -> np.ndarray:  # [M]
        if isinstance(value, bool):
            return self.flags == int(value)
        if isinstance(value, str):
            at = int(np.searchsorted(self.vocab, value)) if self.vocab.size else 0
            found = at < self.vocab.size and self.vocab[at] == value
            return self.codes == at if found else np.zeros(self.codes.shape, np.bool_)
        return self.numbers == value

    def compare(self, op: str, value: Any) -> np.ndarray:  # [M]
        if isinstance(value, str):  # string ranges by sorted rank: searchsorted over the vocabulary
            left = int(np.searchsorted(self.vocab, value, side="left"))
            right = int(np.searchsorted(self.vocab, value, side="right"))
            lo, hi = {"$gt": (right, None), "$gte": (left, None), "$lt": (0, left), "$lte": (0, right)}[op]
            ok = self.codes >= lo
            return ok & (self.codes < hi) if hi is not None else ok
        with np.errstate(invalid="ignore"):
            return {"$gt": np.greater, "$gte": np.greater_equal, "$lt": np.less, "$lte": np.less_equal}[op](
                self.numbers, value)


_MISSING = object()


class MetadataColumns:
    """The chunks' metadata (``metadata[i]``: chunk ``i``'s dict) as columns built per field on
    first use, and :meth:`mask` compiling a ``where`` into ``[n]`` bool (the last
    ``cache`` masks are kept: repeated filters cost nothing)."""

    def __init__(self, metadata: Sequence[dict[str, Any]], *, cache: int = 256) -> None:
        self.metadata, self.n = metadata, len(metadata)
        self._columns: dict[str, _Column] = {}
        self._masks: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache = cache

    def column(self, key: str) -> _Column:
        if key not in self._columns:
            self._columns[key] = _Column([m.get(key, _MISSING) if m else _MISSING for m in self.metadata], self.n)
        return self._columns[key]

    def mask(self, where: dict[str, Any]) -> np.ndarray:
        """Which chunks ``where`` (already checked: :func:`check_where`) allows. -> bool ``[n]``."""
        key = json.dumps(where, sort_keys=True)
        hit = self._masks.get(key)
        if hit is None:
            hit = self._compile(where)
            hit.flags.writeable = False
            self._masks[key] = hit
            if len(self._masks) > self._cache:
                self._masks.popitem(last=False)
        else:
            self._masks.move_to_end(key)
        return hit

    def _compile(self, where: dict[str, Any]) -> np.ndarray:
        out = np.ones(self.n, dtype=np.bool_)
        for key, value in where.items():
            if key == "$and":
                for part in value:
                    out &= self._compile(part)
            elif key == "$or":
                any_ = np.zeros(self.n, dtype=np.bool_)
                for part in value:
                    any_ |= self._compile(part)
                out &= any_
            else:
                ops = value if isinstance(value, dict) else {"$eq": value}
                for op, operand in ops.items():
                    out &= self._field(key, op, operand)
        return out

    def _field(self, key: str, op: str, operand: Any) -> np.ndarray:
        col = self.column(key)
        if op in ("$eq", "$ne"):
            hit = col.any_rows(col.equal(operand))
        elif op in ("$in", "$nin"):
            entries = np.zeros(col.rows.shape, dtype=np.bool_)
            for v in operand:
                entries |= col.equal(v)
            hit = col.any_rows(entries)
        else:
            return col.any_rows(col.compare(op, operand))
        return ~hit if op in ("$ne", "$nin") else hit

    def batch_mask(self, wheres: Sequence[dict[str, Any] | None], device: torch.device | str = "cpu") -> torch.Tensor | None:
        """The allowed chunks of each query (``wheres``: one checked filter or None each): bool
        ``[B, n]`` on ``device``, or None when no query has a filter. Equal filters are compiled once."""
        if all(w is None for w in wheres):
            return None
        keys = [None if w is None else json.dumps(w, sort_keys=True) for w in wheres]
        first = {k: i for i, k in reversed(list(enumerate(keys)))}  # each distinct filter's first query
        slot = {k: j for j, k in enumerate(first)}
        masks = np.stack([np.ones(self.n, np.bool_) if k is None else self.mask(wheres[i]) for k, i in first.items()])
        rows = np.fromiter((slot[k] for k in keys), dtype=np.int64, count=len(keys))
        return torch.from_numpy(masks[rows]).to(device)  # (U, n) -> (B, n), one copy


def per_query_where(where: Any, n: int) -> list[dict[str, Any] | None]:
    """``where`` for each of ``n`` queries, checked: one filter (a dict or None) for all, or a
    list of ``n`` (each a dict or None)."""
    if isinstance(where, (list, tuple)):
        if len(where) != n:
            raise FilterError(f"where: {len(where)} filters for {n} queries; give one filter, or one per query")
        return [check_where(w, label=f"where[{i}]") for i, w in enumerate(where)]
    one = check_where(where)
    return [one] * n


def allowed_at(allowed: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Whether each id of ``ids [B, P]`` (-1 padded) is allowed for its query (``allowed [B, n]``)
    -> bool ``[B, P]`` (False on padding)."""
    return allowed.gather(1, ids.clamp(min=0)) & (ids >= 0)


def restrict_ids(ids: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """``ids [B, P]`` with every id its query does not allow set to -1 (padding)."""
    return ids if allowed is None else ids.masked_fill(~allowed_at(allowed, ids), -1)
