"""spectrag.eval.throughput (``spectrag bench``): every mode x threads x batch size gets a row
whose figures are consistent (q/s = batch / seconds, stages within the batch time), the
latency and embedding figures exist, the table names the machine, and bad settings are refused."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from spectrag.cli.main import main
from spectrag.errors import SpectragError
from spectrag.eval import throughput
from spectrag.eval.throughput import BenchSettings, format_table, measure, run_bench, sample_queries


def test_record_has_every_row_and_consistent_figures(sample_index):
    queries = sample_queries(sample_index, 20)
    assert len(queries) == 20 and all(q.strip() for q in queries)
    assert sample_queries(sample_index, 20) == queries  # seeded
    settings = BenchSettings(modes=("spectral", "hybrid"), batch_sizes=(1, 8), threads=(1,), repeats=2,
                             latency_queries=3)
    record = run_bench(sample_index, queries, settings)
    assert [(r["mode"], r["batch"]) for r in record["rows"]] == [("spectral", 1), ("spectral", 8), ("hybrid", 1),
                                                                   ("hybrid", 8)]
    for row in record["rows"]:
        assert row["queries_per_s"] == pytest.approx(1000 * row["batch"] / row["ms_per_batch"])
        assert sum(row["stage_ms"].values()) <= row["ms_per_batch"] * 1.5  # medians of parts vs median of wholes
    assert {x["mode"] for x in record["latency"]} == {"spectral", "hybrid"}
    assert all(x["p50_ms"] <= x["p99_ms"] for x in record["latency"]) and record["embed"][0]["queries_per_s"] > 0
    table = format_table(record)
    assert "| spectral | 1 | 8 |" in table and "load average" in table and "torch" in table
    json.dumps(record)  # a JSON record


def test_cli_bench_json_and_bad_input(sample_index, tmp_path):
    queries = tmp_path / "q.txt"
    queries.write_text("where is the harbour?\nwho built the bridge?\n", encoding="utf-8")
    out = CliRunner().invoke(main, ["bench", str(sample_index.path), "--queries", str(queries), "--modes", "dense",
                                    "--batch-sizes", "2", "--threads", "1", "--repeats", "1", "--latency-queries", "2",
                                    "--json"])
    assert out.exit_code == 0, out.output
    record = json.loads(out.output)
    assert record["queries"] == 2 and record["rows"][0]["mode"] == "dense"
    bad = CliRunner().invoke(main, ["bench", str(sample_index.path), "--modes", "magic"])
    assert bad.exit_code == 2 and "unknown mode(s) magic" in bad.output
    bad = CliRunner().invoke(main, ["bench", str(sample_index.path), "--batch-sizes", "x"])
    assert bad.exit_code == 2 and "--batch-sizes must be comma-separated integers" in bad.output
    with pytest.raises(SpectragError, match="batch_sizes must be integers >= 1"):
        BenchSettings(batch_sizes=(0,))


def test_measure_times_only_after_the_warm_up():
    calls = []
    now = [0.0]

    def fn(i):
        calls.append(i)
        now[0] += 50.0 if i == 0 else 1.0

    original = throughput._clock
    throughput._clock = lambda: now[0]
    try:
        assert measure(fn, 3) == [1.0, 1.0, 1.0] and calls == [0, 1, 2, 3]
    finally:
        throughput._clock = original


def test_every_configuration_gets_its_own_warm_up_whatever_the_order(monkeypatch):
    """A fake retriever on an instrumented clock: the first call of each configuration (embedding
    at a thread count; a mode at a thread count and batch size) costs 100 s, later ones 1 ms per
    query. Every figure must then be the same, in any order of threads and modes."""
    from types import SimpleNamespace

    import torch

    now = [0.0]
    seen: set = set()

    def cost(key, n):
        now[0] += 1e-3 * n if key in seen else 100.0
        seen.add(key)

    class FakeRetriever:
        def __init__(self, index, config):
            self.mode = config.mode

        def embed(self, queries):
            cost(("embed", torch.get_num_threads()), len(queries))
            return torch.zeros(len(queries), 2)

        def score_batch(self, texts, *, qvecs):
            cost((self.mode, torch.get_num_threads(), len(texts)), len(texts))
            return SimpleNamespace(seconds={"seed": 0.0})

    monkeypatch.setattr(throughput, "_clock", lambda: now[0])
    monkeypatch.setattr(throughput, "Retriever", FakeRetriever)
    index = SimpleNamespace(path="fake", chunks=[None] * 10)
    figures = []
    for threads, modes in (((1, 2), ("spectral", "hybrid")), ((2, 1), ("hybrid", "spectral"))):
        seen.clear()
        record = run_bench(index, ["q"] * 8, BenchSettings(modes, (1, 4), threads, repeats=2, latency_queries=3))
        embed = {e["threads"]: e["queries_per_s"] for e in record["embed"]}
        rows = {(r["mode"], r["threads"], r["batch"]): r["queries_per_s"] for r in record["rows"]}
        latency = {(x["mode"], x["threads"]): x["p99_ms"] for x in record["latency"]}
        figures.append([{k: round(v, 6) for k, v in d.items()} for d in (embed, rows, latency)])
        assert embed == {1: pytest.approx(1000.0), 2: pytest.approx(1000.0)}
        assert all(v == pytest.approx(1000.0) for v in rows.values())
        assert all(v == pytest.approx(1.0) for v in latency.values())
    assert figures[0] == figures[1]
