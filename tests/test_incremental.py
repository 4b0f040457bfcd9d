"""Living indexes (spectrag.incremental): add, delete, update and compact against a fresh build
of the final corpus (in the index's order). Synthetic corpus with supplied vectors: after a
sequence of edits the chunks, embeddings, dense and BM25 files are the build's, every signal but
the entity one is the build's, the entity keys are, the spectrum is within its stated residual
of scipy's eigsh; after `compact` every file is the build's and retrieval is identical. Bad
input, failures injected at each write step, kills during the swap and concurrent writers.
(The parts: tests/graph/test_lists.py, test_graph_update.py, test_warm.py,
tests/index/test_bm25_scores.py, tests/kernels/test_subspace.py. The sample corpus with the
model, the CLI and deleted text in every output: tests/test_incremental_sample.py.)"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from spectrag import add_documents, build_index, compact_index, delete_documents, load_index, update_documents
from spectrag.config import EmbedConfig, IndexConfig, RetrieverConfig
from spectrag.errors import CorpusError, IndexFormatError, SpectragError
from spectrag.generations import current_folder
from spectrag.graph.fuse import signal_matrix
from spectrag.index.chunk import chunk_document
from spectrag.index.load import iter_documents
from spectrag.retriever import Retriever

DIM = 32
TOPICS = 6
SYL = "ka lo mer vin tas dor el ran sov bri quel nor fa ith gul pen".split()
SIGNALS = ("semantic", "adjacency", "section", "entity", "citation")


# ------------------------------------------------------------------------------ synthetic corpus


def _word(i: int) -> str:
    return (SYL[i % len(SYL)] + SYL[(i // len(SYL) + 3) % len(SYL)]).capitalize()


def synthetic_docs(n: int, seed: int = 0) -> list[dict]:
    """``n`` JSONL records with sections, title mentions, links, shared names and years. Record
    0 is titled "Skarholt"; record 1 mentions "Skarholt Harbour", the title of record ``n - 1``:
    once that record is added, the shorter match inside it stops counting (nested-title rule)."""
    rng = random.Random(seed)
    titles = [f"{_word(i)} {_word(7 * i + 1)} Mill" for i in range(n)]
    titles[0], titles[-1] = "Skarholt", "Skarholt Harbour"
    people = [f"{_word(100 + j)} {_word(200 + j)}" for j in range(24)]
    docs = []
    for i in range(n):
        parts = [f"# {titles[i]}"]
        for s in range(rng.randint(1, 3)):
            sentences = [
                f"In {rng.randint(1700, 1990)} {rng.choice(people)} visited {titles[rng.randrange(n)]} "
                f"on the {_word(300 + i % TOPICS).lower()} road."
                for _ in range(rng.randint(2, 6))
            ]
            if rng.random() < 0.3:
                sentences.append(f"See [the mill](doc{rng.randrange(n):03d}) for details.")
            parts.append(f"## Part {s + 1}\n\n" + " ".join(sentences))
        if i == 1:
            parts.append("## Port\n\nThe ships of Skarholt Harbour sailed in 1820.")
        docs.append({"id": f"doc{i:03d}", "title": titles[i], "text": "\n\n".join(parts)})
    return docs


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def chunk_vectors(path: Path, config: IndexConfig) -> np.ndarray:
    """Deterministic per-chunk vectors (topic centre + noise seeded by the chunk text)."""
    centres = np.random.default_rng(99).standard_normal((TOPICS, DIM))
    rows = []
    for doc in iter_documents(path, "jsonl"):
        for chunk in chunk_document(doc, config.chunk):
            seed = int(hashlib.sha256(chunk.text.encode()).hexdigest()[:12], 16)
            v = centres[int(doc.doc_id[3:]) % TOPICS] + 0.9 * np.random.default_rng(seed).standard_normal(DIM)
            rows.append(v / np.linalg.norm(v))
    return np.asarray(rows, dtype=np.float32)


SYNTH_CONFIG = IndexConfig(embed=EmbedConfig(cache_dir=""))


def build_supplied(corpus: Path, out: Path, config: IndexConfig = SYNTH_CONFIG):
    return build_index(corpus, out, config, embeddings=chunk_vectors(corpus, config))


def add_supplied(index_dir: Path, corpus: Path, config: IndexConfig = SYNTH_CONFIG):
    return add_documents(index_dir, corpus, embeddings=chunk_vectors(corpus, config))


def stored_signal_matrix(index, name: str) -> sp.csr_matrix:
    return signal_matrix(index.graph["signals"][name], len(index), symmetric=False)


def assert_same_retrieval(inc, full, queries: list[str], qvecs: torch.Tensor) -> None:
    for mode in ("hybrid", "spectral"):
        a = Retriever(inc, RetrieverConfig(device="cpu")).score_batch(queries, mode=mode, qvecs=qvecs)
        b = Retriever(full, RetrieverConfig(device="cpu")).score_batch(queries, mode=mode, qvecs=qvecs)
        assert torch.equal(a.candidates, b.candidates), mode
        assert torch.equal(a.selected, b.selected), mode
        torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=0)


def fresh_build_of(index, records: dict[str, dict], root: Path, name: str):
    """A build of the index's documents, in its order, from ``records`` (id -> record)."""
    order = list(dict.fromkeys(c.doc_id for c in index.chunks))
    corpus = write_jsonl(root / f"{name}.jsonl", [records[i] for i in order])
    return build_supplied(corpus, root / name)


EDIT = {"compact_above": None}  # the edits below never compact by themselves


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    """90 documents built; 30 added; 4 deleted (doc001 mentions "Skarholt Harbour", doc095 was
    added); an update with one changed document, one unchanged and five new. Returns the
    edited index (not compacted), a fresh build of its final corpus, the folder, and the index
    right after the add."""
    root = tmp_path_factory.mktemp("edited")
    docs = synthetic_docs(120) + synthetic_docs(130, seed=9)[120:125]  # doc119: "Skarholt Harbour"
    records = {d["id"]: d for d in docs}
    build_supplied(write_jsonl(root / "old.jsonl", docs[:90]), root / "idx")
    add_supplied_ = add_documents(root / "idx", write_jsonl(root / "add.jsonl", docs[90:120]),
                                  embeddings=chunk_vectors(root / "add.jsonl", SYNTH_CONFIG), **EDIT)
    shutil.copytree(root / "idx", root / "after-add")
    delete_documents(root / "idx", ["doc003", "doc017", "doc001", "doc095"], **EDIT)
    changed = dict(records["doc010"], text=records["doc010"]["text"] + "\n\n## Later\n\nSkarholt Harbour grew in 1921.")
    records["doc010"] = changed
    update = write_jsonl(root / "update.jsonl", [changed, records["doc011"], *docs[120:125]])
    inc = update_documents(root / "idx", update, embeddings=chunk_vectors(update, SYNTH_CONFIG), **EDIT)
    assert add_supplied_.report.operation == "add"
    return inc, fresh_build_of(inc, records, root, "fresh"), root, load_index(root / "after-add")


def file_hash(index, name: str) -> str | None:
    return index.manifest["files"].get(name, {}).get("sha256")


def test_update_report_counts(edited):
    inc = edited[0]
    r = inc.report
    assert (r.operation, r.documents_replaced, r.documents_unchanged, r.documents) == ("update", 1, 1, 6)
    assert r.documents_removed == 1 and r.chunks_removed == r.chunks - sum(
        1 for c in inc.chunks if c.doc_id in {f"doc{i}" for i in range(120, 125)})


def test_exact_parts_equal_a_fresh_build(edited):
    """Chunks, vectors, the dense and BM25 files, the exact signals, the entity keys and the
    directed citations: the build's, file for file."""
    inc, fresh, _, _ = edited
    assert inc.chunks == fresh.chunks and len(inc) > 200
    np.testing.assert_array_equal(np.asarray(inc.embeddings), np.asarray(fresh.embeddings))
    exact = ["chunks.jsonl", "embeddings.npy", "dense.faiss", *(f"bm25/{n}" for n in (
        "data.npy", "indices.npy", "indptr.npy", "vocab.json", "tokens.indptr.npy", "tokens.ids.npy"))]
    exact += [f"graph/signals/{s}.{p}.npy" for s in ("semantic", "adjacency", "section", "citation")
              for p in ("rows", "cols", "weights")]
    exact += [f"graph/{f}" for f in ("entities.indptr.npy", "entities.ids.npy", "entities.keys.json",
                                     "citations.rows.npy", "citations.cols.npy", "citations.kind.npy")]
    for name in exact:
        assert file_hash(inc, name) is not None and file_hash(inc, name) == file_hash(fresh, name), name


def test_entity_signal_is_close_to_the_builds(edited):
    inc, fresh, _, _ = edited
    a, b = stored_signal_matrix(inc, "entity"), stored_signal_matrix(fresh, "entity")
    ea, eb = set(zip(*a.nonzero())), set(zip(*b.nonzero()))
    assert len(ea & eb) >= 0.9 * len(eb) and len(ea & eb) >= 0.9 * len(ea)
    common = (a != 0).multiply(b != 0)
    assert abs((a - b).multiply(common)).max() <= 0.05
    recomputed = inc.manifest["graph"]["entities"]["recomputed_rows"]
    assert 0 < recomputed < len(inc)


def test_spectrum_is_within_its_stated_tolerance(edited):
    """The stored coordinates against the stored graph's Laplacian and scipy's eigsh."""
    from scipy.sparse.linalg import eigsh

    from spectrag.graph.spectrum import laplacian_csr
    from spectrag.graph.warm import WARM_TOL

    inc = edited[0]
    report = inc.manifest["graph"]["spectrum"]
    tol = WARM_TOL if report["method"].startswith("warm") else 1e-5
    lap = laplacian_csr(inc.graph["weights"])
    x = np.asarray(inc.graph["coordinates"], np.float64)
    theta = np.asarray(inc.graph["eigenvalues"])
    assert np.linalg.norm(lap @ x - x * theta, axis=0).max() <= tol + 1e-5
    comps = inc.manifest["graph"]["components"] + inc.manifest["graph"]["isolated_nodes"]
    values = np.sort(eigsh(lap, k=len(theta) + comps, which="SA", tol=1e-10)[0])
    nontrivial = values[np.abs(values) > 1e-8][: len(theta)]
    np.testing.assert_allclose(theta, nontrivial, atol=tol + 1e-6)


def test_compact_equals_a_fresh_build_file_for_file(edited, tmp_path):
    inc, fresh, _, _ = edited
    shutil.copytree(inc.path, tmp_path / "c")
    compacted = compact_index(tmp_path / "c")
    assert compacted.report.operation == "compact"
    assert set(compacted.manifest["files"]) == set(fresh.manifest["files"])
    for name in fresh.manifest["files"]:
        assert file_hash(compacted, name) == file_hash(fresh, name), name
    assert compacted.manifest["graph"]["spectrum"]["method"] == "lanczos"
    assert compacted.manifest["incremental"]["operations"] == 0
    queries = [f"{_word(100 + j)} visited {_word(300 + j % TOPICS).lower()} Skarholt" for j in range(8)]
    qv = np.random.default_rng(5).standard_normal((8, DIM)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    assert_same_retrieval(compacted, fresh, queries, torch.from_numpy(qv))


def test_history_and_state(edited):
    m = edited[0].manifest
    assert [e["op"] for e in m["history"]] == ["build", "add", "delete", "update"]
    assert m["history"][2]["documents_removed"] == 4 and m["history"][2]["chunks_removed"] > 4
    assert m["incremental"]["operations"] == 3
    assert m["incremental"]["changed_chunks"] == sum(e["chunks_added"] + e["chunks_removed"] for e in m["history"][1:])
    assert m["incremental"]["spectrum"] in ("warm-started", "exact")
    assert "additions" not in m
    load_index(edited[0].path)  # every checksum verifies


def test_retrieval_before_compact_is_close(edited):
    inc, fresh, _, _ = edited
    queries = [f"{_word(100 + j)} visited {_word(300 + j % TOPICS).lower()} Skarholt" for j in range(8)]
    qv = np.random.default_rng(6).standard_normal((8, DIM)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    for search, arg in (("dense_search", qv), ("bm25_search", queries)):  # exact parts: identical
        s1, i1 = getattr(inc, search)(arg, 10)
        s2, i2 = getattr(fresh, search)(arg, 10)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_allclose(s1, s2, atol=1e-6)
    for mode in ("hybrid", "spectral"):
        a = Retriever(inc, RetrieverConfig(device="cpu")).score_batch(queries, mode=mode, qvecs=torch.from_numpy(qv))
        b = Retriever(fresh, RetrieverConfig(device="cpu")).score_batch(queries, mode=mode, qvecs=torch.from_numpy(qv))
        top_a, top_b = a.ranking()[:, :5], b.ranking()[:, :5]
        overlap = np.mean([len(set(x.tolist()) & set(y.tolist())) / 5 for x, y in zip(top_a, top_b)])
        assert overlap >= 0.8, (mode, overlap)


def test_nested_title_drops_an_old_citation_edge(edited):
    """An old chunk mentioning "Skarholt Harbour" cited "Skarholt" until a document of that
    longer title arrived: the add removes the old edge, as a build does."""
    after_add = edited[3]
    old = load_index(edited[2] / "after-add")
    src = next(i for i, c in enumerate(after_add.chunks) if c.doc_id == "doc001" and "Skarholt Harbour" in c.text)
    target = next(i for i, c in enumerate(after_add.chunks) if c.doc_id == "doc000")
    cit = stored_signal_matrix(old, "citation")
    assert cit[min(src, target), max(src, target)] == 0
    harbour = [i for i, c in enumerate(after_add.chunks) if c.doc_id == "doc119"]
    assert harbour and cit[min(src, harbour[0]), max(src, harbour[0])] == 1


# ---------------------------------------------------------------------- bad input, no write


@pytest.fixture
def base_copy(edited, tmp_path) -> Path:
    """A copy of the index right after the add (120 documents)."""
    shutil.copytree(edited[2] / "after-add", tmp_path / "idx")
    return tmp_path / "idx"


def snapshot(path: Path) -> dict:
    return {p.relative_to(path): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_unknown_ids_and_empty_results_write_nothing(base_copy, tmp_path):
    before = snapshot(base_copy)
    with pytest.raises(CorpusError, match=r"2 of 3 document id\(s\) to delete are not in the index \('nope', 'doc999'\)"):
        delete_documents(base_copy, ["doc005", "nope", "doc999"])
    with pytest.raises(CorpusError, match="no document id to delete"):
        delete_documents(base_copy, [])
    everything = sorted({c.doc_id for c in load_index(base_copy).chunks})
    with pytest.raises(CorpusError, match="would leave the index without chunks"):
        delete_documents(base_copy, everything)
    assert snapshot(base_copy) == before
    assert sorted(p.name for p in base_copy.parent.iterdir()) == ["idx"]


def test_an_update_without_changes_writes_nothing(base_copy, tmp_path):
    before = snapshot(base_copy)
    same = write_jsonl(tmp_path / "same.jsonl", synthetic_docs(120)[40:44])
    index = update_documents(base_copy, same, embeddings=chunk_vectors(same, SYNTH_CONFIG))
    assert index.report.documents_unchanged == 4 and index.report.documents == 0
    assert snapshot(base_copy) == before


def test_add_clash_and_supplied_embeddings(base_copy, edited, tmp_path):
    root = edited[2]
    with pytest.raises(CorpusError, match=r"document id 'doc000' is already in the index .*\(90 of 90 ids clash\)"):
        add_supplied(base_copy, root / "old.jsonl")
    with pytest.raises(SpectragError, match=r"pass embeddings \(float32 \[\d+, 32\]\)"):
        update_documents(base_copy, root / "update.jsonl")
    with pytest.raises(CorpusError, match=r"embeddings has 3 rows, expected one per chunk"):
        update_documents(base_copy, root / "update.jsonl", embeddings=np.zeros((3, DIM), np.float32))
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"id": "x1", "text": "  "}])
    with pytest.raises(CorpusError, match="document 'x1' is empty"):
        add_documents(base_copy, empty, embeddings=np.zeros((0, DIM), np.float32))


def test_missing_and_corrupt_index(base_copy, edited, tmp_path):
    with pytest.raises(IndexFormatError, match="no such index folder"):
        delete_documents(tmp_path / "nothing", ["doc001"])
    table = current_folder(base_copy) / "chunks.jsonl"
    data = bytearray(table.read_bytes())
    data[10] ^= 1
    table.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="chunks.jsonl is corrupt"):
        delete_documents(base_copy, ["doc001"])


# ----------------------------------------------------- failures at each step, kills, concurrency

STEPS = {  # where an edit can fail: (module, attribute)
    "bm25": ("spectrag.index.lexical", "BM25Index.save"),
    "embeddings": ("spectrag.incremental.edit", "new_vectors"),
    "kNN lists": ("spectrag.graph.update", "update_lists"),
    "entity rows": ("spectrag.graph.update", "update_entity_signal"),
    "spectrum": ("spectrag.graph.update", "warm_spectrum"),
    "chunk table": ("spectrag.incremental.edit", "write_edited_chunks"),
    "graph files": ("spectrag.incremental.edit", "save_graph"),
    "manifest": ("spectrag.incremental.edit", "write_manifest"),
}


@pytest.mark.parametrize("operation", ["delete", "update"])
@pytest.mark.parametrize("step", list(STEPS))
def test_a_failure_at_any_step_leaves_the_old_index(base_copy, edited, monkeypatch, operation, step):
    import importlib

    before = snapshot(base_copy)
    module, name = STEPS[step]
    target = importlib.import_module(module)
    owner, attr = (getattr(target, name.split(".")[0]), name.split(".")[1]) if "." in name else (target, name)

    def explode(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(owner, attr, explode)
    with pytest.raises(OSError, match="no space"):
        if operation == "delete":
            delete_documents(base_copy, ["doc004", "doc100"], compact_above=None)
        else:
            update = edited[2] / "update.jsonl"
            update_documents(base_copy, update, embeddings=chunk_vectors(update, SYNTH_CONFIG), compact_above=None)
    assert snapshot(base_copy) == before
    assert sorted(p.name for p in base_copy.parent.iterdir()) == ["idx"]  # no temporary folder left, no lock file


WORKER = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[4])
from test_incremental import SYNTH_CONFIG, chunk_vectors
from spectrag import add_documents, delete_documents
mode, index, arg = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "delete":
    delete_documents(index, arg.split(","), compact_above=None)
else:
    add_documents(index, arg, embeddings=chunk_vectors(arg, SYNTH_CONFIG), compact_above=None)
"""


def _worker(mode: str, index: Path, arg: str, kill: str | None = None):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("SPECTRAG_KILL_AT", None)
    if kill:
        env["SPECTRAG_KILL_AT"] = kill
    return subprocess.Popen([sys.executable, "-c", WORKER, mode, str(index), arg, str(Path(__file__).parent)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_kill_during_the_swap_leaves_the_old_or_the_new_index(base_copy, tmp_path):
    """A delete killed (as kill -9) after writing its generation, after syncing it and after
    replacing CURRENT: the path loads, as the old or the new version."""
    n_docs = len({c.doc_id for c in load_index(base_copy).chunks})
    runs = []
    for i, point in enumerate(["generation:written", "generation:synced", "generation:current"]):
        target = tmp_path / f"k{i}" / "idx"
        target.parent.mkdir()
        shutil.copytree(base_copy, target)
        runs.append((point, target, _worker("delete", target, "doc004,doc005", kill=point)))
    for point, target, proc in runs:
        assert proc.wait(timeout=600) == 137, (point, proc.stderr.read())
        documents = load_index(target, verify=True).manifest["counts"]["documents"]
        assert documents == (n_docs - 2 if point == "generation:current" else n_docs), (point, documents)


def test_concurrent_writers_run_one_after_the_other(base_copy, edited):
    """A delete and an add started together both succeed (the second waits for the lock) and
    the index holds the effect of both."""
    extra = write_jsonl(edited[2] / "extra.jsonl", synthetic_docs(130, seed=9)[125:128])
    procs = [_worker("delete", base_copy, "doc004,doc005"), _worker("add", base_copy, str(extra))]
    for proc in procs:
        assert proc.wait(timeout=600) == 0, proc.stderr.read()
    ids = {c.doc_id for c in load_index(base_copy).chunks}
    assert "doc004" not in ids and "doc005" not in ids and {"doc125", "doc126", "doc127"} <= ids
    assert [e["op"] for e in load_index(base_copy).manifest["history"]][-2:] in (["delete", "add"], ["add", "delete"])


def test_past_the_threshold_an_edit_compacts(base_copy, edited, tmp_path):
    """compact_above: an edit that brings the changed chunks past the share recomputes the graph
    from scratch (its spectrum by Lanczos), and says so."""
    index = delete_documents(base_copy, ["doc004"], compact_above=0.001)
    assert index.report.compacted and index.manifest["history"][-1]["compacted"]
    assert index.manifest["graph"]["spectrum"]["method"] == "lanczos"
    assert index.manifest["incremental"]["operations"] == 0
    records = {d["id"]: d for d in synthetic_docs(120)}
    fresh = fresh_build_of(index, records, tmp_path, "fresh")
    for name in fresh.manifest["files"]:
        assert file_hash(index, name) == file_hash(fresh, name), name
