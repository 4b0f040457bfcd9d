"""Batch scoring on Ray (spectrag.distributed.score): ``spectrag retrieve --ray`` writes the same
bytes as ``spectrag retrieve``; a RayRetriever's contexts equal the Retriever's on the same
batches, also after an actor is killed mid-run; bad queries fail on the driver."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import assert_same_results, kill_once
from spectrag.cli.demo import sample_questions
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever

QUESTIONS = [q["question"] for q in sample_questions()]


def test_cli_retrieve_ray_writes_the_same_results(ray_local, sample_index, tmp_path):
    from spectrag.cli import main

    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"id": f"q{i}", "question": q}) + "\n" for i, q in enumerate(QUESTIONS)))
    outputs = {}
    for name, extra in (("single", []), ("ray", ["--ray", "--workers", "2"])):
        out, trec = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.trec"
        result = CliRunner().invoke(main, ["retrieve", str(sample_index.path), "--queries", str(queries), "-o", str(out),
                                           "--trec", str(trec), "--budget", "800", "--batch-size", "3", *extra])
        assert result.exit_code == 0, result.output
        outputs[name] = ([json.loads(line) for line in out.read_text().splitlines()],
                         [line.split() for line in trec.read_text().splitlines()])
    assert len(outputs["ray"][0]) == len(QUESTIONS)
    assert_same_results(outputs["ray"][0], outputs["single"][0])
    # TREC lines: query, Q0, docno, rank, score, tag; the score within the tolerance
    for got, want in zip(*(outputs[name][1] for name in ("ray", "single")), strict=True):
        assert got[:4] + got[5:] == want[:4] + want[5:]
        assert_same_results(float(got[4]), float(want[4]))


def test_ray_retriever_survives_a_killed_actor(ray_local, sample_index):
    from spectrag.distributed import RayRetriever

    batches = [QUESTIONS[lo : lo + 2] for lo in range(0, len(QUESTIONS), 2)]
    local = Retriever(sample_index)
    want = [[c.to_json() for c in local.retrieve(b, budget=600, mode="ppr")] for b in batches]
    scorer = RayRetriever(sample_index.path, workers=2)
    stream = scorer.retrieve_batches(batches, budget=600, mode="ppr")
    got = [[c.to_json() for c in next(stream)]]  # the pool is up and scoring
    killer = kill_once("MapBatches(ScoreBatches)")
    killer.join(timeout=30)
    assert killer.killed, "no scoring actor was found to kill"
    got += [[c.to_json() for c in contexts] for contexts in stream]
    assert_same_results(got, want)  # complete, in order, the same (scores within SCORE_RTOL)


def test_ray_retriever_rejects_bad_input_on_the_driver(ray_local, sample_index, tmp_path):
    from spectrag.distributed import RayRetriever
    from spectrag.distributed.score import scored_batches

    with pytest.raises(SpectragError, match="query 2 of 2 is empty"):
        list(scored_batches(sample_index.path, Retriever(sample_index).config, [[("a", "bridges"), ("b", "  ")]]))
    with pytest.raises(SpectragError, match="no such index folder"):
        RayRetriever(tmp_path / "missing")
    with pytest.raises(SpectragError, match="batch_size"):
        RayRetriever(sample_index.path).retrieve(["x"], batch_size=0)
