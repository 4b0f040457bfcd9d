"""``evaluate``: build or reuse an index, run every method on all questions in batches, score.

Query vectors are embedded once and shared by every method, ablation, sweep point and budget;
each batch goes through :func:`spectrag.pipeline.run` (:mod:`spectrag.eval.run`), and the scoring is tensor work over all
questions at once (:mod:`spectrag.eval.score`, :mod:`spectrag.eval.metrics`). Ablations and the
sweep are in :mod:`spectrag.eval.variants`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from spectrag.build import build_index, uses_llm
from spectrag.config import KG_MODES, MODES, IndexConfig, with_openie
from spectrag.errors import ConfigError, SpectragError
from spectrag.eval.answers import generate_answers
from spectrag.eval.datasets import Dataset, load_dataset
from spectrag.eval.report import write_outputs
from spectrag.eval.run import Run, run_method
from spectrag.eval.score import make_scorer
from spectrag.eval.variants import run_ablations, run_sweep
from spectrag.util.console import progress_on
from spectrag.util.io import default_cache_dir
from spectrag.llm import make_client
from spectrag.retriever import Retriever
from spectrag.store import Index, is_index_folder, load_index

# --- index ---------------------------------------------------------------------------------


def _fingerprint(path: Path) -> list[Any]:
    """Size and mtime of the corpus file(s): a changed corpus gets a new cache folder."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [[p.relative_to(path).as_posix() if p != path else p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def cache_folder(ds: Dataset, config: IndexConfig, cache_dir: str | Path | None = None, llm_model: str = "") -> Path:
    """``<cache>/eval/<dataset>-<hash of corpus path, corpus files, format, config and, for a
    build with the LLM stage, the model>``."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "eval"
    parts = {"corpus": str(ds.corpus.resolve()), "files": _fingerprint(ds.corpus), "format": ds.fmt,
             "config": config.to_dict()}
    if llm_model:
        parts["llm_model"] = llm_model
    key = json.dumps(parts, sort_keys=True)
    return root / f"{ds.name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def find_openie(ds: Dataset) -> Path | None:
    """The one ``openie_*.json`` beside a HippoRAG-layout corpus (HippoRAG ships its LLM
    extractions so), else None."""
    if ds.name not in ("musique", "2wiki", "hotpotqa"):
        return None
    found = sorted(ds.corpus.parent.glob("openie_*.json"))
    return found[0] if len(found) == 1 else None


def resolve_index(ds: Dataset, index=None, config: IndexConfig | None = None, cache_dir: str | Path | None = None,
                  log: Callable[[str], None] = lambda _: None, llm=None):
    """The index to evaluate: ``index`` (an :class:`Index` or a folder) when given, else the cache
    folder's, built there first when absent (atomically, by :func:`build_index`; ``llm``: the
    client of a build with the LLM stage)."""
    if isinstance(index, Index):
        return index, {"path": str(index.path), "built": False}
    if index is not None:
        path = Path(index)
        if not path.exists():
            raise SpectragError(f"--index {path}: no such index folder")
        return load_index(path), {"path": str(path), "built": False}
    config = config or IndexConfig()
    with_llm = uses_llm(config)
    if with_llm and llm is None:
        raise ConfigError("this index configuration runs the LLM stage (utility questions or kg.source = 'llm'): "
                          "pass --llm-base-url URL")
    folder = cache_folder(ds, config, cache_dir, llm.model if with_llm else "")
    if is_index_folder(folder):
        log(f"reusing index {folder}")
        return load_index(folder), {"path": str(folder), "built": False}
    log(f"building index of {ds.corpus} into {folder}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    built = build_index(ds.corpus, folder, config, fmt=ds.fmt, llm=llm if with_llm else None, progress=progress_on())
    return built, {"path": str(folder), "built": True, "seconds": round(time.perf_counter() - start, 1)}


# --- methods ---------------------------------------------------------------------------------


def available_modes() -> tuple[str, ...]:
    """Every retrieval mode of the pipeline (:data:`spectrag.config.MODES`)."""
    return MODES


def resolve_methods(spec: str | Sequence[str], modes: Sequence[str]) -> tuple[list[str], bool]:
    """Method names and whether they came from ``all`` (then a method this index cannot run is
    skipped with its reason instead of failing the evaluation)."""
    if isinstance(spec, str):
        if spec.strip() == "all":
            return list(modes), True
        spec = [s.strip() for s in spec.split(",") if s.strip()]
    names = list(dict.fromkeys(spec))
    bad = [m for m in names if m not in modes]
    if bad or not names:
        raise SpectragError(f"--methods: unknown method(s) {', '.join(bad) or '(none given)'}; "
                            f"choose all or a comma-separated list of {', '.join(modes)}")
    return names, False


def _try(run: Callable[[], Run], name: str, lenient: bool, skipped: dict[str, str]) -> Run | None:
    try:
        return run()
    except SpectragError as exc:
        if not lenient:
            raise
        skipped[name] = str(exc)
        return None


# The budget of every published context figure (the SpectRAG paper's, and the retriever's default
# before 2,000, CHANGELOG.md): the evaluation states its budget instead of taking the retriever's default.
EVAL_BUDGET = 12_000


def evaluate(
    dataset: str,
    data: str | Path | None = None,
    *,
    index=None,
    methods: str | Sequence[str] = "all",
    ablations: bool = False,
    sweep: bool = False,
    budget: int | None = None,
    budgets: Sequence[int] = (),
    batch_size: int = 256,
    config: IndexConfig | None = None,
    openie: str | Path | None = "auto",
    retriever_config=None,
    cache_dir: str | Path | None = None,
    out: str | Path | None = None,
    trec_dir: str | Path | None = None,
    plots: bool = True,
    command: str | None = None,
    log: Callable[[str], None] = lambda _: None,
    llm=None,
    generate: bool = False,
    rounds: int = 1,
) -> dict[str, Any]:
    """Evaluate retrieval methods on ``dataset`` (see :mod:`spectrag.eval.datasets`) and return
    the results as a JSON-ready dict; with ``out``, also write ``eval_<dataset>.json`` / ``.md``,
    TREC runs and qrels (in ``trec_dir``, default ``out/eval_<dataset>_trec``), and (``plots``) PNG
    plots there.

    ``methods``: ``all`` (every mode of the pipeline at run time, :func:`available_modes`) or a
    list / comma-separated string; under ``all`` a mode this index cannot run is reported in
    ``skipped`` with the reason. ``openie``: when an index is built, an OpenIE file to build it
    with (as ``spectrag index --openie``), ``None`` for none, or ``auto`` (default): the dataset
    folder's own ``openie_*.json`` (HippoRAG layout), if any; the knowledge graph is built from
    it only when a KG mode (``activation``, ``combined``; ``all`` includes them) is asked for, else
    the OpenIE file feeds the entity signal alone (a cached index that has the KG is reused either
    way). ``ablations``: the full pipeline
    (``spectral``) with one stage or one edge signal switched off at a time. ``sweep``: one
    parameter at a time around the defaults (:data:`SWEEP`). ``budget``: context tokens per
    question (default: :data:`EVAL_BUDGET`, not the retriever's). ``budgets``: more budgets at which
    every method's context P / R / F1 is also reported (ranking metrics do not depend on the budget).

    ``llm`` (an :class:`~spectrag.config.LLMConfig` or :class:`~spectrag.llm.LLMClient`): the
    endpoint of method ``hyde`` (skipped under ``all`` without one), of an index build with the
    LLM stage, and of ``generate``: every method's contexts answered (``rounds`` > 1: iterative
    retrieval, :mod:`spectrag.generate`) and scored with EM, token F1 and answer containment
    against the gold answers (``result["generation"]``; the LLM's usage and cost per stage in
    ``result["llm"]``; per-question answers in ``out/eval_<dataset>_answers.jsonl``).
    """
    if batch_size < 1:
        raise SpectragError(f"--batch-size must be >= 1, got {batch_size}")
    for b in ([budget] if budget is not None else []) + list(budgets):
        if b < 1:
            raise SpectragError(f"--budget and --budgets must be >= 1 token, got {b}")
    budget = EVAL_BUDGET if budget is None else budget  # explicit: the figures never follow a changed default
    ds = load_dataset(dataset, data)
    client = make_client(llm)
    if generate and client is None:
        raise ConfigError("--generate needs an LLM endpoint: pass --llm-base-url URL")
    if rounds < 1:
        raise SpectragError(f"--rounds must be >= 1, got {rounds}")
    names, lenient = resolve_methods(methods, available_modes())
    config = config or IndexConfig()
    openie_file = None if index is not None else find_openie(ds) if openie == "auto" else openie
    if openie_file is not None:
        config = openie_config(ds, config, Path(openie_file), any(m in KG_MODES for m in names), cache_dir, log)
    idx, index_info = resolve_index(ds, index, config, cache_dir, log, llm=client)
    if openie_file is not None:
        index_info["openie"] = str(openie_file)
    scorer = make_scorer(ds, idx)
    index_info.update(chunks=len(idx.chunks), source=idx.manifest.get("source", {}))
    if gold_gap := scorer.gold.report["unmapped"]:
        log(f"warning: {gold_gap} of {scorer.gold.report['gold_items']} gold items could not be mapped to the corpus")

    retriever = Retriever(idx, retriever_config, llm=client)
    texts = [q.text for q in ds.questions]
    start = time.perf_counter()
    qvecs = torch.cat([retriever.embed(texts[lo : lo + batch_size]) for lo in range(0, len(texts), batch_size)])
    embed_seconds = time.perf_counter() - start
    eff_budget = budget

    result: dict[str, Any] = {
        "command": command,
        "dataset": {"name": ds.name, "corpus": str(ds.corpus), "questions_file": str(ds.questions_file),
                    "questions": len(ds.questions),
                    "groups": {g: {v: vals.count(v) for v in sorted(set(vals))} for g, vals in scorer.groups.items()}},
        "gold": scorer.gold.report,
        "index": index_info,
        "settings": {"budget": eff_budget, "batch_size": batch_size, "device": str(retriever.state.device),
                     "retriever": asdict(retriever.config), "query_embedding_seconds": round(embed_seconds, 2)},
        "methods": {},
        "skipped": {},
    }
    runs: dict[str, Run] = {}
    vectors: dict[str, torch.Tensor] = {}  # hyde: the vectors of its passages, written once

    def method_vectors(name: str) -> torch.Tensor:
        if name != "hyde":
            return qvecs
        if "hyde" not in vectors:
            log("hyde passages")
            vectors["hyde"] = retriever.hyde_vectors(texts)
        return vectors["hyde"]

    for name in names:
        log(f"method {name}")
        run = _try(lambda: run_method(retriever, texts, method_vectors(name), name, budget, batch_size), name, lenient,
                   result["skipped"])
        if run is not None:
            runs[name] = run
            result["methods"][name] = scorer.summary(run)
    if budgets:
        result["budgets"] = {}
        for b in sorted(set(int(b) for b in budgets)):
            log(f"budget {b}")
            result["budgets"][str(b)] = {
                name: {k: v for k, v in scorer.summary(run if b == eff_budget else  # the methods' own budget: their run
                                                       run_method(retriever, texts, method_vectors(name), name, b,
                                                                  batch_size),
                                                       detail=False).items() if k in ("overall", "context")}
                for name, run in runs.items()}
            for row in result["budgets"][str(b)].values():
                row["overall"] = {k: row["overall"][k] for k in ("P", "R", "F1")}
    if ablations:
        result["ablations"] = run_ablations(retriever, texts, qvecs, budget, batch_size, scorer, runs, log)
    if sweep:
        result["sweep"] = run_sweep(retriever, texts, qvecs, budget, batch_size, scorer, log, runs)
    answers = None
    if generate:
        result["generation"], answers = generate_answers(retriever, ds, runs, vectors, rounds=rounds, budget=budget, log=log)
        result["settings"]["generation"] = {"rounds": rounds, "model": client.model, "base_url": client.config.base_url,
                                            "temperature": client.config.temperature}
    if client is not None:
        result["llm"] = client.report()
    if out is not None:
        if answers is not None:
            write_answers(Path(out), ds.name, answers)
        result["outputs"] = write_outputs(Path(out), result, runs, scorer, ds, plots=plots, log=log,
                                          trec_dir=Path(trec_dir) if trec_dir is not None else None)
    return result


def write_answers(out: Path, name: str, answers: dict[str, list[dict[str, Any]]]) -> Path:
    """``out/eval_<dataset>_answers.jsonl``: one line per (method, question)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"eval_{name}_answers.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for method, rows in answers.items():
            for row in rows:
                fh.write(json.dumps({"method": method, **row}, ensure_ascii=False) + "\n")
    return path


def openie_config(ds: Dataset, config: IndexConfig, openie_file: Path, need_kg: bool, cache_dir, log) -> IndexConfig:
    """The index config with an OpenIE file: the knowledge graph and the entity signal from it when
    ``need_kg``, else the entity signal alone, unless the cache already holds the index with both
    (building the KG is the larger part of a cold MuSiQue build, and only the KG modes read it)."""
    full = with_openie(config, openie_file)
    if need_kg or is_index_folder(cache_folder(ds, full, cache_dir)):
        log(f"knowledge graph and entity signal from {openie_file}")
        return full
    log(f"entity signal from {openie_file} (no knowledge graph: no KG mode asked for)")
    return dataclasses.replace(full, kg=config.kg)


__all__ = ["available_modes", "cache_folder", "evaluate", "resolve_index"]
