"""End-to-end evaluation on the bundled sample corpus (12 questions with gold documents):
every mode, ablations and sweep run; the TREC files reproduce our figures with ir_measures;
batching does not change results; the index cache builds once and is reused; the CLI."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from spectrag.cli import main
from spectrag.eval import DATASETS, evaluate
from spectrag.eval.runner import available_modes, cache_folder
from spectrag.eval.score import KS
from spectrag.eval.variants import SWEEP

HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def evaluated(sample_index, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    result = evaluate("sample", index=sample_index, methods="all", ablations=True, sweep=True, budget=1500, budgets=[400],
                      out=out, plots=HAS_MPL)
    return result, out


def test_every_mode_runs_and_gold_is_complete(evaluated):
    result, _ = evaluated
    assert sorted(result["methods"]) == sorted(set(available_modes()) - set(result["skipped"]))
    assert {"dense", "bm25", "hybrid", "heat", "ppr", "spectral"} <= set(result["methods"])
    for name, reason in result["skipped"].items():  # no knowledge graph in the sample index, no LLM here
        assert (name in ("activation", "combined") and "knowledge graph" in reason
                or name == "hyde" and "needs an LLM endpoint" in reason), (name, reason)
    assert result["gold"]["unmapped"] == 0 and result["gold"]["questions_without_gold"] == 0
    assert result["dataset"]["groups"] == {"type": {"2hop": 8, "3hop": 2, "comparison": 2}}
    for name, m in result["methods"].items():
        o = m["overall"]
        assert all(0 <= v <= 1 for v in o.values()), name
        recalls = [o[f"R@{k}"] for k in KS]
        assert recalls == sorted(recalls) and m["recall_curve"] == sorted(m["recall_curve"])
        assert m["context"]["tokens"] <= 1500
        assert sum(g["n"] for g in m["groups"]["type"].values()) == 12
    # documents split into section chunks: chunk level differs from passage (document) level
    assert any(m["chunk_level"] != m["overall"] for m in result["methods"].values())
    assert result["methods"]["dense"]["overall"]["R@10"] >= 0.5  # the sample is easy for dense retrieval


def test_ablations_and_sweep_share_the_default_run(evaluated):
    result, _ = evaluated
    rows = result["ablations"]["rows"]
    assert rows["full"]["overall"] == result["methods"]["spectral"]["overall"]
    assert rows["-spectral proximity"]["overall"] == result["methods"]["ppr"]["overall"]
    assert {"-expansion", "-diffusion", "full, re-fused", "-semantic", "-section", "-adjacency"} <= set(rows)
    assert rows["-semantic"]["baseline"] == "full, re-fused" and rows["-expansion"]["baseline"] == "full"
    for param, s in result["sweep"].items():
        default = [p for p in s["points"] if p["default"]]
        assert len(default) == 1 and s["mode"] == SWEEP[param][0]
        assert default[0]["overall"] == result["methods"][s["mode"]]["overall"], param


def test_trec_files_reproduce_our_metrics_with_ir_measures(evaluated):
    ir_measures = pytest.importorskip("ir_measures", reason="ir-measures is in the test extra: pip install -e '.[test]'")
    result, out = evaluated
    trec = Path(result["outputs"]["trec"]["qrels"]).parent
    qrels = list(ir_measures.read_trec_qrels(str(trec / "qrels.txt")))
    names = {"R@2": "R@2", "R@5": "R@5", "R@10": "R@10", "R@20": "R@20", "MRR": "RR", "nDCG@10": "nDCG@10"}
    sets = {"P": ir_measures.SetP, "R": ir_measures.SetR, "F1": ir_measures.SetF}
    for method, m in result["methods"].items():
        run = list(ir_measures.read_trec_run(str(trec / f"{method}.run")))
        theirs = ir_measures.calc_aggregate([ir_measures.parse_measure(v) for v in names.values()], qrels, run)
        for ours, measure in names.items():
            assert theirs[ir_measures.parse_measure(measure)] == pytest.approx(m["overall"][ours], abs=1e-4), (method, ours)
        ctx = list(ir_measures.read_trec_run(str(trec / f"{method}.context.run")))
        theirs = ir_measures.calc_aggregate(list(sets.values()), qrels, ctx)
        for ours, measure in sets.items():
            assert theirs[measure] == pytest.approx(m["overall"][ours], abs=1e-4), (method, ours)


def test_outputs_written(evaluated):
    result, out = evaluated
    saved = json.loads((out / "eval_sample.json").read_text())
    assert saved["methods"] == result["methods"]
    md = (out / "eval_sample.md").read_text()
    assert "| method | R@2 | R@5 |" in md and "## Ablations" in md and "## Chunk-level results" in md
    assert "## Context set P / R / F1 by token budget" in md and set(result["budgets"]["400"]) == set(result["methods"])
    if HAS_MPL:
        for name in ("recall", "groups", "ablations", "sweep"):
            assert (out / f"eval_sample_{name}.png").stat().st_size > 1000


def test_batch_size_does_not_change_results(sample_index, evaluated):
    result, _ = evaluated
    small = evaluate("sample", index=sample_index, methods="dense,hybrid,spectral", budget=1500, batch_size=5)
    for name, m in small["methods"].items():
        assert m["overall"] == result["methods"][name]["overall"], name


def test_index_is_built_once_into_the_cache_and_reused(tmp_path, index_config):
    first = evaluate("sample", methods="dense", config=index_config, cache_dir=tmp_path)
    assert first["index"]["built"] and Path(first["index"]["path"]).parent == tmp_path
    again = evaluate("sample", methods="dense", config=index_config, cache_dir=tmp_path)
    assert not again["index"]["built"] and again["index"]["path"] == first["index"]["path"]
    assert again["methods"] == {"dense": {**first["methods"]["dense"], "seconds": again["methods"]["dense"]["seconds"],
                                          "queries_per_second": again["methods"]["dense"]["queries_per_second"]}}
    from spectrag.config import ChunkConfig, IndexConfig
    from spectrag.eval.datasets import load_dataset

    ds = load_dataset("sample")
    assert cache_folder(ds, IndexConfig(chunk=ChunkConfig(chunk_size=256, overlap=64)), tmp_path) != Path(first["index"]["path"])


# --- command line -----------------------------------------------------------------------------


def test_cli_eval_json_and_markdown(sample_index):
    runner = CliRunner()
    res = runner.invoke(main, ["eval", "sample", "--index", str(sample_index.path), "--methods", "dense,bm25", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert list(data["methods"]) == ["dense", "bm25"] and data["command"].startswith("spectrag")
    res = runner.invoke(main, ["eval", "sample", "--index", str(sample_index.path), "--methods", "hybrid", "--budget", "800"])
    assert res.exit_code == 0 and "| hybrid |" in res.stdout and "budget 800 tokens" in res.stdout


@pytest.mark.parametrize("args, message", [
    (["--methods", "dense,telepathy"], "unknown method(s) telepathy"),
    (["--budget", "0"], "--budget and --budgets must be >= 1 token, got 0"),
    (["--budgets", "500,x"], "--budgets must be comma-separated token counts"),
    (["--index", "/nonexistent/index"], "no such index folder"),
])
def test_cli_eval_errors_are_one_line(sample_index, args, message):
    base = [] if "--index" in args else ["--index", str(sample_index.path)]
    res = CliRunner().invoke(main, ["eval", "sample", *base, *args])
    assert res.exit_code == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_explicit_method_this_index_cannot_run_is_an_error(sample_index):
    if "activation" not in available_modes():
        pytest.skip("the pipeline has no activation mode yet")
    res = CliRunner().invoke(main, ["eval", "sample", "--index", str(sample_index.path), "--methods", "activation"])
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]  # (after model-loading progress)
    assert res.exit_code == 2 and len(errors) == 1 and "knowledge graph" in errors[0]


def test_cli_eval_missing_data():
    res = CliRunner().invoke(main, ["eval", "musique", "--data", "/nonexistent/musique"])
    assert res.exit_code == 2 and res.stderr.startswith("error: /nonexistent/musique: no such file or folder")


def test_cli_datasets_match_the_loaders():
    eval_cmd = main.commands["eval"]
    assert tuple(next(p for p in eval_cmd.params if p.name == "dataset").type.choices) == DATASETS


def test_openie_file_beside_a_hipporag_corpus_is_found(tmp_path):
    import shutil

    from conftest import FIXTURES

    from spectrag.config import IndexConfig
    from spectrag.eval.datasets import load_dataset
    from spectrag.eval.runner import find_openie, with_openie

    shutil.copy(FIXTURES / "formats" / "musique.json", tmp_path / "mq_corpus.json")
    (tmp_path / "mq.json").write_text('[{"id": "2hop__1", "question": "q?", "paragraphs": []}]', encoding="utf-8")
    ds = load_dataset("musique", tmp_path)
    assert find_openie(ds) is None
    (tmp_path / "openie_mq.json").write_text("{}", encoding="utf-8")
    assert find_openie(ds) == tmp_path / "openie_mq.json"
    config = with_openie(IndexConfig(), tmp_path / "openie_mq.json")
    if hasattr(config, "kg"):  # as `spectrag index --openie`
        assert config.kg.enabled and config.kg.openie_file == str(tmp_path / "openie_mq.json")
        assert config.graph.entities_file == str(tmp_path / "openie_mq.json")
    assert cache_folder(ds, config, tmp_path) != cache_folder(ds, IndexConfig(), tmp_path)


def test_sweep_covers_activation_settings_exactly_when_the_mode_runs(evaluated, kg_index, tmp_path):
    """Without a knowledge graph (the sample index) the activation mode is skipped and so are its
    settings in the sweep; with one (``kg_index``) both run."""
    activation_params = {p for p, (mode, _) in SWEEP.items() if mode == "activation"}
    assert activation_params == {"activation.k", "activation.tau_d"}
    result, _ = evaluated
    assert "activation" not in result["methods"] and not activation_params & set(result["sweep"])
    with_kg = evaluate("sample", index=kg_index, methods=["activation"], sweep=True, budget=1500, out=tmp_path,
                       plots=False)
    assert "activation" in with_kg["methods"] and activation_params <= set(with_kg["sweep"])
    for param in activation_params:
        values = [p["value"] for p in with_kg["sweep"][param]["points"]]
        assert len(values) >= 4 and values == sorted(values)


def test_sweep_sets_nested_settings():
    from types import SimpleNamespace

    from spectrag.config import RetrieverConfig
    from spectrag.eval.run import with_config

    base = SimpleNamespace(config=RetrieverConfig())
    other = with_config(base, **{"activation.tau_d": 0.1})
    assert other.config.get("activation.tau_d") == 0.1 and other.config.activation.k == base.config.activation.k
    assert base.config.activation.tau_d == 0.45  # the original is untouched
    assert with_config(base, propagate__alpha=0.5).config.get("propagate.alpha") == 0.5


def test_openie_builds_the_kg_only_for_kg_modes(tmp_path):
    """With an OpenIE file, the KG is built only when a KG mode is asked for; the entity signal
    always reads it; a cached index that has the KG is reused by a run that does not need it."""
    from types import SimpleNamespace

    from spectrag.config import IndexConfig
    from spectrag.eval.runner import openie_config

    corpus, openie = tmp_path / "corpus.json", tmp_path / "openie_x.json"
    corpus.write_text("[]")
    openie.write_text("{}")
    ds = SimpleNamespace(name="musique", corpus=corpus, fmt="musique")
    cache, said = tmp_path / "cache", []
    lean = openie_config(ds, IndexConfig(), openie, False, cache, said.append)
    assert not lean.kg.enabled and lean.graph.entities_file == str(openie) and "no knowledge graph" in said[-1]
    full = openie_config(ds, IndexConfig(), openie, True, cache, said.append)
    assert full.kg.enabled and full.kg.openie_file == str(openie) and full.graph.entities_file == str(openie)
    folder = cache_folder(ds, full, cache)
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    assert openie_config(ds, IndexConfig(), openie, False, cache, said.append) == full


def test_progress_bars_count_questions(sample_index, capsys, monkeypatch):
    from spectrag.eval.run import progress_bars, run_method
    from spectrag.retriever import Retriever
    from spectrag.util import console

    monkeypatch.setattr(console, "_terminal", lambda file: True)  # a terminal: a tqdm bar (else log lines)

    retriever = Retriever(sample_index)
    texts = ["where is the lighthouse?", "who built the bridge?", "what is the festival?"]
    qvecs = retriever.embed(texts)
    run_method(retriever, texts, qvecs, "dense", 500, 2)
    assert "/3 [" not in capsys.readouterr().err  # off unless asked for
    with progress_bars():
        run_method(retriever, texts, qvecs, "dense", 500, 2)
    err = capsys.readouterr().err
    assert "dense:" in err and "0/3 [" in err  # the bar counts the questions (later states are rate-limited)


def test_each_method_is_timed_after_its_own_warm_up(monkeypatch):
    """An instrumented clock: the first call of a method costs 100 s, the others 1 s per question;
    the q/s of each method must not depend on which ran first."""
    from types import SimpleNamespace

    import torch

    from spectrag.eval import run as run_module

    now = [0.0]
    seen: set[str] = set()

    class Fake:
        def score_batch(self, texts, *, budget, mode, qvecs):
            now[0] += 1.0 * len(texts) if mode in seen else 100.0
            seen.add(mode)
            n = len(texts)
            return SimpleNamespace(ranking=lambda: torch.zeros(n, 1, dtype=torch.long),
                                   selected_ids=lambda: torch.zeros(n, 1, dtype=torch.long),
                                   used_tokens=torch.zeros(n), candidates=torch.zeros(n, 1))

    monkeypatch.setattr(run_module, "_clock", lambda: now[0])
    texts, qvecs = ["a", "b", "c", "d", "e"], torch.zeros(5, 2)
    for order in (("spectral", "hybrid"), ("hybrid", "spectral")):
        seen.clear()
        runs = {m: run_module.run_method(Fake(), texts, qvecs, m, None, 2) for m in order}
        assert {m: r.seconds for m, r in runs.items()} == {"spectral": 5.0, "hybrid": 5.0}
