"""The plain reference of :mod:`spectrag.util.where`: whether one chunk's metadata matches a
``where`` filter, by recursion over the filter with Python comparisons, one chunk at a time.
The tests hold :meth:`spectrag.util.where.MetadataColumns.mask` to it."""

from __future__ import annotations

from typing import Any


def _values(metadata: dict[str, Any], key: str) -> list[Any]:
    """The values a field holds: a list's elements, a scalar alone, nothing when absent."""
    if key not in metadata:
        return []
    value = metadata[key]
    return list(value) if isinstance(value, list) else [value]


def _kind(x: Any) -> str | None:
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, (int, float)):
        return "number"
    return "string" if isinstance(x, str) else None


def _equal(x: Any, v: Any) -> bool:
    return _kind(x) is not None and _kind(x) == _kind(v) and x == v


def _compare(x: Any, op: str, v: Any) -> bool:
    if _kind(x) != _kind(v) or _kind(x) not in ("number", "string"):
        return False
    return {"$gt": x > v, "$gte": x >= v, "$lt": x < v, "$lte": x <= v}[op]


def matches(metadata: dict[str, Any], where: dict[str, Any] | None) -> bool:
    """Whether a chunk with ``metadata`` passes ``where`` (None: every chunk does)."""
    if not where:
        return True
    for key, cond in where.items():
        if key == "$and":
            if not all(matches(metadata, part) for part in cond):
                return False
            continue
        if key == "$or":
            if not any(matches(metadata, part) for part in cond):
                return False
            continue
        values = _values(metadata, key)
        for op, v in (cond.items() if isinstance(cond, dict) else [("$eq", cond)]):
            if op == "$eq":
                ok = any(_equal(x, v) for x in values)
            elif op == "$ne":
                ok = not any(_equal(x, v) for x in values)
            elif op == "$in":
                ok = any(_equal(x, w) for x in values for w in v)
            elif op == "$nin":
                ok = not any(_equal(x, w) for x in values for w in v)
            else:
                ok = any(_compare(x, op, v) for x in values)
            if not ok:
                return False
    return True
