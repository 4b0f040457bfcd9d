"""A real index on the device against the same machine's CPU, with query vectors carried over
(``bench/gpu_prepare.py`` wrote them on the CPU machine: no embedder is needed here).

For modes spectral / hybrid / ppr / heat / dense at B = 80 and 1,024 (the questions repeated),
``Retriever.score_batch`` on CUDA (torch backend) and on the CPU (compiled backend, every core):
agreement (rankings and selections, row by row; a differing row is a *near-tie* when the two
chunks that swap first are within ``NEAR_TIE`` of each other in the CPU's scores), speed (median
ms of ``--repeats`` after one warm-up, queries/s, CUDA / CPU) and each stage's median time.

Without CUDA (the rehearsal on the CPU machine) the device side is the torch backend on the CPU,
said in the report: the agreement of the two code paths is checked, no GPU figure is made.

    python bench/gpu_real.py [--prepared bench/.gpu] [--out DIR] [--budget-s 150]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import ensure_spectrag, finish_record, md_table, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
from spectrag.config import RetrieverConfig  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402
from spectrag.store import load_index  # noqa: E402

MODES = ("spectral", "hybrid", "ppr", "heat", "dense")
BATCHES = (80, 1024)
NEAR_TIE = 1e-5  # relative score gap under which a swap is float rounding of a tie
BUDGET = 2000


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(retriever: Retriever, texts: list[str], qv: torch.Tensor, mode: str, repeats: int):
    """(median seconds, the last result, median seconds of each stage) after one warm-up."""
    dev = retriever.state.device
    res = retriever.score_batch(texts, mode=mode, budget=BUDGET, qvecs=qv)
    times, stages = [], []
    for _ in range(repeats):
        sync(dev)
        t = time.perf_counter()
        res = retriever.score_batch(texts, mode=mode, budget=BUDGET, qvecs=qv)
        sync(dev)
        times.append(time.perf_counter() - t)
        stages.append(dict(res.seconds))
    per_stage = {k: statistics.median(s.get(k, 0.0) for s in stages) for k in stages[-1]}
    return statistics.median(times), res, per_stage


def agreement(dev_res, cpu_res) -> dict:
    """Rows whose ranking / selection differ, and how many of them are near-ties."""
    rk_d, rk_c = dev_res.ranking().cpu(), cpu_res.ranking().cpu()
    sel_d, sel_c = dev_res.selected_ids().cpu(), cpu_res.selected_ids().cpu()
    cand, scores = cpu_res.candidates.cpu(), cpu_res.scores.cpu()
    width = max(sel_d.shape[1], sel_c.shape[1])
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.shape[1]), value=-1)  # noqa: E731
    rank_differ = ~(rk_d == rk_c).all(1)
    sel_differ = ~(pad(sel_d) == pad(sel_c)).all(1)
    near, worst = 0, 0.0
    for b in torch.nonzero(rank_differ | sel_differ).flatten().tolist():
        at = int(torch.nonzero(rk_d[b] != rk_c[b]).flatten()[0]) if bool(rank_differ[b]) else None
        if at is None:  # same ranking, another selection: the selection's own rounding
            worst = max(worst, float("inf"))
            continue
        score_of = dict(zip(cand[b].tolist(), scores[b].tolist()))
        a, c = score_of.get(int(rk_d[b, at]), float("nan")), score_of.get(int(rk_c[b, at]), float("nan"))
        gap = abs(a - c) / max(abs(a), abs(c), 1e-30)
        near += gap <= NEAR_TIE
        worst = max(worst, gap if gap > NEAR_TIE else 0.0)
    rows = rk_d.shape[0]
    return dict(rows=rows, ranking_equal=rows - int(rank_differ.sum()), selection_equal=rows - int(sel_differ.sum()),
                differing_near_ties=near, worst_non_tie_gap=worst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prepared", default=str(HERE / ".gpu"))
    ap.add_argument("--out", default=os.environ.get("OUT") or str(HERE / "results"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting new (mode, B) pairs after this")
    args = ap.parse_args()
    t0 = time.perf_counter()
    prepared = Path(args.prepared)
    if not any((prepared / "index" / name).exists() for name in ("CURRENT", "manifest.json")):  # generations or flat
        print(f"[skip] real index: {prepared}/index is absent: run `python bench/gpu_prepare.py` on the CPU machine "
              "and carry bench/.gpu")
        return
    cuda = torch.cuda.is_available()
    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)
    info = json.loads((prepared / "prepared.json").read_text()) if (prepared / "prepared.json").exists() else {}
    queries = json.loads((prepared / "queries.json").read_text())
    qvecs = torch.from_numpy(np.load(prepared / "qvecs.npy"))
    t = time.perf_counter()
    index = load_index(prepared / "index")
    t_load = time.perf_counter() - t
    if cuda:  # the index loaded for the device: its dense search is the torch scan there (or faiss-gpu)
        device_side = Retriever(load_index(prepared / "index", device="cuda"), RetrieverConfig(device="cuda", backend="torch"))
        label = f"CUDA ({torch.cuda.get_device_name(0)}), torch backend"
    else:
        print("[no CUDA] the device side is the torch backend on the CPU (a rehearsal of the code path; no GPU figure)")
        device_side = Retriever(index, RetrieverConfig(device="cpu", backend="torch", threads=cores))
        label = "no CUDA: torch backend on the CPU (rehearsal)"
    cpu_side = Retriever(index, RetrieverConfig(device="cpu", backend="compiled", threads=cores))
    record = new_record(f"median of {args.repeats} after one warm-up, synchronized on CUDA; CPU side compiled "
                        f"backend at {cores} threads", device=torch.device("cuda" if cuda else "cpu"))
    rows = []
    for B in (int(b) for b in args.batches.split(",")):
        reps = -(-B // len(queries["texts"]))
        texts = (queries["texts"] * reps)[:B]
        qv = qvecs.repeat(reps, 1)[:B]
        for mode in args.modes.split(","):
            if time.perf_counter() - t0 > args.budget_s:
                print(f"  (time budget reached: B={B} {mode} and later skipped)")
                break
            s_dev, r_dev, st_dev = timed(device_side, texts, qv.to(device_side.state.device), mode, args.repeats)
            s_cpu, r_cpu, st_cpu = timed(cpu_side, texts, qv, mode, args.repeats)
            agree = agreement(r_dev, r_cpu)
            row = dict(B=B, mode=mode, dev_ms=s_dev * 1e3, dev_qps=B / s_dev, cpu_ms=s_cpu * 1e3, cpu_qps=B / s_cpu,
                       ratio=s_cpu / s_dev, **agree,
                       dev_stages={k: round(v * 1e3, 2) for k, v in st_dev.items()},
                       cpu_stages={k: round(v * 1e3, 2) for k, v in st_cpu.items()})
            rows.append(row)
            print(f"  B={B:>5} {mode:<9} device {s_dev * 1e3:8.1f} ms {B / s_dev:>9,.0f} q/s | CPU {s_cpu * 1e3:8.1f} ms "
                  f"{B / s_cpu:>9,.0f} q/s | x{s_cpu / s_dev:.2f} | ranking {agree['ranking_equal']}/{B}, selection "
                  f"{agree['selection_equal']}/{B}, near-ties {agree['differing_near_ties']}", flush=True)
    record.update(prepared=info, device_side=label, cores=cores, load_seconds=t_load, budget=BUDGET, rows=rows,
                  command="python bench/gpu_real.py " + " ".join(sys.argv[1:]))
    finish_record(record)
    write_results(os.path.join(args.out, f"gpu_real_{'cuda' if cuda else 'cpu'}"), report(record), record)


def report(res: dict) -> list[str]:
    p = res["prepared"]
    L = results_header("Real index on the device and on the same machine's CPU", res)
    L += [f"Index: {p.get('corpus', '?')}, {p.get('chunks', '?')} chunks, {p.get('questions', '?')} questions embedded "
          f"on the CPU machine ({p.get('built_at', '?')}); budget {res['budget']}; questions repeated to fill B.  ",
          f"Device side: {res['device_side']}; CPU side: compiled backend, {res['cores']} threads.", "",
          f"Agreement: rankings and selections row by row; a differing row is a near-tie when the first swapped "
          f"pair is within {NEAR_TIE:g} (relative) in the CPU's scores.", ""]
    L += md_table(res["rows"], [("B", "B", "d"), ("mode", "mode", ""), ("device ms", "dev_ms", ".1f"),
                                ("device q/s", "dev_qps", ",.0f"), ("CPU ms", "cpu_ms", ".1f"), ("CPU q/s", "cpu_qps", ",.0f"),
                                ("device / CPU speed", "ratio", ".2f"), ("rankings equal", "ranking_equal", "d"),
                                ("selections equal", "selection_equal", "d"), ("near-ties", "differing_near_ties", "d"),
                                ("worst non-tie gap", "worst_non_tie_gap", ".1e")])
    L += ["", "## Stage medians (ms): device | CPU", ""]
    for r in res["rows"]:
        keys = list(r["dev_stages"])
        L.append(f"- B = {r['B']} {r['mode']}: " + ", ".join(f"{k} {r['dev_stages'][k]:.1f} | {r['cpu_stages'].get(k, 0):.1f}"
                                                           for k in keys))
    return L


if __name__ == "__main__":
    main()
