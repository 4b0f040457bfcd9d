"""Does a second thread speed up the copy and a CSR SpMM on this (shared) CPU? The copy
bandwidth and ``Y = A X`` (torch CSR, int32, B = 16) with 1 and 2 torch threads.

    python bench/bench_threads.py            # writes bench/results/threads_cpu.md/.json
    python bench/bench_threads.py --quick    # n = 2e4 / 1e5 (smoke test)

Graphs (``_common``): ``random_graph`` (n = 1e5, ~20 nonzeros per row at random columns) and
``locality_graph(order="rcm")`` (n = 1e6, banded after reverse Cuthill-McKee). The copy moves
256 MiB (median of 5). OpenMP workers wait passively (``OMP_WAIT_POLICY=PASSIVE``, set by
``_common.pin_threads``): spinning workers on a loaded machine made 2-thread products slower.
The load average at the start and the end is in the results, as it decides what a second
thread can get.

Timing: one warm-up, median of ``--repeats``. Results: ``results/threads_cpu.md`` (an earlier
run: ``results/roofline_cpu.md``, section 7).
"""

from __future__ import annotations

from _common import pin_threads

pin_threads("2", passive=True)  # the OpenMP pool must allow 2; torch.set_num_threads picks 1 or 2

import torch  # noqa: E402

from _common import bench_parser, copy_bandwidth, finish_record, gather_bytes, locality_graph  # noqa: E402
from _common import md_table, median_seconds, new_record, quiet_sparse_warnings, random_graph  # noqa: E402
from _common import results_header, torch_csr, write_results  # noqa: E402

quiet_sparse_warnings()


def measure(graphs: dict, repeats: int) -> list[dict]:
    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        row = dict(threads=threads, copy_GBps=copy_bandwidth(mib=256, repeats=5)["torch_GBps"])
        for name, A in graphs.items():
            M, X = torch_csr(A), torch.randn(A.shape[0], 16)  # X (n, 16)
            sec = median_seconds(lambda: torch.sparse.mm(M, X), repeats, slow_s=4.0)[0]
            row[f"{name} ms"] = sec * 1e3
            row[f"{name} gather GB/s"] = gather_bytes(A.nnz, A.shape[0], 16, 4, 4) / sec / 1e9
        rows.append(row)
        print("  " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    return rows


def main() -> None:
    ap = bench_parser(__doc__, "threads_cpu")
    ap.add_argument("--quick", action="store_true", help="n = 2e4 / 1e5 (smoke test)")
    args = ap.parse_args()
    small_n, big_n = (20_000, 100_000) if args.quick else (100_000, 1_000_000)
    record = new_record(f"median of {args.repeats} after one warm-up; copy: median of 5")
    graphs = {f"random n={small_n:,}": random_graph(small_n, 20, args.seed),
              f"RCM locality n={big_n:,}": locality_graph(big_n, args.seed + 2, order="rcm")}
    record.update(rows=measure(graphs, args.repeats))
    finish_record(record)
    lines = results_header("Threads on the CPU: copy bandwidth and CSR SpMM (B = 16) with 1 and 2 threads", record)
    lines += ["The machine line gives the threads the run started with; each row sets torch's intra-op threads.", ""]
    lines += md_table(record["rows"], [(k, k, "d" if k == "threads" else ".2f") for k in record["rows"][0]])
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
