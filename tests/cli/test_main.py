"""The ``spectrag`` CLI: index / info / demo, JSON summaries, and one-line errors on bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from spectrag.cli import main

FOLDER = str(FIXTURES / "formats" / "folder")


@pytest.fixture
def run(monkeypatch, embed_cache):
    monkeypatch.setenv("SPECTRAG_CACHE_DIR", embed_cache)
    runner = CliRunner()
    return lambda *args: runner.invoke(main, [str(a) for a in args])


def test_help_on_every_command(run):
    for cmd in ([], ["index"], ["info"], ["demo"], ["retrieve"], ["serve"], ["view"], ["eval"]):
        result = run(*cmd, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


def test_index_then_info(run, tmp_path):
    out = tmp_path / "idx"
    result = run("index", FOLDER, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["counts"]["documents"] == 3 and summary["source"]["format"] == "folder"
    assert set(summary["seconds"]) >= {"load", "chunk", "embed", "dense", "bm25"}
    result = run("info", out)
    assert result.exit_code == 0 and "documents" in result.output and "cl100k_base" in result.output
    info = json.loads(run("info", out, "--json").stdout)
    assert info["counts"] == summary["counts"]


def test_preset_and_config_file(run, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[chunk]\nmin_tokens = 4\n")
    result = run("index", FOLDER, "-o", tmp_path / "i", "--preset", "fine", "--config", cfg, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["chunking"] == {"chunk_size": 256, "overlap": 64, "min_tokens": 4, "structure": True}


def _bad(tmp_path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda t: ["index", _bad(t, "e.json", b"[]"), "-o", t / "o"], "empty corpus"),
        (lambda t: ["index", _bad(t, "b.json", b"[{"), "-o", t / "o"], "invalid JSON"),
        (lambda t: ["index", _bad(t, "l.txt", b"\xff\xfe bad"), "-o", t / "o"], "not UTF-8"),
        (lambda t: ["index", _bad(t, "x.csv", b"a,b"), "-o", t / "o"], "unknown corpus file type"),
        (lambda t: ["index", FOLDER, "-o", t], "already exists; pass --overwrite"),
        (lambda t: ["index", FOLDER, "-o", t / "o", "--config", _bad(t, "m.toml", b"[embed]\nmodel = '/no/model'\n")],
         "neither all-MiniLM-L6-v2 nor an existing model folder"),
        (lambda t: ["info", t / "nothing"], "no such index folder"),
        (lambda t: ["info", t], "not a SpectRAG index"),
    ],
)
def test_bad_input_is_one_clear_line(run, tmp_path, make_args, message):
    result = run(*make_args(tmp_path))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output
    assert "Traceback" not in result.output


def test_empty_document_and_unknown_format(run, tmp_path):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\nText.")
    (corpus / "b.md").write_text("")
    result = run("index", corpus, "-o", tmp_path / "o")
    assert result.exit_code == 2 and "document 'b.md' is empty" in result.output
    result = run("index", corpus, "-o", tmp_path / "o", "--format", "xml")
    assert result.exit_code == 2 and "Invalid value for '--format'" in result.output


def test_debug_shows_the_exception(run, tmp_path):
    result = run("info", tmp_path / "nothing", "--debug")
    assert result.exit_code != 0 and result.exception is not None
    assert type(result.exception).__name__ == "IndexFormatError"


def test_demo_retrieves_for_every_sample_question(run):
    result = run("demo", "--json", "-k", "5")
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)
    assert len(results) == 12
    assert all(len(r["hits"]) == 5 for r in results)
    found = sum(len(r["gold_found"]) for r in results)
    assert found >= 12  # at least one gold document per question on average
