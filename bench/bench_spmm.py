"""Which CSR layout makes ``Y = A X`` fastest on this CPU, and how far is it from the copy
bandwidth? Index width (int32 / int64), X row- or column-major, torch's ``reduce="sum"`` kernel
(what ``torch_geometric.utils.spmm`` calls with a reduction) and scipy, on random graphs.

    python bench/bench_spmm.py             # n = 1e5 and 1e6; writes bench/results/spmm_cpu.md/.json
    python bench/bench_spmm.py --quick     # n = 2e4 and 1e5 (smoke test)

Graphs: :func:`_common.random_graph`, about 20 nonzeros per row at uniformly random columns
(the worst case for caches). ``X [n, B]`` float32, ``B`` in 1, 16, 64, 256; at the larger ``n``
only the cheaper variants run at B >= 64. Bytes: the gather and compulsory models of
``_common`` (stated in the results); the ceiling is the copy bandwidth measured before and
after the run (:func:`_common.between_copies`).

Timing: inputs built outside the timed region, one warm-up, median of ``--repeats`` (one run
when the warm-up took over 4 s); torch threads ``--threads`` (default 1: the machine is shared;
``bench_threads.py`` compares 2). Results: ``results/spmm_cpu.md`` (the figures of an earlier
run are in ``results/roofline_cpu.md``, section 2).
"""

from __future__ import annotations

from _common import pin_threads

THREADS = pin_threads("1", passive=True)

import torch  # noqa: E402

from _common import BYTES_MODEL, bench_parser, between_copies, ceiling_text, finish_record  # noqa: E402
from _common import md_table, median_runs, new_record, random_graph, results_header, spmm_columns  # noqa: E402
from _common import spmm_rows, write_results  # noqa: E402

ALL = ["torch i32", "torch i64", "torch i32 colmajor", "torch i64 reduce-sum", "scipy"]
BATCHES = (1, 16, 64, 256)


def measure(small_n: int, big_n: int, repeats: int, seed: int, ceiling: float) -> list[dict]:
    rows = []
    A = random_graph(small_n, 20, seed)
    for B in BATCHES:
        rows += spmm_rows(A, B, ALL, repeats, "random", seed + B, ceiling=ceiling)
    A = random_graph(big_n, 20, seed + 1)
    for B in BATCHES:  # the slow variants only where they finish in minutes
        variants = ["torch i32", "torch i64", "scipy"] if B <= 16 else ["torch i32"]
        rows += spmm_rows(A, B, variants, repeats, "random", seed + B, ceiling=ceiling)
    return rows


def main() -> None:
    ap = bench_parser(__doc__, "spmm_cpu", threads=THREADS)
    ap.add_argument("--quick", action="store_true", help="n = 2e4 and 1e5 (smoke test)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    small_n, big_n = (20_000, 100_000) if args.quick else (100_000, 1_000_000)
    record = new_record(median_runs(args.repeats))
    rows, copies = between_copies(lambda ceiling: measure(small_n, big_n, args.repeats, args.seed, ceiling))
    record.update(copies, rows=rows)
    finish_record(record)
    lines = results_header("CSR SpMM `Y = A X` on random graphs (CPU): layout, index width, scipy", record)
    lines += [ceiling_text(copies), "", BYTES_MODEL, "",
              "Graphs: ~20 nonzeros per row at uniformly random columns (`_common.random_graph`); X float32, row-major "
              "unless the variant says colmajor; rel_err = max relative difference to the first variant of its row group.", ""]
    lines += md_table(rows, spmm_columns(copies["ceiling_GBps"]) + [("rel_err", "rel_err", ".1e")])
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
