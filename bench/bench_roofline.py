"""Roofline of the diffusion kernels on this CPU: bytes moved, FLOPs, GB/s and the ratio to the
copy bandwidth measured in the same run.

    python bench/bench_roofline.py                 # ~10 min on 2 cores; writes bench/results/roofline_cpu.md/.json
    python bench/bench_roofline.py --quick         # n = 2e4 / 1e5 only, a minute or two (smoke test)

Sections (each a table in the results file):

1. copy bandwidth: ``dst.copy_(src)`` of 512 MiB float32 (torch) and ``np.copyto`` (numpy),
   median of 7; bytes = read + write. Measured at the start and the end; the ceiling is the
   median of both torch figures.
2. CSR SpMM ``Y = A X``, ``X [n, B]``, on random graphs (``n * 10`` uniform random undirected
   edges, so ~20 nonzeros per row; the worst case for caches), ``n`` in 1e5, 1e6, ``B`` in 1, 16,
   64, 256: torch CSR with int64 vs int32 indices, row-major ``X`` vs column-major, torch's
   ``reduce="sum"`` kernel (what ``torch_geometric.utils.spmm`` calls), scipy CSR @ dense.
3. node order: a locality graph (each node linked to 10 nodes within +-100 positions, ~20 nnz
   per row) randomly permuted, then reordered by reverse Cuthill-McKee.
4. diffusion through our kernels: ``chebyshev_heat`` (t = 1) and ``personalized_pagerank``.
5. precision: which half-precision sparse products torch has on the CPU; accuracy of a float16
   / bfloat16 diffusion *state* against float32 (every state vector rounded after each step,
   operator in float32, which is what a GPU half-precision SpMM with float32 accumulation does);
   speed of the half-precision paths that exist on the CPU (gather-scatter, dense ``bmm``).
6. induced subgraphs, ``P = 200``: dense ``[B, P, P]`` blocks (``bmm``) vs one block-diagonal CSR.
7. threads: copy and SpMM with 1 and 2 threads.

Bytes model (stated per table; ``s`` = bytes per value, ``i`` per index):

    CSR        = nnz * (s + i) + (n + 1) * i              values + column indices + row pointers
    gather     = CSR + nnz * B * s + n * B * s             every nonzero reads its row of X; Y written once
    compulsory = CSR + 2 * n * B * s                       X read once, Y written once

``gather`` is the traffic when X does not stay in cache (random graphs); ``compulsory`` is the
least any kernel must move. The goal figure ("SpMM diffusion >= 50% of copy bandwidth") uses the
gather model, as specified; both are printed. FLOPs = 2 * nnz * B per SpMM.

Timing: inputs built outside the timed region, one warm-up, median of ``--repeats`` (a single
run when the warm-up took over 4 s). torch threads: ``--threads`` (default 1: the machine is
shared; section 7 compares 2).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings

from _common import cpu_model, median_seconds, pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402
from scipy.sparse.csgraph import reverse_cuthill_mckee  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spectrag.kernels.edge_propagate import edge_propagate  # noqa: E402
from spectrag.kernels.heat import chebyshev_heat, chebyshev_heat_dense_batched, heat_coefficients  # noqa: E402
from spectrag.kernels.pagerank import personalized_pagerank, random_walk_operator  # noqa: E402

warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
warnings.filterwarnings("ignore", message=".*Sparse invariant checks are implicitly disabled.*")

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


# ---------------------------------------------------------------------------------------------
# Timing and models
# ---------------------------------------------------------------------------------------------


def timed(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` after one warm-up (one timed run if the warm-up took > 4 s)."""
    return median_seconds(fn, repeats, slow_s=4.0)[0]


def csr_bytes(nnz: int, n: int, s: int, i: int) -> int:
    return nnz * (s + i) + (n + 1) * i


def gather_bytes(nnz: int, n: int, B: int, s: int, i: int) -> int:
    return csr_bytes(nnz, n, s, i) + nnz * B * s + n * B * s


def compulsory_bytes(nnz: int, n: int, B: int, s: int, i: int) -> int:
    return csr_bytes(nnz, n, s, i) + 2 * n * B * s


def copy_bandwidth(repeats: int = 7, mib: int = 512) -> dict:
    """GB/s of a large copy (read + write bytes), torch and numpy; median of ``repeats``."""
    a = torch.empty(mib * 2**20 // 4, dtype=torch.float32).normal_()
    b = torch.empty_like(a)
    t_torch = timed(lambda: b.copy_(a), repeats)
    an, bn = a.numpy(), b.numpy()
    t_np = timed(lambda: np.copyto(bn, an), repeats)
    nbytes = 2 * a.numel() * 4
    return {"torch_GBps": nbytes / t_torch / 1e9, "numpy_GBps": nbytes / t_np / 1e9, "MiB": mib}


# ---------------------------------------------------------------------------------------------
# Graphs
# ---------------------------------------------------------------------------------------------


def _symmetric(r: np.ndarray, c: np.ndarray, w: np.ndarray, n: int) -> sp.csr_matrix:
    """CSR ``[n, n]`` holding each edge ``(r, c, w)`` in both directions, duplicates summed."""
    A = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([r, c]), np.concatenate([c, r]))), shape=(n, n))
    A = A.tocsr()
    A.sum_duplicates()
    A.sort_indices()
    return A


def random_graph(n: int, seed: int) -> sp.csr_matrix:
    """``n * 10`` uniform random undirected edges, weights in (0, 1]: ~20 nonzeros per row."""
    rng = np.random.default_rng(seed)
    m = n * 10
    r, c = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = r != c
    r, c = r[keep], c[keep]
    w = rng.random(r.size).astype(np.float32) + 1e-3
    return _symmetric(r, c, w, n)


def locality_graph(n: int, seed: int, window: int = 100, k: int = 10) -> sp.csr_matrix:
    """Each node linked to ``k`` nodes within ``+-window`` positions (symmetrised), ~2k per row."""
    rng = np.random.default_rng(seed)
    r = np.repeat(np.arange(n), k)
    c = (r + rng.integers(1, window + 1, r.size)) % n
    w = rng.random(r.size).astype(np.float32) + 1e-3
    return _symmetric(r, c, w, n)


def permute(A: sp.csr_matrix, order: np.ndarray) -> sp.csr_matrix:
    P = A[order][:, order].tocsr()
    P.sort_indices()
    return P


def mean_band(A: sp.csr_matrix) -> float:
    """Mean ``|i - j|`` over the nonzeros: how far a row's X reads are from the row itself."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return float(np.abs(rows - A.indices).mean())


def to_torch(A: sp.csr_matrix, index_dtype=torch.int32, dtype=torch.float32) -> torch.Tensor:
    return torch.sparse_csr_tensor(
        torch.from_numpy(A.indptr.astype(np.int64)).to(index_dtype),
        torch.from_numpy(A.indices.astype(np.int64)).to(index_dtype),
        torch.from_numpy(A.data).to(dtype),
        size=A.shape,
        check_invariants=False,
    )


def sym_laplacian(A: sp.csr_matrix) -> sp.csr_matrix:
    """``I - D^-1/2 A D^-1/2`` (float32 CSR, sorted indices)."""
    d = np.asarray(A.sum(axis=1)).ravel()
    s = np.where(d > 0, 1.0 / np.sqrt(np.maximum(d, 1e-30)), 0.0).astype(np.float32)
    L = (sp.identity(A.shape[0], dtype=np.float32, format="csr") - sp.diags(s) @ A @ sp.diags(s)).tocsr()
    L.sort_indices()
    return L.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------


def spmm_row(graph, n, nnz, B, variant, sec, s, i, ceiling) -> dict:
    g = gather_bytes(nnz, n, B, s, i)
    c = compulsory_bytes(nnz, n, B, s, i)
    return dict(graph=graph, n=n, nnz=nnz, B=B, variant=variant, ms=sec * 1e3,
                GFLOPs=2 * nnz * B / sec / 1e9, gather_GBps=g / sec / 1e9, gather_ratio=g / sec / 1e9 / ceiling,
                compulsory_GBps=c / sec / 1e9, compulsory_ratio=c / sec / 1e9 / ceiling)


def spmm_variants(A: sp.csr_matrix, B: int, variants: list[str], repeats: int, graph: str, ceiling: float,
                  seed: int) -> list[dict]:
    n, nnz = A.shape[0], A.nnz
    X = torch.randn(n, B, generator=torch.Generator().manual_seed(seed))
    rows, ref = [], None
    mats = {}
    for v in variants:
        if v.startswith("torch"):
            idx = torch.int64 if "i64" in v else torch.int32
            M = mats.setdefault(idx, to_torch(A, idx))
            Xv = X.t().contiguous().t() if "colmajor" in v else X
            if "reduce" in v:
                fn = lambda M=M, Xv=Xv: torch.sparse.mm(M, Xv, "sum")  # noqa: E731
            else:
                fn = lambda M=M, Xv=Xv: torch.sparse.mm(M, Xv)  # noqa: E731
            ib = 8 if idx == torch.int64 else 4
        elif v == "scipy":
            Xn = X.numpy()
            A32 = A.astype(np.float32)
            fn = lambda: A32 @ Xn  # noqa: E731
            ib = A.indices.dtype.itemsize
        else:
            raise ValueError(v)
        out = torch.as_tensor(fn())
        if ref is None:
            ref = out
        err = float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
        sec = timed(fn, repeats)
        row = spmm_row(graph, n, nnz, B, v, sec, 4, ib, ceiling)
        row["rel_err_vs_first"] = err
        rows.append(row)
        print(f"  {graph:<22} n={n:>9,} B={B:>4} {v:<22} {sec * 1e3:9.1f} ms  gather {row['gather_GBps']:5.2f} GB/s "
              f"({row['gather_ratio']:4.0%})  compulsory {row['compulsory_GBps']:5.2f} GB/s ({row['compulsory_ratio']:4.0%})",
              flush=True)
    return rows


def heat_bytes(K: int, nnz: int, n: int, B: int, s: int, i: int) -> tuple[int, int]:
    """(bytes, flops) of one chebyshev_heat call with K SpMMs (see _chebyshev_apply): per term
    one fused addmm (gather model + read and write of the output buffer), one sub_ and one add_
    (3 n B values each)."""
    per = csr_bytes(nnz, n, s, i) + nnz * B * s + 2 * n * B * s + 6 * n * B * s
    return K * per, K * (2 * nnz * B + 6 * n * B)


def ppr_bytes(iters_cols: int, iters: int, nnz: int, n: int, s: int, i: int) -> tuple[int, int]:
    """(bytes, flops) of personalized_pagerank: per iteration the CSR once, and per active column
    the gathers, p * scale into buf, addmm read/write of buf, x - buf and its L1 norm (8 n values)."""
    return iters * csr_bytes(nnz, n, s, i) + iters_cols * (nnz + 8 * n) * s, iters_cols * (2 * nnz + 6 * n)


def diffusion(A: sp.csr_matrix, graph: str, batches: list[int], repeats: int, ceiling: float, seed: int) -> list[dict]:
    n = A.shape[0]
    L = sym_laplacian(A)
    L32, L64 = to_torch(L, torch.int32), to_torch(L, torch.int64)
    At = to_torch(A, torch.int64)
    op = random_walk_operator(At, dtype=torch.float32)  # int32 PT (spectrag.kernels.csr.csr_int32)
    coeffs = heat_coefficients(1.0)
    K = len(coeffs) - 1
    rows = []
    g = torch.Generator().manual_seed(seed)
    for B in batches:
        X = torch.rand(n, B, generator=g)
        for variant, Lop in (("heat, int32 operator", L32), ("heat, int64 operator", L64)):
            sec = timed(lambda: chebyshev_heat(Lop, X, 1.0), repeats)
            by, fl = heat_bytes(K, L.nnz, n, B, 4, 4 if Lop is L32 else 8)
            if Lop is L64:  # the call converts the indices to int32 first: one more pass
                by += L.nnz * 12 + (n + 1) * 12
            rows.append(dict(graph=graph, n=n, nnz=L.nnz, B=B, kernel=variant, spmms=K, ms=sec * 1e3,
                             GFLOPs=fl / sec / 1e9, GBps=by / sec / 1e9, ratio=by / sec / 1e9 / ceiling))
            print(f"  {graph:<22} B={B:>4} {variant:<24} {K} SpMMs {sec * 1e3:9.1f} ms  {by / sec / 1e9:5.2f} GB/s "
                  f"({by / sec / 1e9 / ceiling:4.0%})", flush=True)
        seeds = torch.randint(0, n, (B,), generator=g)
        R = torch.zeros(n, B)
        R[seeds, torch.arange(B)] = 1.0
        res = personalized_pagerank(op, R, tol=1e-8)
        sec = timed(lambda: personalized_pagerank(op, R, tol=1e-8), repeats)
        by, fl = ppr_bytes(int(res.column_iters.sum()), res.n_iter, op.PT.values().numel(), n, 4, 4)
        rows.append(dict(graph=graph, n=n, nnz=op.PT.values().numel(), B=B, kernel="ppr, int32 operator",
                         spmms=res.n_iter, column_iters=int(res.column_iters.sum()), ms=sec * 1e3, GFLOPs=fl / sec / 1e9, GBps=by / sec / 1e9,
                         ratio=by / sec / 1e9 / ceiling))
        print(f"  {graph:<22} B={B:>4} {'ppr, int32 operator':<24} {res.n_iter} iters {sec * 1e3:9.1f} ms  "
              f"{by / sec / 1e9:5.2f} GB/s ({by / sec / 1e9 / ceiling:4.0%})", flush=True)
    return rows


def heat_rounded_state(L: torch.Tensor, X: torch.Tensor, coeffs: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """The Chebyshev recurrence of ``chebyshev_heat`` with every state vector stored in ``dtype``
    (the operator applied in float32): the accuracy of a half-precision diffusion state."""
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
    """``iters`` power iterations of personalized_pagerank's update with ``x`` stored in ``dtype``."""
    r = lambda T: T.to(dtype).to(torch.float32)  # noqa: E731
    n = R.shape[0]
    p = R / R.sum(0, keepdim=True)
    x = r(torch.full_like(R, 1.0 / n))
    dang = op.dangling.nonzero().flatten()
    for _ in range(iters):
        scale = damping * x.index_select(0, dang).sum(0) + (1 - damping)
        x = r(damping * torch.sparse.mm(op.PT, x) + p * scale)
    return x


def topk_overlap(a: torch.Tensor, b: torch.Tensor, k: int = 20) -> float:
    """Mean over columns of |top-k(a) & top-k(b)| / k."""
    ia, ib = a.topk(k, dim=0).indices, b.topk(k, dim=0).indices
    hits = (ia.unsqueeze(1) == ib.unsqueeze(0)).any(1).float().mean(0)
    return float(hits.mean())


def precision(A: sp.csr_matrix, B: int, repeats: int, seed: int) -> dict:
    n = A.shape[0]
    out: dict = {"support": [], "accuracy": [], "speed": []}
    small = to_torch(random_graph(1000, seed), torch.int32)
    Xs = torch.randn(1000, 4)
    for dt in (torch.float16, torch.bfloat16):
        for what, fn in (
            ("torch CSR SpMM (MKL)", lambda dt=dt: torch.sparse.mm(small.to(dt), Xs.to(dt))),
            ("torch COO SpMM", lambda dt=dt: torch.sparse.mm(small.to_sparse_coo().to(dt), Xs.to(dt))),
            ("torch CSR reduce='sum'", lambda dt=dt: torch.sparse.mm(small.to(dt), Xs.to(dt), "sum")),
            ("edge_propagate (gather-scatter)", lambda dt=dt: edge_propagate(
                small.to_sparse_coo().indices()[1], small.to_sparse_coo().indices()[0],
                small.to_sparse_coo().values(), Xs.to(dt), 1000, backend="torch")),
            ("dense bmm", lambda dt=dt: torch.bmm(torch.rand(2, 50, 50).to(dt), torch.rand(2, 50, 3).to(dt))),
        ):
            try:
                fn()
                status = "works"
            except Exception as e:  # noqa: BLE001  (we record what torch says)
                status = f"fails: {type(e).__name__}: {str(e).splitlines()[0][:90]}"
            out["support"].append(dict(dtype=str(dt).replace("torch.", ""), kernel=what, status=status))
            print(f"  {str(dt):<15} {what:<32} {status}", flush=True)

    # accuracy of a half-precision state against float32 (same operator, same number of steps)
    L = to_torch(sym_laplacian(A), torch.int32)
    At = to_torch(A, torch.int64)
    op = random_walk_operator(At, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, B, generator=g)
    coeffs = heat_coefficients(1.0)
    ref_h = chebyshev_heat(L, X, 1.0)
    seeds = torch.randint(0, n, (B,), generator=g)
    R = torch.zeros(n, B)
    R[seeds, torch.arange(B)] = 1.0
    ref_p = ppr_rounded_state(op, R, 30, torch.float32)
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        h = heat_rounded_state(L, X, coeffs, dt)
        p = ppr_rounded_state(op, R, 30, dt)
        row = dict(dtype=str(dt).replace("torch.", ""),
                   heat_max_rel_err=float(((h - ref_h).abs().amax(0) / ref_h.abs().amax(0)).max()),
                   heat_top20_overlap=topk_overlap(h, ref_h),
                   ppr_max_l1_err=float((p - ref_p).abs().sum(0).max()),
                   ppr_top20_overlap=topk_overlap(p, ref_p))
        out["accuracy"].append(row)
        print(f"  state {row['dtype']:<9} heat max rel err {row['heat_max_rel_err']:.2e} top-20 overlap "
              f"{row['heat_top20_overlap']:.3f} | ppr max L1 err {row['ppr_max_l1_err']:.2e} top-20 overlap "
              f"{row['ppr_top20_overlap']:.3f}", flush=True)

    # speed of the half-precision paths that exist on the CPU
    coo = At.to_sparse_coo()
    dst, src = coo.indices()
    w = coo.values()
    A32 = to_torch(A, torch.int32)
    blocks = torch.rand(256, 200, 200, generator=g)
    vec = torch.rand(256, 200, 16, generator=g)
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        Xd = X.to(dt)
        t_ep = timed(lambda: edge_propagate(src, dst, w.to(dt), Xd, n, backend="torch"), repeats)
        Ad = A32.to(dt)
        t_red = timed(lambda: torch.sparse.mm(Ad, Xd, "sum"), repeats)
        t_mkl = timed(lambda: torch.sparse.mm(Ad, Xd), repeats) if dt == torch.float32 else float("nan")
        bd, vd = blocks.to(dt), vec.to(dt)
        t_bmm = timed(lambda: torch.bmm(bd, vd), repeats)
        out["speed"].append(dict(dtype=str(dt).replace("torch.", ""), csr_mkl_ms=t_mkl * 1e3, csr_reduce_sum_ms=t_red * 1e3,
                                 edge_propagate_ms=t_ep * 1e3, bmm_256x200x200_by_16_ms=t_bmm * 1e3))
        print(f"  {str(dt):<15} n={n:,} B={B}: CSR (MKL) {t_mkl * 1e3:8.1f} ms, CSR reduce='sum' {t_red * 1e3:8.1f} ms, "
              f"edge_propagate {t_ep * 1e3:8.1f} ms; bmm [256,200,200]x[256,200,16]: {t_bmm * 1e3:8.1f} ms", flush=True)
    return out


def induced_blocks(B: int, P: int, per_row: int, repeats: int, seed: int) -> list[dict]:
    """One PPR-style application ``PT x`` on B induced subgraphs: dense bmm vs block-diagonal CSR,
    and a whole heat call (t = 1) each way."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    blocks = []
    dense = torch.zeros(B, P, P)
    for b in range(B):
        m = P * per_row // 2
        r, c = rng.integers(0, P, m), rng.integers(0, P, m)
        keep = r != c
        w = rng.random(keep.sum()).astype(np.float32)
        M = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([r[keep], c[keep]]), np.concatenate([c[keep], r[keep]]))),
                          shape=(P, P)).tocsr()
        blocks.append(M)
        dense[b] = torch.from_numpy(M.toarray())
    diag = sp.block_diag(blocks, format="csr")
    diag.sort_indices()
    nnz = diag.nnz
    Lb = torch.stack([torch.from_numpy(sym_laplacian(M).toarray()) for M in blocks])
    Ld = to_torch(sym_laplacian(diag), torch.int32)
    csr = to_torch(diag, torch.int32)
    rows = []
    for C in (1, 16):
        x = torch.rand(B, P, C, generator=g)
        xf = x.reshape(B * P, C)
        t_dense = timed(lambda: torch.bmm(dense, x), repeats)
        t_csr = timed(lambda: torch.sparse.mm(csr, xf), repeats)
        t_hd = timed(lambda: chebyshev_heat_dense_batched(Lb, x, 1.0, spmm="dense"), repeats)
        t_hc = timed(lambda: chebyshev_heat(Ld, xf, 1.0), repeats)
        err = float((chebyshev_heat_dense_batched(Lb, x, 1.0, spmm="dense").reshape(B * P, C)
                     - chebyshev_heat(Ld, xf, 1.0)).abs().max())
        dense_b = B * P * P * 4 + 2 * B * P * C * 4
        csr_b = gather_bytes(nnz, B * P, C, 4, 4)
        rows.append(dict(B=B, P=P, nnz_per_row=nnz / (B * P), C=C, dense_bmm_ms=t_dense * 1e3, csr_ms=t_csr * 1e3,
                         dense_GBps=dense_b / t_dense / 1e9, csr_GBps=csr_b / t_csr / 1e9,
                         heat_dense_ms=t_hd * 1e3, heat_csr_ms=t_hc * 1e3, heat_max_abs_diff=err))
        print(f"  B={B} P={P} nnz/row={nnz / (B * P):.1f} C={C}: dense bmm {t_dense * 1e3:7.2f} ms vs block-diag CSR "
              f"{t_csr * 1e3:7.2f} ms; heat dense {t_hd * 1e3:7.1f} ms vs CSR {t_hc * 1e3:7.1f} ms (diff {err:.1e})",
              flush=True)
    return rows


def threads_section(A_rand: sp.csr_matrix, A_loc: sp.csr_matrix, repeats: int) -> list[dict]:
    rows = []
    before = torch.get_num_threads()
    for th in (1, 2):
        torch.set_num_threads(th)
        cb = copy_bandwidth(repeats=5, mib=256)
        row = dict(threads=th, copy_GBps=cb["torch_GBps"])
        for name, A in (("random", A_rand), ("rcm locality", A_loc)):
            M = to_torch(A, torch.int32)
            X = torch.randn(A.shape[0], 16)
            sec = timed(lambda: torch.sparse.mm(M, X), repeats)
            row[f"{name} n={A.shape[0]:,} B=16 ms"] = sec * 1e3
            row[f"{name} gather GB/s"] = gather_bytes(A.nnz, A.shape[0], 16, 4, 4) / sec / 1e9
        rows.append(row)
        print("  " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    torch.set_num_threads(before)
    return rows


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def md_table(rows: list[dict], cols: list[tuple[str, str, str]]) -> list[str]:
    """``cols``: (header, key, format)."""
    out = ["| " + " | ".join(h for h, _, _ in cols) + " |", "|" + "|".join("---:" if f else "---" for _, _, f in cols) + "|"]
    for r in rows:
        out.append("| " + " | ".join(format(r[k], f) if f else str(r[k]) for _, k, f in cols) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only (smoke test)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(RESULTS, "roofline_cpu"), help="results path without extension")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    load0 = os.getloadavg()
    small_n, big_n = (20_000, 100_000) if args.quick else (100_000, 1_000_000)
    res: dict = {"command": "python bench/bench_roofline.py " + " ".join(sys.argv[1:]),
                 "machine": f"{cpu_model()}, {os.cpu_count()} logical CPUs", "threads": torch.get_num_threads(),
                 "torch": torch.__version__, "numpy": np.__version__, "scipy": scipy.__version__,
                 "python": platform.python_version(), "loadavg_start": load0}

    print(f"== copy bandwidth (threads={torch.get_num_threads()}, load {load0[0]:.1f})", flush=True)
    cb0 = copy_bandwidth()
    print(f"  torch {cb0['torch_GBps']:.2f} GB/s, numpy {cb0['numpy_GBps']:.2f} GB/s", flush=True)
    ceiling = cb0["torch_GBps"]  # provisional; the final ceiling also uses the end-of-run copy

    print("== CSR SpMM on random graphs", flush=True)
    spmm: list[dict] = []
    A_small = random_graph(small_n, args.seed)
    full = ["torch i32", "torch i64", "torch i32 colmajor", "torch i64 reduce-sum", "scipy"]
    for B in (1, 16, 64, 256):
        spmm += spmm_variants(A_small, B, full, args.repeats, "random", ceiling, args.seed + B)
    del A_small
    A_big = random_graph(big_n, args.seed + 1)
    for B in (1, 16, 64, 256):
        variants = ["torch i32", "torch i64", "scipy"] if B <= 16 else ["torch i32"]
        spmm += spmm_variants(A_big, B, variants, args.repeats, "random", ceiling, args.seed + B)

    print("== node order: locality graph, randomly permuted vs RCM", flush=True)
    A_loc = locality_graph(big_n, args.seed + 2)
    perm = np.random.default_rng(args.seed).permutation(big_n)
    A_perm = permute(A_loc, perm)
    del A_loc
    t0 = time.perf_counter()
    rcm = reverse_cuthill_mckee(A_perm, symmetric_mode=True)
    t_rcm = time.perf_counter() - t0
    A_rcm = permute(A_perm, rcm)
    order = dict(n=big_n, nnz=A_rcm.nnz, rcm_seconds=t_rcm, band_permuted=mean_band(A_perm), band_rcm=mean_band(A_rcm))
    print(f"  RCM {t_rcm:.1f} s; mean |i-j| permuted {order['band_permuted']:,.0f} -> RCM {order['band_rcm']:,.0f}", flush=True)
    order_rows: list[dict] = []
    for B in (1, 16, 64):
        order_rows += spmm_variants(A_perm, B, ["torch i32"], args.repeats, "locality, permuted", ceiling, args.seed + B)
        order_rows += spmm_variants(A_rcm, B, ["torch i32", "scipy"], args.repeats, "locality, RCM", ceiling, args.seed + B)
    del A_perm

    print("== diffusion through spectrag.kernels.heat / spectrag.kernels.pagerank", flush=True)
    diff_rows = diffusion(random_graph(small_n, args.seed), "random", [16, 64], args.repeats, ceiling, args.seed)
    diff_rows += diffusion(A_rcm, "locality, RCM", [16], args.repeats, ceiling, args.seed)

    print("== precision", flush=True)
    prec = precision(random_graph(small_n, args.seed), 16, args.repeats, args.seed)

    print("== induced subgraphs: dense [B, P, P] blocks vs block-diagonal CSR", flush=True)
    blocks_rows = induced_blocks(256, 200, 20, args.repeats, args.seed) + induced_blocks(256, 200, 6, args.repeats, args.seed)

    print("== threads", flush=True)
    thread_rows = threads_section(random_graph(small_n, args.seed), A_rcm, args.repeats)
    torch.set_num_threads(args.threads)

    cb1 = copy_bandwidth()
    ceiling = statistics.median([cb0["torch_GBps"], cb1["torch_GBps"]])
    print(f"== copy bandwidth at the end: torch {cb1['torch_GBps']:.2f} GB/s; ceiling used {ceiling:.2f} GB/s", flush=True)
    for r in spmm + order_rows:  # ratios against the final ceiling
        r["gather_ratio"] = r["gather_GBps"] / ceiling
        r["compulsory_ratio"] = r["compulsory_GBps"] / ceiling
    for r in diff_rows:
        r["ratio"] = r["GBps"] / ceiling

    res.update(copy_start=cb0, copy_end=cb1, ceiling_GBps=ceiling, spmm=spmm, order=order, order_rows=order_rows,
               diffusion=diff_rows, precision=prec, induced_blocks=blocks_rows, threads_rows=thread_rows,
               loadavg_end=os.getloadavg(), wall_seconds=time.perf_counter() - t_start)
    write_report(res, args.out)


def write_report(res: dict, out: str) -> None:
    ceiling = res["ceiling_GBps"]
    L = [
        "# Roofline of the diffusion kernels (CPU)",
        "",
        f"Command: `{res['command']}`  ",
        f"Machine: {res['machine']}, shared with other jobs (1-min load average {res['loadavg_start'][0]:.1f} at the start, "
        f"{res['loadavg_end'][0]:.1f} at the end); torch {res['torch']} with {res['threads']} intra-op thread(s) "
        f"(section 7: 2), numpy {res['numpy']}, scipy {res['scipy']}, Python {res['python']}. "
        f"Wall time {res['wall_seconds'] / 60:.1f} min.  ",
        "Timing: median of 3 after one warm-up (one run when the warm-up took over 4 s).",
        "",
        "## 1. Ceiling: copy bandwidth",
        "",
        f"`dst.copy_(src)` of {res['copy_start']['MiB']} MiB float32, bytes = read + write: torch "
        f"{res['copy_start']['torch_GBps']:.2f} GB/s at the start, {res['copy_end']['torch_GBps']:.2f} GB/s at the end "
        f"(numpy `copyto` {res['copy_start']['numpy_GBps']:.2f} / {res['copy_end']['numpy_GBps']:.2f}). "
        f"**Ceiling used: {ceiling:.2f} GB/s** (median of the two torch figures); every ratio below is against it.",
        "",
        "Bytes model (s = 4 bytes per float32 value, i = bytes per index): CSR = nnz (s + i) + (n + 1) i; "
        "**gather** = CSR + nnz B s (each nonzero reads its row of X) + n B s (Y written); "
        "**compulsory** = CSR + 2 n B s (X read once, Y written once). FLOPs = 2 nnz B.",
        "",
        "## 2. CSR SpMM `Y = A X` on random graphs (~20 nonzeros per row)",
        "",
    ]
    cols = [("graph", "graph", ""), ("n", "n", ","), ("B", "B", "d"), ("variant", "variant", ""), ("ms", "ms", ".1f"),
            ("GFLOP/s", "GFLOPs", ".2f"), ("gather GB/s", "gather_GBps", ".2f"), ("gather / ceiling", "gather_ratio", ".0%"),
            ("compulsory GB/s", "compulsory_GBps", ".2f"), ("compulsory / ceiling", "compulsory_ratio", ".0%")]
    L += md_table(res["spmm"], cols)
    o = res["order"]
    L += ["", "## 3. Node order: locality graph, randomly permuted vs reverse Cuthill-McKee", "",
          f"n = {o['n']:,}, nnz = {o['nnz']:,}; `scipy.sparse.csgraph.reverse_cuthill_mckee` took {o['rcm_seconds']:.1f} s; "
          f"mean |i - j| over the nonzeros {o['band_permuted']:,.0f} (permuted) -> {o['band_rcm']:,.0f} (RCM).", ""]
    L += md_table(res["order_rows"], cols)
    by = {(r["B"], r["graph"], r["variant"]): r["ms"] for r in res["order_rows"]}
    speed = [f"B = {B}: {by[(B, 'locality, permuted', 'torch i32')] / by[(B, 'locality, RCM', 'torch i32')]:.1f}x"
             for B in (1, 16, 64) if (B, "locality, RCM", "torch i32") in by]
    L += ["", "RCM speed-up of torch int32 SpMM: " + ", ".join(speed) + "."]
    L += ["", "## 4. Diffusion through our kernels", "",
          "Heat: `chebyshev_heat(L, X, t=1)` (K SpMMs, bytes = K [CSR + nnz B s + 8 n B s]: the fused addmm reads and "
          "writes its output, sub_ and add_ move 3 n B values each). PPR: `personalized_pagerank(op, R)` with an operator "
          "from `random_walk_operator` (int32 indices), one-hot restarts, tol 1e-8; bytes = iters CSR + sum over "
          "columns of iters (nnz + 8 n) s. The int64 heat row passes an int64 CSR, which the kernel converts to int32 "
          "on each call (counted).", ""]
    L += md_table(res["diffusion"], [("graph", "graph", ""), ("n", "n", ","), ("B", "B", "d"), ("kernel", "kernel", ""),
                                     ("SpMMs", "spmms", "d"), ("ms", "ms", ".1f"), ("GFLOP/s", "GFLOPs", ".2f"),
                                     ("GB/s", "GBps", ".2f"), ("/ ceiling", "ratio", ".0%")])
    p = res["precision"]
    L += ["", "## 5. Precision", "", "Which half-precision products torch has on this CPU:", ""]
    L += md_table(p["support"], [("dtype", "dtype", ""), ("kernel", "kernel", ""), ("status", "status", "")])
    L += ["", "Accuracy of a half-precision diffusion **state** against float32 (n = 1e5 random graph, B = 16; every "
          "state vector rounded to the dtype after each step, operator in float32; heat t = 1 with all its terms, "
          "PPR 30 iterations from one-hot restarts):", ""]
    L += md_table(p["accuracy"], [("state", "dtype", ""), ("heat max rel. error", "heat_max_rel_err", ".2e"),
                                  ("heat top-20 overlap", "heat_top20_overlap", ".3f"), ("PPR max L1 error", "ppr_max_l1_err", ".2e"),
                                  ("PPR top-20 overlap", "ppr_top20_overlap", ".3f")])
    L += ["", "Speed of the half-precision paths that run on this CPU:", ""]
    L += md_table(p["speed"], [("dtype", "dtype", ""), ("CSR SpMM (MKL) ms", "csr_mkl_ms", ".1f"),
                               ("CSR reduce='sum' ms", "csr_reduce_sum_ms", ".1f"),
                               ("edge_propagate (torch) ms", "edge_propagate_ms", ".1f"),
                               ("bmm [256,200,200] x [256,200,16] ms", "bmm_256x200x200_by_16_ms", ".1f")])
    L += ["", "## 6. Induced subgraphs (P = 200): dense `[B, P, P]` blocks vs one block-diagonal CSR", "",
          "One application `A x` (dense bytes = B P^2 s + 2 B P C s; CSR bytes = gather model) and a whole heat call "
          "(t = 1), `chebyshev_heat_dense_batched` vs `chebyshev_heat` on the block-diagonal Laplacian.", ""]
    L += md_table(res["induced_blocks"], [("B", "B", "d"), ("P", "P", "d"), ("nnz/row", "nnz_per_row", ".1f"), ("C", "C", "d"),
                                          ("dense bmm ms", "dense_bmm_ms", ".2f"), ("CSR ms", "csr_ms", ".2f"),
                                          ("dense GB/s", "dense_GBps", ".2f"), ("CSR GB/s", "csr_GBps", ".2f"),
                                          ("heat dense ms", "heat_dense_ms", ".1f"), ("heat CSR ms", "heat_csr_ms", ".1f"),
                                          ("max |diff|", "heat_max_abs_diff", ".1e")])
    L += ["", "## 7. Threads", ""]
    tr = res["threads_rows"]
    L += md_table(tr, [(k, k, "d" if k == "threads" else ".2f") for k in tr[0]])
    L += ["", "## Goal: SpMM diffusion >= 50% of the copy bandwidth (gather model)", ""]
    for r in res["diffusion"]:
        L.append(f"- {r['kernel']} on {r['graph']} n = {r['n']:,}, B = {r['B']}: {r['ratio']:.0%} -- "
                 + ("met" if r["ratio"] >= 0.5 else "NOT met"))
    best = max(res["spmm"] + res["order_rows"], key=lambda r: r["gather_ratio"])
    L.append(f"- best single SpMM: {best['variant']} on {best['graph']} n = {best['n']:,}, B = {best['B']}: "
             f"{best['gather_ratio']:.0%} (gather), {best['compulsory_ratio']:.0%} (compulsory)")
    L.append("")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".md", "w") as f:
        f.write("\n".join(L))
    with open(out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    print(f"written to {out}.md and {out}.json")


if __name__ == "__main__":
    main()
