"""``spectrag index --ray`` (spectrag.distributed.build, .graph): on the local Ray cluster the
index directory equals a single-process build of the same corpus, file for file and byte for
byte; the manifests differ only in the fields that record when, how fast and where the build
ran (``spectrag.distributed.build.TIMING_FIELDS``)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from spectrag import build_index, load_index
from spectrag.cli.demo import sample_corpus
from spectrag.store import MANIFEST, read_manifest

#: small tasks, so the sample corpus (~100 chunks) is split into several per stage
TASKS = {"knn_rows": 16, "entity_rows": 16, "extract_texts": 16}


def assert_same_index(single: Path, distributed: Path) -> None:
    """Every file byte for byte; the manifest apart from timings and the ``distributed`` entry."""
    from spectrag.distributed.build import index_differences

    assert index_differences(single, distributed) == []
    facts = read_manifest(distributed, verify=False)["distributed"]
    assert facts["engine"] == "ray" and facts["workers"] == 2


def test_index_differences_names_what_differs(sample_index, index_copy):
    from spectrag.distributed.build import index_differences

    assert index_differences(sample_index.path, index_copy) == []
    (index_copy / "chunks.jsonl").write_text("changed\n")
    manifest = json.loads((index_copy / MANIFEST).read_text())
    manifest["created"], manifest["counts"]["chunks"] = "another day", -1  # a timing field and a real one
    (index_copy / MANIFEST).write_text(json.dumps(manifest))
    (index_copy / "extra.npy").write_bytes(b"")
    assert index_differences(sample_index.path, index_copy) == [
        f"only in {index_copy}: extra.npy", "bytes differ: chunks.jsonl", "manifest differs: counts"]


def test_ray_build_equals_single_process_build(ray_local, sample_index, index_config, tmp_path):
    from spectrag.distributed import build_index_ray

    # sample_index filled the embedding cache: both builds read the same vectors from it (the
    # actor pool's embedding is held to the single-process one in test_distributed_embed.py)
    single = build_index(sample_corpus(), tmp_path / "single", index_config)
    ray_index = build_index_ray(sample_corpus(), tmp_path / "ray", index_config, workers=2, graph_tasks=TASKS)
    assert ray_index.manifest["counts"]["embedding_cache_hits"] == len(single.chunks)
    assert_same_index(single.path, ray_index.path)
    load_index(ray_index.path)  # checksums verified


def test_cli_index_ray_equals_cli_index(ray_local, tmp_path):
    from spectrag.cli import main

    # no embedding cache: the single-process build embeds in this process, the Ray build on its actor pool
    config = tmp_path / "index.toml"
    config.write_text('[embed]\ncache_dir = ""\n')
    source = str(Path(__file__).parents[1] / "fixtures" / "formats" / "folder")
    for name, extra in (("single", []), ("ray", ["--ray", "--workers", "2"])):
        result = CliRunner().invoke(main, ["index", source, "-o", str(tmp_path / name), "--config", str(config),
                                           "--json", *extra])
        assert result.exit_code == 0, result.output
    assert_same_index(tmp_path / "single", tmp_path / "ray")


def test_a_failed_ray_build_leaves_nothing(ray_local, sample_index, index_config, tmp_path, monkeypatch):
    import pytest

    from spectrag.distributed import build_index_ray
    from spectrag.index.lexical import BM25Index

    monkeypatch.setattr(BM25Index, "build", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(RuntimeError, match="disk full"):
        build_index_ray(sample_corpus(), tmp_path / "idx", index_config)  # vectors from the session's cache
    # nothing left behind, the index's lock file included (its holder removes it, spectrag.store.index_lock)
    assert [p.name for p in tmp_path.iterdir()] == []
