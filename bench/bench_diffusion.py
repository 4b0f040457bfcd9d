"""Benchmark: batched (SpMM) vs per-column (SpMV loop) heat and personalized-PageRank diffusion.

    python bench/bench_diffusion.py                      # n=200,000, ~10 neighbours, B in {1,64,256}
    python bench/bench_diffusion.py --n 20000 --repeats 1 --device cuda

Graph: ``_common.random_graph(n, degree, unit=True)``: ``n * degree / 2`` uniformly random
undirected edges (self-loops dropped), i.e. about ``degree`` neighbours per node, a 0/1
adjacency.  Heat uses the symmetric normalised Laplacian (``spectrag.graph.spectrum.laplacian_csr``,
every diagonal entry stored: ``nnz(L) = nnz(A) + n``), PPR the row-normalised adjacency (prepared once with ``random_walk_operator``; the preparation is timed separately
and excluded from the per-query figures so that the batched and the loop runs are comparable).

Timings are medians over ``--repeats`` runs after one warm-up.  The loop baseline (B = 64 only)
calls the same kernel once per column with an ``[n, 1]`` block.

Bytes-per-SpMM model (a lower bound on DRAM traffic, SpMM only, ignores the element-wise
vector updates and re-reads of X rows that miss the cache):

    bytes = nnz * (s_val + 8) + n * B_active * s_val * 2

(``s_val`` = 4 for float32 / 8 for float64 values, 8 bytes per int64 column index; X is read
once and the result written once.)  GB/s = sum of bytes over all SpMMs / median wall time.
On a random graph X does not fit in cache and every nonzero gathers a whole row of X, so a
second, more realistic "gather" model is also printed:

    gather bytes = nnz * (s_val + 8) + nnz * B_active * s_val + n * B_active * s_val

For heat the number of SpMMs is ``num_terms - 1``; for PPR it is one per iteration over the
still-active columns (converged columns are dropped), so the X term uses ``sum(column_iters)``.
Prints a table (machine, threads and load average first); nothing is written.
"""

from __future__ import annotations

import argparse
import time

from _common import pin_threads

pin_threads("1", passive=True)  # before torch loads: an idle spinning OpenMP pool slowed 2-thread runs many times

import torch  # noqa: E402
from _common import (  # noqa: E402
    ensure_spectrag,
    machine_info,
    machine_line,
    median_seconds,
    quiet_sparse_warnings,
    random_graph,
    sync,
    torch_csr,
)

ensure_spectrag()
from spectrag.graph.spectrum import laplacian_csr  # noqa: E402
from spectrag.kernels.heat import chebyshev_heat, heat_num_terms  # noqa: E402
from spectrag.kernels.pagerank import personalized_pagerank, random_walk_operator  # noqa: E402

quiet_sparse_warnings()


def graph(n: int, degree: float, seed: int, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The adjacency ``A`` and its ``L_sym`` as torch CSR (int64 indices) on ``device``."""
    W = random_graph(n, degree, seed, unit=True)
    return (torch_csr(W, torch.int64, dtype).to(device), torch_csr(laplacian_csr(W), torch.int64, dtype).to(device))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--degree", type=float, default=10.0)
    ap.add_argument("--batches", type=str, default="1,64,256")
    ap.add_argument("--loop-batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--t", type=float, default=1.0)
    ap.add_argument("--heat-tol", type=float, default=1e-6)
    ap.add_argument("--ppr-tol", type=float, default=1e-8)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    dev = torch.device(args.device)
    s_val = torch.empty((), dtype=dtype).element_size()
    batches = [int(b) for b in args.batches.split(",")]

    t0 = time.perf_counter()
    A, L = graph(args.n, args.degree, args.seed, dev, dtype)
    sync(dev)
    t_graph = time.perf_counter() - t0
    n = args.n
    nnz_A, nnz_L = A.values().numel(), L.values().numel()
    t0 = time.perf_counter()
    op = random_walk_operator(A, dtype=dtype)
    sync(dev)
    t_prep = time.perf_counter() - t0
    K = heat_num_terms(args.t, args.heat_tol) - 1  # SpMMs per heat call

    print(machine_line(machine_info(dev)))
    print(f"device={dev} dtype={args.dtype}; runs: median of {args.repeats} after one warm-up")
    print(f"graph: n={n:,} nnz(A)={nnz_A:,} ({nnz_A / n:.2f}/node) nnz(L)={nnz_L:,}; build {t_graph:.2f}s, "
          f"PPR operator prep {t_prep:.2f}s (excluded below)")
    print(f"heat: t={args.t} tol={args.heat_tol} -> {K + 1} Chebyshev terms ({K} SpMMs); "
          f"PPR: damping=0.85 tol={args.ppr_tol} (L1 change < n*tol = {n * args.ppr_tol:.2e})")
    print(f"bytes/SpMM model: nnz*({s_val}+8) + n*B*{s_val}*2   "
          f"(gather model: nnz*({s_val}+8) + nnz*B*{s_val} + n*B*{s_val})")
    print()
    hdr = f"{'kernel':<6} {'mode':<7} {'B':>4} {'median s':>10} {'queries/s':>11} {'SpMMs':>6} {'MB/SpMM':>9} {'GB/s':>7} {'gath GB/s':>10}"
    print(hdr)
    print("-" * len(hdr))

    g = torch.Generator().manual_seed(args.seed + 1)
    qps: dict[tuple[str, str, int], float] = {}

    def heat_bytes(B):  # (simple model, gather model) over one call
        return (K * (nnz_L * (s_val + 8) + n * B * s_val * 2),
                K * (nnz_L * (s_val + 8) + nnz_L * B * s_val + n * B * s_val))

    def ppr_bytes(res_list):
        simple = gather = 0
        for r in res_list:
            col_it = int(r.column_iters.sum())
            simple += r.n_iter * nnz_A * (s_val + 8) + col_it * n * s_val * 2
            gather += r.n_iter * nnz_A * (s_val + 8) + col_it * (nnz_A + n) * s_val
        return simple, gather

    def row(kernel, mode, B, sec, n_spmm, bytes_total, mb_per):
        q = B / sec
        qps[(kernel, mode, B)] = q
        print(f"{kernel:<6} {mode:<7} {B:>4} {sec:>10.4f} {q:>11.1f} {n_spmm:>6} {mb_per:>9.1f} "
              f"{bytes_total[0] / sec / 1e9:>7.2f} {bytes_total[1] / sec / 1e9:>10.2f}")

    for B in batches:
        X = torch.randn(n, B, generator=g).to(dtype=dtype, device=dev)
        sec, _ = median_seconds(lambda: chebyshev_heat(L, X, args.t, tol=args.heat_tol), args.repeats, device=dev)
        row("heat", "batched", B, sec, K, heat_bytes(B), (nnz_L * (s_val + 8) + n * B * s_val * 2) / 1e6)
        if B == args.loop_batch:
            cols = [X[:, b : b + 1].contiguous() for b in range(B)]
            sec, _ = median_seconds(lambda: [chebyshev_heat(L, c, args.t, tol=args.heat_tol) for c in cols], args.repeats, device=dev)
            row("heat", "loop", B, sec, K * B, tuple(v * B for v in heat_bytes(1)), (nnz_L * (s_val + 8) + n * s_val * 2) / 1e6)
        X = None  # freed before the next B

    for B in batches:
        seeds = torch.randint(0, n, (B,), generator=g)
        X = torch.zeros(n, B, dtype=dtype)
        X[seeds, torch.arange(B)] = 1.0
        X = X.to(dev)
        sec, res = median_seconds(lambda: personalized_pagerank(op, X, tol=args.ppr_tol), args.repeats, device=dev)
        row("ppr", "batched", B, sec, res.n_iter, ppr_bytes([res]), (nnz_A * (s_val + 8) + n * B * s_val * 2) / 1e6)
        if B == args.loop_batch:
            cols = [X[:, b : b + 1].contiguous() for b in range(B)]
            sec, rs = median_seconds(lambda: [personalized_pagerank(op, c, tol=args.ppr_tol) for c in cols], args.repeats, device=dev)
            row("ppr", "loop", B, sec, sum(r.n_iter for r in rs), ppr_bytes(rs), (nnz_A * (s_val + 8) + n * s_val * 2) / 1e6)
        X = None  # freed before the next B

    print()
    LB = args.loop_batch
    for kernel in ("heat", "ppr"):
        if (kernel, "batched", LB) in qps and (kernel, "loop", LB) in qps:
            ratio = qps[(kernel, "batched", LB)] / qps[(kernel, "loop", LB)]
            print(f"{kernel}: batched/loop throughput ratio at B={LB}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
