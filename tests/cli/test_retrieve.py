"""``spectrag retrieve`` (spectrag.cli.retrieve): queries from a JSONL file in batches, one JSON
line per query and a TREC run; no queries is a usage error."""

from __future__ import annotations

import json

from click.testing import CliRunner

from spectrag.cli.demo import sample_questions

QUESTIONS = [q["question"] for q in sample_questions()]


def test_cli_retrieve_writes_jsonl_and_trec(sample_index, tmp_path):
    from spectrag.cli import main

    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"id": f"x{i}", "question": q}) + "\n" for i, q in enumerate(QUESTIONS[:3])))
    out, trec = tmp_path / "out.jsonl", tmp_path / "run.trec"
    result = CliRunner().invoke(main, ["retrieve", str(sample_index.path), "--queries", str(queries), "-o", str(out),
                                       "--trec", str(trec), "--budget", "1000", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["x0", "x1", "x2"]
    assert all(r["used_tokens"] <= 1000 for r in rows)
    lines = trec.read_text().splitlines()
    assert lines[0].split()[:4] == ["x0", "Q0", str(rows[0]["ranking"][0]), "1"]
    bad = CliRunner().invoke(main, ["retrieve", str(sample_index.path)])
    assert bad.exit_code == 2 and "no queries" in bad.output
