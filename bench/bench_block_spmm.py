"""Dense ``[B, P, P]`` blocks (``bmm``) or one block-diagonal CSR for the induced candidate
subgraphs? One application ``A x`` and whole heat / PPR calls
(``chebyshev_heat_dense_batched`` / ``personalized_pagerank_dense_batched`` with
``spmm="dense"`` and ``spmm="sparse"``), at the pipeline's operating point P = 200, B = 256.

    python bench/bench_block_spmm.py            # writes bench/results/block_spmm_cpu.md/.json
    python bench/bench_block_spmm.py --quick    # B = 32 (smoke test)

Blocks: ``--per-row`` random symmetric nonzeros per row (default 20 and 6), weights in
[0.05, 1). One application: ``torch.bmm(blocks, x)`` against
``torch.sparse.mm(block_diagonal_csr(blocks), x.reshape(B P, C))`` for C = 1 and 16 signals per
block; bytes: dense B P^2 s + 2 B P C s, CSR the gather model of ``_common``. Heat (t = 1) runs on
``block_laplacian(blocks)``, PPR on the blocks (tol 1e-6) with C = 1. The kernels' ``spmm="auto"``
takes the CSR on the CPU for blocks at most 25% nonzero (``spectrag.kernels.csr.use_sparse_blocks``);
this benchmark is what that rule rests on, and ``bench/gpu_check.py`` times both on a GPU.

Timing: one warm-up, median of ``--repeats`` (one run when the warm-up took over 4 s), torch
threads ``--threads`` (default 1). Results: ``results/block_spmm_cpu.md`` (an earlier run:
``results/roofline_cpu.md``, section 6).
"""

from __future__ import annotations

from _common import ensure_spectrag, pin_threads

THREADS = pin_threads("1", passive=True)

import torch  # noqa: E402

from _common import bench_parser, finish_record, gather_bytes, md_table, median_runs  # noqa: E402
from _common import median_seconds, new_record, quiet_sparse_warnings, results_header  # noqa: E402
from _common import write_results  # noqa: E402

ensure_spectrag()
from spectrag.kernels.csr import block_diagonal_csr  # noqa: E402
from spectrag.kernels.heat import chebyshev_heat_dense_batched  # noqa: E402
from spectrag.kernels.laplacian import block_laplacian  # noqa: E402
from spectrag.kernels.pagerank import personalized_pagerank_dense_batched  # noqa: E402

quiet_sparse_warnings()


def random_blocks(B: int, P: int, per_row: int, g: torch.Generator) -> torch.Tensor:
    """``B`` symmetric ``[P, P]`` blocks with about ``per_row`` nonzeros per row, no diagonal."""
    m = B * P * per_row // 2
    b, i, j = torch.randint(0, B, (m,), generator=g), torch.randint(0, P, (m,), generator=g), torch.randint(0, P, (m,), generator=g)
    w = (0.05 + 0.95 * torch.rand(m, generator=g)) * (i != j)
    blocks = torch.zeros(B, P, P).index_put_((b, i, j), w, accumulate=True)
    return blocks + blocks.transpose(1, 2)  # (B, P, P)


def measure(B: int, P: int, per_row: int, repeats: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    blocks = random_blocks(B, P, per_row, g)
    L = block_laplacian(blocks)
    csr = block_diagonal_csr(blocks)
    nnz = csr.values().numel()
    timed = lambda fn: median_seconds(fn, repeats, slow_s=4.0)[0]  # noqa: E731
    rows = []
    for C in (1, 16):
        x = torch.rand(B, P, C, generator=g)  # (B, P, C)
        xf = x.reshape(B * P, C)
        t_dense, t_csr = timed(lambda: torch.bmm(blocks, x)), timed(lambda: torch.sparse.mm(csr, xf))
        row = dict(B=B, P=P, nnz_per_row=nnz / (B * P), C=C, dense_ms=t_dense * 1e3, csr_ms=t_csr * 1e3,
                   dense_GBps=(B * P * P * 4 + 2 * B * P * C * 4) / t_dense / 1e9,
                   csr_GBps=gather_bytes(nnz, B * P, C, 4, 4) / t_csr / 1e9)
        heat = {s: timed(lambda s=s: chebyshev_heat_dense_batched(L, x, 1.0, spmm=s)) for s in ("dense", "sparse")}
        row.update(heat_dense_ms=heat["dense"] * 1e3, heat_sparse_ms=heat["sparse"] * 1e3,
                   heat_max_abs_diff=float((chebyshev_heat_dense_batched(L, x, 1.0, spmm="dense")
                                            - chebyshev_heat_dense_batched(L, x, 1.0, spmm="sparse")).abs().max()))
        if C == 1:
            restart = x[:, :, 0] + 1e-3
            ppr = {s: timed(lambda s=s: personalized_pagerank_dense_batched(blocks, restart, tol=1e-6, spmm=s))
                   for s in ("dense", "sparse")}
            row.update(ppr_dense_ms=ppr["dense"] * 1e3, ppr_sparse_ms=ppr["sparse"] * 1e3)
        rows.append(row)
        print(f"  {row}", flush=True)
    return rows


def main() -> None:
    ap = bench_parser(__doc__, "block_spmm_cpu", threads=THREADS)
    ap.add_argument("--quick", action="store_true", help="B = 32 (smoke test)")
    ap.add_argument("--batch", type=int, default=256, help="blocks B (default: 256)")
    ap.add_argument("--P", type=int, default=200, help="nodes per block (default: 200)")
    ap.add_argument("--per-row", type=int, nargs="+", default=[20, 6], help="nonzeros per row (default: 20 6)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    B = 32 if args.quick else args.batch
    record = new_record(median_runs(args.repeats))
    rows = [r for k in args.per_row for r in measure(B, args.P, k, args.repeats, args.seed)]
    record.update(rows=rows)
    finish_record(record)
    lines = results_header("Induced subgraphs on the CPU: dense `[B, P, P]` bmm vs one block-diagonal CSR", record)
    lines += ["One application `A x` (dense bytes = B P^2 s + 2 B P C s; CSR bytes = gather model) and whole heat "
              "(t = 1) and PPR (tol 1e-6, C = 1) calls through the kernels' `spmm=\"dense\"` / `spmm=\"sparse\"` (the "
              "sparse path builds its block-diagonal CSR inside each call).", ""]
    lines += md_table(rows, [("B", "B", "d"), ("P", "P", "d"), ("nnz/row", "nnz_per_row", ".1f"), ("C", "C", "d"),
                             ("bmm ms", "dense_ms", ".2f"), ("CSR ms", "csr_ms", ".2f"), ("bmm GB/s", "dense_GBps", ".2f"),
                             ("CSR GB/s", "csr_GBps", ".2f"), ("heat dense ms", "heat_dense_ms", ".1f"),
                             ("heat sparse ms", "heat_sparse_ms", ".1f"), ("heat max abs diff", "heat_max_abs_diff", ".1e"),
                             ("PPR dense ms", "ppr_dense_ms", ".1f"), ("PPR sparse ms", "ppr_sparse_ms", ".1f")])
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
