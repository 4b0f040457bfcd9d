"""Benchmark: ``spectrag.kernels.lanczos.lanczos_eigsh`` vs ``scipy.sparse.linalg.eigsh``.

Problem: the k=32 smallest eigenpairs of the normalized Laplacian of a random sparse graph
(``_common.random_graph``, 0/1 weights; n=100,000 nodes, ~10 neighbours per node), in float32
and float64, on the CPU.
scipy runs ARPACK on ``2 I - L`` with ``which="LA"`` (the same eigenvectors; eigenvalues are
mapped back with ``2 - mu``), which converges much faster than ``which="SA"`` on ``L``.
Each timing is the median of ``--repeats`` runs in the same process. Both solvers run with
``--threads`` BLAS/OpenMP threads (default 1: on a small shared machine, more threads than
free cores makes torch's OpenMP kernels much slower). "matvecs" counts operator applications
(ours includes the explicit residual checks and the probe cycle).

Usage: ``python bench/bench_lanczos.py [--n 100000] [--k 32] [--repeats 3]`` (prints a table,
machine, threads and load average first; ``bench_spectrum.py`` asks the same question on chunk
graphs of 10^4 .. 10^6 nodes and writes results).
"""

from __future__ import annotations

import argparse

# BLAS thread counts must be fixed before numpy/scipy/torch load their BLAS libraries.
from _common import ensure_spectrag, pin_threads

_THREADS = pin_threads("1")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as sla  # noqa: E402
import torch  # noqa: E402

from _common import machine_info, machine_line, median_seconds, quiet_sparse_warnings, random_graph, torch_csr  # noqa: E402

ensure_spectrag()
from spectrag.kernels.lanczos import lanczos_eigsh  # noqa: E402
from spectrag.kernels.laplacian import normalized_laplacian  # noqa: E402

quiet_sparse_warnings()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--degree", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tol64", type=float, default=1e-6)
    ap.add_argument("--tol32", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads for both solvers")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    W = random_graph(args.n, args.degree, 0, unit=True)
    print(machine_line(machine_info()))
    print(
        f"graph: n={args.n}, nnz(W)={W.nnz} (mean degree {W.nnz / args.n:.2f}), k={args.k}, "
        f"torch threads={torch.get_num_threads()}, repeats={args.repeats} (median)"
    )
    rows = []
    for dtype, tol in ((torch.float64, args.tol64), (torch.float32, args.tol32)):
        L = normalized_laplacian(torch_csr(W, torch.int64, dtype))
        t_ours, res = median_seconds(lambda: lanczos_eigsh(L, args.k, which="SA", tol=tol), args.repeats, warmup=False)

        crow, col, val = (t.numpy() for t in (L.crow_indices(), L.col_indices(), L.values()))
        L_sp = sp.csr_matrix((val, col, crow), shape=L.shape)
        shifted = (2.0 * sp.identity(args.n, dtype=L_sp.dtype, format="csr") - L_sp).tocsr()
        v0 = np.random.default_rng(0).standard_normal(args.n).astype(L_sp.dtype)
        n_sp = [0]

        def matvec(x, M=shifted):
            n_sp[0] += 1
            return M @ x

        op = sla.LinearOperator(shifted.shape, matvec=matvec, dtype=shifted.dtype)
        # scipy's tol is relative to |mu| (mu ~ 1.4..2 here), ours is tol * max(1, |lambda|).
        t_sp, (mu, _) = median_seconds(
            lambda: sla.eigsh(op, k=args.k, which="LA", tol=tol, v0=v0), args.repeats, warmup=False
        )
        lam_sp = np.sort(2.0 - mu)
        lam = res.eigenvalues.double().numpy()
        rows.append(
            (
                str(dtype).replace("torch.", ""),
                tol,
                t_ours,
                res.n_matvec,
                res.n_iter,
                float(res.residual_norms.max()),
                t_sp,
                n_sp[0] // args.repeats,
                float(np.abs(lam - lam_sp).max()),
                lam[0],
                lam[-1],
            )
        )

    head = (
        f"{'dtype':8} {'tol':>7} {'ours [s]':>9} {'matvecs':>8} {'cycles':>6} {'max resid':>10} "
        f"{'scipy [s]':>10} {'matvecs':>8} {'speedup':>8} {'max|dlam|':>10} {'lam_1':>9} {'lam_k':>9}"
    )
    print(head)
    print("-" * len(head))
    for d, tol, t, mv, it, r, ts, mv_sp, dl, l0, lk in rows:
        print(
            f"{d:8} {tol:7.0e} {t:9.3f} {mv:8d} {it:6d} {r:10.2e} {ts:10.3f} {mv_sp:8d} {ts / t:8.2f} "
            f"{dl:10.2e} {l0:9.6f} {lk:9.6f}"
        )


if __name__ == "__main__":
    main()
