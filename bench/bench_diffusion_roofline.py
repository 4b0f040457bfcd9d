"""What fraction of the copy bandwidth do our diffusion kernels reach on the CPU? Whole-graph
heat (``spectrag.kernels.heat.chebyshev_heat``, t = 1) and personalized PageRank
(``spectrag.kernels.pagerank.personalized_pagerank``) on a random graph and on a locality graph
in reverse Cuthill-McKee order: bytes, FLOPs, GB/s and the ratio to the copy ceiling.

    python bench/bench_diffusion_roofline.py          # writes bench/results/diffusion_roofline_cpu.md/.json
    python bench/bench_diffusion_roofline.py --quick  # n = 2e4 / 1e5 (smoke test)

Graphs (``_common``): ``random_graph`` (~20 nonzeros per row, uniformly random columns; n = 1e5,
B = 16 and 64) and ``locality_graph(order="rcm")`` (n = 1e6, B = 16). Heat runs on
``L_sym`` (``spectrag.graph.spectrum.laplacian_csr``) with int32 and int64 indices, PPR on the
operator of ``random_walk_operator`` (int32) from one-hot restarts, tol 1e-8.

Bytes per call, the gather model (the goal's measure: "SpMM diffusion >= 50% of the copy
bandwidth"), ``s`` = 4, ``i`` = index bytes; K = SpMMs of the heat call::

    heat  K [CSR + nnz B s + 8 n B s]   fused addmm (gather + read/write of its output), sub_, add_
    PPR   iters CSR + sum over columns of iters (nnz + 8 n) s

and the compulsory model beside them (X read once per SpMM). The ceiling is the copy bandwidth
before and after the run (``_common.between_copies``). Timing: one warm-up, median of
``--repeats`` (one run when the warm-up took over 4 s), torch threads ``--threads`` (default 1).
Results: ``results/diffusion_roofline_cpu.md`` (an earlier run: ``results/roofline_cpu.md``,
section 4). ``bench_roofline_index.py`` runs the same rows on a built index's chunk graph.
"""

from __future__ import annotations

from _common import ensure_spectrag, pin_threads

THREADS = pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import bench_parser, between_copies, ceiling_text, csr_bytes, finish_record  # noqa: E402
from _common import locality_graph, md_table, median_runs, median_seconds, new_record  # noqa: E402
from _common import quiet_sparse_warnings, random_graph, results_header, torch_csr, write_results  # noqa: E402

ensure_spectrag()
from spectrag.graph.spectrum import laplacian_csr  # noqa: E402
from spectrag.kernels.heat import chebyshev_heat, heat_coefficients  # noqa: E402
from spectrag.kernels.pagerank import personalized_pagerank, random_walk_operator  # noqa: E402

quiet_sparse_warnings()


def heat_bytes(K: int, nnz: int, n: int, B: int, s: int, i: int) -> tuple[int, int, int]:
    """(gather bytes, compulsory bytes, FLOPs) of one ``chebyshev_heat`` call with K SpMMs: per
    term one fused addmm (SpMM + read and write of its output), one sub_ and one add_ (3 n B
    values each)."""
    vectors = 2 * n * B * s + 6 * n * B * s
    gather = csr_bytes(nnz, n, s, i) + nnz * B * s + vectors
    compulsory = csr_bytes(nnz, n, s, i) + 2 * n * B * s + vectors
    return K * gather, K * compulsory, K * (2 * nnz * B + 6 * n * B)


def ppr_bytes(column_iters: int, iters: int, nnz: int, n: int, s: int, i: int) -> tuple[int, int, int]:
    """(gather bytes, compulsory bytes, FLOPs) of ``personalized_pagerank``: per iteration the
    CSR once, per active column the gathers, ``p * scale`` into a buffer, the addmm's read/write
    of it, ``x - buf`` and its L1 norm (8 n values)."""
    return (iters * csr_bytes(nnz, n, s, i) + column_iters * (nnz + 8 * n) * s,
            iters * csr_bytes(nnz, n, s, i) + column_iters * 8 * n * s, column_iters * (2 * nnz + 6 * n))


def _row(graph: str, n: int, nnz: int, B: int, kernel: str, spmms: int, sec: float, model: tuple, ceiling: float) -> dict:
    gather, compulsory, flops = model
    row = dict(graph=graph, n=n, nnz=nnz, B=B, kernel=kernel, spmms=spmms, ms=sec * 1e3, GFLOPs=flops / sec / 1e9,
               GBps=gather / sec / 1e9, compulsory_GBps=compulsory / sec / 1e9)
    print(f"  {graph:<22} B={B:>4} {kernel:<24} {spmms:>3} SpMMs {sec * 1e3:9.1f} ms  {row['GBps']:5.2f} GB/s "
          f"({row['GBps'] / ceiling:4.0%})", flush=True)
    return row


def diffusion_rows(A, graph: str, batches: list[int], repeats: int, seed: int, *, ceiling: float) -> list[dict]:
    """Heat (int32 and int64 operator) and PPR rows for each ``B`` on the graph ``A`` (scipy
    CSR ``[n, n]``); ``ceiling`` only scales the printed percentages."""
    n = A.shape[0]
    L = laplacian_csr(A).astype(np.float32)
    L32, L64 = torch_csr(L, torch.int32), torch_csr(L, torch.int64)
    op = random_walk_operator(torch_csr(A, torch.int64), dtype=torch.float32)  # int32 PT (csr_int32)
    K = len(heat_coefficients(1.0)) - 1
    g = torch.Generator().manual_seed(seed)
    rows = []
    for B in batches:
        X = torch.rand(n, B, generator=g)  # (n, B)
        for kernel, Lop, ib in (("heat, int32 operator", L32, 4), ("heat, int64 operator", L64, 8)):
            sec = median_seconds(lambda: chebyshev_heat(Lop, X, 1.0), repeats, slow_s=4.0)[0]
            gather, compulsory, flops = heat_bytes(K, L.nnz, n, B, 4, ib)
            if ib == 8:  # the kernel converts int64 indices to int32 first: one more pass
                gather, compulsory = gather + L.nnz * 12 + (n + 1) * 12, compulsory + L.nnz * 12 + (n + 1) * 12
            rows.append(_row(graph, n, L.nnz, B, kernel, K, sec, (gather, compulsory, flops), ceiling))
        R = torch.zeros(n, B)  # one-hot restarts
        R[torch.randint(0, n, (B,), generator=g), torch.arange(B)] = 1.0
        sec, res = median_seconds(lambda: personalized_pagerank(op, R, tol=1e-8), repeats, slow_s=4.0)
        nnz = op.PT.values().numel()
        row = _row(graph, n, nnz, B, "ppr, int32 operator", res.n_iter, sec,
                   ppr_bytes(int(res.column_iters.sum()), res.n_iter, nnz, n, 4, 4), ceiling)
        rows.append(row)
    return rows


def diffusion_columns(ceiling: float) -> list[tuple]:
    """The :func:`_common.md_table` columns of :func:`diffusion_rows`, ratios against ``ceiling``."""
    return [("graph", "graph", ""), ("n", "n", ","), ("B", "B", "d"), ("kernel", "kernel", ""), ("SpMMs", "spmms", "d"),
            ("ms", "ms", ".1f"), ("GFLOP/s", "GFLOPs", ".2f"), ("gather GB/s", "GBps", ".2f"),
            ("gather / ceiling", lambda r: r["GBps"] / ceiling, ".0%"), ("compulsory GB/s", "compulsory_GBps", ".2f"),
            ("compulsory / ceiling", lambda r: r["compulsory_GBps"] / ceiling, ".0%")]


def goal_lines(rows: list[dict], ceiling: float) -> list[str]:
    """One line per row: is the gather-model ratio >= 50%?"""
    out = ["## Goal: SpMM diffusion >= 50% of the copy bandwidth (gather model)", ""]
    for r in rows:
        ratio = r["GBps"] / ceiling
        out.append(f"- {r['kernel']} on {r['graph']}, n = {r['n']:,}, B = {r['B']}: {ratio:.0%} -- "
                   + ("met" if ratio >= 0.5 else "NOT met"))
    return out


def write_report(out: str, title: str, record: dict, intro: list[str]) -> None:
    """The results file of :func:`diffusion_rows` measured between two copies: header, ``intro``,
    the ceiling, the table and the goal lines."""
    ceiling = record["ceiling_GBps"]
    lines = results_header(title, record) + intro + [ceiling_text(record), ""]
    lines += md_table(record["rows"], diffusion_columns(ceiling)) + [""] + goal_lines(record["rows"], ceiling)
    write_results(out, lines, record)


def main() -> None:
    ap = bench_parser(__doc__, "diffusion_roofline_cpu", threads=THREADS)
    ap.add_argument("--quick", action="store_true", help="n = 2e4 / 1e5 (smoke test)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    small_n, big_n = (20_000, 100_000) if args.quick else (100_000, 1_000_000)
    record = new_record(median_runs(args.repeats))

    def measure(ceiling: float) -> list[dict]:
        rows = diffusion_rows(random_graph(small_n, 20, args.seed), "random", [16, 64], args.repeats, args.seed,
                              ceiling=ceiling)
        return rows + diffusion_rows(locality_graph(big_n, args.seed + 2, order="rcm"), "locality, RCM", [16],
                                     args.repeats, args.seed, ceiling=ceiling)

    rows, copies = between_copies(measure)
    record.update(copies, rows=rows)
    write_report(args.out, "Diffusion kernels against the copy bandwidth (CPU): heat and PPR on whole graphs",
                 finish_record(record),
                 ["Bytes (gather model): heat K [CSR + nnz B s + 8 n B s] (the fused addmm reads and writes its output, "
                  "sub_ and add_ move 3 n B values each); PPR iters CSR + sum over columns of iters (nnz + 8 n) s; the "
                  "compulsory model reads X once per SpMM. The int64 heat row passes an int64 CSR, which the kernel "
                  "converts to int32 on each call (counted). Heat t = 1; PPR from one-hot restarts, tol 1e-8.", ""])


if __name__ == "__main__":
    main()
