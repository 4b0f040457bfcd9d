"""Evaluation outputs: the Markdown report, the JSON results, and TREC runs + qrels.

TREC files (passage level) let ``ir_measures`` / ``trec_eval`` recompute every figure::

    eval_<dataset>_trec/qrels.txt            qid 0 docno gain    (unmapped gold: docno unmapped:<qid>:<j>)
    eval_<dataset>_trec/<method>.run         the ranking: qid Q0 docno rank score tag
    eval_<dataset>_trec/<method>.context.run the budgeted context set (its order)

    ir_measures qrels.txt dense.run 'R@2 R@5 R@10 R@20 RR nDCG@10'
    ir_measures qrels.txt dense.context.run 'SetP SetR SetF'

Scores in a run fall strictly with rank, so ``trec_eval``'s tie-breaking cannot reorder it.
A question with no ranked (or no selected) unit has no run line; ``trec_eval`` then leaves it
out of its averages, where ours counts it as 0 (it never happens on the bundled datasets).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from spectrag.eval import metrics as M
from spectrag.eval.gold import _docno
from spectrag.eval.score import Run, Scorer

RANK_COLS = ("R@2", "R@5", "R@10", "R@20", "MRR", "nDCG@10", "All@5")
SET_COLS = ("P", "R", "F1")


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def methods_table(result: dict[str, Any]) -> str:
    cols = RANK_COLS + SET_COLS
    lines = ["| method | " + " | ".join(cols) + " | context chunks | context tokens | queries/s |",
             "|---|" + "---:|" * (len(cols) + 3)]
    for name, m in result["methods"].items():
        o = m["overall"]
        lines.append(f"| {name} | " + " | ".join(_pct(o[c]) for c in cols)
                     + f" | {m['context']['chunks']:.1f} | {m['context']['tokens']:,.0f} | {m['queries_per_second']:,.1f} |")
    return "\n".join(lines)


def groups_tables(result: dict[str, Any], metrics: tuple[str, ...] = ("R@2", "R@5", "MRR", "All@5")) -> str:
    """One table per question grouping (type, hops) and metric; All@5 is the share of questions
    with every gold passage in the top 5 (both pages of a two-page question)."""
    parts = []
    for group, counts in result["dataset"]["groups"].items():
        for metric in metrics:
            parts.append(_group_table(result, group, counts, metric))
    return "\n\n".join(parts)


def _group_table(result: dict[str, Any], group: str, counts: dict[str, int], metric: str) -> str:
    values = list(counts)
    lines = [f"{metric} by {group} (%):", "",
             "| method | " + " | ".join(f"{v} (n={counts[v]})" for v in values) + " |",
             "|---|" + "---:|" * len(values)]
    for name, m in result["methods"].items():
        g = m["groups"][group]
        lines.append(f"| {name} | " + " | ".join(_pct(g[v][metric]) if g[v]["n"] else "-" for v in values) + " |")
    return "\n".join(lines)


def budget_table(result: dict[str, Any]) -> str:
    budgets = result["budgets"]
    head = " | ".join(f"{int(b):,}: P / R / F1 (chunks)" for b in budgets)
    lines = [f"| method | {head} |", "|---|" + "---:|" * len(budgets)]
    for name in result["methods"]:
        cells = []
        for rows in budgets.values():
            o, c = rows[name]["overall"], rows[name]["context"]
            cells.append(f"{_pct(o['P'])} / {_pct(o['R'])} / {_pct(o['F1'])} ({c['chunks']:.1f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ablation_table(ab: dict[str, Any]) -> str:
    cols = RANK_COLS + ("F1",)
    rows = ab["rows"]
    lines = ["| variant | what changes | " + " | ".join(cols) + " | ΔR@5 [95% CI] | vs |",
             "|---|---|" + "---:|" * (len(cols) + 1) + "---|"]
    for name, row in rows.items():
        o, base = row["overall"], row.get("baseline", "")
        delta = ""
        if base in rows:
            lo, hi = row["delta_R@5_ci95"]
            delta = f"{100 * (o['R@5'] - rows[base]['overall']['R@5']):+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
        lines.append(f"| {name} | {row['description']} | " + " | ".join(_pct(o[c]) for c in cols) + f" | {delta} | {base} |")
    notes = [f"{label}: {', '.join(ab[key])}" for key, label in (("signals_absent_from_index", "signals not in this index"),
                                                                  ("signals_without_edges", "signals with no edges here"))
             if ab.get(key)]
    if notes:
        lines += ["", "Not run (nothing to remove): " + "; ".join(notes) + "."]
    return "\n".join(lines)


def sweep_tables(sweep: dict[str, Any]) -> str:
    cols = RANK_COLS + ("F1",)
    parts = []
    for param, s in sweep.items():
        lines = [f"`{param}` (mode {s['mode']}, default {s['default']}):", "",
                 f"| {param} | " + " | ".join(cols) + " | ΔR@5 [95% CI] |", "|---:|" + "---:|" * (len(cols) + 1)]
        base = next(p for p in s["points"] if p["default"])["overall"]["R@5"]
        for p in s["points"]:
            mark = " (default)" if p["default"] else ""
            lo, hi = p["delta_R@5_ci95"]
            delta = "" if p["default"] else f"{100 * (p['overall']['R@5'] - base):+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
            lines.append(f"| {p['value']}{mark} | " + " | ".join(_pct(p["overall"][c]) for c in cols) + f" | {delta} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def generation_table(result: dict[str, Any]) -> str:
    """EM / F1 / containment per method, and the LLM's usage."""
    lines = ["| method | EM | F1 | contains | answered | citations / answer | malformed | rounds | questions |",
             "|---|" + "---:|" * 8]
    for name, g in result["generation"].items():
        lines.append(f"| {name} | {_pct(g['EM'])} | {_pct(g['F1'])} | {_pct(g['contains'])} | {_pct(g['answered'])} | "
                     f"{g['citations_per_answer']:.2f} | {g['malformed']} | {g['rounds']:.2f} | {g['questions']} |")
    return "\n".join(lines)


def llm_table(llm: dict[str, Any]) -> str:
    lines = [f"LLM {llm['model']} at {llm['base_url']} (cost at {llm['price_per_1k']['prompt']:g} / "
             f"{llm['price_per_1k']['completion']:g} per 1k prompt / completion tokens):", "",
             "| stage | requests | cached | calls | retries | failed | malformed | prompt tokens | completion tokens | cost |",
             "|---|" + "---:|" * 9]
    for name, u in llm["stages"].items():
        lines.append(f"| {name} | {u['requests']:,} | {u['cached']:,} | {u['calls']:,} | {u['retries']:,} | {u['failed']:,} | "
                     f"{u['malformed']:,} | {u['prompt_tokens']:,} | {u['completion_tokens']:,} | {u['cost']:.4f} |")
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    ds, gold, st = result["dataset"], result["gold"], result["settings"]
    out = [f"# Retrieval evaluation: {ds['name']}", ""]
    if result.get("command"):
        out += ["```bash", result["command"], "```", ""]
    mapped = ", ".join(f"{v} by {k}" for k, v in gold["mapped_by"].items()) or "none"
    out += [
        f"- questions: {ds['questions']} ({ds['questions_file']}); {gold['questions_without_gold']} without gold "
        "evidence (left out of the averages)",
        f"- index: {result['index']['path']} ({result['index']['chunks']:,} chunks, {gold['units']:,} passages/documents; "
        f"{gold['units_split_into_chunks']} split into several chunks"
        + (f"; knowledge graph and entity signal from {Path(result['index']['openie']).name}" if result["index"].get("openie") else "")
        + ")",
        f"- gold evidence: {gold['gold_items']} items, {gold['mapped']} mapped ({mapped}), **{gold['unmapped']} unmapped**"
        + (f" ({', '.join(f'{v} {k}' for k, v in gold['unmapped_reasons'].items())}; counted as misses)" if gold["unmapped"] else ""),
        f"- context budget {st['budget']:,} tokens per question; batches of {st['batch_size']}; device {st['device']}",
    ]
    if result.get("machine"):
        out.append("- machine: " + ", ".join(f"{k} {v}" for k, v in result["machine"].items()))
    if result.get("check"):
        out.append("- check: " + result["check"]["summary"])
    out += [
        "",
        "## Passage-level results (%)",
        "",
        methods_table(result),
        "",
    ]
    if result.get("generation"):
        rounds = result["settings"].get("generation", {}).get("rounds", 1)
        out += [f"## Generated answers (%, {'single-shot' if rounds == 1 else f'up to {rounds} retrieval rounds'})", "",
                generation_table(result), ""]
    if result.get("llm"):
        out += [llm_table(result["llm"]), ""]
    if result.get("skipped"):
        out += ["Skipped (this index cannot run them): "
                + "; ".join(f"`{k}`: {v}" for k, v in result["skipped"].items()), ""]
    if ds["groups"]:
        out += [groups_tables(result), ""]
    if gold["units_split_into_chunks"]:
        cols = RANK_COLS + SET_COLS
        out += ["## Chunk-level results (%)", "", "| method | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        out += [f"| {n} | " + " | ".join(_pct(m["chunk_level"][c]) for c in cols) + " |" for n, m in result["methods"].items()]
        out.append("")
    if result.get("budgets"):
        out += ["## Context set P / R / F1 by token budget (%)", "", budget_table(result), ""]
    if "ablations" in result:
        out += [f"## Ablations of the full pipeline ({result['ablations']['base']}, %)", "", ablation_table(result["ablations"]), ""]
    if "sweep" in result:
        out += ["## Sensitivity, one parameter at a time around the defaults (%)", "", sweep_tables(result["sweep"]), ""]
    out += [
        "## Definitions",
        "",
        "- Ranking metrics use the ranked candidate pool of each method (`BatchResult.ranking()`), collapsed to "
        "passages: a passage ranks at its best chunk and its later chunks are dropped.",
        "- R@k = |gold ∩ top-k passages| / |gold|, averaged over questions (HippoRAG's recall@k); MRR = "
        "1 / rank of the first gold passage (0 if none in the pool); nDCG@10 with linear gains.",
        "- P / R / F1 (SpectRAG eq. 23-24): the budgeted context set (the selected chunks, as distinct passages) "
        "against the gold passages; F1 = 0 when P + R = 0.",
        "- Generated answers (with --generate): EM, token F1 and containment of the short answer (its `Answer:` line) "
        "against the gold answer and aliases after SQuAD normalization (lower case, no punctuation or articles), the "
        "maximum over the gold answers; answered = not `unanswerable`.",
        "- Chunk level: the raw chunk ranking and selection against every chunk of a gold passage (identical when "
        "every passage is one chunk).",
        "- Unmapped gold items stay in every denominator (a miss); TREC runs and qrels in the `_trec` folder "
        "reproduce these figures with `ir_measures` (R@k, RR, nDCG@10, SetP/SetR/SetF).",
        "",
    ]
    return "\n".join(out)


def write_trec(folder: Path, runs: dict[str, Run], scorer: Scorer, qids: list[str]) -> dict[str, str]:
    """Passage-level qrels, one ranking run and one context run per method."""
    folder.mkdir(parents=True, exist_ok=True)
    names = scorer.gold.names
    qids = [_docno(q) for q in qids]  # TREC ids: no whitespace
    with (folder / "qrels.txt").open("w", encoding="utf-8") as f:
        for b, qid in enumerate(qids):
            for u, g in zip(scorer.gold.units[b].tolist(), scorer.gold.gains[b].tolist()):
                if u >= 0:
                    f.write(f"{qid} 0 {names[u]} {int(round(g))}\n")
    paths = {"qrels": str(folder / "qrels.txt")}
    for method, run in runs.items():
        for suffix, chunks in (("run", run.ranking), ("context.run", run.selected)):
            units = M.collapse(chunks, scorer.unit_of).tolist()
            path = folder / f"{method}.{suffix}"
            with path.open("w", encoding="utf-8") as f:
                for qid, row in zip(qids, units):
                    row = [u for u in row if u >= 0]
                    for rank, u in enumerate(row, start=1):
                        f.write(f"{qid} Q0 {names[u]} {rank} {len(row) - rank + 1} spectrag-{method}\n")
            paths[f"{method}.{suffix}"] = str(path)
    return paths


def save(out: Path, result: dict[str, Any]) -> dict[str, str]:
    """Write ``eval_<dataset>.json`` and ``.md`` under ``out``; returns their paths."""
    stem = f"eval_{result['dataset']['name']}"
    paths = {"json": str(out / f"{stem}.json"), "markdown": str(out / f"{stem}.md")}
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / f"{stem}.md").write_text(markdown(result), encoding="utf-8")
    return paths


def write_outputs(out: Path, result: dict[str, Any], runs: dict[str, Run], scorer: Scorer, ds, *,
                  plots: bool = True, trec_dir: Path | None = None,
                  log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The TREC folder (default ``out/eval_<dataset>_trec``), the PNGs (``plots``), then the JSON and
    Markdown reports under ``out``; returns the paths written (also stored in the JSON)."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"eval_{ds.name}"
    trec = trec_dir if trec_dir is not None else out / f"{stem}_trec"
    written: dict[str, Any] = {"trec": write_trec(trec, runs, scorer, [q.qid for q in ds.questions])}
    if plots:
        from spectrag.eval.plots import write_plots

        written["plots"] = write_plots(out, stem, result)
    written.update(json=str(out / f"{stem}.json"), markdown=str(out / f"{stem}.md"))
    save(out, {**result, "outputs": written})
    log(f"wrote {out / stem}.md, .json, {trec}" + (" and plots" if plots else ""))
    return written


__all__ = ["markdown", "methods_table", "save", "write_outputs", "write_trec"]
