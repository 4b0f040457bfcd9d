"""Fuzzing (hypothesis) across the layers that read outside input: corpus loaders, the chunker,
config tables, the index manifest and the stored arrays, and the query API. Every input either
works or raises a :class:`spectrag.errors.SpectragError` subclass; never another exception.
Where an input works, the result is checked too (no text lost, exact chunk slices, finite
config values, validated arrays safe for scipy).

Also (issue 25): values that break the index format with resealed checksums, online settings at
the ends of their ranges, file names of any bytes, request bodies in any framing, and the
batcher under cancels and shutdown.

CI-sized: a fixed, derandomized budget of examples per property (the whole file takes a few
minutes on a busy 2-core machine); ``python bench/bench_fuzz.py`` runs the long version across
the audit's categories.
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


@st.composite
def csr_parts(draw):
    """``(rows, cols, indptr, indices, data)``: arbitrary lists, or a well-formed CSR matrix with
    at most one of its parts damaged (so that both the refusals and the acceptances are tried)."""
    rows, cols = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    dtype = draw(st.sampled_from([np.int64, np.int32, np.float32, np.uint8]))
    if draw(st.booleans()):
        return (rows, cols, np.asarray(draw(st.lists(st.integers(-3, 12), max_size=8)), dtype=np.int64).astype(dtype),
                np.asarray(draw(st.lists(st.integers(-3, 9), max_size=10)), dtype=np.int64).astype(dtype),
                np.asarray(draw(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=10)),
                           dtype=np.float32))
    m = sp.random(rows, cols, density=draw(st.sampled_from([0.0, 0.3, 1.0])), format="csr", dtype=np.float32,
                  random_state=draw(st.integers(0, 1000)))
    indptr, indices, data = m.indptr.astype(dtype), m.indices.astype(dtype), m.data.copy()
    damage = draw(st.sampled_from(["none", "indptr", "indices", "data"]))
    part = {"indptr": indptr, "indices": indices, "data": data}.get(damage)
    if part is not None and part.size:
        values = [float("nan"), float("inf"), -1.0, 99.0] if part.dtype.kind == "f" else [99] if part.dtype.kind == "u" \
            else [-1, 99]
        part[draw(st.integers(0, part.size - 1))] = draw(st.sampled_from(values))
    return rows, cols, indptr, indices, data


@FAST
@given(csr=csr_parts())
def test_validated_csr_parts_are_safe_for_scipy(csr):
    rows, cols, *parts = csr
    try:
        check_csr(*parts, "m", (rows, cols))
    except IndexFormatError:
        return
    m = sp.csr_matrix((parts[2], parts[1], parts[0]), shape=(rows, cols))
    assert np.isfinite(m @ np.ones(cols, dtype=np.float32)).all()


def test_a_well_formed_csr_passes_the_check_and_a_damaged_one_does_not():
    """The acceptance side of the property above, pinned: scipy's own CSR matrices pass, and one
    damaged part (an index out of range, a non-finite value, a decreasing indptr) is refused."""
    m = sp.random(5, 7, density=0.4, format="csr", dtype=np.float32, random_state=3)
    for dtype in (np.int32, np.int64):
        check_csr(m.indptr.astype(dtype), m.indices.astype(dtype), m.data, "m", (5, 7))
    check_csr(m.indptr, m.indices, None, "m", (5, 7))  # pattern only
    bad_index, bad_value, bad_ptr = m.indices.copy(), m.data.copy(), m.indptr.copy()
    bad_index[0], bad_value[0], bad_ptr[2] = 7, np.nan, bad_ptr[3] + 1
    for parts in ((m.indptr, bad_index, m.data), (m.indptr, m.indices, bad_value), (bad_ptr, m.indices, m.data)):
        with pytest.raises(IndexFormatError):
            check_csr(*parts, "m", (5, 7))


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
    shutil.copytree(sample_index.folder, folder)
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


# --- issue 25: value-invariant damage, extreme finite settings, file names, bodies, shutdown ----

VALUE_FILES = ["embeddings.npy", "bm25/data.npy", "graph/weights.data.npy", "graph/relations.data.npy",
               "graph/eigenvalues.npy", "graph/coordinates.npy", "graph/signals/semantic.weights.npy"]


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rel=st.sampled_from(VALUE_FILES), position=st.integers(0, 10**6), kind=st.sampled_from(["scale", "set", "negate"]),
       value=st.sampled_from([0.0, 1.0, 0.999, 1.001, 2.5, 1000.0, 1e38, -1e-6, 3e-39]))
def test_value_damage_with_resealed_checksums_loads_only_when_the_format_holds(sample_index, tmp_path_factory, rel,
                                                                              position, kind, value):
    """One value of one array changed (scaled, set or negated) and the checksums rewritten to
    match: the index loads exactly when what the format documents still holds (checked
    independently with numpy / scipy: spectrag.reference.index_format), else an IndexFormatError
    names the file."""
    import numpy as np
    from conftest import reseal

    from spectrag import load_index
    from spectrag.reference.index_format import broken_invariants

    folder = tmp_path_factory.mktemp("vd") / "idx"
    shutil.copytree(sample_index.folder, folder)
    a = np.load(folder / rel)
    flat = a.reshape(-1).copy()
    i = position % flat.size
    if rel == "embeddings.npy" and kind == "scale":  # a whole row scaled: its norm becomes |value|
        row = i // a.shape[1]
        flat.reshape(a.shape)[row] *= value
    else:
        flat[i] = {"scale": flat[i] * value, "set": value, "negate": -flat[i]}[kind]
    np.save(folder / rel, flat.reshape(a.shape).astype(a.dtype))
    reseal(folder)
    holds = not broken_invariants(folder)
    try:
        load_index(folder)
    except IndexFormatError as exc:
        assert not holds, f"refused an index that keeps the format: {exc}"
        assert rel.split("/")[-1].split(".")[0] in str(exc), exc
        return
    assert holds, "loaded an index whose values break the format"


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_extreme_finite_settings_retrieve_or_are_refused(retriever, data):
    """Online settings drawn anywhere in their ranges, the ends included (1e6 weights, t = 100,
    pools of 10,000, budgets of 10^7, rrf_k = 1): retrieval works and its scores are finite."""
    import torch

    from spectrag.config import RETRIEVER_TABLES, numeric_fields

    base = retriever.config
    tables = [("retriever", type(base))] + [(t, type(getattr(base, t))) for t in RETRIEVER_TABLES if t != "activation"]
    changes = {}
    for _ in range(data.draw(st.integers(1, 3))):
        table, cls = data.draw(st.sampled_from(tables))
        name, kind, meta = data.draw(st.sampled_from([f for f in numeric_fields(cls) if f[0] != "threads"]))
        lo = meta["lo"] + (1e-9 if meta["lo_open"] else 0)
        hi = meta["hi"] - (1e-9 if meta["hi_open"] else 0)
        value = data.draw(st.sampled_from([lo, hi]) | (st.integers(int(lo), int(hi)) if kind == "int"
                                                       else st.floats(lo, hi, allow_nan=False)))
        changes[name if table == "retriever" else f"{table}.{name}"] = int(value) if kind == "int" else float(value)
    mode = data.draw(st.sampled_from(["spectral", "ppr", "heat", "hybrid", "bm25", "dense"]))
    config = base.replace(mode=mode, **changes)
    saved = retriever.config
    retriever.config = config
    try:
        result = retriever.score_batch(["Who designed the Veltra Bridge?", "harbour winter"])
        contexts = retriever.retrieve(["Who designed the Veltra Bridge?"])  # budgeted: retriever.budget
        top = retriever.retrieve(["Who designed the Veltra Bridge?"], k=5)  # top-k: no budget
    except SpectragError:
        return
    finally:
        retriever.config = saved
    assert torch.isfinite(result.scores[result.candidates >= 0]).all()
    assert all(c.budget == config.budget and c.used_tokens <= c.budget for c in contexts)
    assert all(c.budget is None and len(c.hits) <= 5 for c in top)


@FAST
@given(names=st.lists(st.binary(min_size=1, max_size=12).filter(lambda b: b"/" not in b and b"\0" not in b
                                                                 and b not in (b".", b"..")),
                      min_size=1, max_size=5, unique=True))
def test_any_file_name_bytes_load_with_printable_ids(tmp_path_factory, names):
    """Files named by arbitrary bytes (.md): every one is read, its id valid Unicode that spells
    the name's undecodable bytes as \\xNN, each such name noted once; ids stay distinct."""
    import os

    folder = tmp_path_factory.mktemp("names")
    for i, raw in enumerate(names):
        (folder / os.fsdecode(raw + b".md")).write_text(f"# T{i}\n\nbody {i}\n")
    notes: list = []
    docs = load_documents(folder, notes=notes)
    assert len(docs) == len(names) and len({d.doc_id for d in docs}) == len(names)
    for d in docs:
        d.doc_id.encode("utf-8")
        d.title.encode("utf-8")
    assert len(notes) == sum(1 for raw in names if _not_utf8(raw))
    ids = {d.doc_id for d in docs}
    assert all(raw.decode("utf-8") + ".md" in ids for raw in names if not _not_utf8(raw))  # valid names unchanged


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@FAST
@given(chunks=st.lists(st.integers(0, 3000), max_size=12), limit=st.integers(1, 8000),
       header=st.sampled_from(["none", "true", "lie-low", "lie-high", "junk"]))
def test_body_limit_on_any_framing(chunks, limit, header):
    """The body middleware over any sequence of body messages (what chunked uploads arrive as)
    and any Content-Length: past the limit a 413 and the app never runs, and nothing after the
    message that crossed is read; within it the app gets exactly the bytes sent."""
    import asyncio

    from spectrag.serve.body import BodyLimit

    total = sum(chunks)
    length = {"none": None, "true": str(total), "lie-low": str(max(total - 1, 0)), "lie-high": str(total + limit + 1),
              "junk": "12abc"}[header]
    messages = [{"type": "http.request", "body": b"x" * c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    messages = messages or [{"type": "http.request", "body": b"", "more_body": False}]
    read, sent, seen = [0], [], []

    async def receive():
        read[0] += 1
        return messages[read[0] - 1] if read[0] <= len(messages) else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async def app(scope, receive_, send_):
        message = await receive_()
        seen.append(message["body"])
        await send_({"type": "http.response.start", "status": 200, "headers": []})
        await send_({"type": "http.response.body", "body": b"ok"})

    headers = [] if length is None else [(b"content-length", length.encode())]
    asyncio.run(BodyLimit(app, max_bytes=limit, timeout_s=5)({"type": "http", "headers": headers}, receive, send))
    status = sent[0]["status"]
    declared_too_big = length is not None and (not length.isdigit() or int(length) > limit)
    if declared_too_big or total > limit:
        assert status == 413 and not seen
        if declared_too_big:
            assert read[0] == 0  # answered from the header alone
        else:
            crossed = next(i for i in range(len(chunks)) if sum(chunks[: i + 1]) > limit)
            assert read[0] == crossed + 1  # nothing read after the message that crossed the limit
    else:
        assert status == 200 and seen == [b"x" * total]


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=10),
       close_after=st.integers(0, 10), max_wait_ms=st.sampled_from([0.0, 5.0, 200.0]))
def test_batcher_under_cancels_and_shutdown(retriever, plan, close_after, max_wait_ms):
    """Submits of 1-3 queries, some cancelled by their caller, the batcher closed part-way: every
    request not cancelled is answered, no cancelled one is scored, no thread of it dies, the
    counts add up, and nothing is taken after close."""
    import threading

    from spectrag.serve.batcher import Closing, MicroBatcher

    died = []
    hook, threading.excepthook = threading.excepthook, lambda args: died.append(args.exc_value)
    try:
        batcher = MicroBatcher(retriever, max_batch=4, max_wait_ms=max_wait_ms)
        futures, refused = [], 0
        for i, (size, cancel) in enumerate(plan):
            if i == close_after:
                batcher.close(timeout=0)
            try:
                f = batcher.submit([f"Veltra Bridge question {i}.{j}" for j in range(size)])
            except Closing:
                refused += 1
                continue
            if cancel:
                f.cancel()
            futures.append((size, f))
        batcher.close(timeout=120)
    finally:
        threading.excepthook = hook
    assert not died and not batcher._embedder.is_alive() and not batcher._scorer.is_alive() and batcher.pending == 0
    answered = [(s, f) for s, f in futures if not f.cancelled()]
    assert all(len(f.result(0)) == s for s, f in answered)
    stats = batcher.stats
    assert stats.requests == len(answered) and stats.cancelled == len(futures) - len(answered)
    assert refused == sum(1 for i in range(len(plan)) if i >= close_after)
