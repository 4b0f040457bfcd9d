"""``spectrag index --ray`` (spectrag.distributed.build, .graph): on the local Ray cluster the
index directory equals a single-process build of the same corpus, file for file and byte for
byte; the manifests differ only in the fields that record when, how fast and where the build
ran (``TIMING``, the graph's and the spectrum's seconds, and ``distributed``)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from spectrag import build_index, load_index
from spectrag.cli.demo import sample_corpus
from spectrag.store import MANIFEST

#: manifest fields that may differ between two builds of one corpus: wall clock, seconds, memory
TIMING = ("created", "seconds", "cpu_seconds", "memory")
GRAPH_TIMING = ("seconds", "cpu_seconds", "peak_rss_mib")
#: small tasks, so the sample corpus (102 chunks) is split into several per stage
TASKS = {"knn_rows": 16, "entity_rows": 16, "extract_texts": 16}


def _manifest_without_timing(path: Path) -> dict:
    m = json.loads((path / MANIFEST).read_text())
    for key in TIMING:
        m.pop(key)
    for key in GRAPH_TIMING:
        m["graph"].pop(key)
    m["graph"]["spectrum"].pop("seconds")
    return m


def assert_same_index(single: Path, distributed: Path) -> None:
    """Every file byte for byte; the manifest apart from timings and the ``distributed`` entry."""
    files = sorted(p.relative_to(single).as_posix() for p in single.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(distributed).as_posix() for p in distributed.rglob("*") if p.is_file())
    for rel in files:
        if rel != MANIFEST:
            assert (single / rel).read_bytes() == (distributed / rel).read_bytes(), rel
    want, got = _manifest_without_timing(single), _manifest_without_timing(distributed)
    facts = got.pop("distributed")
    assert facts["engine"] == "ray" and facts["workers"] == 2
    assert got == want


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
    assert list(tmp_path.iterdir()) == []
