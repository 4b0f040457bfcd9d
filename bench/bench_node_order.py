"""How much does the node order change a CSR SpMM? A graph with locality (every node linked to
nodes within +-100 positions) randomly relabelled, then reordered by reverse Cuthill-McKee.

    python bench/bench_node_order.py            # n = 1e6; writes bench/results/node_order_cpu.md/.json
    python bench/bench_node_order.py --quick    # n = 1e5 (smoke test)

The relabelled graph hides its locality (a row's columns are anywhere in X), RCM
(``scipy.sparse.csgraph.reverse_cuthill_mckee``, timed) brings it back; the mean ``|i - j|``
over the nonzeros says how far a row's reads of X are from the row. Both are timed with torch
CSR (int32) and, on the RCM order, scipy, for ``X [n, B]`` with B in 1, 16, 64; bytes and
ceiling as in ``bench_spmm.py``. A built index stores an RCM order (``graph/rcm_order.npy``):
``bench_roofline_index.py`` runs the diffusion kernels on a real chunk graph in its orders.

Timing: one warm-up, median of ``--repeats`` (one run when the warm-up took over 4 s), torch
threads ``--threads`` (default 1). Results: ``results/node_order_cpu.md`` (an earlier run's
figures: ``results/roofline_cpu.md``, section 3).
"""

from __future__ import annotations

import time

from _common import pin_threads

THREADS = pin_threads("1", passive=True)

import torch  # noqa: E402
from scipy.sparse.csgraph import reverse_cuthill_mckee  # noqa: E402

from _common import BYTES_MODEL, bench_parser, between_copies, ceiling_text, finish_record  # noqa: E402
from _common import locality_graph, md_table, mean_band, median_runs, new_record, permute  # noqa: E402
from _common import results_header, spmm_columns, spmm_rows, write_results  # noqa: E402


def measure(n: int, repeats: int, seed: int, ceiling: float) -> dict:
    """SpMM rows on the relabelled graph and on its RCM order, and the order's facts."""
    A_perm = locality_graph(n, seed, order="random")
    t0 = time.perf_counter()
    rcm = reverse_cuthill_mckee(A_perm, symmetric_mode=True)
    t_rcm = time.perf_counter() - t0
    A_rcm = permute(A_perm, rcm)
    order = dict(n=n, nnz=A_rcm.nnz, rcm_seconds=t_rcm, band_permuted=mean_band(A_perm), band_rcm=mean_band(A_rcm))
    print(f"  RCM {t_rcm:.1f} s; mean |i-j| permuted {order['band_permuted']:,.0f} -> RCM {order['band_rcm']:,.0f}",
          flush=True)
    rows = []
    for B in (1, 16, 64):
        rows += spmm_rows(A_perm, B, ["torch i32"], repeats, "locality, permuted", seed + B, ceiling=ceiling)
        rows += spmm_rows(A_rcm, B, ["torch i32", "scipy"], repeats, "locality, RCM", seed + B, ceiling=ceiling)
    return {"order": order, "rows": rows}


def speedups(rows: list[dict]) -> str:
    """RCM speed-up of torch int32 per B."""
    ms = {(r["B"], r["graph"]): r["ms"] for r in rows if r["variant"] == "torch i32"}
    return ", ".join(f"B = {B}: {ms[(B, 'locality, permuted')] / ms[(B, 'locality, RCM')]:.1f}x"
                     for B in sorted({b for b, _ in ms}) if (B, "locality, RCM") in ms)


def main() -> None:
    ap = bench_parser(__doc__, "node_order_cpu", threads=THREADS)
    ap.add_argument("--quick", action="store_true", help="n = 1e5 (smoke test)")
    ap.add_argument("--n", type=int, default=None, help="nodes (default: 1e6, or 1e5 with --quick)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n = args.n or (100_000 if args.quick else 1_000_000)
    record = new_record(median_runs(args.repeats))
    got, copies = between_copies(lambda ceiling: measure(n, args.repeats, args.seed + 2, ceiling))
    record.update(copies, **got)
    finish_record(record)
    o = got["order"]
    lines = results_header("Node order and CSR SpMM (CPU): a locality graph relabelled at random vs RCM", record)
    lines += [ceiling_text(copies), "", BYTES_MODEL, "",
              f"Graph: n = {o['n']:,}, nnz = {o['nnz']:,}, each node linked to 10 nodes within +-100 positions "
              f"(`_common.locality_graph`), relabelled at random; `reverse_cuthill_mckee` took {o['rcm_seconds']:.1f} s; "
              f"mean |i - j| over the nonzeros {o['band_permuted']:,.0f} (relabelled) -> {o['band_rcm']:,.0f} (RCM).", ""]
    lines += md_table(got["rows"], spmm_columns(copies["ceiling_GBps"]))
    lines += ["", f"RCM speed-up of torch int32 SpMM: {speedups(got['rows'])}."]
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
