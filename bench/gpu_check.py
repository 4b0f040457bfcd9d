"""GPU check: every kernel against the CPU reference on random inputs, the pipeline on the
device against the pipeline on the CPU, then each online stage and ``spectrag.pipeline.run`` end
to end timed at 10^6 chunks for B = 256 and 1,024. Run it with ``bash bench/gpu_check.sh``.

    bash bench/gpu_check.sh                  # CUDA machine: n = 1e6, B = 256, 1024 (under 8 min)
    bash bench/gpu_check.sh --small          # any machine: n = 1e4, B = 32, 128 (a minute or two on a CPU)

Needs only torch, numpy and scipy (Triton, CuPy and faiss-gpu are used when present); nothing
needs to be installed: ``_common.ensure_spectrag`` maps ``spectrag`` onto the checkout, and the
engine modules imported here need neither FAISS, bm25s, tiktoken, sentence-transformers nor
pyahocorasick (``tests/test_light_imports.py``).

Synthetic data, generated on the device: ``n`` chunk embeddings (d = 384, float32,
L2-normalised) drawn around ``n / 1000`` cluster centres; a kNN-like graph where every chunk
links to 10 random chunks of its own cluster (symmetric: ~20 nonzeros per row, one weight in
(0.05, 1] per undirected edge), node ids randomly permuted (no free locality); token lengths in [50, 400], 8 chunks
per document, 32-dim spectral coordinates; a Zipf-like BM25 matrix; a knowledge graph of
``n / 4`` entities with ~4 directed relations each for spreading activation.

End to end: the data as a :class:`spectrag.state.QueryState` (``from_arrays``: the one synthetic
graph serves as the fused and the relational graph; dense seeds by ``DenseIndex(backend="torch")``,
as the GPU machine has no FAISS) and ``spectrag.pipeline.run`` with the ``RetrieverConfig``
defaults (mode ``spectral``) on query vectors alone, so the seeds are dense only (the synthetic
chunks have no text). The check runs the same batch on the device with the torch graph backend
and on the CPU with the scipy one and compares the selections.

Results: ``gpu_check_<cuda|cpu>.md`` and ``.json`` in ``--out`` (default ``$OUT`` when set,
else ``bench/results``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import time
import traceback

import numpy as np
import scipy.sparse as sp
import torch

from _common import (  # noqa: E402  (bench/, no heavy imports)
    copy_bandwidth,
    ensure_spectrag,
    finish_record,
    md_table,
    median_seconds,
    new_record,
    quiet_sparse_warnings,
    random_graph,
    results_header,
    sync,
    torch_csr,
    write_results,
)

T0 = time.perf_counter()
ensure_spectrag()
from spectrag.config import BM25Config, RetrieverConfig, SelectConfig  # noqa: E402
from spectrag.expand.blocks import candidate_blocks  # noqa: E402
from spectrag.propagate.proximity import heat_proximity, ppr_proximity  # noqa: E402
from spectrag.expand.pool import expand, expand_torch  # noqa: E402
from spectrag.index.dense import DenseIndex  # noqa: E402
from spectrag.index.lexical import BM25Index  # noqa: E402  (bm25s is imported lazily there)
from spectrag.kernels.activation import spreading_activation  # noqa: E402
from spectrag.kernels.csr import TorchCSR  # noqa: E402
from spectrag.kernels.edge_propagate import edge_propagate  # noqa: E402
from spectrag.kernels.heat import chebyshev_heat, chebyshev_heat_dense_batched, heat_coefficients  # noqa: E402
from spectrag.kernels.laplacian import block_laplacian, normalized_laplacian  # noqa: E402
from spectrag.kernels.pagerank import (  # noqa: E402
    personalized_pagerank,
    personalized_pagerank_blocks,
    personalized_pagerank_dense_batched,
    random_walk_operator,
)
from spectrag.kernels.select import budget_select  # noqa: E402
from spectrag.kernels.topk import tiled_topk_ip  # noqa: E402
from spectrag.pipeline import run  # noqa: E402
from spectrag.state import QueryState  # noqa: E402

# what the GPU machine lacks must not have been imported by anything above
HEAVY = sorted({m.split(".")[0] for m, module in sys.modules.items() if module is not None}
               & {"sentence_transformers", "transformers", "faiss", "bm25s", "tiktoken", "ahocorasick"})
quiet_sparse_warnings()

D = 384
P = 200
N_SEEDS = 20
K = 50  # dense and BM25 list depth
SELECT = {**dataclasses.asdict(SelectConfig()), "budget": 12_000}  # the engine's selection, at the recorded budget


def timed(fn, dev: torch.device, repeats: int = 3):
    """(median seconds after one warm-up, last output); one timed run if the warm-up took > 3 s."""
    return median_seconds(fn, repeats, device=dev, slow_s=3.0)


def on(data: dict, dev: torch.device) -> dict:
    return {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in data.items()}


# ---------------------------------------------------------------------------------------------
# Synthetic data (on the device)
# ---------------------------------------------------------------------------------------------


def make_data(n: int, dev: torch.device, seed: int) -> dict:
    """Chunks: ``emb [n, D]``, ``cluster``, ``tokens``, ``docs [n]``, ``coords [n, 32]`` and the
    graph as CSR ``indptr [n + 1]``, ``indices``, ``values [nnz]``."""
    g = torch.Generator(device=dev).manual_seed(seed)
    n_clusters = max(n // 1000, 4)
    centres = torch.randn(n_clusters, D, generator=g, device=dev)
    centres /= centres.norm(dim=1, keepdim=True)
    cluster = torch.sort(torch.randint(0, n_clusters, (n,), generator=g, device=dev)).values  # grouped
    emb = centres[cluster] + 0.6 * torch.randn(n, D, generator=g, device=dev) / D**0.5
    # kNN-like graph: 10 random links inside the chunk's cluster (a contiguous id range here)
    counts = torch.bincount(cluster, minlength=n_clusters)
    start = torch.cumsum(counts, 0) - counts
    k = 10
    row = torch.arange(n, device=dev).repeat_interleave(k)
    size = counts[cluster].repeat_interleave(k)
    col = start[cluster].repeat_interleave(k) + (torch.rand(n * k, generator=g, device=dev) * size).long()
    # random relabelling: node order carries no locality (as in an index in document order)
    perm = torch.randperm(n, generator=g, device=dev)
    row, col = perm[row], perm[col]
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n, device=dev)
    emb, cluster = emb[inv], cluster[inv]
    emb /= emb.norm(dim=1, keepdim=True)
    keep = row != col
    lo, hi = torch.minimum(row[keep], col[keep]), torch.maximum(row[keep], col[keep])
    pair = torch.unique(lo * n + hi)  # each undirected edge once, duplicates merged
    # one weight per undirected edge, stored at (i, j) and (j, i): the engine's graphs are
    # symmetric (QueryState.from_arrays checks it; the block kernels rely on it)
    w_pair = 0.05 + 0.95 * torch.rand(pair.numel(), generator=g, device=dev)
    key, order = torch.sort(torch.cat([pair, (pair % n) * n + pair // n]))  # sorted by (row, col)
    r, c = key // n, key % n
    w = torch.cat([w_pair, w_pair])[order]
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=dev)
    torch.cumsum(torch.bincount(r, minlength=n), 0, out=indptr[1:])
    coords = torch.randn(n, 32, generator=g, device=dev)
    return dict(n=n, emb=emb, cluster=cluster, indptr=indptr, indices=c, values=w,
                tokens=torch.randint(50, 401, (n,), generator=g, device=dev),
                docs=torch.arange(n, device=dev) // 8, coords=coords / coords.norm(dim=1, keepdim=True))


def graph_csr(data: dict) -> sp.csr_matrix:
    """The synthetic graph as scipy CSR ``[n, n]`` (on the host)."""
    n = data["n"]
    return sp.csr_matrix((data["values"].cpu().numpy(), data["indices"].cpu().numpy(), data["indptr"].cpu().numpy()),
                         shape=(n, n))


def make_state(data: dict, dev: torch.device) -> QueryState:
    """The pipeline's state of the synthetic chunks on ``dev``: the one graph is the fused and
    the relational graph; dense seeds by the torch backend (no FAISS on the GPU machine)."""
    W = graph_csr(data)
    dense = DenseIndex(data["emb"].cpu().numpy(), backend="torch", device=str(dev))
    return QueryState.from_arrays(data["emb"].to(dev), tokens=data["tokens"], doc_codes=data["docs"],
                                  clusters=data["cluster"], coordinates=data["coords"], weights=W, relations=W,
                                  dense=dense, device=dev)


def make_bm25(n: int, dev: torch.device, seed: int, vocab: int = 200_000, per_doc: int = 100) -> BM25Index:
    """A BM25 index over a synthetic score matrix ``[vocab, n]``: ``per_doc`` term draws per
    chunk from a Zipf(1.1) law over ``vocab`` terms (long posting lists for frequent terms, as in
    real text), scores in [0.5, 5). Drawn on ``dev``, stored on the host as the engine stores it."""
    g = torch.Generator(device=dev).manual_seed(seed)
    cdf = torch.cumsum(torch.arange(1, vocab + 1, device=dev, dtype=torch.float64) ** -1.1, 0)
    term = torch.searchsorted(cdf / cdf[-1], torch.rand(n * per_doc, generator=g, device=dev, dtype=torch.float64))
    key = torch.unique(term.clamp(max=vocab - 1) * n + torch.arange(n, device=dev).repeat_interleave(per_doc))
    crow = torch.zeros(vocab + 1, dtype=torch.int64, device=dev)
    crow[1:] = torch.cumsum(torch.bincount(key // n, minlength=vocab), 0)
    vals = 0.5 + 4.5 * torch.rand(key.numel(), generator=g, device=dev)
    M = sp.csr_matrix((vals.cpu().numpy(), (key % n).cpu().numpy(), crow.cpu().numpy()), shape=(vocab, n))
    return BM25Index(BM25Config(stemmer=""), {str(t): t for t in range(vocab)}, M)  # no PyStemmer needed


def bm25_queries(B: int, vocab: int, seed: int, terms: int = 4) -> sp.csr_matrix:
    """Query term counts ``[B, vocab]``: ``terms`` distinct terms of frequency rank 20-5,000
    each (content words: posting lists of ~10^2-10^5 chunks at n = 10^6)."""
    g = torch.Generator().manual_seed(seed)
    cols = torch.sort(20 + torch.randperm(4980, generator=g)[: B * terms].reshape(B, terms), dim=1).values
    return sp.csr_matrix((np.ones(B * terms, np.float32), cols.reshape(-1).numpy(), np.arange(0, B * terms + 1, terms)),
                         shape=(B, vocab))


def make_queries(data: dict, B: int, seed: int) -> torch.Tensor:
    """``[B, D]`` query vectors near random chunks."""
    dev = data["emb"].device
    g = torch.Generator(device=dev).manual_seed(seed)
    at = torch.randint(0, data["n"], (B,), generator=g, device=dev)
    q = data["emb"][at] + 0.5 * torch.randn(B, D, generator=g, device=dev) / D**0.5
    return q / q.norm(dim=1, keepdim=True)


def make_kg(n_ent: int, dev: torch.device, seed: int) -> dict:
    """Entities (``[N, d]``), relation texts (``[T, d]``), ~4 directed relations per entity."""
    g = torch.Generator(device=dev).manual_seed(seed)
    m = n_ent * 2
    a = torch.randint(0, n_ent, (m,), generator=g, device=dev)
    b = torch.randint(0, n_ent, (m,), generator=g, device=dev)
    keep = a != b
    src, dst = torch.cat([a[keep], b[keep]]), torch.cat([b[keep], a[keep]])
    order = torch.argsort(src * n_ent + dst)
    src, dst = src[order], dst[order]
    n_rel = max(n_ent // 10, 8)
    indptr = torch.zeros(n_ent + 1, dtype=torch.int64, device=dev)
    torch.cumsum(torch.bincount(src, minlength=n_ent), 0, out=indptr[1:])
    node_emb = torch.randn(n_ent, D, generator=g, device=dev)
    edge_emb = torch.randn(n_rel, D, generator=g, device=dev)
    return dict(node_emb=node_emb / node_emb.norm(dim=1, keepdim=True), edge_emb=edge_emb / edge_emb.norm(dim=1, keepdim=True),
                indptr=indptr, indices=dst, edge_index=torch.randint(0, n_rel, (src.numel(),), generator=g, device=dev))


def same_rows(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of rows of two ``-1``-padded ``[B, *]`` id tensors that are equal."""
    width = max(a.shape[1], b.shape[1])
    pad = lambda x: torch.nn.functional.pad(x.cpu(), (0, width - x.shape[1]), value=-1)  # noqa: E731
    return (pad(a) == pad(b)).all(1).float().mean().item()


# ---------------------------------------------------------------------------------------------
# Checks: device vs CPU reference
# ---------------------------------------------------------------------------------------------


def array_ppr(xp, xsp, A, X, *, damping: float = 0.85, tol: float = 1e-8, max_iter: int = 200):
    """Personalized PageRank by power iteration written against the numpy / scipy.sparse API, so
    that CuPy (``cupy``, ``cupyx.scipy.sparse``: the same API on the GPU) runs it as a second
    opinion independent of torch and of ``kernels.pagerank``; networkx's model: dangling mass
    goes to the restart, a column stops when its L1 change is below ``n * tol``.
    Shapes: ``A [n, n]`` (scipy CSR, ``A[i, j]`` = weight of ``i -> j``), ``X [n, C]`` -> ``[n, C]``."""
    A = xsp.csr_matrix(A)
    n = A.shape[0]
    deg = xp.asarray(A.sum(axis=1)).ravel()
    inv = xp.where(deg > 0, 1.0 / xp.where(deg > 0, deg, 1.0), 0.0)
    walk = (xsp.diags(inv) @ A).T.tocsr()  # x -> P^T x with P = D^-1 A
    dangling = (deg == 0).astype(xp.float64)
    p = X / X.sum(axis=0, keepdims=True)
    x = xp.full(X.shape, 1.0 / n)
    done = xp.zeros(X.shape[1], dtype=bool)
    for _ in range(max_iter):
        xn = damping * (walk @ x + (dangling @ x)[None, :] * p) + (1.0 - damping) * p
        err = xp.abs(xn - x).sum(axis=0)
        x = xp.where(done[None, :], x, xn)
        done = done | (err < n * tol)
        if bool(done.all()):
            break
    return x


def kernel_checks(dev: torch.device, check) -> None:
    """Every kernel on the device against the same kernel on the CPU (float64 where it has one)."""
    g = torch.Generator().manual_seed(0)

    def rel(a, b):
        return float((a.double().cpu() - b.double().cpu()).abs().max() / b.double().abs().max().clamp(min=1e-30))

    def topk():
        xq, xb = torch.randn(64, 32, generator=g), torch.randn(5000, 32, generator=g)
        s0, i0 = tiled_topk_ip(xq, xb, 10, tile=1024)
        s1, i1 = tiled_topk_ip(xq.to(dev), xb.to(dev), 10, tile=1024)
        return rel(s1, s0), f"ids identical: {bool(torch.equal(i1.cpu(), i0))}"

    A = torch_csr(random_graph(2000, 8, 1), torch.int64, torch.float64)
    L = normalized_laplacian(A)
    X = torch.rand(2000, 8, generator=g, dtype=torch.float64)

    def heat():
        ref = chebyshev_heat(L, X, 1.0)
        return rel(chebyshev_heat(L.to(torch.float32).to(dev), X.float().to(dev), 1.0), ref), "float32 device vs float64 CPU"

    def heat_half(dt):
        def fn():
            ref = chebyshev_heat(L.to(torch.float32).to(dev), X.float().to(dev), 1.0)
            return rel(chebyshev_heat(L.to(dev), X.to(dt).to(dev), 1.0), ref), f"{dt} state vs float32, same device"
        return fn

    def ppr():
        return rel(personalized_pagerank(A.to(dev), X.to(dev)).scores, personalized_pagerank(A, X).scores), "float64 on both"

    A_sp = random_graph(2000, 8, 1).astype(np.float64)

    def cupy_ppr():
        import cupy
        import cupyx.scipy.sparse as cusp

        ours = personalized_pagerank(A.to(dev), X.to(dev)).scores
        theirs = array_ppr(cupy, cusp, A_sp, cupy.asarray(X.numpy()))
        return rel(ours, torch.from_numpy(cupy.asnumpy(theirs))), "kernels.pagerank on the device vs a CuPy power iteration"

    def cupy_spmm():
        import cupy
        import cupyx.scipy.sparse as cusp

        ours = torch.sparse.mm(A.to(dev), X.to(dev))
        theirs = cusp.csr_matrix(A_sp) @ cupy.asarray(X.numpy())
        return rel(ours, torch.from_numpy(cupy.asnumpy(theirs))), "torch CSR product vs cupyx.scipy.sparse"

    Bb, Pb = 16, 50
    blk = torch.rand(Bb, Pb, Pb, generator=g, dtype=torch.float64) * (torch.rand(Bb, Pb, Pb, generator=g) < 0.2)
    blk = blk + blk.transpose(1, 2)
    bmask = torch.rand(Bb, Pb, generator=g) < 0.9
    bx = torch.rand(Bb, Pb, generator=g, dtype=torch.float64)

    def dense_heat():
        Lb = block_laplacian(blk)
        ref = chebyshev_heat_dense_batched(Lb, bx, 1.0, mask=bmask)
        return rel(chebyshev_heat_dense_batched(Lb.float().to(dev), bx.float().to(dev), 1.0, mask=bmask.to(dev)), ref), ""

    def dense_ppr():
        ref = personalized_pagerank_dense_batched(blk, bx, mask=bmask).scores
        out = personalized_pagerank_dense_batched(blk.float().to(dev), bx.float().to(dev), mask=bmask.to(dev), tol=1e-7).scores
        return rel(out, ref), ""

    E, N = 5000, 800
    src, dst = torch.randint(0, N, (E,), generator=g), torch.randint(0, N, (E,), generator=g)
    ew, ex = torch.rand(E, 16, generator=g, dtype=torch.float64), torch.rand(N, 16, generator=g, dtype=torch.float64)
    ep_ref = edge_propagate(src, dst, ew, ex, N, backend="torch")

    def ep(backend, sort):
        def fn():
            s, d, w = src, dst, ew
            if sort:
                o = torch.argsort(dst)
                s, d, w = src[o], dst[o], ew[o]
            out = edge_propagate(s.to(dev), d.to(dev), w.float().to(dev), ex.float().to(dev), N, backend=backend)
            return rel(out, ep_ref), f"backend={backend}" + (", dst sorted (segments)" if sort else "")
        return fn

    kg = make_kg(3000, torch.device("cpu"), 3)
    qa = torch.randn(32, D, generator=g)
    qa /= qa.norm(dim=1, keepdim=True)

    def activation():
        ref = spreading_activation(qa, **kg, hops=3)
        out = spreading_activation(qa.to(dev), **on(kg, dev), hops=3)
        same = torch.equal(out.node.cpu(), ref.node) and torch.equal(out.query.cpu(), ref.query)
        return rel(out.value, ref.value), f"same (query, node) pairs: {same}, layout {out.layout}"

    def select():
        B, Ps = 32, 200
        emb = torch.randn(B, Ps, D, generator=g)
        emb /= emb.norm(dim=2, keepdim=True)
        inp = dict(scores=torch.rand(B, Ps, generator=g), prox=torch.rand(B, Ps, generator=g),
                   tokens=torch.randint(50, 401, (B, Ps), generator=g), mask=torch.rand(B, Ps, generator=g) < 0.95,
                   embeddings=emb, clusters=torch.randint(0, 8, (B, Ps), generator=g),
                   docs=torch.randint(0, 30, (B, Ps), generator=g))
        ref = budget_select(**inp, **SELECT)
        out = budget_select(**on(inp, dev), **SELECT)
        return 1.0 - same_rows(out.order, ref.order), "fraction of queries with a different selection"

    check("tiled_topk_ip", topk, 1e-5)
    check("chebyshev_heat (CSR)", heat, 1e-5)
    for dt in (torch.float16, torch.bfloat16):
        if dev.type == "cuda":
            check(f"chebyshev_heat (CSR) {dt} state", heat_half(dt), 5e-2)
        else:
            check(f"chebyshev_heat (CSR) {dt} state", None, 5e-2, "skipped: torch has no half-precision CSR product on the CPU")
    check("personalized_pagerank (CSR)", ppr, 1e-4)
    if dev.type == "cuda" and importlib.util.find_spec("cupy") is not None:
        check("CuPy cross-check: CSR product", cupy_spmm, 1e-10)
        check("CuPy cross-check: personalized_pagerank", cupy_ppr, 1e-6)
    else:
        check("CuPy cross-check", None, 0.0, "skipped: needs CUDA and cupy (array_ppr is checked against numpy / scipy here)")
    check("chebyshev_heat_dense_batched", dense_heat, 1e-5)
    check("personalized_pagerank_dense_batched", dense_ppr, 1e-4)
    check("edge_propagate torch", ep("torch", False), 1e-5)
    if dev.type == "cuda" and importlib.util.find_spec("triton") is not None:
        check("edge_propagate triton (atomics)", ep("triton", False), 1e-5)
        check("edge_propagate triton (segments)", ep("triton", True), 1e-5)
    else:
        check("edge_propagate triton", None, 0.0, "skipped: needs CUDA tensors and triton (tested in the interpreter by tests/kernels)")
    check("spreading_activation", activation, 1e-5)
    check("budget_select", select, 0.0)


def stage_checks(dev: torch.device, check) -> None:
    """The engine's device stages against its CPU path: expansion, induced blocks, BM25 search,
    and the whole pipeline (device + torch kernels vs CPU + compiled kernels)."""
    cpu = torch.device("cpu")
    sdata = make_data(3000, cpu, 5)
    sq = make_queries(sdata, 24, 6)
    W = graph_csr(sdata)
    s, ids = tiled_topk_ip(sq, sdata["emb"], N_SEEDS)
    w = s / s[:, :1]
    cand_cpu = expand(ids, w, W, max_candidates=P)[0]

    def expansion():
        out = expand_torch(ids.to(dev), w.to(dev), TorchCSR.from_scipy(W, dev), max_candidates=P)[0]
        return 1.0 - same_rows(out, cand_cpu), "fraction of queries whose pool differs from the compiled CPU path"

    def blocks():
        ref = np.zeros((cand_cpu.shape[0], P, P), dtype=np.float32)
        for b in range(cand_cpu.shape[0]):  # reference: one query at a time
            c = cand_cpu[b][cand_cpu[b] >= 0].numpy()
            ref[b, : c.size, : c.size] = W[c][:, c].toarray()
        out = candidate_blocks(cand_cpu.to(dev), [TorchCSR.from_scipy(W, dev)])[0].dense()
        return float((out.cpu() - torch.from_numpy(ref)).abs().max()), "max abs difference"

    def bm25():
        index, Q = make_bm25(3000, cpu, 8, vocab=5000, per_doc=40), bm25_queries(40, 5000, 9)
        rows = (Q @ index.matrix).tocsr()
        _, got = index.search_terms(Q, K, device=dev, backend="torch")
        differ = 0
        for b in range(Q.shape[0]):  # reference: sort each query's row in Python
            lo, hi = rows.indptr[b], rows.indptr[b + 1]
            want = sorted(zip(rows.indices[lo:hi].tolist(), rows.data[lo:hi].tolist()), key=lambda t: (-t[1], t[0]))[:K]
            differ += got[b, : len(want)].tolist() != [c for c, _ in want]
        return differ / Q.shape[0], "fraction of queries whose top-50 differs (float32 sums in another order may swap near-ties)"

    cpu_state, dev_state = make_state(sdata, cpu), make_state(sdata, dev)

    def pipeline(mode: str, blocks: str):
        def fn():
            ref = run(cpu_state, sq, RetrieverConfig(device="cpu", backend="compiled", mode=mode))
            out = run(dev_state, sq.to(dev), RetrieverConfig(device=str(dev), backend="torch", mode=mode)
                      .replace(propagate__blocks=blocks))
            pools = same_rows(out.candidates, ref.candidates)
            prox = float((out.proximity.cpu() - ref.proximity).abs().max())
            return 1.0 - same_rows(out.selected_ids(), ref.selected_ids()), \
                f"fraction of queries whose selection differs; pools equal on {pools:.0%}; max proximity difference {prox:.1e}"
        return fn

    check("expansion (device) vs scipy", expansion, 0.05)
    check("induced blocks (device) vs scipy", blocks, 0.0)
    check("BM25 search_terms (device, torch) vs scipy rows sorted in Python", bm25, 0.05)
    # every blocks setting against the compiled CPU path (issue 35: the dense blocks were once
    # another PPR on a directed synthetic graph); float32 sums in another order may swap near-ties
    for mode in ("spectral", "ppr", "heat"):
        for blocks in ("dense", "sparse"):
            check(f"spectrag.pipeline.run {mode}: device + torch, blocks={blocks} vs CPU + compiled",
                  pipeline(mode, blocks), 0.05)


def run_checks(dev: torch.device, rows: list) -> None:
    def check(name, fn, tol, skipped: str = ""):
        if fn is None:
            rows.append(dict(check=name, error=float("nan"), tol=tol, ok=True, note=skipped))
            print(f"  [skip] {name}: {skipped}")
            return
        try:
            err, note = fn()
            rows.append(dict(check=name, error=err, tol=tol, ok=bool(err <= tol), note=note))
        except Exception as e:  # noqa: BLE001  (a failed check is reported, the run goes on)
            rows.append(dict(check=name, error=float("nan"), tol=tol, ok=False,
                             note=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
            traceback.print_exc()
        r = rows[-1]
        print(f"  [{'ok' if r['ok'] else 'FAIL'}] {name}: error {r['error']:.2e} (tol {tol:.0e}) {r['note']}", flush=True)

    kernel_checks(dev, check)
    stage_checks(dev, check)


# ---------------------------------------------------------------------------------------------
# Timings
# ---------------------------------------------------------------------------------------------


def whole_graph_diffusion(dev, data, batches, left, roof) -> None:
    """Heat (float32 / float16 / bfloat16 state) and PPR on the whole graph, ``X [n, B]``, with
    GB/s (bytes as in ``bench_diffusion_roofline.py``)."""
    n = data["n"]
    A = torch.sparse_csr_tensor(data["indptr"], data["indices"], data["values"], size=(n, n))
    L = normalized_laplacian(A)
    nnz_L, nnz_A = L.values().numel(), data["values"].numel()
    K_heat = len(heat_coefficients(1.0)) - 1
    op = random_walk_operator(A, dtype=torch.float32)
    for B in batches:
        if not left():
            return
        X = torch.rand(n, B, device=dev)  # (n, B)
        i_b = L.col_indices().element_size()
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            name = str(dt).replace("torch.", "")
            try:
                sec, Y = timed(lambda: chebyshev_heat(L, X.to(dt), 1.0), dev)
            except Exception as e:  # noqa: BLE001  (what torch says is the finding)
                roof.append(dict(kernel=f"heat {name}", B=B, note=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"))
                print(f"  heat {name} B={B}: {roof[-1]['note']}")
                continue
            sv = torch.empty((), dtype=dt).element_size()
            by = K_heat * (nnz_L * (sv + i_b) + (n + 1) * i_b + nnz_L * B * sv + 8 * n * B * sv)
            r = dict(kernel=f"heat {name}", B=B, spmms=K_heat, ms=sec * 1e3, GBps=by / sec / 1e9)
            if dt != torch.float32:
                ref = chebyshev_heat(L, X, 1.0)
                r["note"] = f"max rel. error vs float32 {float((Y.float() - ref).abs().max() / ref.abs().max()):.1e}"
            roof.append(r)
            print(f"  diffusion heat {name} n={n:,} B={B}: {sec * 1e3:.1f} ms, {by / sec / 1e9:.3g} GB/s", flush=True)
        if not left():
            return
        R = torch.zeros(n, B, device=dev)
        R[torch.randint(0, n, (B,), device=dev), torch.arange(B, device=dev)] = 1.0
        sec, res = timed(lambda: personalized_pagerank(op, R, tol=1e-8, raise_on_failure=False), dev)
        ib = op.PT.col_indices().element_size()
        by = res.n_iter * (nnz_A * (4 + ib) + (n + 1) * ib) + int(res.column_iters.sum()) * (nnz_A + 8 * n) * 4
        roof.append(dict(kernel="ppr float32", B=B, spmms=res.n_iter, ms=sec * 1e3, GBps=by / sec / 1e9))
        print(f"  diffusion ppr n={n:,} B={B}: {res.n_iter} iterations {sec * 1e3:.1f} ms, {by / sec / 1e9:.3g} GB/s", flush=True)
        X = R = None  # freed before the next B


def stage_timings(dev, data, state, batches, left, add) -> None:
    """Each online stage alone (seeding variants, BM25, expansion, blocks, diffusion on the
    blocks, spreading activation, selection), then ``run`` end to end, per B. Each stage's
    ``bytes`` is what it must move at least (every input read once, every output written once:
    the formulas in :data:`BOUND_NOTE`); over the copy bandwidth it is the stage's bound."""
    n = data["n"]
    bm25 = make_bm25(n, dev, 12)
    kg = make_kg(max(n // 4, 1000), dev, 11)
    W = state.torch_graph("weights")
    deg = data["values"].numel() / n  # mean in-graph degree
    postings = np.diff(bm25.matrix.indptr)  # posting-list length of every term
    for B in batches:
        if not left():
            return
        q = make_queries(data, B, 100 + B)
        sec, (s, ids) = timed(lambda: tiled_topk_ip(q, data["emb"], K), dev)
        add("seed: matmul + top-50 (float32)", B, sec, bytes_=n * D * 4)
        emb16 = data["emb"].half()
        sec16, (_, ids16) = timed(lambda: tiled_topk_ip(q.half(), emb16, K), dev)
        overlap = (ids16[:, :, None] == ids[:, None, :]).any(2).float().mean().item()
        add("seed: matmul + top-50 (float16)", B, sec16, f"top-50 overlap with float32 {overlap:.3f}", bytes_=n * D * 2)
        sec16s, _ = timed(lambda: tiled_topk_ip(q.half(), emb16, K, tile=8192), dev)
        add("seed: float16, tile 8,192 (L2-sized)", B, sec16s, "vs the default tile of 65,536", bytes_=n * D * 2)
        emb16 = None
        if importlib.util.find_spec("faiss") is not None and dev.type == "cuda":
            try:
                faiss_dense = DenseIndex(data["emb"].cpu().numpy(), backend="faiss-gpu", device=str(dev))
                sec_f, _ = timed(lambda: faiss_dense.search(q.cpu().numpy(), K), dev)
                add("seed: DenseIndex faiss-gpu", B, sec_f, "host queries in/out, float64 re-scoring")
            except Exception as e:  # noqa: BLE001
                print(f"  faiss-gpu: {type(e).__name__}: {e}")
        Q = bm25_queries(B, bm25.matrix.shape[0], 200 + B)
        sec, _ = timed(lambda: bm25.search_terms(Q, K, device=dev, backend="torch"), dev)
        add("seed: BM25 search_terms (torch)", B, sec, f"{bm25.matrix.nnz:,} matrix entries",
            bytes_=int(postings[Q.indices].sum()) * 8)
        seeds, seed_w = ids[:, :N_SEEDS], s[:, :N_SEEDS] / s[:, :1].clamp(min=1e-30)
        sec, (cand, _) = timed(lambda: expand_torch(seeds, seed_w, W, max_candidates=P), dev)
        add("expand: two hops, P = 200", B, sec, bytes_=int(B * N_SEEDS * (1 + deg) * deg * 12))
        sec, (blocks,) = timed(lambda: candidate_blocks(cand, [W]), dev)
        add("blocks: induced subgraphs (sparse BlockGraph)", B, sec, f"{blocks.nnz:,} edges",
            bytes_=int(B * P * deg * 12 + blocks.nnz * 20))
        mask = cand >= 0
        x = torch.where(mask, torch.rand(cand.shape, device=dev), torch.zeros((), device=dev))
        k_heat = len(heat_coefficients(1.0)) - 1
        iters = personalized_pagerank_blocks(blocks, (x + mask.float() * 1e-3).double(), mask=mask, tol=1e-8,
                                             max_iter=200, raise_on_failure=False).n_iter
        for dense in (True, False):  # bmm on [B, P, P] vs one block-diagonal CSR (the engine's stage functions)
            kind = "dense [B, P, P]" if dense else "sparse"
            sec, _ = timed(lambda: heat_proximity(blocks, x, mask, 1.0, dense=dense), dev)
            per = B * P * P * 4 if dense else blocks.nnz * 8 + B * P * 4 * 3  # one product: operator + vectors
            add(f"propagate: heat on blocks ({kind})", B, sec, f"{k_heat} products", bytes_=k_heat * per)
            sec, _ = timed(lambda: ppr_proximity(blocks, x + mask.float() * 1e-3, mask, dense=dense), dev)
            per = B * P * P * 8 if dense else blocks.nnz * 12 + B * P * 8 * 3
            add(f"propagate: PPR on blocks ({kind}, float64)", B, sec, f"{iters} iterations", bytes_=iters * per)
        if not left():
            return
        qk = torch.randn(B, D, device=dev)
        qk /= qk.norm(dim=1, keepdim=True)
        sec, act = timed(lambda: spreading_activation(qk, **kg, hops=3), dev)
        add("activation: spectrag.kernels.spreading_activation", B, sec,
            f"{kg['node_emb'].shape[0]:,} entities, 3 hops, {act.value.numel():,} (query, node) pairs, layout {act.layout}")
        emb = data["emb"][cand.clamp(min=0)]  # (B, P, d)
        ids_c = cand.clamp(min=0)
        sel_in = dict(scores=(emb * q[:, None, :]).sum(2).masked_fill(~mask, 0.0), prox=torch.rand(cand.shape, device=dev),
                      tokens=data["tokens"][ids_c].masked_fill(~mask, 1), mask=mask, embeddings=emb,
                      clusters=data["cluster"][ids_c], docs=data["docs"][ids_c])
        sec, sel = timed(lambda: budget_select(**sel_in, **SELECT), dev)
        add("select: budget_select", B, sec, f"{sel.n_steps} steps", bytes_=B * P * (D * 4 + 40))
        if not left():
            return
        config = RetrieverConfig(device=str(dev), budget=SELECT["budget"])
        sec, res = timed(lambda: run(state, q, config), dev)
        e2e = (n * D * 4 + int(B * N_SEEDS * (1 + deg) * deg * 12) + int(B * P * deg * 12 + blocks.nnz * 20)
               + iters * (B * P * P * 8 if dev.type == "cuda" else blocks.nnz * 12 + B * P * 8 * 3) + B * P * (D * 4 + 40))
        add("end-to-end: spectrag.pipeline.run (spectral, dense seeds)", B, sec,
            "stages ms: " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in res.seconds.items()), bytes_=e2e)


#: how each stage's least traffic is counted (bytes; n chunks, D = 384, B queries, P = 200,
#: S = 20 seeds, deg the mean degree, nnz_b the blocks' edges, int64 ids + float32 values = 12 B)
BOUND_NOTE = ("seed: the embeddings once (n D 4, or n D 2 in float16); BM25: the query terms' posting lists (8 B an "
              "entry); expand: the CSR rows of the seeds and their neighbours (B S (1 + deg) deg 12); blocks: the "
              "pool nodes' rows and the blocks written (B P deg 12 + 20 nnz_b); heat / PPR: per product the operator "
              "(dense B P^2 s, sparse nnz_b (s + 4)) and three [B, P] vectors, times the products / iterations; "
              "select: the pool's embeddings once (B P (4 D + 40)); end to end: the sum of the stages it runs")


def run_timings(dev, data, batches, deadline, rows, roof, ceiling: float) -> None:
    def left() -> bool:
        if time.perf_counter() > deadline:
            print("  (time budget reached: remaining timings skipped)", flush=True)
            return False
        return True

    def add(stage, B, sec, note="", bytes_=None):
        row = dict(stage=stage, B=B, ms=sec * 1e3, qps=B / sec, note=note)
        if bytes_ is not None:  # the stage's bound: its least traffic at the measured copy bandwidth
            row.update(bytes=int(bytes_), bound_ms=bytes_ / (ceiling * 1e9) * 1e3, share=bytes_ / (ceiling * 1e9) / sec)
        rows.append(row)
        share = f" bound {row['bound_ms']:.3f} ms ({row['share']:.0%})" if bytes_ is not None else ""
        print(f"  {stage:<40} B={B:>5}: {sec * 1e3:9.2f} ms  {B / sec:>11,.0f} queries/s{share}  {note}", flush=True)

    whole_graph_diffusion(dev, data, batches, left, roof)
    t = time.perf_counter()
    state = make_state(data, dev)
    print(f"  query state on {dev}: {time.perf_counter() - t:.1f} s", flush=True)
    stage_timings(dev, data, state, batches, left, add)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="n = 1e4, B = 32, 128 (runs on a CPU in a minute or two)")
    ap.add_argument("--n", type=int, default=None, help="chunks (default: 1e6, or 1e4 with --small)")
    ap.add_argument("--batches", default=None, help="comma-separated B (default: 256,1024, or 32,128 with --small)")
    ap.add_argument("--device", default="auto", help="auto (cuda when present) or a torch device")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new timings after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    n = args.n or (10_000 if args.small else 1_000_000)
    batches = [int(b) for b in (args.batches or ("32,128" if args.small else "256,1024")).split(",")]
    if dev.type == "cpu":  # small problems on a shared CPU: extra OpenMP threads only spin
        torch.set_num_threads(1)
    record = new_record("median of 3 after one warm-up (one run when the warm-up took over 3 s), synchronized "
                        "on CUDA; checks: one run", device=dev)
    present = {m: importlib.util.find_spec(m) is not None for m in ("triton", "cupy", "faiss", "torch_geometric", "sentence_transformers")}
    print(f"device {dev}: {record['machine'].get('gpu', record['machine']['cpu'])}; torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}); n = {n:,}, B = {batches}; present: {', '.join(k for k, v in present.items() if v) or 'none'}",
          flush=True)
    print(f"the engine modules imported here pulled in: {HEAVY or 'nothing heavy'}", flush=True)
    checks: list = [dict(check="imports pull no sentence-transformers / transformers / faiss / bm25s / tiktoken / "
                         "pyahocorasick", error=float(len(HEAVY)), tol=0.0, ok=not HEAVY, note=", ".join(HEAVY))]
    print("== copy bandwidth (ceiling)", flush=True)
    ceiling = copy_bandwidth(dev, mib=2048 if dev.type == "cuda" else 256, repeats=5)["torch_GBps"]
    print(f"  device-to-device copy: {ceiling:.3g} GB/s", flush=True)
    print("== checks: device vs CPU reference", flush=True)
    run_checks(dev, checks)
    print(f"== data: n = {n:,} on {dev}", flush=True)
    t = time.perf_counter()
    data = make_data(n, dev, 0)
    sync(dev)
    t_data = time.perf_counter() - t
    print(f"  {t_data:.1f} s; graph nnz {data['values'].numel():,} ({data['values'].numel() / n:.1f} per row)", flush=True)
    print("== timings", flush=True)
    rows: list = []
    roof: list = []
    run_timings(dev, data, batches, T0 + args.budget_s, rows, roof, ceiling)
    for r in roof:
        if "GBps" in r:
            r["ratio"] = r["GBps"] / ceiling
    record.update(present=present, n=n, batches=batches, graph_nnz=data["values"].numel(), copy_GBps=ceiling,
                  checks=checks, timings=rows, diffusion=roof, data_seconds=t_data)
    record["command"] = "bash bench/gpu_check.sh " + " ".join(sys.argv[1:])
    finish_record(record)
    write_results(os.path.join(args.out, f"gpu_check_{dev.type}"), report(record), record)
    print(f"{sum(not c['ok'] for c in checks)} failed check(s)")


def report(res: dict) -> list[str]:
    fails = [c for c in res["checks"] if not c["ok"]]
    L = results_header(f"GPU check ({res['machine'].get('gpu', res['machine']['cpu'])})", res)
    present = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in res["present"].items())
    L += [f"Present: {present}.  ",
          f"Data: n = {res['n']:,} synthetic chunks (d = {D}), graph nnz {res['graph_nnz']:,}; built on the device in "
          f"{res['data_seconds']:.1f} s.", "",
          f"## Checks against the CPU reference: {len(res['checks']) - len(fails)}/{len(res['checks'])} passed", ""]
    L += md_table(res["checks"], [("check", "check", ""), ("error", "error", ".2e"), ("tolerance", "tol", ".0e"),
                                  ("result", lambda c: "ok" if c["ok"] else "**FAIL**", ""), ("note", "note", "")])
    L += ["", f"## Diffusion on the whole graph (X [n, B]) against the copy ceiling ({res['copy_GBps']:.3g} GB/s, "
          "device-to-device copy measured in this run)", "",
          "Bytes: heat K [CSR + nnz B s + 8 n B s]; PPR iters CSR + sum over columns of iters (nnz + 8 n) s.", ""]
    L += md_table(res["diffusion"], [("kernel", "kernel", ""), ("B", "B", "d"), ("SpMMs", "spmms", "d"), ("ms", "ms", ".1f"),
                                     ("GB/s", "GBps", ".3g"), ("/ ceiling", "ratio", ".0%"), ("note", "note", "")])
    L += ["", "## Stages at this n", ""]
    L += [f"Bound: each stage's least traffic over the copy bandwidth ({res['copy_GBps']:.3g} GB/s); share = bound / "
          f"measured. Bytes: {BOUND_NOTE}.", ""]
    L += md_table(res["timings"], [("stage", "stage", ""), ("B", "B", "d"), ("ms", "ms", ".2f"), ("queries/s", "qps", ",.0f"),
                                   ("bound ms", "bound_ms", ".3f"), ("share of bound", "share", ".1%"), ("note", "note", "")])
    e2e = [r for r in res["timings"] if r["stage"].startswith("end-to-end")]
    if e2e:
        best = max(e2e, key=lambda r: r["B"])
        L += ["", f"End-to-end at B = {best['B']}: **{best['qps']:,.0f} queries/s** (goal on the H200 at 10^6 chunks, "
              "B = 1,024: 20,000)."]
    return L


if __name__ == "__main__":
    main()
