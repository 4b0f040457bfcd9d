"""Can the diffusion state be float16 or bfloat16? Which half-precision sparse products torch
has on this CPU, how accurate a half-precision heat / PPR *state* is against float32, and how
fast the half-precision paths that do run are.

    python bench/bench_half_precision.py           # n = 1e5; writes bench/results/half_precision_cpu.md/.json
    python bench/bench_half_precision.py --quick   # n = 2e4 (smoke test)

1. Support: each product (torch CSR / COO SpMM, CSR ``reduce="sum"``,
   ``spectrag.kernels.edge_propagate``, dense ``bmm``) called in float16 and bfloat16 on a
   small graph; what torch answers is recorded.
2. Accuracy: the Chebyshev heat recurrence (t = 1, all its terms) and 30 PPR power iterations
   with every state vector rounded to the dtype after each step and the operator in float32,
   which is what a GPU half-precision SpMM with float32 accumulation does; max relative error
   and top-20 overlap against the float32 state, on a random graph (``_common.random_graph``,
   ~20 nonzeros per row), B = 16.
3. Speed: CSR (MKL, float32 only), CSR ``reduce="sum"``, ``edge_propagate`` and a
   ``[256, 200, 200] x [256, 200, 16]`` ``bmm``, per dtype.

``bench/gpu_check.py`` measures the GPU's half-precision SpMM. Timing: one warm-up, median of
``--repeats`` (one run when the warm-up took over 4 s), torch threads ``--threads`` (default 1).
Results: ``results/half_precision_cpu.md`` (an earlier run: ``results/roofline_cpu.md``,
section 5).
"""

from __future__ import annotations

from _common import ensure_spectrag, pin_threads

THREADS = pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import bench_parser, finish_record, md_table, median_seconds, new_record  # noqa: E402
from _common import quiet_sparse_warnings, random_graph, results_header, torch_csr, write_results  # noqa: E402

ensure_spectrag()
from spectrag.graph.spectrum import laplacian_csr  # noqa: E402
from spectrag.kernels.edge_propagate import edge_propagate  # noqa: E402
from spectrag.kernels.heat import chebyshev_heat, heat_coefficients  # noqa: E402
from spectrag.kernels.pagerank import random_walk_operator  # noqa: E402

quiet_sparse_warnings()
HALF = (torch.float16, torch.bfloat16)


def name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def support() -> list[dict]:
    """What torch says when each product runs in half precision (a 1,000-node graph)."""
    small = torch_csr(random_graph(1000, 20, 1))
    coo = small.to_sparse_coo()
    dst, src = coo.indices()
    Xs = torch.randn(1000, 4)
    rows = []
    for dt in HALF:
        for what, fn in (
            ("torch CSR SpMM (MKL)", lambda: torch.sparse.mm(small.to(dt), Xs.to(dt))),
            ("torch COO SpMM", lambda: torch.sparse.mm(coo.to(dt), Xs.to(dt))),
            ("torch CSR reduce='sum'", lambda: torch.sparse.mm(small.to(dt), Xs.to(dt), "sum")),
            ("edge_propagate (gather-scatter)", lambda: edge_propagate(src, dst, coo.values(), Xs.to(dt), 1000,
                                                                       backend="torch")),
            ("dense bmm", lambda: torch.bmm(torch.rand(2, 50, 50).to(dt), torch.rand(2, 50, 3).to(dt))),
        ):
            try:
                fn()
                status = "works"
            except Exception as e:  # noqa: BLE001  (what torch says is the finding)
                status = f"fails: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
            rows.append(dict(dtype=name(dt), kernel=what, status=status))
            print(f"  {name(dt):<9} {what:<32} {status}", flush=True)
    return rows


def heat_rounded_state(L: torch.Tensor, X: torch.Tensor, coeffs: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """The Chebyshev recurrence of ``chebyshev_heat`` with every state vector stored in ``dtype``
    (the operator applied in float32). Shapes: ``X [n, B]`` -> ``[n, B]``."""
    r = lambda T: T.to(dtype).to(torch.float32)  # noqa: E731
    X = r(X)
    Y = r(X * float(coeffs[0]))
    T_prev, T = X, r(torch.sparse.mm(L, X) - X)  # S = L - I for lambda_max = 2
    Y = r(Y + float(coeffs[1]) * T)
    for c in coeffs[2:]:
        T_prev, T = T, r(2.0 * (torch.sparse.mm(L, T) - T) - T_prev)
        Y = r(Y + float(c) * T)
    return Y


def ppr_rounded_state(op, R: torch.Tensor, iters: int, dtype: torch.dtype, damping: float = 0.85) -> torch.Tensor:
    """``iters`` power iterations of ``personalized_pagerank``'s update with ``x`` stored in
    ``dtype``. Shapes: ``R [n, B]`` -> ``[n, B]``."""
    r = lambda T: T.to(dtype).to(torch.float32)  # noqa: E731
    p = R / R.sum(0, keepdim=True)
    x = r(torch.full_like(R, 1.0 / R.shape[0]))
    dang = op.dangling.nonzero().flatten()
    for _ in range(iters):
        scale = damping * x.index_select(0, dang).sum(0) + (1 - damping)
        x = r(damping * torch.sparse.mm(op.PT, x) + p * scale)
    return x


def topk_overlap(a: torch.Tensor, b: torch.Tensor, k: int = 20) -> float:
    """Mean over columns of ``|top-k(a) & top-k(b)| / k``."""
    ia, ib = a.topk(k, dim=0).indices, b.topk(k, dim=0).indices
    return float((ia.unsqueeze(1) == ib.unsqueeze(0)).any(1).float().mean())


def accuracy(A, B: int, seed: int) -> list[dict]:
    n = A.shape[0]
    L = torch_csr(laplacian_csr(A).astype(np.float32))
    op = random_walk_operator(torch_csr(A, torch.int64), dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, B, generator=g)
    R = torch.zeros(n, B)
    R[torch.randint(0, n, (B,), generator=g), torch.arange(B)] = 1.0
    ref_h, ref_p = chebyshev_heat(L, X, 1.0), ppr_rounded_state(op, R, 30, torch.float32)
    rows = []
    for dt in (torch.float32, *HALF):
        h, p = heat_rounded_state(L, X, heat_coefficients(1.0), dt), ppr_rounded_state(op, R, 30, dt)
        rows.append(dict(dtype=name(dt), heat_max_rel_err=float(((h - ref_h).abs().amax(0) / ref_h.abs().amax(0)).max()),
                         heat_top20_overlap=topk_overlap(h, ref_h), ppr_max_l1_err=float((p - ref_p).abs().sum(0).max()),
                         ppr_top20_overlap=topk_overlap(p, ref_p)))
        print(f"  state {rows[-1]}", flush=True)
    return rows


def speed(A, B: int, repeats: int, seed: int) -> list[dict]:
    n = A.shape[0]
    A32 = torch_csr(A)
    coo = torch_csr(A, torch.int64).to_sparse_coo()
    dst, src = coo.indices()
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, B, generator=g)
    blocks, vec = torch.rand(256, 200, 200, generator=g), torch.rand(256, 200, 16, generator=g)
    timed = lambda fn: median_seconds(fn, repeats, slow_s=4.0)[0] * 1e3  # noqa: E731
    rows = []
    for dt in (torch.float32, *HALF):
        Xd, Ad, w, bd, vd = X.to(dt), A32.to(dt), coo.values().to(dt), blocks.to(dt), vec.to(dt)
        rows.append(dict(dtype=name(dt), csr_mkl_ms=timed(lambda: torch.sparse.mm(Ad, Xd)) if dt == torch.float32 else None,
                         csr_reduce_sum_ms=timed(lambda: torch.sparse.mm(Ad, Xd, "sum")),
                         edge_propagate_ms=timed(lambda: edge_propagate(src, dst, w, Xd, n, backend="torch")),
                         bmm_ms=timed(lambda: torch.bmm(bd, vd))))
        print(f"  speed {rows[-1]}", flush=True)
    return rows


def main() -> None:
    ap = bench_parser(__doc__, "half_precision_cpu", threads=THREADS)
    ap.add_argument("--quick", action="store_true", help="n = 2e4 (smoke test)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n, B = (20_000 if args.quick else 100_000), 16
    record = new_record(f"speed: median of {args.repeats} after one warm-up (one run when the warm-up took over 4 s); "
                        "accuracy: one run")
    A = random_graph(n, 20, args.seed)
    record.update(n=n, nnz=A.nnz, B=B, support=support(), accuracy=accuracy(A, B, args.seed),
                  speed=speed(A, B, args.repeats, args.seed))
    finish_record(record)
    lines = results_header("Half-precision diffusion on the CPU: support, accuracy of the state, speed", record)
    lines += ["## Which half-precision products torch has on this CPU", ""]
    lines += md_table(record["support"], [("dtype", "dtype", ""), ("kernel", "kernel", ""), ("status", "status", "")])
    lines += ["", f"## Accuracy of a half-precision state against float32 (random graph n = {n:,}, nnz = {A.nnz:,}, "
              f"B = {B})", "", "Every state vector rounded to the dtype after each step, operator in float32; heat t = 1 "
              "with all its terms, PPR 30 iterations from one-hot restarts.", ""]
    lines += md_table(record["accuracy"], [("state", "dtype", ""), ("heat max rel. error", "heat_max_rel_err", ".2e"),
                                           ("heat top-20 overlap", "heat_top20_overlap", ".3f"),
                                           ("PPR max L1 error", "ppr_max_l1_err", ".2e"),
                                           ("PPR top-20 overlap", "ppr_top20_overlap", ".3f")])
    lines += ["", f"## Speed of the paths that run (n = {n:,}, B = {B}; an empty cell: that product fails in that dtype, see above)", ""]
    lines += md_table(record["speed"], [("dtype", "dtype", ""), ("CSR SpMM (MKL) ms", "csr_mkl_ms", ".1f"),
                                        ("CSR reduce='sum' ms", "csr_reduce_sum_ms", ".1f"),
                                        ("edge_propagate (torch) ms", "edge_propagate_ms", ".1f"),
                                        ("bmm [256,200,200] x [256,200,16] ms", "bmm_ms", ".1f")])
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
