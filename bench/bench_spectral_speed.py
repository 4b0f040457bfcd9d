"""Benchmark: spectral against hybrid and the per-query peer at one thread, the compiled kernels
of this checkout against those of a base commit, in one process, interleaved; and whether the
two give the same results.

The base commit's versions of the compiled kernel modules that differ (``git show
BASE:kernels/compiled/<name>.py``) are loaded from a temporary folder and swapped in for
"before" (every reference a ``spectrag`` module holds to one of their functions), the current
ones for "after". Per dev set (MuSiQue, 2wiki-dev), at one thread:

* equality: every question, every mode the index runs, at the default budget and at 12,000
  tokens, before vs after: questions whose candidates, ranking (the whole pool) or context
  (selected chunk ids, in order, and tokens used) differ, and the largest score / proximity gap;
* speed: rounds of {before, after} x {spectral, hybrid} batches of B queries (query vectors
  given), one after the other, and the SpectRAG-code peer (``bench/peers.py``, one query at a
  time) in each round; medians over the rounds, by the wall clock and by the calling thread's
  CPU time (everything runs on that one thread: on a busy machine the CPU time leaves out the
  time spent waiting for a core, which the wall clock does not). The variants' order alternates
  from round to round, and an untimed batch of each mode follows the peer, so that neither
  variant always meets the caches the peer left (with the order fixed, an A/A run measured
  the first variant 3% slower than the same code run second).

    python bench/bench_spectral_speed.py                  # base: the merge base with main
    python bench/bench_spectral_speed.py --base 6d72958 --rounds 7
    python bench/bench_spectral_speed.py --before-config propagate__ppr_method=power \
        --sets musique,2wiki,docs --out bench/results/ppr_chebyshev_cpu   # a setting, not a commit

With ``--before-config KEY=VALUE`` "before" is this checkout with one setting changed
(``RetrieverConfig.replace`` keyword paths; the value read as Python, else as a string). With
``--before-without MODULE:CLASS.ATTR`` "before" is this checkout without an optional fast path
(e.g. ``spectrag.index.dense:TorchScan.search_unordered``).

Results: bench/results/spectral_speed_cpu.md / .json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.pin_threads("1", passive=True)
_common.ensure_spectrag()

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_peers import cached_query_vectors, dataset_index  # noqa: E402
from peers import SpectragCodePeer  # noqa: E402
from spectrag.config import BASELINE_MODES, GRAPH_MODES, KG_MODES, RetrieverConfig  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402

ROOT = _common.ROOT
KERNELS = "kernels/compiled"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


class Variants:
    """The base commit's compiled kernel modules that differ from the checkout's, and a switch
    between them and the current ones."""

    def __init__(self, base: str, folder: Path) -> None:
        import spectrag.kernels.compiled  # noqa: F401

        self.base, self.swaps = base, []  # (module name, attribute, current object, base object)
        # modified modules only: one added since the base has no base version, and the pipeline
        # of this checkout calls it in both variants (listed as added)
        changed = [line for line in git("diff", "--name-only", "--diff-filter=M", base, "--", KERNELS).split()
                   if line.endswith(".py")]
        self.added = [Path(line).name for line in git("diff", "--name-only", "--diff-filter=A", base, "--",
                                                          KERNELS).split() if line.endswith(".py")]
        for path in changed:
            name = Path(path).stem
            live = sys.modules.get(f"spectrag.kernels.compiled.{name}") or importlib.import_module(
                f"spectrag.kernels.compiled.{name}")
            file = folder / f"base_{name}.py"
            file.write_text(git("show", f"{base}:{path}"))
            spec = importlib.util.spec_from_file_location(f"_base_compiled_{name}", file)
            old = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(old)
            for attr, obj in vars(live).items():
                if callable(obj) and getattr(obj, "__module__", "") == live.__name__ and hasattr(old, attr):
                    for mod_name, mod in list(sys.modules.items()):
                        if mod_name.startswith("spectrag") and getattr(mod, attr, None) is obj:
                            self.swaps.append((mod, attr, obj, getattr(old, attr)))
        self.modules = [Path(p).name for p in changed]

    @contextmanager
    def before(self):
        for mod, attr, _, old in self.swaps:
            setattr(mod, attr, old)
        try:
            yield
        finally:
            for mod, attr, new, _ in self.swaps:
                setattr(mod, attr, new)


class ConfigVariant:
    """"Before" as this checkout with some settings changed: every ``Retriever.score_batch``
    call made inside :meth:`before` runs with them (the query encoding as well as the pipeline)."""

    def __init__(self, changes: dict) -> None:
        self.changes = changes
        self.modules: list[str] = []
        self.added: list[str] = []

    @contextmanager
    def before(self):
        from spectrag.retriever import Retriever

        score_batch = Retriever.score_batch
        changes = self.changes

        def changed(retriever, *args, **kw):
            config = retriever.config
            retriever.config = config.replace(**changes)
            try:
                return score_batch(retriever, *args, **kw)
            finally:
                retriever.config = config

        Retriever.score_batch = changed
        try:
            yield
        finally:
            Retriever.score_batch = score_batch


class WithoutVariant:
    """"Before" as this checkout without some attributes (``module:Class.name``): an optional fast
    path that the code looks up where it exists (``getattr(index, "search_unordered", ...)``),
    deleted inside :meth:`before`."""

    def __init__(self, paths: list[str]) -> None:
        self.targets = []
        for path in paths:
            module, _, dotted = path.partition(":")
            owner = importlib.import_module(module)
            *parents, name = dotted.split(".")
            for part in parents:
                owner = getattr(owner, part)
            if name not in vars(owner):
                raise SystemExit(f"--before-without {path}: {owner!r} has no attribute {name!r} of its own")
            self.targets.append((owner, name, vars(owner)[name]))
        self.modules: list[str] = []
        self.added: list[str] = []

    @contextmanager
    def before(self):
        for owner, name, _ in self.targets:
            delattr(owner, name)
        try:
            yield
        finally:
            for owner, name, value in self.targets:
                setattr(owner, name, value)


def parse_changes(items: list[str]) -> dict:
    import ast

    out = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def rows(result) -> list[dict]:
    ranking, selected = result.ranking(), result.selected_ids()
    out = []
    for b in range(result.candidates.shape[0]):
        out.append({"candidates": sorted(c for c in result.candidates[b].tolist() if c >= 0),
                    "ranking": [c for c in ranking[b].tolist() if c >= 0],
                    "selected": [c for c in selected[b].tolist() if c >= 0],
                    "used": int(result.used_tokens[b])})
    return out


def all_results(retriever: Retriever, texts, qvecs, mode: str, budget: int, batch: int):
    """Every question's result rows and the score / proximity tensors (pool order)."""
    out, scores, prox = [], [], []
    for lo in range(0, len(texts), batch):
        res = retriever.score_batch(texts[lo:lo + batch], mode=mode, budget=budget, qvecs=qvecs[lo:lo + batch])
        out += rows(res)
        mask = res.candidates >= 0
        scores.append(torch.where(mask, res.scores, torch.zeros_like(res.scores)))
        prox.append(torch.where(mask, res.proximity, torch.zeros_like(res.proximity)))
    return out, scores, prox


def equality(index, texts, qvecs, variants: Variants, budgets, batch: int, only: str = "") -> list[dict]:
    modes = [m for m in BASELINE_MODES + GRAPH_MODES if m != "hyde"]
    modes += [m for m in KG_MODES if index.kg is not None]
    modes = [m for m in modes if m in only.split(",")] if only else modes
    r = Retriever(index, RetrieverConfig(device="cpu", threads=1))
    table = []
    for budget in budgets:
        for mode in modes:
            with variants.before():
                want, ws, wp = all_results(r, texts, qvecs, mode, budget, batch)
            got, gs, gp = all_results(r, texts, qvecs, mode, budget, batch)
            diff = {k: sum(g[k] != w[k] for g, w in zip(got, want)) for k in ("candidates", "ranking", "selected", "used")}
            same_shape = all(a.shape == b.shape for a, b in zip(gs, ws))
            gap_s = max(float((a - b).abs().max()) for a, b in zip(gs, ws)) if same_shape else float("nan")
            gap_p = max(float((a - b).abs().max()) for a, b in zip(gp, wp)) if same_shape else float("nan")
            table.append({"mode": mode, "budget": budget, "questions": len(texts), **diff,
                          "score_gap": gap_s, "proximity_gap": gap_p})
            print(f"  equal? {mode:10s} budget {budget:6d}: differing {diff}, |score| gap {gap_s:.2e}, "
                  f"|proximity| gap {gap_p:.2e}", flush=True)
    return table


def timed(fn) -> tuple[float, float]:
    """Wall-clock and CPU seconds of the calling thread (at one thread every kernel, torch op
    and BLAS call runs on it, so its CPU time is the batch's work without the time a busy
    machine kept it waiting)."""
    w0, c0 = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - w0, time.thread_time() - c0


def speed(index, texts, qvecs, variants: Variants, budget: int, batch: int, rounds: int, peer_queries: int) -> dict:
    texts = (texts * (batch // len(texts) + 1))[:batch]
    qvecs = torch.cat([qvecs] * (batch // len(qvecs) + 1))[:batch]
    r = Retriever(index, RetrieverConfig(device="cpu", threads=1, budget=budget))
    peer = SpectragCodePeer(np.asarray(index.embeddings, dtype=np.float32), index.graph["weights"],
                            index.graph["coordinates"], np.array([c.n_tokens for c in index.chunks]))
    qv = qvecs.numpy()[:peer_queries]
    keys = ("spectral before", "spectral after", "hybrid before", "hybrid after", "peer")
    wall, cpu, stages = {k: [] for k in keys}, {k: [] for k in keys}, {}

    def batch_of(mode):
        return r.score_batch(texts, mode=mode, qvecs=qvecs).seconds

    for variant in ("before", "after"):  # warm-up: compile / load the kernels of both
        with variants.before() if variant == "before" else _nothing():
            batch_of("spectral"), batch_of("hybrid")
    with _common.limit_threads(1):
        for i in range(rounds):
            # the variant that runs first in a round meets caches the peer left cold (an A/A run
            # measured the first one 3% slower): the order alternates, and a settling batch
            # follows the peer
            for variant in ("before", "after") if i % 2 == 0 else ("after", "before"):
                with variants.before() if variant == "before" else _nothing():
                    for mode in ("spectral", "hybrid"):
                        sec = {}
                        w, c = timed(lambda: sec.update(batch_of(mode)))
                        wall[f"{mode} {variant}"].append(w)
                        cpu[f"{mode} {variant}"].append(c)
                        stages.setdefault(f"{mode} {variant}", []).append(sec)
            w, c = timed(lambda: [peer.query(q, budget) for q in qv])
            wall["peer"].append(w / len(qv) * batch)
            cpu["peer"].append(c / len(qv) * batch)
            batch_of("spectral"), batch_of("hybrid")  # settling, untimed
    qps = {k: batch / statistics.median(v) for k, v in wall.items()}
    qps_cpu = {k: batch / statistics.median(v) for k, v in cpu.items()}
    stage_ms = {k: {s: round(1000 * statistics.median(x[s] for x in v), 1) for s in v[0]} for k, v in stages.items()}
    runs = {"wall": wall, "cpu": cpu}
    return {"budget": budget, "batch": batch, "rounds": rounds, "peer_queries": len(qv), "qps": qps,
            "qps_cpu": qps_cpu, "stages_ms": stage_ms, "raw_seconds": runs}


@contextmanager
def _nothing():
    yield


def markdown(record: dict) -> str:
    if record.get("before_without"):
        title = f"this checkout without {', '.join(record['before_without'])} (before) and with it (after)"
    elif record.get("before_config"):
        what = ", ".join(f"{k} = {v!r}" for k, v in record["before_config"].items())
        title = f"this checkout with {what} (before) and with its defaults (after)"
    else:
        title = f"the kernels of {record['base']} (before) and of this checkout (after)"
    lines = _common.results_header(f"Spectral against hybrid and the per-query peer at one thread: {title}", record)
    if not record.get("before_config") and not record.get("before_without"):
        lines += [f"Kernel modules that differ: {', '.join(record['modules']) or 'none'}."
                  + (f" Added since then, run by both variants (this checkout's pipeline calls them): "
                     f"{', '.join(record['added'])}." if record.get("added") else ""), ""]
    for res in record["indexes"]:
        lines += [f"## {res['name']} ({res['chunks']:,} chunks)", ""]
        lines += ["| budget | B | clock | spectral before q/s | spectral after q/s | hybrid q/s (before / after) | "
                  "spectral / hybrid before | after | x the peer before | after | peer q/s |",
                  "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for s in res["speed"]:
            for clock, q in (("CPU time", s["qps_cpu"]), ("wall", s["qps"])):
                hyb = (q["hybrid before"] + q["hybrid after"]) / 2
                lines.append(f"| {s['budget']:,} | {s['batch']} | {clock} | {q['spectral before']:,.1f} | "
                             f"{q['spectral after']:,.1f} | {q['hybrid before']:,.1f} / {q['hybrid after']:,.1f} | "
                             f"{q['spectral before'] / hyb:.2f} | {q['spectral after'] / hyb:.2f} | "
                             f"{q['spectral before'] / q['peer']:.1f} | {q['spectral after'] / q['peer']:.1f} | "
                             f"{q['peer']:,.1f} |")
        lines += ["", "Stage medians, ms per batch:", ""]
        for s in res["speed"]:
            for k, v in s["stages_ms"].items():
                lines.append(f"- budget {s['budget']:,}, {k}: " + ", ".join(f"{a} {b}" for a, b in v.items()))
        lines += ["", "Before vs after, every question (pool order, float32 scores):", "",
                  "| mode | budget | questions | candidates differ | ranking differs | context differs | "
                  "tokens differ | max score gap | max proximity gap |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for e in res["equality"]:
            lines.append(f"| {e['mode']} | {e['budget']:,} | {e['questions']} | {e['candidates']} | {e['ranking']} | "
                         f"{e['selected']} | {e['used']} | {e['score_gap']:.1e} | {e['proximity_gap']:.1e} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=None, help="commit of the 'before' kernels (default: merge base with main)")
    ap.add_argument("--before-config", action="append", default=[], metavar="KEY=VALUE",
                    help="'before' is this checkout with this setting (repeatable) instead of a commit's kernels")
    ap.add_argument("--before-without", action="append", default=[], metavar="MODULE:CLASS.ATTR",
                    help="'before' is this checkout without this attribute (repeatable): an optional fast path")
    ap.add_argument("--sets", default="musique,2wiki")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budgets", default="2000,12000", help="budgets timed (the equality check runs the default and 12,000)")
    ap.add_argument("--peer-queries", type=int, default=32, help="peer queries per round")
    ap.add_argument("--no-equality", action="store_true")
    ap.add_argument("--equality-modes", default="", help="comma-separated modes of the equality check (default: all)")
    ap.add_argument("--threads", default="1", help="threads (read by the pinning at import; only 1 is meant)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spectral_speed_cpu"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    changes = parse_changes(args.before_config)
    base = args.base or git("merge-base", "HEAD", "main").strip()
    record = _common.new_record(f"medians of {args.rounds} interleaved rounds after a warm-up of each variant; the "
                                "variants' order alternates by round, and an untimed batch of each mode follows the peer")
    record["base"], record["indexes"] = git("rev-parse", "--short", base).strip(), []
    record["before_config"] = changes
    record["before_without"] = args.before_without
    with tempfile.TemporaryDirectory() as folder:
        if args.before_without:
            variants = WithoutVariant(args.before_without)
        else:
            variants = ConfigVariant(changes) if changes else Variants(base, Path(folder))
        record["modules"], record["added"] = variants.modules, variants.added
        for name in args.sets.split(","):
            got = dataset_index(name)
            if got is None:
                continue
            index, texts, info = got
            qvecs = cached_query_vectors(index, name, texts)
            print(f"== {name}: {len(texts)} questions", flush=True)
            res = {**info, "speed": [], "equality": []}
            if not args.no_equality:
                res["equality"] = equality(index, texts, qvecs, variants, [RetrieverConfig().budget, 12_000], args.batch,
                                          args.equality_modes)
            for budget in (int(b) for b in args.budgets.split(",")):
                s = speed(index, texts, qvecs, variants, budget, args.batch, args.rounds, args.peer_queries)
                res["speed"].append(s)
                print(f"  budget {budget}: " + ", ".join(f"{k} {v:,.1f}" for k, v in s["qps_cpu"].items()) + " q/s (CPU time)",
                      flush=True)
            record["indexes"].append(res)
    _common.finish_record(record)
    print(_common.save_record(args.out, record, markdown))


if __name__ == "__main__":
    main()
