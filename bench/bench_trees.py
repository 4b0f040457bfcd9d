"""Benchmark: this checkout's whole engine against another commit's, each in processes of its
own, interleaved; and whether the two give the same answers.

``bench_spectral_speed.py`` swaps compiled kernel modules inside one process, which cannot time
a change in the rest of the engine (the pipeline, its torch steps, the tokenizer, kernels added
since). Here every child process maps ``spectrag`` to one tree (``engine/`` and ``kernels/`` of
``git archive BEFORE``, or this checkout) and uses this checkout's benchmark helpers and cached
dev-set indexes, so only the engine differs:

* speed: per round one child per tree, the order alternating by round; each child warms up,
  then times ``--batches`` batches of B queries of each of ``--modes`` (default spectral and
  hybrid), one after the other, and
  the SpectRAG-code peer (``bench/peers.py``, one query at a time) between them, at one thread,
  thread CPU time, medians; the record gives the median over rounds, and "x the peer" from each
  child's own peer (so a slow or fast phase of the machine hits both);
* equality: one child per tree writes every question's candidates, ranking, selection, tokens,
  scores, proximities and relevance, every mode, at 2,000 and 12,000 tokens; the parent compares
  them bit for bit.

    python bench/bench_trees.py --before 9546669 --rounds 6 --out bench/results/engine_trees_cpu
    python bench/bench_trees.py --before HEAD --sets musique --modes activation,combined   # the KG modes

Results: bench/results/engine_trees_cpu.md / .json (``--out``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.pin_threads("1", passive=True)

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

ROOT = _common.ROOT
SETS = ("musique", "2wiki")
RESULT = "RESULT "  # the child's last line: its figures as JSON


def load_tree(root: Path) -> None:
    """``spectrag`` from ``root``'s engine/ and kernels/ (the layout pyproject.toml installs)."""
    modules = []
    for name, folder in (("spectrag", root / "engine"), ("spectrag.kernels", root / "kernels")):
        spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        modules.append((spec, module))
    modules[0][1].kernels = modules[1][1]
    for spec, module in reversed(modules):  # the kernels first: they import nothing else of spectrag
        spec.loader.exec_module(module)
    if not str(Path(sys.modules["spectrag"].__file__).resolve()).startswith(str(root.resolve())):
        raise SystemExit(f"spectrag did not load from {root}")


def indexes(sets: list[str]):
    """Each dev set's cached index, questions and query vectors (embedded once, cached)."""
    from bench_peers import cached_query_vectors, dataset_index

    for name in sets:
        got = dataset_index(name)
        if got is None:
            continue
        index, texts, info = got
        yield name, index, texts, cached_query_vectors(index, name, texts), info


def child_speed(args) -> dict:
    import numpy as np
    import torch

    from peers import SpectragCodePeer
    from spectrag.config import RetrieverConfig
    from spectrag.retriever import Retriever

    torch.set_num_threads(1)
    out = {}
    for name, index, texts, qvecs, info in indexes(args.sets.split(",")):
        batch = args.batch
        t = (texts * (batch // len(texts) + 1))[:batch]
        q = torch.cat([qvecs] * (batch // len(qvecs) + 1))[:batch]
        r = Retriever(index, RetrieverConfig(device="cpu", threads=1, budget=args.budget))
        peer = SpectragCodePeer(np.asarray(index.embeddings, dtype=np.float32), index.graph["weights"],
                                index.graph["coordinates"], np.array([c.n_tokens for c in index.chunks]))
        pq = qvecs.numpy()[: args.peer_queries]
        modes = args.modes.split(",")
        cpu: dict[str, list] = {**{m: [] for m in modes}, "peer": []}
        stages: dict[str, list] = {m: [] for m in modes}
        for mode in modes + modes:  # warm-up
            r.score_batch(t, mode=mode, qvecs=q)
        for _ in range(args.batches):
            for mode in modes:
                c0 = time.thread_time()
                res = r.score_batch(t, mode=mode, qvecs=q)
                cpu[mode].append(time.thread_time() - c0)
                stages[mode].append(res.seconds)
            c0 = time.thread_time()
            for v in pq:
                peer.query(v, args.budget)
            cpu["peer"].append((time.thread_time() - c0) / len(pq) * batch)
            r.score_batch(t, mode=modes[0], qvecs=q)  # settling, untimed: the caches the peer left
        out[name] = {"chunks": info["chunks"], "qps": {k: batch / statistics.median(v) for k, v in cpu.items()},
                     "stages_ms": {m: {s: 1000 * statistics.median(x[s] for x in v) for s in v[0]}
                                   for m, v in stages.items()}}
    return out


def child_dump(args) -> dict:
    import torch

    from spectrag.config import BASELINE_MODES, GRAPH_MODES, KG_MODES, RetrieverConfig
    from spectrag.retriever import Retriever

    torch.set_num_threads(1)
    dump = {}
    for name, index, texts, qvecs, _ in indexes(args.sets.split(",")):
        r = Retriever(index, RetrieverConfig(device="cpu", threads=1))
        modes = [m for m in BASELINE_MODES + GRAPH_MODES if m != "hyde"] + [m for m in KG_MODES if index.kg is not None]
        for mode in modes:
            for budget in (RetrieverConfig().budget, 12_000):
                rows = []
                for lo in range(0, len(texts), args.batch):
                    b = r.score_batch(texts[lo : lo + args.batch], mode=mode, budget=budget, qvecs=qvecs[lo : lo + args.batch])
                    real = b.candidates >= 0
                    ranking, selected = b.ranking(), b.selected_ids()
                    for i in range(b.candidates.shape[0]):
                        zero = torch.zeros_like(b.scores[i])
                        rows.append({"candidates": b.candidates[i].numpy(), "ranking": ranking[i].numpy(),
                                     "selected": selected[i].numpy(), "used": b.used_tokens[i:i + 1].numpy(),
                                     "scores": torch.where(real[i], b.scores[i], zero).numpy(),
                                     "proximity": torch.where(real[i], b.proximity[i], zero).numpy(),
                                     "relevance": b.relevance[i].numpy()})
                dump[(name, mode, budget)] = rows
    with open(args.dump, "wb") as f:
        pickle.dump(dump, f)
    return {"keys": len(dump)}


def child(args) -> None:
    load_tree(Path(args.child))
    out = child_dump(args) if args.dump else child_speed(args)
    print(RESULT + json.dumps(out), flush=True)


def run_child(tree: Path, args, *extra: str) -> dict:
    cmd = [sys.executable, __file__, "--child", str(tree), "--sets", args.sets, "--batch", str(args.batch),
           "--batches", str(args.batches), "--peer-queries", str(args.peer_queries), "--budget", str(args.budget),
           "--modes", args.modes, *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode or not lines:
        raise SystemExit(f"child on {tree} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT):])


def compare(a: dict, b: dict) -> list[dict]:
    if a.keys() != b.keys():
        raise SystemExit(f"the trees ran different modes: {sorted(set(a) ^ set(b))}")
    def same(x, y) -> bool:  # the bytes: a sign of zero, a dtype or a NaN's payload counts
        return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()

    table = []
    for key in a:
        if len(a[key]) != len(b[key]):
            raise SystemExit(f"{key}: {len(a[key])} questions before, {len(b[key])} after")
        fields = a[key][0].keys()
        differ = {f: sum(not same(x[f], y[f]) for x, y in zip(a[key], b[key])) for f in fields}
        table.append({"set": key[0], "mode": key[1], "budget": key[2], "questions": len(a[key]), **differ})
    return table


def markdown(record: dict) -> str:
    lines = _common.results_header(f"The engine of {record['before']} (before) against this checkout's (after), "
                                   "each in processes of its own", record)
    modes = record["modes"]
    ratio = "spectral" in modes and "hybrid" in modes
    for name, res in record["speed"].items():
        lines += [f"## {name} ({res['chunks']:,} chunks), B = {record['batch']}, budget {record['budget']:,}", "",
                  "| tree | " + " | ".join(f"{m} q/s" for m in modes) + " | peer q/s | "
                  + ("spectral / hybrid | " if ratio else "") + f"{modes[0]} x the peer |",
                  "|---|" + "---:|" * (len(modes) + 2 + ratio)]
        for tree in ("before", "after"):
            s = res[tree]
            lines.append(f"| {tree} | " + " | ".join(f"{s[m]:,.1f}" for m in modes) + f" | {s['peer']:,.1f} | "
                         + (f"{s['spectral'] / s['hybrid']:.2f} | " if ratio else "") + f"{s['x_peer']:.1f} |")
        b, a = res["before"], res["after"]
        lines += ["", "After / before: " + ", ".join(f"{m} {a[m] / b[m]:.3f}" for m in modes)
                  + f". \"x the peer\" is the median over rounds of each child's "
                  f"{modes[0]} q/s over its own peer's (per round, after: "
                  f"{', '.join(f'{x:.1f}' for x in a['x_peer_rounds'])}; before: "
                  f"{', '.join(f'{x:.1f}' for x in b['x_peer_rounds'])}).", "", "Stage medians, ms per batch:", ""]
        for tree in ("before", "after"):
            for mode, st in res[tree]["stages_ms"].items():
                lines.append(f"- {tree}, {mode}: " + ", ".join(f"{k} {v:.1f}" for k, v in st.items()))
        lines.append("")
    if record["equality"]:
        lines += ["## Before vs after, every question (bit for bit)", "",
                  "| set | mode | budget | questions | candidates | ranking | selection | tokens | scores | proximity | "
                  "relevance |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for e in record["equality"]:
            lines.append(f"| {e['set']} | {e['mode']} | {e['budget']:,} | {e['questions']} | {e['candidates']} | "
                         f"{e['ranking']} | {e['selected']} | {e['used']} | {e['scores']} | {e['proximity']} | "
                         f"{e['relevance']} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", help="the commit whose engine is 'before' (required unless --child)")
    ap.add_argument("--rounds", type=int, default=6, help="children per tree, the order alternating by round")
    ap.add_argument("--batches", type=int, default=5, help="timed batches of each mode per child")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--peer-queries", type=int, default=32)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--modes", default="spectral,hybrid",
                    help="modes timed, comma-separated; the first is compared with the peer (spectral's per-query code)")
    ap.add_argument("--no-equality", action="store_true")
    ap.add_argument("--threads", default="1", help="threads (read by the pinning at import; only 1 is meant)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "engine_trees_cpu"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--dump", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if not args.before:
        ap.error("--before COMMIT is required")
    if args.rounds < 1 or args.batches < 1:
        ap.error("--rounds and --batches must be at least 1")
    git = ["git", "-C", str(ROOT)]
    before = subprocess.run([*git, "rev-parse", "--short", args.before], check=True, capture_output=True,
                            text=True).stdout.strip()
    record = _common.new_record(f"{args.rounds} rounds of one child process per tree, the order alternating by round; "
                                f"per child a warm-up, then {args.batches} batches of each mode and the peer, medians "
                                "of thread CPU time; the median over rounds")
    record.update(before=before, batch=args.batch, budget=args.budget, modes=args.modes.split(","), speed={},
                  equality=[])
    with tempfile.TemporaryDirectory() as folder:
        old = Path(folder) / "before"
        old.mkdir()
        archive = subprocess.run([*git, "archive", args.before, "engine", "kernels"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        trees = {"before": old, "after": ROOT}
        if not args.no_equality:
            dumps = {}
            for name, tree in trees.items():
                path = Path(folder) / f"{name}.pkl"
                run_child(tree, args, "--dump", str(path))
                with open(path, "rb") as f:
                    dumps[name] = pickle.load(f)
            record["equality"] = compare(dumps["before"], dumps["after"])
            print(f"equality: {sum(sum(v for k, v in e.items() if k not in ('set', 'mode', 'budget', 'questions')) for e in record['equality'])} differing fields", flush=True)
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        modes = record["modes"]
        for rnd in range(args.rounds):
            for name in ("before", "after") if rnd % 2 == 0 else ("after", "before"):
                runs[name].append(run_child(trees[name], args))
                print(f"round {rnd + 1} {name}: " + ", ".join(f"{s} {modes[0]} {v['qps'][modes[0]]:,.0f} q/s"
                                                              for s, v in runs[name][-1].items()), flush=True)
    for name in runs["after"][0]:
        res = {"chunks": runs["after"][0][name]["chunks"]}
        for tree, rows in runs.items():
            qps = {k: statistics.median(r[name]["qps"][k] for r in rows) for k in (*modes, "peer")}
            x_peer = [r[name]["qps"][modes[0]] / r[name]["qps"]["peer"] for r in rows]
            stages = {m: {s: statistics.median(r[name]["stages_ms"][m][s] for r in rows)
                          for s in rows[0][name]["stages_ms"][m]} for m in modes}
            res[tree] = {**qps, "x_peer": statistics.median(x_peer), "x_peer_rounds": x_peer, "stages_ms": stages}
        record["speed"][name] = res
    record["child_results"] = runs
    _common.finish_record(record)
    print(_common.save_record(args.out, record, markdown))


if __name__ == "__main__":
    main()
