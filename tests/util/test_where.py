"""spectrag.util.where: compiled filter masks against the plain per-chunk reference
(spectrag.reference.where.matches) on random metadata and random filters, and the errors a bad
filter gets (each naming the place, the operator and the value)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from spectrag.reference.where import matches
from spectrag.util.where import FilterError, MetadataColumns, check_where, per_query_where

LANGS = ["en", "de", "fr", "zh"]


def random_metadata(rng: random.Random, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        m = {}
        if rng.random() < 0.85:
            m["lang"] = rng.choice(LANGS)
        if rng.random() < 0.8:
            m["year"] = rng.choice([2019, 2020, 2021, 2022.5, 2023])
        if rng.random() < 0.6:
            m["tags"] = rng.sample(["a", "b", "c", "d"], rng.randint(0, 3))
        if rng.random() < 0.5:
            m["draft"] = rng.random() < 0.5
        if rng.random() < 0.4:
            m["date"] = f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"
        if rng.random() < 0.1:
            m["lang"] = {"nested": "en"}  # not comparable: matches only $ne / $nin
        if rng.random() < 0.1:
            m["year"] = True  # a boolean is never the number 1
        out.append(m)
    return out


def random_leaf(rng: random.Random) -> dict:
    field = rng.choice(["lang", "year", "tags", "draft", "date", "missing"])
    value = {"lang": lambda: rng.choice(LANGS + ["xx"]), "year": lambda: rng.choice([2019, 2020.0, 2021, 2022.5, 1]),
             "tags": lambda: rng.choice("abcde"), "draft": lambda: rng.random() < 0.5,
             "date": lambda: f"2024-0{rng.randint(1, 9)}-15", "missing": lambda: "x"}[field]
    op = rng.choice(["eq", "$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte"])
    if op == "eq":
        return {field: value()}
    if op in ("$in", "$nin"):
        return {field: {op: [value() for _ in range(rng.randint(1, 3))]}}
    v = value()
    if op in ("$gt", "$gte", "$lt", "$lte") and isinstance(v, bool):
        v = 2021
    return {field: {op: v}}


def random_where(rng: random.Random, depth: int = 0) -> dict:
    r = rng.random()
    if depth < 2 and r < 0.3:
        return {rng.choice(["$and", "$or"]): [random_where(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if r < 0.45:  # several fields at once: all must hold
        return {**random_leaf(rng), **random_leaf(rng)}
    return random_leaf(rng)


def test_masks_equal_the_reference_on_random_filters():
    rng = random.Random(3)
    metadata = random_metadata(rng, 400)
    columns = MetadataColumns(metadata)
    matched = 0
    for _ in range(600):
        where = check_where(random_where(rng))
        want = np.array([matches(m, where) for m in metadata])
        got = columns.mask(where)
        assert np.array_equal(got, want), f"{where}: {np.flatnonzero(got != want)[:5]}"
        matched += 0 < want.sum() < len(metadata)
    assert matched > 300  # most filters split the chunks: the comparison is not vacuous


def test_semantics_on_a_small_table():
    metadata = [{"lang": "en", "year": 2020, "tags": ["a", "b"]}, {"lang": "de", "year": 2023.0},
                {"year": True, "tags": []}, {}]
    c = MetadataColumns(metadata)
    assert c.mask({"lang": "en"}).tolist() == [True, False, False, False]
    assert c.mask({"lang": {"$ne": "en"}}).tolist() == [False, True, True, True]  # missing: "not equal"
    assert c.mask({"year": {"$gte": 2021}}).tolist() == [False, True, False, False]  # True is not a number
    assert c.mask({"year": 1}).tolist() == [False, False, False, False]
    assert c.mask({"year": True}).tolist() == [False, False, True, False]
    assert c.mask({"tags": "b"}).tolist() == [True, False, False, False]  # a list: any element
    assert c.mask({"tags": {"$nin": ["a"]}}).tolist() == [False, True, True, True]
    assert c.mask({"lang": {"$lt": "e"}}).tolist() == [False, True, False, False]  # strings: lexicographic
    assert c.mask({"$or": [{"lang": "de"}, {"tags": "a"}]}).tolist() == [True, True, False, False]
    assert c.mask({"$and": [{"year": {"$gt": 2019}}, {"year": {"$lt": 2021}}]}).tolist() == [True, False, False, False]


def test_batch_mask_per_query_and_none():
    c = MetadataColumns([{"lang": "en"}, {"lang": "de"}, {}])
    assert c.batch_mask([None, None]) is None
    got = c.batch_mask([{"lang": "en"}, None, {"lang": "en"}, {"lang": "de"}])
    assert got.dtype == torch.bool and got.tolist() == [[True, False, False], [True, True, True],
                                                        [True, False, False], [False, True, False]]


@pytest.mark.parametrize("where, message", [
    ("lang=en", "where must be an object"),
    ({"lang": ["en", "de"]}, "where.lang: a list is not a value to compare; use {\"$in\": [\"en\", \"de\"]}"),
    ({"lang": {"$regex": "e.*"}}, "where.lang: unknown operator \"$regex\"; allowed: $eq, $ne"),
    ({"$not": {"lang": "en"}}, "where: unknown operator '$not'"),
    ({"$or": []}, "where.$or takes a non-empty list of filters, got []"),
    ({"$and": [{"year": {"$gte": True}}]}, "where.$and[0].year.$gte takes a number or a string, got true"),
    ({"lang": {"$in": "en"}}, "where.lang.$in takes a non-empty list"),
    ({"lang": None}, "where.lang: compare with a string, number or boolean, got null"),
    ({"lang": {}}, "where.lang: an empty operator object"),
    ({"year": {"$eq": [2020]}}, "where.year.$eq takes a string, number or boolean, got [2020]"),
])
def test_bad_filters_are_clear_errors(where, message):
    with pytest.raises(FilterError) as err:
        check_where(where)
    assert message in str(err.value)


def test_per_query_filters():
    assert per_query_where({"a": 1}, 2) == [{"a": 1}, {"a": 1}]
    assert per_query_where(None, 2) == [None, None]
    assert per_query_where([{}, {"a": 1}], 2) == [None, {"a": 1}]
    with pytest.raises(FilterError, match="where: 1 filters for 2 queries"):
        per_query_where([{"a": 1}], 2)
    with pytest.raises(FilterError, match=r"where\[1\].a: a list"):
        per_query_where([None, {"a": [1]}], 2)
