"""How fast is ``spectrag.kernels.lanczos.lanczos_eigsh`` against scipy's ARPACK ``eigsh`` on the
chunk graph's spectrum, at 10^4 .. 10^6 chunks? The ``m = 32`` smallest non-trivial eigenpairs of
``L_sym`` of the fused graph, both solvers on the same operator, in the same run.

    python bench/bench_spectrum.py --sizes 10000 100000 1000000 --repeats 3 1 1 --threads 2
    python bench/bench_spectrum.py --sizes 5000 --repeats 1 --out /tmp/spectrum      # smoke test
    python bench/bench_spectrum.py --index /tmp/spectrag-synth-1e6                  # an index's own graph

**Graphs**: the fused graph of ``make_synthetic.chunk_corpus`` (the corpus of
``bench_graph_build.py``), built untimed by ``build_signals`` + ``fuse_signals`` with
``GraphConfig()`` defaults (IVF kNN above 2 x 10^5 chunks), or with ``--index`` the stored
graph of a built index (``spectrag.graph.build.load_graph``).

**Operator**: the deflated ``L' = L_sym + 3 N N^T`` of ``engine/graph/spectrum.py``
(``_deflated_operator``, one torch SpMM per application; its setup is timed apart and shared).
``lanczos_eigsh(..., which="SA")`` runs on it; scipy runs ARPACK on the *same* torch operator as a
``LinearOperator``, shifted to ``2 I - L'`` with ``which="LA"`` (eigenvalues mapped back by
``2 - mu``), which converges far faster than ``which="SA"`` on ``L'`` (also run, at small sizes).
scipy's ``tol`` is relative to ``|mu|`` (about 2 here) and ours is ``tol * max(1, |lambda|)``,
so scipy gets ``tol / 2``: both then target residuals of about ``tol``. Residuals
``||L' v - lambda v||`` of both are recomputed in float64 with the same operator; same ``ncv``.
Each solver run has a wall-clock cap (``--solver-limit``); a capped run is reported as "not
converged in X s". k-means (which ``spectral_coordinates`` also runs) is not timed here.

Threads: torch, BLAS (threadpoolctl; ARPACK's dense work also with 1 thread, ``--scipy-blas``)
and FAISS/OpenMP get ``--threads``. Runs: median of ``--repeats`` per size (no warm-up: one
solve is long). Results: ``--out`` (default ``results/spectrum_cpu.md``) and ``.json``; an
earlier run's figures are in ``results/graph_cpu.md`` (its spectrum sections).

"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from _common import ensure_spectrag, pin_threads

THREADS = pin_threads("2", passive=True)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as sla  # noqa: E402
import torch  # noqa: E402

from _common import ROOT, finish_record, limit_threads, md_table, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
import make_synthetic  # noqa: E402
from spectrag.config import GraphConfig  # noqa: E402
from spectrag.graph.build import build_signals, load_graph  # noqa: E402
from spectrag.graph.fuse import fuse_signals  # noqa: E402
from spectrag.graph.spectrum import _deflated_operator  # noqa: E402
from spectrag.kernels.lanczos import lanczos_eigsh  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def synthetic_graph(n: int, seed: int) -> sp.csr_matrix:
    """The fused graph ``W [n, n]`` of the synthetic corpus (IVF kNN above 2 x 10^5 chunks)."""
    chunks, emb, _ = make_synthetic.chunk_corpus(n, seed=seed)
    cfg = GraphConfig(knn="exact" if n <= 200_000 else "ivf")
    signals, _ = build_signals(chunks, emb, cfg)
    return fuse_signals(signals, cfg.signal_weights(), tau=cfg.tau, max_degree=cfg.max_degree).weights


class _Deadline(Exception):
    pass


def _capped(fn, limit_s: float, counter: list):
    """``fn`` that counts applied vectors (``counter[0]``), sums its own time (``counter[1]``)
    and raises :class:`_Deadline` once ``limit_s`` seconds have passed."""
    t_end = time.perf_counter() + limit_s

    def wrapped(x):
        t0 = time.perf_counter()
        if t0 > t_end:
            raise _Deadline
        counter[0] += x.shape[1]
        y = fn(x)
        counter[1] += time.perf_counter() - t0
        return y

    return wrapped


def _scipy_op(matvec, n: int, dtype: torch.dtype, shift: float | None):
    """``shift * I - L'`` (or ``L'`` when shift is None) as a LinearOperator over the torch matvec."""
    np_dtype = np.float64 if dtype == torch.float64 else np.float32

    def apply(x):
        x = np.asarray(x, dtype=np_dtype)
        one = x.ndim == 1
        xt = torch.from_numpy(np.ascontiguousarray(x.reshape(n, -1)))  # (n, b)
        y = matvec(xt)
        if shift is not None:
            y = shift * xt - y
        y = y.numpy()
        return y.ravel() if one else y

    return sla.LinearOperator((n, n), matvec=apply, matmat=apply, dtype=np_dtype)


def _runs(solve, repeats: int, mv, limit: float) -> dict:
    """Up to ``repeats`` timed calls of ``solve(capped matvec)``; a capped or failed run ends them.
    Returns seconds (median), operator seconds, matvecs, the last output (None when capped)."""
    times, op_times, out, counts = [], [], None, 0
    for _ in range(repeats):
        counter = [0, 0.0]
        t0 = time.perf_counter()
        try:
            out = solve(_capped(mv, limit, counter))
        except (_Deadline, sla.ArpackNoConvergence) as exc:
            out = None
            log(f"    stopped: {type(exc).__name__}")
        times.append(time.perf_counter() - t0)
        op_times.append(counter[1])
        counts = counter[0]
        if out is None:
            break
    return {"runs": len(times), "seconds": statistics.median(times), "times": times,
            "operator_seconds": statistics.median(op_times), "matvecs": counts, "out": out}


def spectrum_rows(w: sp.csr_matrix, args, repeats: int) -> tuple[list[dict], dict]:
    """Lanczos and scipy rows (float64, and float32 up to ``--f32-max-n``) and the operator setup."""
    from threadpoolctl import threadpool_limits

    n = w.shape[0]
    t0 = time.perf_counter()
    mv64, n_comp, isolated = _deflated_operator(w, torch.float64)
    setup = {"operator_setup_s_float64": time.perf_counter() - t0, "components": n_comp, "isolated": isolated}
    m = max(1, min(args.m, n - n_comp - 1))
    ncv = min(n, max(2 * m + 1, m + 32))  # lanczos_eigsh's default, given to scipy too
    setup.update(m=m, ncv=ncv)

    def residual(vecs: np.ndarray, lam: np.ndarray) -> float:
        v = torch.from_numpy(np.ascontiguousarray(vecs, dtype=np.float64))
        r = mv64(v) - v * torch.from_numpy(np.asarray(lam, dtype=np.float64))[None, :]
        return float(torch.linalg.vector_norm(r, dim=0).max())

    configs = [(torch.float64, args.tol64, mv64)]
    if n <= args.f32_max_n:
        configs.append((torch.float32, args.tol32, _deflated_operator(w, torch.float32)[0]))
    blas_all = list(dict.fromkeys(args.scipy_blas or [args.threads, 1]))
    rows, ref = [], None
    for dtype, tol, mv in configs:
        dname = str(dtype).replace("torch.", "")
        log(f"  lanczos {dname} tol {tol:g} ...")
        got = _runs(lambda f: lanczos_eigsh(f, m, which="SA", tol=tol, seed=0, n=n, dtype=dtype, device="cpu",
                                            raise_on_failure=False), repeats, mv, args.solver_limit)
        res = got.pop("out")
        row = {"solver": "lanczos_eigsh", "setting": "SA on L'", "dtype": dname, "tol": tol, "blas_threads": "-", **got}
        if res is None:
            row.update(converged=False, status=f"not converged in {args.solver_limit:.0f} s (capped)")
        else:
            lam = res.eigenvalues.double().numpy()
            row.update(converged=bool(res.converged), status="converged" if res.converged else "not converged",
                       matvecs=int(res.n_matvec), max_residual=residual(res.eigenvectors.double().numpy(), lam), lam=lam)
            ref = lam if (ref is None and dtype == torch.float64 and res.converged) else ref
        rows.append(row)
        big = n > args.scipy_variants_max_n or dtype == torch.float32
        settings = [("LA on 2I - L'", 2.0, b) for b in (blas_all[-1:] if big else blas_all)]
        if n <= args.scipy_sa_max_n and dtype == torch.float64:
            settings.append(("SA on L'", None, blas_all[-1]))
        v0 = np.random.default_rng(0).standard_normal(n).astype(np.float64 if dtype == torch.float64 else np.float32)
        for setting, shift, blas in settings:
            log(f"  scipy eigsh {setting} {dname}, BLAS threads {blas} ...")

            def solve(f, shift=shift, blas=blas):
                with threadpool_limits(limits=blas, user_api="blas"):
                    return sla.eigsh(_scipy_op(f, n, dtype, shift), k=m, which="LA" if shift else "SA", tol=tol / 2,
                                     v0=v0, ncv=ncv)

            got = _runs(solve, repeats, mv, args.solver_limit)
            out = got.pop("out")
            row = {"solver": "scipy eigsh (ARPACK)", "setting": setting, "dtype": dname, "tol": tol / 2,
                   "blas_threads": blas, **got}
            if out is None:
                row.update(converged=False, status=f"not converged in {args.solver_limit:.0f} s (capped)")
            else:
                mu, vecs = out
                lam = (shift - mu) if shift else mu
                order = np.argsort(lam)
                row.update(converged=True, status="converged", max_residual=residual(vecs[:, order], lam[order]),
                           lam=lam[order].astype(np.float64))
                ref = row["lam"] if (ref is None and dtype == torch.float64 and shift) else ref
            rows.append(row)
    for row in rows:
        row["load_1min_after"] = os.getloadavg()[0]
        lam = row.pop("lam", None)
        if lam is not None:
            row.update(lam_first=float(lam[0]), lam_last=float(lam[-1]))
            if ref is not None:
                row["max_dlam_vs_ref"] = float(np.abs(lam - ref).max())
    return rows, setup


def _s(x) -> str:
    return "-" if x is None else (f"{x:.2f}" if x < 100 else f"{x:,.0f}")


def render(record: dict) -> list[str]:
    lines = results_header("Chunk-graph spectrum on the CPU: lanczos_eigsh vs ARPACK", record)
    lines += [f"Graphs: {record['graphs']}. Both solvers apply the same torch operator `L' = L_sym + 3 N N^T` "
              "(`_deflated_operator`); scipy gets it as a `LinearOperator`, shifted to `2I - L'` with `which=\"LA\"` "
              "(`which=\"SA\"` on `L'` also at small n), `tol/2` (its tolerance is relative to |mu| ~ 2), the same "
              "ncv, fixed v0. \"BLAS thr.\" = threads of the BLAS that ARPACK's own dense work uses. Residual = max_i "
              "||L' v_i - lambda_i v_i|| recomputed in float64; dlam = max abs difference of the eigenvalues to the "
              "float64 Lanczos result.", ""]
    rows = [dict(n=r["n"], **row) for r in record["sizes"] for row in r["rows"]]
    lines += md_table(rows, [("n", "n", ","), ("solver", "solver", ""), ("setting", "setting", ""), ("dtype", "dtype", ""),
                             ("tol", "tol", "g"), ("BLAS thr.", "blas_threads", ""), ("runs", "runs", "d"),
                             ("seconds", lambda r: _s(r["seconds"]), ""), ("in operator [s]", lambda r: _s(r["operator_seconds"]), ""),
                             ("matvecs", "matvecs", ","), ("status", "status", ""), ("max residual", "max_residual", ".2e"),
                             ("max dlam", "max_dlam_vs_ref", ".1e"), ("lambda_1", "lam_first", ".6f"),
                             ("lambda_m", "lam_last", ".6f"), ("load 1 min after", "load_1min_after", ".1f")])
    lines += ["", "| n | graph setup [s] | operator setup float64 [s] | components | isolated nodes | m |",
              "|---:|---:|---:|---:|---:|---:|"]
    for r in record["sizes"]:
        s = r["setup"]
        lines.append(f"| {r['n']:,} | {_s(r['graph_s'])} | {s['operator_setup_s_float64']:.2f} | {s['components']} "
                     f"| {s['isolated']} | {s['m']} |")
    lines += ["", "## Lanczos vs the fastest converged ARPACK run (float64)", "",
              "| n | lanczos [s] | ARPACK best [s] (setting, BLAS threads) | ARPACK / lanczos |", "|---:|---:|---|---:|"]
    for r in record["sizes"]:
        ours = next((x for x in r["rows"] if x["solver"] == "lanczos_eigsh" and x["dtype"] == "float64"), None)
        theirs = [x for x in r["rows"] if x["solver"].startswith("scipy") and x["dtype"] == "float64" and x["converged"]]
        if ours and theirs:
            best = min(theirs, key=lambda x: x["seconds"])
            ratio = f"{best['seconds'] / ours['seconds']:.2f}" if ours["converged"] else f"n/a (lanczos {ours['status']})"
            lines.append(f"| {r['n']:,} | {_s(ours['seconds'])} | {_s(best['seconds'])} ({best['setting']}, "
                         f"{best['blas_threads']}) | {ratio} |")
    if record.get("conclusions"):
        lines += ["", "## Conclusions", "", record["conclusions"].strip()]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--index", default=None, help="use this index's stored graph instead of synthetic ones")
    ap.add_argument("--repeats", type=int, nargs="+", default=[3, 1, 1],
                    help="runs per size (the last value applies to further sizes)")
    ap.add_argument("--threads", type=int, default=int(THREADS), help="torch / BLAS / FAISS threads (default: 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--m", type=int, default=32, help="eigenpairs (default: 32)")
    ap.add_argument("--tol64", type=float, default=1e-6)
    ap.add_argument("--tol32", type=float, default=1e-5)
    ap.add_argument("--f32-max-n", type=int, default=100_000, help="float32 runs only up to this size")
    ap.add_argument("--scipy-blas", type=int, nargs="+", default=None,
                    help="BLAS thread counts for ARPACK's dense work, one scipy run each (default: --threads, 1); "
                         "float32 and sizes above --scipy-variants-max-n run only the last one")
    ap.add_argument("--scipy-variants-max-n", type=int, default=100_000)
    ap.add_argument("--scipy-sa-max-n", type=int, default=10_000, help="scipy which='SA' runs only up to this size")
    ap.add_argument("--solver-limit", type=float, default=600.0, help="wall-clock cap per solver run [s]")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spectrum_cpu"), help="results path without extension")
    ap.add_argument("--render", default=None, metavar="JSON", help="only re-render the Markdown of an earlier JSON")
    ap.add_argument("--conclusions", default=None, metavar="FILE", help="Markdown text added as Conclusions")
    args = ap.parse_args()
    if args.render:
        record = json.loads(Path(args.render).read_text(encoding="utf-8"))
        if args.conclusions:
            record["conclusions"] = Path(args.conclusions).read_text(encoding="utf-8")
        write_results(args.out, render(record), record)
        return
    record = new_record("median of the runs column per size, no warm-up (one solve is long)", packages=("faiss",))
    record.update(sizes=[], graphs=f"the stored graph of {args.index}" if args.index else
                  "fused graphs of `make_synthetic.chunk_corpus` (seed 0, d = 32), `GraphConfig()` defaults")
    sizes = [None] if args.index else args.sizes
    with limit_threads(args.threads):
        for i, n in enumerate(sizes):
            t0 = time.perf_counter()
            w = load_graph(Path(args.index))["weights"] if args.index else synthetic_graph(n, args.seed)
            w = sp.csr_matrix((np.array(w.data), np.array(w.indices), np.array(w.indptr)), shape=w.shape)
            entry = {"n": w.shape[0], "graph_s": time.perf_counter() - t0, "nnz": int(w.nnz)}
            log(f"n = {entry['n']:,}: graph with {w.nnz:,} nonzeros in {entry['graph_s']:.1f} s")
            entry["rows"], entry["setup"] = spectrum_rows(w, args, args.repeats[min(i, len(args.repeats) - 1)])
            record["sizes"].append(entry)
            write_results(args.out, render(finish_record(record)), record)  # partial results survive a stop


if __name__ == "__main__":
    main()
