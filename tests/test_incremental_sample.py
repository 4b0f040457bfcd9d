"""Living indexes on the bundled sample corpus with the embedding model: an add, a delete and an
update, then `compact`, answer every sample question with the ranking of a fresh build of the
final corpus; an update embeds only the chunks whose text changed (counted at the model); a
deleted document's text appears in no index file, retrieved context, TREC run, graph view or
served response; the CLI's delete / update / compact / info; an index with a knowledge graph;
an index built with the LLM stage is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from spectrag import add_documents, build_index, compact_index, delete_documents, load_index, update_documents
from spectrag.cli import main
from spectrag.cli.demo import sample_corpus, sample_questions
from spectrag.config import EmbedConfig, IndexConfig, RetrieverConfig
from spectrag.errors import SpectragError
from spectrag.generations import collect, current_folder
from spectrag.retriever import Retriever

MARKER = "Quorblaxian"
MARKED = ("# Quorblaxian Beacon\n\nThe Quorblaxian beacon stood on the outer reef of Tessel from 1788 until the "
          "storm of 1901. Its keeper, Zanthe Quorblaxian, kept a log of every ship that passed the reef and of the "
          "weather at each watch, and the Quorblaxian log is the oldest weather record of the islands.\n")
QUESTIONS = [q["question"] for q in sample_questions()]
EDIT = {"compact_above": None}


def folder(root: Path, name: str, files: list[Path], extra: dict[str, str] | None = None) -> Path:
    out = root / name
    out.mkdir()
    for f in files:
        shutil.copy(f, out / f.name)
    for fname, text in (extra or {}).items():
        (out / fname).write_text(text, encoding="utf-8")
    return out


def holds(path: Path, needle: str) -> list[str]:
    """The files under ``path`` whose bytes contain ``needle`` in any case."""
    low = needle.lower().encode()
    return [str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and low in p.read_bytes().lower()]


@pytest.fixture(scope="module")
def sample_edits(tmp_path_factory, embed_cache):
    """The first 24 files built; the other 6 and a marked document added; the marked document
    and one more deleted; the last file updated (its last section rewritten) with one unchanged.
    The final chunk order is the sorted file order, so a build of the final folder is the
    index's own order. Returns (root, the index after each step, the update's encoded texts)."""
    root = tmp_path_factory.mktemp("sample-edits")
    files = sorted(p for p in sample_corpus().iterdir() if p.is_file())
    config = IndexConfig(embed=EmbedConfig(cache_dir=embed_cache))
    steps = {"build": build_index(folder(root, "first", files[:24]), root / "idx", config)}
    steps["add"] = add_documents(root / "idx", folder(root, "rest", files[24:], {"zzz_beacon.md": MARKED}), **EDIT)
    shutil.copytree(root / "idx", root / "after-add")
    steps["delete"] = delete_documents(root / "idx", ["zzz_beacon.md", files[3].name], **EDIT)
    shutil.copytree(root / "idx", root / "after-delete")
    last = files[-1].read_text(encoding="utf-8")
    changed = last.replace("Notes of 1,000 skeld were withdrawn in 2015", "Notes of 1,000 skeld were withdrawn in 2016")
    assert changed != last
    update = folder(root, "update", [files[-2]], {files[-1].name: changed})
    from spectrag.index import embed as embed_module

    seen: list[str] = []
    original = embed_module.Embedder.encode

    def spy(self, texts, *args, **kwargs):
        seen.extend(texts)
        return original(self, texts, *args, **kwargs)

    embed_module.Embedder.encode = spy
    try:
        steps["update"] = update_documents(root / "idx", update, **EDIT)
    finally:
        embed_module.Embedder.encode = original
    final = folder(root, "final", [f for f in files if f != files[3] and f != files[-1]], {files[-1].name: changed})
    steps["fresh"] = build_index(final, root / "fresh", config)
    return root, steps, seen


def test_an_update_embeds_only_the_changed_chunks(sample_edits):
    _, steps, seen = sample_edits
    r = steps["update"].report
    assert (r.documents_replaced, r.documents_unchanged) == (1, 1)
    old = {c.text for c in steps["delete"].chunks if c.doc_id == "vessmark_skeld.md"}
    new = [c for c in steps["update"].chunks if c.doc_id == "vessmark_skeld.md"]
    changed = [c for c in new if c.text not in old]
    assert 1 <= len(changed) < len(new)  # only the rewritten section's chunk
    assert r.embedded == len(seen) == len(changed) and r.vectors_reused == len(new) - len(changed)


def test_after_compact_every_question_gets_the_fresh_builds_ranking(sample_edits, tmp_path):
    root, steps, _ = sample_edits
    shutil.copytree(root / "idx", tmp_path / "c")
    compacted, fresh = compact_index(tmp_path / "c"), steps["fresh"]
    assert compacted.chunks == fresh.chunks
    for name in fresh.manifest["files"]:
        assert compacted.manifest["files"][name]["sha256"] == fresh.manifest["files"][name]["sha256"], name
    qv = torch.from_numpy(fresh.embed_queries(QUESTIONS))
    for mode in ("hybrid", "spectral", "ppr"):
        a = Retriever(compacted, RetrieverConfig(device="cpu")).score_batch(QUESTIONS, mode=mode, qvecs=qv)
        b = Retriever(fresh, RetrieverConfig(device="cpu")).score_batch(QUESTIONS, mode=mode, qvecs=qv)
        assert torch.equal(a.ranking(), b.ranking()), mode
        assert torch.equal(a.selected_ids(), b.selected_ids()), mode
        torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=0)


def test_before_compact_retrieval_stays_close(sample_edits):
    """Not compacted: the top 5 of every question mostly the fresh build's (the entity weights
    of untouched rows and the warm-started spectrum differ slightly)."""
    _, steps, _ = sample_edits
    inc, fresh = steps["update"], steps["fresh"]
    qv = torch.from_numpy(fresh.embed_queries(QUESTIONS))
    for mode in ("hybrid", "spectral"):
        a = Retriever(inc, RetrieverConfig(device="cpu")).score_batch(QUESTIONS, mode=mode, qvecs=qv).ranking()[:, :5]
        b = Retriever(fresh, RetrieverConfig(device="cpu")).score_batch(QUESTIONS, mode=mode, qvecs=qv).ranking()[:, :5]
        overlap = np.mean([len(set(x.tolist()) & set(y.tolist())) / 5 for x, y in zip(a, b)])
        assert overlap >= 0.9, (mode, overlap)


# ------------------------------------------------------------------ deleted text appears nowhere


def without_query(value):
    """A JSON answer without the echoed query text (every "query" key dropped)."""
    if isinstance(value, dict):
        return {k: without_query(v) for k, v in value.items() if k != "query"}
    if isinstance(value, list):
        return [without_query(v) for v in value]
    return value


def test_deleted_text_is_in_no_file_context_run_view_or_response(sample_edits, tmp_path):
    from fastapi.testclient import TestClient

    from spectrag.serve.app import ServeSettings, create_app

    root, _, _ = sample_edits
    query = "Who kept the Quorblaxian beacon log on the Tessel reef?"
    for name, present in (("after-add", True), ("after-delete", False)):
        # the copy holds the generation before the delete too (this process's add result held it
        # when the delete ran); once no reader holds it, the next write's clean-up removes it
        collect(root / name)
        index = load_index(root / name)
        assert bool(holds(index.path, MARKER)) is present, holds(index.path, MARKER)
        contexts = Retriever(index, RetrieverConfig(device="cpu")).retrieve([query], k=20)
        texts = " ".join(c.text for ctx in contexts for c in ctx.chunks)
        assert (MARKER in texts) is present
        assert any(h.doc_id == "zzz_beacon.md" for h in contexts[0].hits) is present
        run, out = tmp_path / f"{name}.trec", tmp_path / f"{name}.jsonl"
        done = CliRunner().invoke(main, ["retrieve", str(index.path), "-q", query, "--trec", str(run), "--level", "doc",
                                         "-o", str(out)])
        assert done.exit_code == 0, done.output
        answer = json.dumps(without_query(json.loads(out.read_text())))  # the query itself names the marker
        assert ("zzz_beacon.md" in run.read_text()) is present and (MARKER in answer) is present
        page = tmp_path / f"{name}.html"
        done = CliRunner().invoke(main, ["view", str(index.path), "-o", str(page), "--max-nodes", "1000"])  # every chunk
        assert done.exit_code == 0, done.output
        assert (MARKER in page.read_text(encoding="utf-8")) is present
        with TestClient(create_app(Retriever(index), ServeSettings(max_batch=4))) as client:
            response = client.post("/retrieve", json={"queries": [query], "k": 20})
        assert response.status_code == 200, response.text
        answer = json.dumps(without_query(response.json()))
        assert (MARKER in answer) is present and ("zzz_beacon.md" in answer) is present


# ------------------------------------------------------------------------------------- the CLI


def test_cli_delete_update_compact_info(sample_edits, tmp_path):
    root, _, _ = sample_edits
    idx = tmp_path / "idx"
    shutil.copytree(root / "after-add", idx)
    runner = CliRunner()
    ids = tmp_path / "ids.txt"
    ids.write_text("zzz_beacon.md\n\nlake_sorrel.txt\n")
    never = ["--compact-above", "100"]  # (the default would compact this small index on its second edit)
    done = runner.invoke(main, ["delete", str(idx), "--ids", str(ids), "tollsund.txt", "--json", *never])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert out["edit"]["documents_removed"] == 3 and out["counts"]["documents"] == 28
    assert [e["op"] for e in out["history"]] == ["build", "add", "delete"]
    bad = runner.invoke(main, ["delete", str(idx), "no_such_doc.md"])
    assert bad.exit_code == 2 and "error:" in bad.output and "'no_such_doc.md'" in bad.output
    done = runner.invoke(main, ["update", str(idx), str(root / "update"), *never])
    assert done.exit_code == 0, done.output
    assert "update: updated 1 document (" in done.output and "1 document unchanged" in done.output
    info = runner.invoke(main, ["info", str(idx)])
    assert info.exit_code == 0, info.output
    for word in ("build", "add", "delete", "update", "since full build", "3 edit(s)"):
        assert word in info.output, (word, info.output)
    done = runner.invoke(main, ["compact", str(idx)])
    assert done.exit_code == 0 and "compacted" in done.output, done.output
    info = runner.invoke(main, ["info", str(idx), "--json"])
    state = json.loads(info.stdout)
    assert state["history"][-1]["op"] == "compact" and state["incremental"]["operations"] == 0
    assert state["graph"]["spectrum"]["method"] == "lanczos"


# ---------------------------------------------------------- knowledge graph, LLM-stage indexes


def test_an_index_with_a_knowledge_graph_compacts_to_the_fresh_build(tmp_path, embed_cache):
    from spectrag.config import KGConfig

    files = sorted(p for p in sample_corpus().iterdir() if p.is_file())[:6]
    config = IndexConfig(embed=EmbedConfig(cache_dir=embed_cache), kg=KGConfig(enabled=True, source="extractor"))
    build_index(folder(tmp_path, "first", files[:4]), tmp_path / "inc", config)
    add_documents(tmp_path / "inc", folder(tmp_path, "rest", files[4:]), **EDIT)
    inc = delete_documents(tmp_path / "inc", [files[1].name], **EDIT)
    assert inc.kg is not None and "kg" in inc.report.seconds
    assert not any(r == files[1].name for r in inc.kg.names)
    full = build_index(folder(tmp_path, "all", [f for f in files if f != files[1]]), tmp_path / "full", config)
    kg_files = sorted(f for f in full.manifest["files"] if f.startswith("kg/"))
    assert kg_files == sorted(f for f in inc.manifest["files"] if f.startswith("kg/"))
    for f in kg_files:  # rebuilt with known vectors reused: the files are the build's
        assert inc.manifest["files"][f]["sha256"] == full.manifest["files"][f]["sha256"], f
    compacted = compact_index(tmp_path / "inc")
    for f in full.manifest["files"]:
        assert compacted.manifest["files"][f]["sha256"] == full.manifest["files"][f]["sha256"], f


@pytest.mark.parametrize("operation", ["add", "delete", "update", "compact"])
def test_an_index_built_with_the_llm_stage_is_refused(llm_index, tmp_path, operation):
    """No edit runs the LLM stage: refused before anything is written."""
    from conftest import FIXTURES

    target = tmp_path / "llm-copy"
    shutil.copytree(llm_index[1].path, target)
    before = (current_folder(target) / "manifest.json").read_bytes()
    with pytest.raises(SpectragError, match="built with the LLM stage .* rebuild the index"):
        if operation == "add":
            add_documents(target, FIXTURES / "formats" / "folder")
        elif operation == "delete":
            delete_documents(target, [llm_index[1].chunks[0].doc_id])
        elif operation == "update":
            update_documents(target, FIXTURES / "formats" / "folder")
        else:
            compact_index(target)
    assert (current_folder(target) / "manifest.json").read_bytes() == before
