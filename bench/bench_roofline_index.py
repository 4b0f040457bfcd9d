"""What fraction of the copy bandwidth do the diffusion kernels reach on a built index's own
chunk graph, in its three node orders?

    python bench/bench_roofline_index.py --index /tmp/spectrag-synth-1e6    # a 10^6-chunk index: minutes

``bench_diffusion_roofline.py`` measures synthetic extremes (uniformly random graphs, banded
locality graphs); this runs the same rows (``chebyshev_heat`` t = 1 with int32 / int64
operators, ``personalized_pagerank`` from one-hot restarts, B = ``--batch`` columns) on the
fused chunk graph ``W`` of an index (``spectrag.graph.build.load_graph``; built by
``bench/bench_scale.py`` or ``spectrag index``), with the nodes

* in chunk order (as stored),
* in the stored reverse Cuthill-McKee order (``graph/rcm_order.npy``),
* sorted by spectral k-means cluster (``graph/clusters.npy``).

Bytes, FLOPs and the ceiling as in ``bench_diffusion_roofline.py``. Timing: one warm-up, median
of ``--repeats``, one torch thread. Results: ``results/roofline_index_cpu.md`` / ``.json``.
"""

from __future__ import annotations

from pathlib import Path

from _common import ensure_spectrag, pin_threads

pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

from _common import bench_parser, between_copies, finish_record, median_runs, new_record, permute  # noqa: E402
from bench_diffusion_roofline import diffusion_rows, write_report  # noqa: E402

ensure_spectrag()
from spectrag.graph.build import load_graph  # noqa: E402


def orders(graph: dict) -> dict[str, np.ndarray | None]:
    """Node orders to run: as stored, the stored RCM order, sorted by k-means cluster."""
    return {"chunk order": None, "RCM order": np.asarray(graph["rcm_order"]),
            "cluster order": np.argsort(np.asarray(graph["clusters"]), kind="stable")}


def main() -> None:
    ap = bench_parser(__doc__, "roofline_index_cpu")
    ap.add_argument("--index", required=True, help="an index folder built with the chunk graph")
    ap.add_argument("--batch", type=int, default=16, help="columns B (default: 16)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if not (Path(args.index) / "graph" / "weights.indptr.npy").is_file():
        raise SystemExit(f"{args.index}: no graph/weights.indptr.npy (an index built with the chunk graph is needed)")
    graph = load_graph(Path(args.index))
    w = graph["weights"]
    W = sp.csr_matrix((np.array(w.data), np.array(w.indices), np.array(w.indptr)), shape=w.shape)  # off the maps
    record = new_record(median_runs(args.repeats))

    def measure(ceiling: float) -> list[dict]:
        rows = []
        for name, order in orders(graph).items():
            A = W if order is None else permute(W, order)
            rows += diffusion_rows(A, name, [args.batch], args.repeats, args.seed, ceiling=ceiling)
        return rows

    rows, copies = between_copies(measure)
    record.update(copies, rows=rows, index=str(args.index), n=W.shape[0], nnz=W.nnz)
    write_report(args.out, "Diffusion kernels on an index's own chunk graph, three node orders (CPU)",
                 finish_record(record),
                 [f"Graph: {args.index}, n = {W.shape[0]:,}, nnz = {W.nnz:,} (fused W; the heat rows use L_sym, the "
                  f"PPR rows the random-walk operator); B = {args.batch} columns. Bytes as in "
                  "`bench_diffusion_roofline.py`: *gather* counts a read of X's row for every nonzero (the goal's "
                  "model), *compulsory* X read once per SpMM.", ""])


if __name__ == "__main__":
    main()
