"""Fuzzing (hypothesis) across the layers that read outside input: corpus loaders, the chunker,
config tables, the index manifest and the stored arrays, and the query API. Every input either
works or raises a :class:`spectrag.errors.SpectragError` subclass; never another exception.
Where an input works, the result is checked too (no text lost, exact chunk slices, finite
config values, validated arrays safe for scipy).

CI-sized: a fixed, derandomized budget of examples per property (the whole file runs in well
under 30 s); ``python bench/bench_fuzz.py`` runs the long version across the audit's categories.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectrag.config import ChunkConfig, IndexConfig, retriever_config_from_dict
from spectrag.errors import ConfigError, CorpusError, IndexFormatError, SpectragError
from spectrag.index.chunk import _protected_spans, chunk_document
from spectrag.index.load import load_documents
from spectrag.types import Document
from spectrag.util.checks import check_csr
from spectrag.util.tokens import count_tokens

FAST = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Markdown-ish text: the constructs the chunker treats specially, in any order
PIECES = ["# ", "## Title\n", "###### x #\n", "Title\n===\n", "---\n", "```\n", "~~~py\n", "|a|b|\n", "<!--", "-->",
          "1. Intro\n", "2.1 Data\n", "- item\n", "Word ", "sentence. ", "Next! ", "\n", "\n\n", "  ", "\t", "é", "\U0001F600",
          "[link](x.md) ", "*em* ", "&amp; ", "\r\n", ".", "\u3000", "`code` "]
markdownish = st.lists(st.sampled_from(PIECES) | st.text(max_size=8), max_size=80).map("".join)


@FAST
@given(text=markdownish, size=st.integers(8, 64), overlap=st.integers(0, 7), min_tokens=st.integers(0, 12),
       markup=st.sampled_from(["markdown", "text"]), kind=st.sampled_from(["document", "passage"]))
def test_chunker_invariants_on_any_text(text, size, overlap, min_tokens, markup, kind):
    config = ChunkConfig(chunk_size=size, overlap=overlap, min_tokens=min(min_tokens, size))
    doc = Document("d", "t", text, markup=markup, kind=kind)
    spans = _protected_spans(text)
    covered = bytearray(len(text))
    for c in chunk_document(doc, config):
        assert c.text == text[c.start : c.end] and c.text.strip()
        assert c.n_tokens == count_tokens([c.text])[0]
        assert c.n_tokens <= size or spans.covers(c.start, c.end)
        assert all(len(s) <= 200 for s in c.section)
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text)), "text lost"


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                           max_leaves=12)


@FAST
@given(records=st.lists(st.dictionaries(st.sampled_from(["id", "_id", "text", "title", "url", "metadata", "body"]),
                                        json_values | st.text(), max_size=5), max_size=5),
       raw=st.binary(max_size=60), skip=st.booleans())
def test_loaders_work_or_name_the_problem(tmp_path_factory, records, raw, skip):
    folder = tmp_path_factory.mktemp("fz")
    jsonl = folder / "c.jsonl"
    jsonl.write_bytes(b"\n".join(json.dumps(r).encode() for r in records) + b"\n" + raw)
    (folder / "c.json").write_text(json.dumps(records))
    (folder / "m").mkdir()
    (folder / "m" / "a.md").write_bytes(raw)
    (folder / "m" / "b.rst").write_bytes(raw)
    (folder / "m" / "c.md").write_text("---\n" + raw.decode("latin-1") + "\n---\n# T\n\nbody\n")
    for path, fmt in ((jsonl, "jsonl"), (folder / "c.json", "json"), (folder / "m", "folder"), (jsonl, "beir")):
        skipped: list | None = [] if skip else None
        try:
            docs = load_documents(path, fmt, skipped=skipped)
        except CorpusError:
            continue
        for d in docs:
            d.text.encode("utf-8")  # never a lone surrogate past the loader
        if fmt == "json":  # no text lost: every record the loader kept has its text as given
            texts = [r["text"] for r in records if isinstance(r.get("text"), str)]
            assert all(d.text in texts for d in docs)


config_tables = st.dictionaries(
    st.sampled_from(["chunk", "embed", "bm25", "graph", "kg", "extra"]),
    st.dictionaries(st.sampled_from(["chunk_size", "overlap", "min_tokens", "k1", "b", "min_cos", "entity_top_k", "tau",
                                     "device", "model", "stemmer", "enabled", "weights", "lanczos_tol", "method"]),
                    json_values | st.floats(allow_nan=True, allow_infinity=True), max_size=4),
    max_size=4)


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


@FAST
@given(tables=config_tables, online=st.dictionaries(
    st.sampled_from(["retriever", "seed", "expand", "propagate", "bridge", "select", "activation"]),
    st.dictionaries(st.sampled_from(["mode", "budget", "rrf_k", "k_dense", "hops", "alpha", "t", "damping", "tau_a", "tau_d",
                                     "lam", "rho", "precision_floor", "layout"]),
                    json_values | st.floats(allow_nan=True, allow_infinity=True), max_size=4), max_size=4))
def test_config_tables_are_valid_or_a_config_error(tables, online):
    for make in (lambda: IndexConfig.from_dict(tables), lambda: retriever_config_from_dict(online)):
        try:
            config = make()
        except ConfigError:
            continue
        assert _finite(config.to_dict()), "a non-finite value got through"


@FAST
@given(rows=st.integers(0, 6), cols=st.integers(0, 6),
       indptr=st.lists(st.integers(-3, 12), max_size=8), indices=st.lists(st.integers(-3, 9), max_size=10),
       data=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=10),
       dtype=st.sampled_from([np.int64, np.int32, np.float32, np.uint8]))
def test_validated_csr_parts_are_safe_for_scipy(rows, cols, indptr, indices, data, dtype):
    parts = (np.asarray(indptr, dtype=dtype), np.asarray(indices, dtype=dtype), np.asarray(data, dtype=np.float32))
    try:
        check_csr(*parts, "m", (rows, cols))
    except IndexFormatError:
        return
    m = sp.csr_matrix((parts[2], parts[1], parts[0]), shape=(rows, cols))
    assert np.isfinite(m @ np.ones(cols, dtype=np.float32)).all()


def _edit(manifest, path, value):
    """``manifest`` with the value at ``path`` (keys / indices, wrapped into range) replaced."""
    node = manifest
    for key in path[:-1]:
        if isinstance(node, dict) and node:
            node = node[sorted(node)[key % len(node)]]
        elif isinstance(node, list) and node:
            node = node[key % len(node)]
        else:
            break
    if isinstance(node, dict) and node:
        node[sorted(node)[path[-1] % len(node)]] = value
    elif isinstance(node, list) and node:
        node[path[-1] % len(node)] = value
    return manifest


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(path=st.lists(st.integers(0, 50), min_size=1, max_size=4), value=json_values)
def test_edited_manifests_load_or_are_an_index_error(sample_index, tmp_path_factory, path, value):
    from spectrag import load_index
    from spectrag.store import MANIFEST

    folder = tmp_path_factory.mktemp("mf") / "idx"
    shutil.copytree(sample_index.path, folder)
    manifest = _edit(json.loads((folder / MANIFEST).read_text()), path, value)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    try:
        index = load_index(folder, verify=False)
    except SpectragError:
        return
    assert len(index) == index.manifest["counts"]["chunks"]
    from click.testing import CliRunner

    from spectrag.cli.main import _print_summary, _summary

    with CliRunner().isolation():  # what `spectrag info` prints from an accepted manifest
        _print_summary(_summary(index.manifest, folder))


@pytest.fixture(scope="module")
def retriever(sample_index):
    from spectrag.config import RetrieverConfig
    from spectrag.retriever import Retriever

    return Retriever(sample_index, RetrieverConfig(mode="spectral", device="cpu"))


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(queries=st.lists(st.text(max_size=40) | st.sampled_from(["", "   ", "\ud800", "Veltra Bridge", "x" * 2000]),
                        min_size=0, max_size=4),
       budget=st.integers(-5, 3000) | st.none())
def test_query_api_answers_or_names_the_problem(retriever, queries, budget):
    try:
        contexts = retriever.retrieve(queries, budget=budget)
    except SpectragError:
        return
    assert len(contexts) == len(queries)
    assert all(c.used_tokens <= c.budget for c in contexts)
