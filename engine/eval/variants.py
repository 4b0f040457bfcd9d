"""Ablations of the full pipeline and a one-at-a-time sensitivity sweep, on the same questions
and query vectors as the main evaluation.

Ablations switch off one stage (expansion: ``expand.hops = 0``; diffusion: ``propagate.alpha = 0``; spectral
proximity: mode ``ppr``; bridging, where the pipeline has it) or one edge signal (the graph
re-fused without it, :mod:`spectrag.eval.graphs`) at a time. The sweep varies one parameter of
:class:`RetrieverConfig` around its default with everything else fixed; the default is always
one of the points, so it matches the main table.

Each row carries a 95% paired bootstrap interval of its R@5 difference from its baseline
(2,000 resamples of the questions, fixed seed): on 100 questions one gold passage of one
question moves R@5 by 0.3-0.5 points, so small differences are within noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from spectrag.errors import SpectragError
from spectrag.eval.graphs import rebuild_graph, stored_signals, with_graph
from spectrag.eval.metrics import paired_bootstrap_ci
from spectrag.eval.run import run_method, with_config
from spectrag.eval.score import METRICS, Run, Scorer

R5 = METRICS.index("R@5")

FULL = "spectral"  # the full pipeline, the base of the ablations and most sweeps
SWEEP: dict[str, tuple[str, tuple[float, ...]]] = {
    # parameter: (mode it is swept on, values around the default)
    "propagate.alpha": ("spectral", (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)),
    "propagate.t": ("heat", (0.25, 0.5, 1.0, 2.0, 4.0)),
    "propagate.damping": ("spectral", (0.5, 0.7, 0.85, 0.95)),
    "expand.n_seeds": ("spectral", (5, 10, 20, 40)),
    "expand.max_candidates": ("spectral", (50, 100, 200, 400)),
    # spreading activation (indexes with a knowledge graph only): seeds and the chunk filter
    "activation.k": ("activation", (1, 3, 5, 10)),
    "activation.tau_d": ("activation", (0.0, 0.3, 0.45, 0.6)),
}


def run_ablations(retriever, texts, qvecs, budget, batch_size, scorer: Scorer, runs: dict[str, Run],
                  log: Callable[[str], None]) -> dict[str, Any]:
    """The full pipeline with one stage, then one edge signal, switched off at a time.

    Signal rows are compared with ``full, re-fused``: the same pipeline on the graph re-fused
    from all stored signals. It differs from the stored graph only by float32 rounding of the
    weights (the signals are stored in float32), which can reorder near-ties; comparing with
    it keeps that rounding out of each signal's delta (and shows its size). Signals that the
    index does not hold, or that have no edges, are listed instead of run (nothing to remove).
    """
    if retriever.state.weights is None:
        raise SpectragError("--ablations needs the chunk graph, but this index was built without it")
    cfg = retriever.config
    rows: dict[str, Any] = {}

    per_q: dict[str, torch.Tensor] = {}  # R@5 per question, for the paired intervals

    def add(name: str, what: str, r, mode: str = FULL, baseline: str = "full") -> dict[str, Any]:
        log(f"ablation {name}")
        # the unchanged retriever in a mode the methods already ran: that run (full, -spectral proximity)
        run = runs[mode] if (r is retriever and mode in runs) else run_method(r, texts, qvecs, mode, budget, batch_size)
        full_q = scorer.per_question(run)
        rows[name] = {"description": what, "baseline": baseline, **scorer.summary(run, detail=False, per_q=full_q)}
        per_q[name] = full_q[:, R5]
        if baseline:
            rows[name]["delta_R@5_ci95"] = _ci(per_q[name] - per_q[baseline], scorer)
        return rows[name]

    add("full", f"{FULL}: every stage and signal", retriever, baseline="")
    add("-expansion", f"expand.hops = 0: the pool is the {cfg.expand.n_seeds} fused seeds, no graph neighbours",
        with_config(retriever, expand__hops=0))
    add("-diffusion", "propagate.alpha = 0: ranked by query relevance alone over the expanded pool",
        with_config(retriever, propagate__alpha=0.0))
    add("-spectral proximity", "PPR proximity only (= mode ppr)", retriever, mode="ppr")
    if cfg.bridge.rounds > 0:  # the query-aware bridging step
        add("-bridging", "bridge.rounds = 0: no relevance carried along relational edges",
            with_config(retriever, bridge__rounds=0))
    signals = stored_signals(retriever.index)
    weights = retriever.index.config.graph.signal_weights()
    absent = sorted(set(weights) - set(signals))
    empty = sorted(name for name, m in signals.items() if m.nnz == 0)
    present = [name for name in sorted(signals, key=lambda s: -weights.get(s, 0)) if name not in empty]
    if present:
        refused = rebuild_graph(retriever.index, (), signals)
        facts = refused.pop("facts")
        add("full, re-fused", f"graph re-fused from every stored signal ({facts['edges']:,} edges; "
            "float32 rounding only)", with_graph(retriever, refused))["graph"] = facts
    for name in present:
        graph = rebuild_graph(retriever.index, (name,), signals)
        facts = graph.pop("facts")
        add(f"-{name}", f"graph re-fused without the {name} signal ({facts['edges']:,} edges)",
            with_graph(retriever, graph), baseline="full, re-fused")["graph"] = facts
    return {"base": FULL, "rows": rows, "signals_absent_from_index": absent, "signals_without_edges": empty}


def _ci(diff: torch.Tensor, scorer: Scorer) -> list[float]:
    lo, hi = paired_bootstrap_ci(diff[scorer.gold.n_gold > 0])
    return [round(lo, 4), round(hi, 4)]


def run_sweep(retriever, texts, qvecs, budget, batch_size, scorer: Scorer, log: Callable[[str], None],
              runs: dict[str, Run] | None = None) -> dict[str, Any]:
    """One parameter at a time around the defaults (:data:`SWEEP`); everything else fixed.
    ``runs``: the methods' runs (same budget), reused as the default points."""
    runs = runs or {}
    out: dict[str, Any] = {}
    for param, (mode, values) in SWEEP.items():
        default = retriever.config.get(param)
        points, per_q = [], []
        if mode not in runs:
            try:
                run_method(retriever, texts[:1], qvecs[:1], mode, budget, 1)
            except SpectragError as exc:  # e.g. activation on an index without a knowledge graph
                log(f"sweep {param}: skipped ({exc})")
                continue
        for v in sorted({type(default)(v) for v in values} | {default}):  # the default is always a point
            log(f"sweep {param} = {v}")
            run = runs[mode] if (v == default and mode in runs) else \
                run_method(with_config(retriever, **{param: v}), texts, qvecs, mode, budget, batch_size)
            full_q = scorer.per_question(run)
            points.append({"value": v, "default": v == default, **scorer.summary(run, detail=False, per_q=full_q)})
            per_q.append(full_q[:, R5])
        base = per_q[next(i for i, p in enumerate(points) if p["default"])]
        for p, q in zip(points, per_q):
            p["delta_R@5_ci95"] = _ci(q - base, scorer)
        out[param] = {"mode": mode, "default": default, "points": points}
    return out
