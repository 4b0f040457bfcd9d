"""Reading an index back (spectrag.store): a round trip gives identical search results, and a
corrupt, truncated or missing file, a wrong format version or a broken manifest is refused with
the file named. A damaged index whose manifest checksums were rewritten to match (the audit of
issue 16) is refused by the structural checks, never loaded into a crash."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import reseal

from spectrag import load_index
from spectrag.errors import IndexFormatError, SpectragError
from spectrag.store import MANIFEST

CLI = [sys.executable, "-c", "from spectrag.cli import main; main()"]  # the `spectrag` command, in a process
QUESTIONS = ["In which town was the designer of the Veltra Bridge born?", "Who founded the Greywater Shipping Company?"]


def test_round_trip_gives_identical_results(sample_index):
    again = load_index(sample_index.path)
    assert again.chunks == sample_index.chunks
    np.testing.assert_array_equal(np.asarray(again.embeddings), np.asarray(sample_index.embeddings))
    for a, b in zip(again.bm25_search(QUESTIONS, 8), sample_index.bm25_search(QUESTIONS, 8)):
        np.testing.assert_array_equal(a, b)
    xq = sample_index.embed_queries(QUESTIONS)
    for a, b in zip(again.dense_search(xq, 8), sample_index.dense_search(xq, 8)):
        np.testing.assert_array_equal(a, b)


def test_corrupt_file_is_detected(index_copy):
    emb = index_copy / "embeddings.npy"
    data = bytearray(emb.read_bytes())
    data[-1] ^= 0xFF  # same size, different content
    emb.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="embeddings.npy is corrupt"):
        load_index(index_copy)


def test_truncated_and_missing_files_are_detected(index_copy, sample_index):
    (index_copy / "dense.faiss").unlink()
    with pytest.raises(IndexFormatError, match="dense.faiss listed in the manifest is missing"):
        load_index(index_copy)
    shutil.copy(sample_index.folder / "dense.faiss", index_copy / "dense.faiss")
    (index_copy / "chunks.jsonl").write_text("")
    with pytest.raises(IndexFormatError, match="chunks.jsonl has 0 bytes"):
        load_index(index_copy, verify=False)


def test_an_index_from_before_section_headings_keeps_its_text_form(index_copy, sample_index):
    # its chunks were embedded without headings: an edit must embed new ones the same way
    assert sample_index.config.embed.include_headings
    manifest = json.loads((index_copy / MANIFEST).read_text())
    del manifest["config"]["embed"]["include_headings"]
    reseal(index_copy, manifest)
    assert load_index(index_copy).config.embed.include_headings is False


def test_version_and_manifest_problems(index_copy, tmp_path):
    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["format_version"] = 99
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="format version 99, this engine reads version 1"):
        load_index(index_copy)
    (index_copy / MANIFEST).write_text("{not json")
    with pytest.raises(IndexFormatError, match="corrupt manifest"):
        load_index(index_copy)
    (index_copy / MANIFEST).unlink()
    with pytest.raises(IndexFormatError, match="not a SpectRAG index"):
        load_index(index_copy)
    with pytest.raises(IndexFormatError, match="no such index folder"):
        load_index(tmp_path / "missing")


# ----------------------------------------------------------------- hostile indexes (issue 16)
# The audit's repro cases: the manifest's checksums rewritten to match the damage (conftest.reseal),
# so only the structural checks stand between the damage and scipy / torch / FAISS.


def _poke(path, index, value):
    """Rewrite one entry of the .npy array at ``path`` (same dtype and shape)."""
    a = np.load(path)
    a.reshape(-1)[index] = value
    np.save(path, a)


OUT_OF_RANGE = [
    ("graph/weights.indices.npy", 0, 10**6, "graph/weights"),
    ("graph/weights.indices.npy", -1, -3, "graph/weights"),
    ("graph/relations.indices.npy", 3, 10**9, "graph/relations"),
    ("bm25/indices.npy", 0, 10**6, "bm25/"),
    ("bm25/tokens.ids.npy", 0, 10**7, "tokens.ids.npy"),
    ("graph/signals/semantic.rows.npy", 0, 10**6, "semantic.rows.npy"),
    ("graph/clusters.npy", 0, 10**6, "clusters.npy"),
    ("graph/rcm_order.npy", 0, 1, "rcm_order.npy"),  # a repeated node: not a permutation
]


@pytest.mark.parametrize("rel, where, value, named", OUT_OF_RANGE, ids=[f"{r}={v}" for r, _, v, _ in OUT_OF_RANGE])
def test_out_of_range_ids_with_resealed_checksums_are_refused(index_copy, rel, where, value, named):
    _poke(index_copy / rel, where, value)
    reseal(index_copy)
    with pytest.raises(IndexFormatError, match=re.escape(named)):
        load_index(index_copy)


BROKEN_ARRAYS = [
    ("graph/weights.indptr.npy", lambda a: a[::-1].copy(), "indptr"),          # decreasing, wrong ends
    ("graph/weights.indptr.npy", lambda a: a[:-1].copy(), "shape"),            # one row short
    ("graph/weights.data.npy", lambda a: np.where(np.arange(a.size) == 0, np.nan, a).astype(a.dtype), "row 0 .* holds nan"),
    ("graph/weights.data.npy", lambda a: -a, r"row 0 .* holds -.* \(values must be finite and in \[0, 1.0001\]"),
    ("bm25/indptr.npy", lambda a: a + 1, "runs from 1"),
    ("bm25/data.npy", lambda a: np.full_like(a, np.inf), "holds inf"),
    ("bm25/indices.npy", lambda a: a.astype(np.float32), "dtype float32"),
    ("embeddings.npy", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 7, np.nan, a).astype(np.float32),
     "row 0 has L2 norm nan"),
    ("embeddings.npy", lambda a: a[:, :-1].copy(), "shape"),
    ("embeddings.npy", lambda a: a.astype(np.float64), "dtype float64"),
    ("graph/coordinates.npy", lambda a: a[:-1].copy(), "shape"),
    ("graph/eigenvalues.npy", lambda a: np.full_like(a, np.nan), "entry 0 holds nan"),
    ("graph/signals/entity.weights.npy", lambda a: a + 5, r"must be finite and in \[0, 1.0001\]"),
    ("graph/signals/entity.cols.npy", lambda a: a[:-1].copy(), "shape"),
    ("graph/weights.data.npy", lambda a: a.astype(np.float16), "dtype float16"),
    ("graph/clusters.npy", lambda a: a.astype(np.uint8), "dtype uint8"),
]


@pytest.mark.parametrize("rel, damage, message", BROKEN_ARRAYS, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(BROKEN_ARRAYS)])
def test_malformed_arrays_with_resealed_checksums_are_refused(index_copy, rel, damage, message):
    np.save(index_copy / rel, damage(np.load(index_copy / rel)))
    reseal(index_copy)
    with pytest.raises(IndexFormatError, match=message):
        load_index(index_copy)


# --- values that break what the format documents, checksums resealed (issue 25) ------------------


def _row_times(row, factor):
    return lambda a: np.where(np.arange(a.shape[0])[:, None] == row, a * factor, a).astype(a.dtype)


def _asymmetric(a):
    """One stored weight changed (its mirror entry keeps the old value)."""
    a = a.copy()
    a[len(a) // 2] = a[len(a) // 2] * 0.5 + 0.01
    return a


def _chunk_tokens(folder, value):
    lines = (folder / "chunks.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    row["n_tokens"] = value
    lines[3] = json.dumps(row)
    (folder / "chunks.jsonl").write_text("\n".join(lines) + "\n")


VALUE_DAMAGE = [  # (file, damage of the array, message): rankings changed silently before
    ("embeddings.npy", _row_times(5, 1000.0), "embeddings.npy: row 5 has L2 norm 1000"),
    ("embeddings.npy", lambda a: np.where(np.arange(a.shape[0])[:, None] == 6, np.float32(1e38), a).astype(np.float32),
     "row 6 has L2 norm 1.9"),  # 1e38 in every entry
    ("embeddings.npy", _row_times(9, 0.0), "row 9 has L2 norm 0"),
    ("embeddings.npy", _row_times(2, 0.98), "row 2 has L2 norm 0.98"),
    ("bm25/data.npy", lambda a: np.where(np.arange(a.size) == 4, -a, a).astype(a.dtype),
     r"bm25/\{data,indices,indptr\}.npy data: row \d+ \(entry 4\) holds -.* \(values must be finite and >= 0\)"),
    ("graph/weights.data.npy", lambda a: (a * 3).astype(a.dtype), r"values must be finite and in \[0, 1.0001\]"),
    ("graph/weights.data.npy", _asymmetric, r"graph/weights.*not symmetric at row \d+"),
    ("graph/relations.data.npy", _asymmetric, r"graph/relations.*not symmetric at row \d+"),
    ("graph/relations.data.npy", lambda a: (a + 1.5).astype(a.dtype), r"values must be finite and in \[0, 1.0001\]"),
    ("graph/eigenvalues.npy", lambda a: a + 5, r"eigenvalues.npy: entry 0 holds .* \(values must be finite and in \[-0.001, 2.001\]"),
    ("dense.faiss", None, "dense.faiss: vector 3 differs from row 3 of the embeddings"),
    ("chunks.jsonl", None, "line 4: n_tokens is 0; every chunk has at least one token"),
]


@pytest.mark.parametrize("rel, damage, message", VALUE_DAMAGE, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(VALUE_DAMAGE)])
def test_values_breaking_the_format_with_resealed_checksums_are_refused(index_copy, rel, damage, message):
    if rel == "dense.faiss":  # one stored vector replaced by another unit vector
        from spectrag.index.dense import _FLAT

        raw = bytearray((index_copy / rel).read_bytes())
        d = np.load(index_copy / "embeddings.npy").shape[1]
        at = _FLAT.size + 3 * d * 4
        raw[at : at + d * 4] = np.roll(np.frombuffer(bytes(raw[at : at + d * 4]), np.float32), 1).tobytes()
        (index_copy / rel).write_bytes(bytes(raw))
    elif rel == "chunks.jsonl":
        _chunk_tokens(index_copy, 0)
    else:
        np.save(index_copy / rel, damage(np.load(index_copy / rel)))
    reseal(index_copy)
    with pytest.raises(IndexFormatError, match=message):
        load_index(index_copy)


def test_graph_invariant_checks_against_a_dense_reference():
    """check_symmetric against numpy on small random matrices, symmetric or not, with and
    without self-loops; check_unit_rows against numpy's norms."""
    import scipy.sparse as sp

    from spectrag.util.checks import check_symmetric, check_unit_rows

    for seed in range(300):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(1, 9))
        upper = np.triu((rng.random((k, k)) < 0.4) * rng.random((k, k)), 1)
        full = upper + upper.T * (1.0 if rng.random() < 0.5 else (rng.random((k, k)) < 0.7))
        if rng.random() < 0.2:
            full[rng.integers(k), rng.integers(k)] = 0.5
        full = full.astype(np.float32)
        m = sp.csr_matrix(full)
        want = bool((full == full.T).all() and not np.diag(full).any())
        try:
            check_symmetric(m.indptr, m.indices, m.data, "w", k)
            got = True
        except IndexFormatError:
            got = False
        assert got == want, (seed, full)
        unit = rng.standard_normal((k, 3))
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        scale = rng.choice([1.0, 1.001, 0.995, 1.5, 0.9, 0.0], size=k, p=[0.7, 0.1, 0.1, 0.04, 0.03, 0.03])
        try:
            check_unit_rows((unit * scale[:, None]).astype(np.float32), "e")
            got = True
        except IndexFormatError:
            got = False
        assert got == bool((np.abs(scale - 1) <= 1e-2).all()), (seed, scale)


def test_long_manifest_values_are_echoed_briefly(index_copy):
    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["tokenizer"] = list(range(100_000))
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match=re.escape("got [0, 1, 2, 3, 4, ... (100,000 items)]")) as err:
        load_index(index_copy, verify=False)
    assert len(str(err.value)) < 300


@pytest.mark.parametrize("llm, message", [
    ("x", "manifest field 'llm' must be a table or null, got 'x'"),
    ({"model": "m", "usage": {"stages": {"questions": {"requests": "many"}}}}, "manifest field 'requests' must be a number"),
    ({"model": "m", "usage": {"stages": {}}, "openie": 3}, None),
])
def test_the_llm_entry_spectrag_info_prints_is_checked(index_copy, llm, message):
    """A damaged manifest's llm entry: one error (it was a TypeError in `spectrag info`)."""
    from click.testing import CliRunner

    from spectrag.cli import main

    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["llm"] = llm
    reseal(index_copy, manifest)
    done = CliRunner().invoke(main, ["info", str(index_copy)])
    if message is None:
        assert done.exit_code == 0, done.output
    else:
        assert done.exit_code == 2 and message in done.output and done.output.count("\n") == 1, done.output


def test_supplied_embeddings_must_be_unit_rows(tmp_path):
    from spectrag import build_index
    from spectrag.config import EmbedConfig, GraphConfig, IndexConfig
    from spectrag.errors import CorpusError

    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "The harbour froze."}\n{"id": "b", "text": "The bridge opened."}\n')
    config = IndexConfig(embed=EmbedConfig(cache_dir=""), graph=GraphConfig(enabled=False))
    with pytest.raises(CorpusError, match=r"embeddings: row 1 has L2 norm 2; .* normalize the supplied vectors"):
        build_index(corpus, tmp_path / "i", config, embeddings=np.array([[1, 0], [0, 2]], np.float32))


def test_unreadable_npy_and_faiss_files_are_refused(index_copy):
    (index_copy / "graph" / "clusters.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    reseal(index_copy)
    with pytest.raises(IndexFormatError, match="clusters.npy: not a readable .npy"):
        load_index(index_copy)


@pytest.mark.parametrize("cut", [10, 200])
def test_faiss_file_header_and_size_are_checked_before_faiss_reads_it(index_copy, sample_index, cut):
    data = (sample_index.folder / "dense.faiss").read_bytes()
    (index_copy / "dense.faiss").write_bytes(data[:cut] if cut < 45 else data[:-cut])
    reseal(index_copy)
    with pytest.raises(IndexFormatError, match="dense.faiss"):
        load_index(index_copy)
    wrong_count = bytearray(data)
    wrong_count[8:16] = (10**12).to_bytes(8, "little")  # ntotal
    (index_copy / "dense.faiss").write_bytes(bytes(wrong_count))
    reseal(index_copy)
    with pytest.raises(IndexFormatError, match="dense.faiss: holds 1000000000000"):
        load_index(index_copy)


def test_damaged_graph_with_resealed_checksums_is_an_error_line_not_a_crash(index_copy):
    """The audit's segfault (exit 139) / heap corruption (exit 134): ``spectrag retrieve`` on
    out-of-range graph indices now prints one error line and exits 2."""
    _poke(index_copy / "graph" / "weights.indices.npy", 5, 10**7)
    reseal(index_copy)
    proc = subprocess.run([*CLI, "retrieve", str(index_copy), "-q", "Veltra Bridge"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and "weights" in proc.stderr


def test_an_empty_file_list_does_not_switch_checking_off(index_copy):
    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["files"] = {}
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="does not list .* file"):
        load_index(index_copy)
    full = _sealed(index_copy)  # a list that leaves out one file is refused as well
    del full["files"]["bm25/indices.npy"]
    (index_copy / MANIFEST).write_text(json.dumps(full))
    with pytest.raises(IndexFormatError, match="bm25/indices.npy"):
        load_index(index_copy, verify=False)


def _sealed(folder):
    """A fresh manifest listing every file of ``folder`` (as the build writes it)."""
    from spectrag.store import write_manifest

    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).unlink()
    write_manifest(folder, {k: v for k, v in manifest.items() if k not in ("format", "format_version", "files")})
    return json.loads((folder / MANIFEST).read_text())


def test_unlisted_files_are_never_loaded(index_copy, sample_index):
    g = index_copy / "graph"
    for part in ("rows", "cols", "weights"):  # a signal the manifest does not list
        shutil.copy(g / "signals" / f"semantic.{part}.npy", g / "signals" / f"utility.{part}.npy")
    # utility-question files the manifest does not list (they would feed the utility seed list)
    np.save(g / "questions.vectors.npy", np.asarray(sample_index.embeddings[:3], dtype=np.float32))
    np.save(g / "questions.owners.npy", np.arange(3, dtype=np.int64))
    loaded = load_index(index_copy)
    assert "utility" not in loaded.graph["signals"]
    assert set(loaded.graph["signals"]) == set(sample_index.graph["signals"])
    assert loaded.graph["questions"] is None
    # a token-id pair the manifest does not list is not read either
    manifest = json.loads((index_copy / MANIFEST).read_text())
    for name in ("bm25/tokens.indptr.npy", "bm25/tokens.ids.npy"):
        del manifest["files"][name]
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    assert load_index(index_copy).bm25.tokens is None
    del manifest["files"]["graph/relations.data.npy"]  # half of an optional group
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="without graph/relations.data.npy"):
        load_index(index_copy)


@pytest.mark.parametrize("rel", ["../outside.bin", "/etc/hostname", "graph/../../outside.bin", "a\\..\\b", "", "./chunks.jsonl"])
def test_manifest_paths_stay_inside_the_index_folder(index_copy, rel):
    (index_copy.parent / "outside.bin").write_bytes(b"secret" * 100)
    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["files"][rel] = {"bytes": 600, "sha256": "0" * 64}
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="not inside the index folder") as err:
        load_index(index_copy)
    assert "bytes" not in str(err.value)  # nothing about the file outside is revealed


def test_symbolic_links_in_the_index_are_refused(index_copy, tmp_path):
    outside = tmp_path / "elsewhere.jsonl"
    shutil.move(index_copy / "chunks.jsonl", outside)
    (index_copy / "chunks.jsonl").symlink_to(outside)
    with pytest.raises(IndexFormatError, match="chunks.jsonl is a symbolic link"):
        load_index(index_copy)


MALFORMED_MANIFESTS = [
    (lambda m: [m], "a JSON list, not an object"),
    (lambda m: {k: v for k, v in m.items() if k != "config"}, "no 'config'"),
    (lambda m: {k: v for k, v in m.items() if k != "embedding"}, "no 'embedding'"),
    (lambda m: {k: v for k, v in m.items() if k != "counts"}, "no 'counts'"),
    (lambda m: {**m, "counts": {**m["counts"], "chunks": "102"}}, "'chunks' must be an integer"),
    (lambda m: {**m, "counts": {**m["counts"], "chunks": True}}, "'chunks' must be an integer"),
    (lambda m: {**m, "embedding": {**m["embedding"], "dim": -1}}, "'dim' must be a positive integer"),
    (lambda m: {**m, "files": []}, "'files' must be a table"),
    (lambda m: {**m, "files": {**m["files"], "chunks.jsonl": 5}}, "entry for file 'chunks.jsonl'"),
    (lambda m: {**m, "graph": {**m["graph"], "nodes": 3}}, "'nodes' must be the chunk count"),
    (lambda m: {**m, "graph": {k: v for k, v in m["graph"].items() if k != "signal_edges"}}, "no 'signal_edges'"),
    (lambda m: {**m, "graph": {**m["graph"], "signal_edges": {"gossip": 3}}}, "unknown signal"),
    (lambda m: {**m, "format_version": True}, "format version True"),
    (lambda m: {**m, "config": {"chunk": {"chunk_size": 100.5}}}, "chunk.chunk_size must be an integer"),
    (lambda m: {**m, "seconds": {"embed": None}}, "'seconds' must map stages to numbers"),  # bench/bench_fuzz.py found it
    (lambda m: {**m, "graph": {**m["graph"], "spectrum": {**m["graph"]["spectrum"], "max_residual": "x"}}},
     "'max_residual' must be a number"),
]


@pytest.mark.parametrize("edit, message", MALFORMED_MANIFESTS, ids=[m for _, m in MALFORMED_MANIFESTS])
def test_malformed_manifests_are_named_not_a_key_error(index_copy, edit, message):
    manifest = json.loads((index_copy / MANIFEST).read_text())
    (index_copy / MANIFEST).write_text(json.dumps(edit(manifest)))
    with pytest.raises(SpectragError, match=message):
        load_index(index_copy)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": ' + "9" * 5000 + "}", '"\\ud800"'])
def test_hostile_manifest_json_is_a_corrupt_manifest(index_copy, text):
    (index_copy / MANIFEST).write_text(text)
    with pytest.raises(IndexFormatError, match="corrupt manifest|not an object"):
        load_index(index_copy)


def test_chunk_table_records_are_checked(index_copy):
    lines = (index_copy / "chunks.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    for bad in ({**row, "id": 7}, {**row, "n_tokens": "12"}, {**row, "text": row["text"] + "x"},
                {**row, "section": "History"}, {k: v for k, v in row.items() if k != "url"}):
        (index_copy / "chunks.jsonl").write_text("\n".join(lines[:3] + [json.dumps(bad)] + lines[4:]) + "\n")
        reseal(index_copy)
        with pytest.raises(IndexFormatError, match="bad chunk record on line 4"):
            load_index(index_copy)
    (index_copy / "chunks.jsonl").write_text("\n".join(lines[:-1]) + "\n")  # one record short
    reseal(index_copy)
    with pytest.raises(IndexFormatError, match="chunk records, the manifest counts"):
        load_index(index_copy)


def test_the_model_fingerprint_is_compared_when_queries_are_embedded(index_copy):
    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["embedding"]["fingerprint"] = "0123456789abcdef"
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    index = load_index(index_copy)  # loads: vectors given as arrays need no model
    with pytest.raises(IndexFormatError, match="fingerprint 0123456789abcdef.*would not be comparable"):
        index.embed_queries(["who designed the bridge?"])


def test_damaged_knowledge_graph_with_resealed_checksums_is_refused(kg_index, tmp_path):
    for rel, where, value in (("kg/relations.subject.npy", 0, 10**6), ("kg/adjacency.indices.npy", 1, -1),
                              ("kg/incidence.indices.npy", 0, 10**8), ("kg/relations.chunk.npy", 2, 10**5),
                              ("kg/entity_embeddings.npy", 3, np.nan)):
        copy = tmp_path / rel.replace("/", "_")
        shutil.copytree(kg_index.folder, copy)
        _poke(copy / rel, where, value)
        reseal(copy)
        with pytest.raises(IndexFormatError, match=re.escape(rel.split("/")[1].split(".")[0])):
            load_index(copy)


# ----------------------------------------------- replacing an index: kills and concurrent adds

WORKER = """
import sys
import numpy as np
from spectrag import build_index
from spectrag.config import EmbedConfig, GraphConfig, IndexConfig
from spectrag.incremental import add_documents
from spectrag.index.chunk import chunk_corpus
from spectrag.index.load import load_documents

mode, corpus, out, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
config = IndexConfig(embed=EmbedConfig(cache_dir=""), graph=GraphConfig(enabled=False))
n = len(chunk_corpus(load_documents(corpus), config.chunk))
v = np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)
v /= np.linalg.norm(v, axis=1, keepdims=True)
if mode == "build":
    build_index(corpus, out, config, overwrite=True, embeddings=v)
else:
    add_documents(out, corpus, embeddings=v)
"""


def _corpus(path, first, count):
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Document {i} is about the harbour of town {i}."}) + "\n"
                            for i in range(first, first + count)))
    return path


def _worker(mode, corpus, out, seed, kill=None, exchange=True):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("SPECTRAG_KILL_AT", None)
    if kill:
        env["SPECTRAG_KILL_AT"] = kill
    if not exchange:
        env["SPECTRAG_NO_RENAME_EXCHANGE"] = "1"
    return subprocess.Popen([sys.executable, "-c", WORKER, mode, str(corpus), str(out), str(seed)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _siblings_left(path):
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.") and p.is_dir())


# a build over an index and an add write a new generation and replace CURRENT last
# (spectrag.generations): killed before, between and after those steps
KILLS = [("build", "generation:written"), ("build", "generation:synced"), ("build", "generation:current"),
         ("add", "generation:written"), ("add", "generation:current")]


def test_a_kill_at_any_point_of_a_write_leaves_a_loadable_index(tmp_path):
    """--overwrite and add killed (os._exit, as kill -9) at each step of writing a generation:
    the path loads, as the old or the new version (the new one exactly when CURRENT was
    replaced), and the next write's clean-up removes the generation the dead process left."""
    from spectrag.generations import FOLDER, collect, read_pointer

    base = _corpus(tmp_path / "base.jsonl", 0, 6)
    other = _corpus(tmp_path / "other.jsonl", 100, 9)
    more = _corpus(tmp_path / "more.jsonl", 200, 3)
    _worker("build", base, tmp_path / "seed-index", 0).wait(timeout=300)
    runs = []
    for i, (mode, point) in enumerate(KILLS):
        target = tmp_path / f"k{i}" / "idx"
        target.parent.mkdir()
        shutil.copytree(tmp_path / "seed-index", target)
        runs.append((target, mode, point, _worker(mode, other if mode == "build" else more, target, 1, point)))
    for target, mode, point, proc in runs:
        assert proc.wait(timeout=300) == 137, (point, proc.stderr.read())
        documents = load_index(target, verify=True).manifest["counts"]["documents"]
        assert documents == ((9 if mode == "build" else 9) if point == "generation:current" else 6), (point, documents)
        assert len(list((target / FOLDER).iterdir())) == 2, point  # the old one and the dead writer's
        collect(target)
        assert [p.name for p in (target / FOLDER).iterdir()] == [read_pointer(target)], point
        assert _siblings_left(target) == [], (point, _siblings_left(target))


def test_concurrent_adds_run_one_after_the_other(tmp_path):
    """Three adds started together: every one succeeds (they wait for the index lock) and the
    index holds every document once; none fails with a traceback."""
    _worker("build", _corpus(tmp_path / "base.jsonl", 0, 4), tmp_path / "idx", 0).wait(timeout=300)
    procs = [_worker("add", _corpus(tmp_path / f"add{j}.jsonl", 100 * (j + 1), 2), tmp_path / "idx", j) for j in range(3)]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    index = load_index(tmp_path / "idx")
    assert sorted({c.doc_id for c in index.chunks}) == sorted([f"d{i}" for i in range(4)] +
                                                              [f"d{100 * (j + 1) + k}" for j in range(3) for k in range(2)])
    assert _siblings_left(tmp_path / "idx") == []


def test_stale_siblings_are_cleaned_only_when_ours_and_stale(tmp_path):
    from spectrag.store import clean_stale

    target = tmp_path / "idx"
    target.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process id that has ended
    for name in (f".idx.tmp-{pid}-0123abcd", f".idx.old-{pid}-89abcdef", f".idx.tmp-{os.getpid()}-00000000",
                 ".idx.tmp-deadbeef", ".other.tmp-1-00000000", ".idx.backup", f".idx2.tmp-{pid}-01234567"):
        (tmp_path / name).mkdir()
    removed = sorted(p.name for p in clean_stale(target))
    assert removed == [f".idx.old-{pid}-89abcdef", f".idx.tmp-{pid}-0123abcd"]  # not ours, alive, or legacy and recent: kept
    assert (tmp_path / ".idx.tmp-deadbeef").exists() and (tmp_path / ".idx.backup").exists()


def test_the_lock_file_is_removed_after_success_and_failure(tmp_path):
    import threading
    import time

    from spectrag.build import build_index
    from spectrag.errors import CorpusError
    from spectrag.store import index_lock

    lock = tmp_path / ".idx.lock"
    with index_lock(tmp_path / "idx"):
        assert lock.exists()
    assert not lock.exists()
    with pytest.raises(RuntimeError), index_lock(tmp_path / "idx"):
        raise RuntimeError("a failed command")
    assert not lock.exists()
    with pytest.raises(CorpusError):
        build_index(tmp_path / "missing", tmp_path / "idx")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # holders that wait for each other still exclude each other with the file removed between them
    inside, overlaps = [0], []

    def hold():
        for _ in range(20):
            with index_lock(tmp_path / "idx"):
                inside[0] += 1
                time.sleep(0.002)  # long enough for the others to come in, were the lock not held
                overlaps.append(inside[0])
                inside[0] -= 1

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(overlaps) == 80 and max(overlaps) == 1 and not lock.exists()
