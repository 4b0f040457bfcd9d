"""GPU check: every kernel against the CPU reference on random inputs, then each online stage
timed at 10^6 chunks for B = 256 and 1,024, and end-to-end queries/s. Run it with
``bash bench/gpu_check.sh`` (``PYTHONPATH=.``; needs only torch, numpy and scipy; Triton,
CuPy and faiss-gpu are used when present).

    bash bench/gpu_check.sh                  # CUDA machine: n = 1e6, B = 256, 1024 (< 8 min)
    bash bench/gpu_check.sh --small          # any machine: n = 1e4, B = 32, 128 (~1-2 min on one CPU core)

Synthetic data, generated on the device: ``n`` chunk embeddings (d = 384, float32,
L2-normalised) drawn around ``n / 1000`` cluster centres; a kNN-like graph where every chunk
links to 10 random chunks of its own cluster (symmetrised: ~20 nonzeros per row, weights in
(0, 1]), node ids randomly permuted (no free locality); token lengths in [50, 400], 8 chunks
per document, 32-dim spectral coordinates; a knowledge graph of ``n / 4`` entities with ~4
directed relations each for spreading activation.

The end-to-end query is the ``spectral`` mode of ``spectrag.pipeline`` composed from
kernels on the device (engine itself is not imported: it pulls tokenizers and FAISS):
dense seeds (tiled matmul top-50) -> two-hop expansion to P = 200 -> induced ``[B, P, P]``
blocks -> relevance, PPR on the blocks (float32) and spectral proximity -> ``budget_select``.
No BM25 (text) stage: seeds are dense only.

Results: ``gpu_check_<cuda|cpu>.md`` and ``.json`` in ``--out`` (default ``$OUT`` when set,
else ``bench/results``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
import warnings

import numpy as np
import scipy.sparse as sp
import torch

from _common import median_seconds  # noqa: E402  (bench/, no heavy imports)

T0 = time.perf_counter()
import spectrag.kernels  # noqa: E402  (must not import sentence-transformers / faiss)

HEAVY = sorted({m.split(".")[0] for m in sys.modules} & {"sentence_transformers", "faiss", "transformers"})

from spectrag.kernels.activation import spreading_activation  # noqa: E402
from spectrag.kernels.edge_propagate import edge_propagate  # noqa: E402
from spectrag.kernels.heat import chebyshev_heat, chebyshev_heat_dense_batched, heat_coefficients  # noqa: E402
from spectrag.kernels.pagerank import (  # noqa: E402
    personalized_pagerank,
    personalized_pagerank_dense_batched,
    random_walk_operator,
)
from spectrag.config import SelectConfig# noqa: E402
from spectrag.kernels.select import budget_select
from spectrag.kernels.topk import tiled_topk_ip  # noqa: E402

# the engine's device expansion and blocks (these modules import neither FAISS nor sentence-transformers)
from spectrag.expand.pool import expand# noqa: E402
from spectrag.kernels.csr import TorchCSR# noqa: E402
from spectrag.expand.blocks import candidate_blocks_torch
from spectrag.expand.pool import expand_torch
from spectrag.index.lexical import top_k_scores  # noqa: E402  (bm25s is imported lazily there)
from spectrag.rescore.bridge import bridge_relevance  # noqa: E402
from spectrag.config import RetrieverConfig# noqa: E402
from spectrag.kernels.laplacian import block_laplacian# noqa: E402
from spectrag.propagate.proximity import ppr_proximity, spectral_proximity

warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
warnings.filterwarnings("ignore", message=".*Sparse invariant checks are implicitly disabled.*")

D = 384
P = 200
N_SEEDS = 20
K_DENSE = 50
K_BM25 = 50


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev: torch.device, repeats: int = 3):
    """(median seconds after one warm-up, last output); one timed run if the warm-up took > 3 s."""
    return median_seconds(fn, repeats, device=dev, slow_s=3.0)


def copy_bandwidth(dev: torch.device, mib: int) -> float:
    """GB/s of a device-to-device copy (read + write bytes), median of 5."""
    a = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=dev).normal_()
    b = torch.empty_like(a)
    sec, _ = timed(lambda: b.copy_(a), dev, 5)
    return 2 * a.numel() * 4 / sec / 1e9


# ---------------------------------------------------------------------------------------------
# Synthetic data (on the device)
# ---------------------------------------------------------------------------------------------


def make_data(n: int, dev: torch.device, seed: int) -> dict:
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
    r = torch.cat([row[keep], col[keep]])
    c = torch.cat([col[keep], row[keep]])
    key = torch.unique(r * n + c)  # sorted by (row, col), duplicates merged
    r, c = key // n, key % n
    w = 0.05 + 0.95 * torch.rand(key.numel(), generator=g, device=dev)
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=dev)
    torch.cumsum(torch.bincount(r, minlength=n), 0, out=indptr[1:])
    coords = torch.randn(n, 32, generator=g, device=dev)
    coords /= coords.norm(dim=1, keepdim=True)
    # queries: near random chunks
    return dict(
        n=n, emb=emb, cluster=cluster, indptr=indptr, indices=c, values=w,
        tokens=torch.randint(50, 401, (n,), generator=g, device=dev),
        docs=torch.arange(n, device=dev) // 8, coords=coords,
    )


def make_bm25(n: int, dev: torch.device, seed: int, vocab: int = 200_000, per_doc: int = 100) -> torch.Tensor:
    """A BM25-like score matrix ``[vocab, n]`` (sparse CSR on the device): ``per_doc`` term draws
    per chunk from a Zipf(1.1) law over ``vocab`` terms (long posting lists for frequent terms,
    as in real text), scores in [0.5, 5)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    cdf = torch.cumsum(torch.arange(1, vocab + 1, device=dev, dtype=torch.float64) ** -1.1, 0)
    term = torch.searchsorted(cdf / cdf[-1], torch.rand(n * per_doc, generator=g, device=dev, dtype=torch.float64))
    key = torch.unique(term.clamp(max=vocab - 1) * n + torch.arange(n, device=dev).repeat_interleave(per_doc))
    crow = torch.zeros(vocab + 1, dtype=torch.int64, device=dev)
    crow[1:] = torch.cumsum(torch.bincount(key // n, minlength=vocab), 0)
    vals = 0.5 + 4.5 * torch.rand(key.numel(), generator=g, device=dev)
    return torch.sparse_csr_tensor(crow, key % n, vals, size=(vocab, n), check_invariants=False)


def bm25_queries(B: int, vocab: int, dev: torch.device, seed: int, terms: int = 4) -> torch.Tensor:
    """Query term counts ``[B, vocab]`` (sparse CSR): ``terms`` distinct terms of frequency rank
    20-5,000 each (content words: posting lists of ~10^2-10^5 chunks at n = 10^6)."""
    g = torch.Generator(device=dev).manual_seed(seed)
    cols = torch.sort(20 + torch.randperm(4980, generator=g, device=dev)[: B * terms].reshape(B, terms), dim=1).values
    crow = torch.arange(0, B * terms + 1, terms, device=dev)
    return torch.sparse_csr_tensor(crow, cols.reshape(-1), torch.ones(B * terms, device=dev), size=(B, vocab),
                                   check_invariants=False)


def bm25_search(Q: torch.Tensor, M: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's BM25 search on the device (``BM25Index.search``, backend torch): one sparse
    product and the positive top-k per row."""
    rows = torch.sparse.mm(Q, M)
    return top_k_scores(rows.crow_indices(), rows.col_indices(), rows.values(), k)


def make_queries(data: dict, B: int, seed: int) -> torch.Tensor:
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


# ---------------------------------------------------------------------------------------------
# Online stages composed from kernels (device versions of engine/expand/pool.py)
# ---------------------------------------------------------------------------------------------


def graph_of(data: dict) -> TorchCSR:
    return TorchCSR(data["indptr"], data["indices"], data["values"])


def expand_device(data: dict, seeds: torch.Tensor, seed_w: torch.Tensor, p: int = P, hops: int = 2) -> torch.Tensor:
    """Candidate pools ``[B, p]`` (-1 padded) on the device: the engine's torch expansion
    (``spectrag.expand.pool``), what ``Retriever`` runs on a GPU."""
    return expand_torch(seeds, seed_w, graph_of(data), max_candidates=p, hops=hops)[0]


def expand_reference(data: dict, seeds: np.ndarray, seed_w: np.ndarray, p: int = P) -> np.ndarray:
    """The same rule by the engine's CPU path (scipy sparse products), for the check."""
    n = data["n"]
    W = sp.csr_matrix((data["values"].cpu().numpy(), data["indices"].cpu().numpy(), data["indptr"].cpu().numpy()), shape=(n, n))
    return expand(torch.from_numpy(seeds), torch.from_numpy(seed_w), W, max_candidates=p)[0].numpy()


def blocks_device(data: dict, cand: torch.Tensor) -> torch.Tensor:
    """Induced subgraphs ``W[c_b, c_b]`` as dense ``[B, P, P]`` (zero rows/cols on padding), by the
    engine's ``candidate_blocks_torch``."""
    return candidate_blocks_torch(cand, [graph_of(data)])[0]


def end_to_end(data: dict, q: torch.Tensor, cfg: SelectConfig) -> tuple[torch.Tensor, dict]:
    """One batch through the engine's spectral-mode stages (``Retriever.score_batch`` with the
    ``RetrieverConfig`` defaults) on the device: dense seeds (no BM25: the synthetic data has no
    text), expansion, blocks of the fused and relational graphs (the one synthetic graph serves
    as both), PPR + spectral proximity, bridging, selection. Returns the selection order and
    seconds per stage."""
    dev = q.device
    rc = RetrieverConfig()
    sec = {}
    t = time.perf_counter()

    def stage(name):
        nonlocal t
        sync(dev)
        now = time.perf_counter()
        sec[name] = now - t
        t = now

    s, ids = tiled_topk_ip(q, data["emb"], rc.k_dense)
    stage("seed")
    seeds, seed_w = ids[:, : rc.n_seeds], s[:, : rc.n_seeds]
    seed_w = seed_w / seed_w[:, :1].clamp(min=1e-30)
    cand = expand_device(data, seeds, seed_w, p=rc.max_candidates, hops=rc.hops)
    stage("expand")
    blocks, relations = candidate_blocks_torch(cand, [graph_of(data), graph_of(data)])
    stage("blocks")
    mask = cand >= 0
    emb = data["emb"][cand.clamp(min=0)]  # (B, P, d)
    relevance = (emb * q[:, None, :]).sum(dim=2).masked_fill(~mask, 0.0)
    restart = ((cand[:, :, None] == seeds[:, None, :]).float() * seed_w[:, None, :].clamp(min=0)).sum(dim=2)
    ppr = ppr_proximity(blocks, restart, mask, damping=rc.damping)
    prox = (0.5 * ppr + 0.5 * spectral_proximity(data["coords"], cand, seeds, mask)).clamp(0.0, 1.0)
    stage("propagate")
    bridged = bridge_relevance(relations, relevance, cand, sources=rc.bridge_sources, lam=rc.bridge_lambda,
                               gamma=rc.bridge_gamma, rounds=rc.bridge_rounds)
    scores = torch.where(mask, (1 - rc.alpha) * bridged + rc.alpha * prox, torch.zeros_like(relevance))
    stage("bridge")
    ids_c = cand.clamp(min=0)
    sel = budget_select(scores, prox, data["tokens"][ids_c].masked_fill(~mask, 1), mask, emb,
                        data["cluster"][ids_c], data["docs"][ids_c], cfg)
    stage("select")
    return sel.order, sec


# ---------------------------------------------------------------------------------------------
# Checks: device vs CPU reference
# ---------------------------------------------------------------------------------------------


def small_graph(n: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    m = n * 4
    r, c = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = r != c
    w = rng.random(keep.sum()) + 0.05
    A = sp.coo_matrix((np.concatenate([w, w]), (np.concatenate([r[keep], c[keep]]), np.concatenate([c[keep], r[keep]]))),
                      shape=(n, n)).tocsr()
    A.sum_duplicates()
    return torch.sparse_csr_tensor(torch.from_numpy(A.indptr), torch.from_numpy(A.indices.astype(np.int64)),
                                   torch.from_numpy(A.data), size=(n, n))


def sym_laplacian(A: torch.Tensor) -> torch.Tensor:
    Ad = A.to_dense()
    s = Ad.sum(1).clamp(min=1e-30).rsqrt()
    return (torch.eye(A.shape[0], dtype=Ad.dtype) - s[:, None] * Ad * s[None, :]).to_sparse_csr()


def run_checks(dev: torch.device, rows: list) -> None:
    def check(name, fn, tol):
        try:
            err, note = fn()
            rows.append(dict(check=name, error=err, tol=tol, ok=bool(err <= tol), note=note))
        except Exception as e:  # noqa: BLE001  (a failed check is reported, the run goes on)
            rows.append(dict(check=name, error=float("nan"), tol=tol, ok=False,
                             note=f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
            traceback.print_exc()
        r = rows[-1]
        print(f"  [{'ok' if r['ok'] else 'FAIL'}] {name}: error {r['error']:.2e} (tol {tol:.0e}) {r['note']}", flush=True)

    g = torch.Generator().manual_seed(0)
    cpu = torch.device("cpu")

    def rel(a, b):
        return float((a.double().cpu() - b.double().cpu()).abs().max() / b.double().abs().max().clamp(min=1e-30))

    def topk():
        xq, xb = torch.randn(64, 32, generator=g), torch.randn(5000, 32, generator=g)
        s0, i0 = tiled_topk_ip(xq, xb, 10, tile=1024)
        s1, i1 = tiled_topk_ip(xq.to(dev), xb.to(dev), 10, tile=1024)
        return rel(s1, s0), f"ids identical: {bool(torch.equal(i1.cpu(), i0))}"

    A = small_graph(2000, 1)
    L = sym_laplacian(A)
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
        ref = personalized_pagerank(A, X).scores
        out = personalized_pagerank(A.to(dev), X.to(dev)).scores
        return rel(out, ref), "float64 on both"

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

    kg = make_kg(3000, cpu, 3)
    qa = torch.randn(32, D, generator=g)
    qa /= qa.norm(dim=1, keepdim=True)

    def activation():
        ref = spreading_activation(qa, **kg, hops=3)
        out = spreading_activation(qa.to(dev), **{k: v.to(dev) for k, v in kg.items()}, hops=3)
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
        ref = budget_select(**inp)
        out = budget_select(**{k: v.to(dev) for k, v in inp.items()})
        same = (out.order.cpu() == ref.order).all(1).float().mean().item() if out.order.shape == ref.order.shape else 0.0
        return 1.0 - same, "fraction of queries with a different selection"

    sdata = make_data(3000, cpu, 5)
    sq = make_queries(sdata, 24, 6)

    def expand():
        s, ids = tiled_topk_ip(sq, sdata["emb"], N_SEEDS)
        w = s / s[:, :1]
        ref = expand_reference(sdata, ids.numpy(), w.numpy())
        out = expand_device({k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in sdata.items()},
                            ids.to(dev), w.to(dev)).cpu().numpy()
        same = (out == ref).all(1).mean()
        return 1.0 - float(same), "fraction of queries whose pool differs from the scipy reference"

    def blocks():
        s, ids = tiled_topk_ip(sq, sdata["emb"], N_SEEDS)
        cand = expand_device(sdata, ids, s / s[:, :1])
        W = sp.csr_matrix((sdata["values"].numpy(), sdata["indices"].numpy(), sdata["indptr"].numpy()))
        ref = np.zeros((cand.shape[0], P, P), dtype=np.float32)
        for b in range(cand.shape[0]):  # reference: one query at a time
            c = cand[b][cand[b] >= 0].numpy()
            ref[b, : c.size, : c.size] = W[c][:, c].toarray()
        out = blocks_device({k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in sdata.items()}, cand.to(dev))
        return rel(out, torch.from_numpy(ref)), ""

    check("tiled_topk_ip", topk, 1e-5)
    check("chebyshev_heat (CSR)", heat, 1e-5)
    for dt in (torch.float16, torch.bfloat16):
        if dev.type == "cuda":
            check(f"chebyshev_heat (CSR) {dt} state", heat_half(dt), 5e-2)
        else:
            rows.append(dict(check=f"chebyshev_heat (CSR) {dt} state", error=float("nan"), tol=5e-2, ok=True,
                             note="skipped: torch has no half-precision CSR product on the CPU"))
            print(f"  [skip] {rows[-1]['check']}: {rows[-1]['note']}")
    check("personalized_pagerank (CSR)", ppr, 1e-4)
    check("chebyshev_heat_dense_batched", dense_heat, 1e-5)
    check("personalized_pagerank_dense_batched", dense_ppr, 1e-4)
    check("edge_propagate torch", ep("torch", False), 1e-5)
    if dev.type == "cuda" and importlib.util.find_spec("triton") is not None:
        check("edge_propagate triton (atomics)", ep("triton", False), 1e-5)
        check("edge_propagate triton (segments)", ep("triton", True), 1e-5)
    else:
        rows.append(dict(check="edge_propagate triton", error=float("nan"), tol=0.0, ok=True,
                         note="skipped: needs CUDA tensors and triton (tested in the interpreter by tests/kernels)"))
        print(f"  [skip] edge_propagate triton: {rows[-1]['note']}")
    check("spreading_activation", activation, 1e-5)
    check("budget_select", select, 0.0)
    def bm25():
        M, Q = make_bm25(3000, cpu, 8, vocab=5000, per_doc=40), bm25_queries(40, 5000, cpu, 9)
        Ms = sp.csr_matrix((M.values().numpy(), M.col_indices().numpy(), M.crow_indices().numpy()), shape=M.shape)
        Qs = sp.csr_matrix((Q.values().numpy(), Q.col_indices().numpy(), Q.crow_indices().numpy()), shape=Q.shape)
        rows = (Qs @ Ms).tocsr()
        s, ids = bm25_search(Q.to(dev), M.to(dev), K_BM25)
        ids = ids.cpu()
        differ = 0
        for b in range(Q.shape[0]):  # reference: sort each query's row in Python
            lo, hi = rows.indptr[b], rows.indptr[b + 1]
            want = sorted(zip(rows.indices[lo:hi].tolist(), rows.data[lo:hi].tolist()), key=lambda t: (-t[1], t[0]))[:K_BM25]
            differ += ids[b, : len(want)].tolist() != [c for c, _ in want]
        return differ / Q.shape[0], "fraction of queries whose top-50 differs (float32 sums in another order may swap near-ties)"

    check("expansion (device) vs scipy", expand, 0.05)
    check("BM25 search (device) vs scipy rows sorted in Python", bm25, 0.05)

    def pipeline():
        ref, _ = end_to_end(sdata, sq, SelectConfig())
        dev_data = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in sdata.items()}
        out, _ = end_to_end(dev_data, sq.to(dev), SelectConfig())
        same = (out.cpu() == ref).all(1).float().mean().item() if out.shape == ref.shape else 0.0
        return 1.0 - same, "fraction of queries whose selection differs from the same stages on the CPU"

    check("engine spectral stages end to end (device) vs CPU", pipeline, 0.05)  # float32 vs float64 sums: near-ties at the cut may swap
    check("induced blocks (device) vs scipy", blocks, 0.0)


# ---------------------------------------------------------------------------------------------
# Timings
# ---------------------------------------------------------------------------------------------


def run_timings(dev, data, batches, deadline, rows, roof, args) -> None:
    n = data["n"]
    cfg = SelectConfig()

    def left() -> bool:
        if time.perf_counter() > deadline:
            print("  (time budget reached: remaining timings skipped)", flush=True)
            return False
        return True

    def add(stage, B, sec, note=""):
        rows.append(dict(stage=stage, B=B, ms=sec * 1e3, qps=B / sec, note=note))
        print(f"  {stage:<34} B={B:>5}: {sec * 1e3:9.2f} ms  {B / sec:>11,.0f} queries/s  {note}", flush=True)

    # global-graph diffusion roofline (X [n, B]): what one SpMM-based heat / PPR costs at this n
    A = torch.sparse_csr_tensor(data["indptr"], data["indices"], data["values"], size=(n, n))
    deg = torch.zeros(n, device=dev).index_add_(0, torch.repeat_interleave(torch.arange(n, device=dev), torch.diff(data["indptr"])), data["values"])
    s = deg.clamp(min=1e-30).rsqrt()
    rowi = torch.repeat_interleave(torch.arange(n, device=dev), torch.diff(data["indptr"]))
    Lv = -data["values"] * s[rowi] * s[data["indices"]]
    Lcoo = torch.sparse_coo_tensor(torch.cat([torch.stack([rowi, data["indices"]]), torch.arange(n, device=dev).expand(2, n)], 1),
                                   torch.cat([Lv, torch.ones(n, device=dev)]), (n, n)).coalesce()
    L = Lcoo.to_sparse_csr()
    nnz_L, nnz_A = L.values().numel(), data["values"].numel()
    K = len(heat_coefficients(1.0)) - 1
    op = random_walk_operator(A, dtype=torch.float32)
    for B in batches:
        if not left():
            return
        X = torch.rand(n, B, device=dev)
        i_b = L.col_indices().element_size()
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            try:
                sec, Y = timed(lambda: chebyshev_heat(L, X.to(dt), 1.0), dev)
            except Exception as e:  # noqa: BLE001
                roof.append(dict(kernel=f"heat {dt}", B=B, note=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"))
                print(f"  heat {dt} B={B}: {roof[-1]['note']}")
                continue
            sv = torch.empty((), dtype=dt).element_size()
            by = K * (nnz_L * (sv + i_b) + (n + 1) * i_b + nnz_L * B * sv + 8 * n * B * sv)
            r = dict(kernel=f"heat {str(dt).replace('torch.', '')}", B=B, spmms=K, ms=sec * 1e3, GBps=by / sec / 1e9)
            if dt != torch.float32:
                ref = chebyshev_heat(L, X, 1.0)
                r["rel_err_vs_fp32"] = float((Y.float() - ref).abs().max() / ref.abs().max())
            roof.append(r)
            print(f"  diffusion heat {dt} n={n:,} B={B}: {sec * 1e3:.1f} ms, {by / sec / 1e9:.3g} GB/s", flush=True)
        if not left():
            return
        R = torch.zeros(n, B, device=dev)
        R[torch.randint(0, n, (B,), device=dev), torch.arange(B, device=dev)] = 1.0
        sec, res = timed(lambda: personalized_pagerank(op, R, tol=1e-8, raise_on_failure=False), dev)
        ib = op.PT.col_indices().element_size()
        by = res.n_iter * (nnz_A * (4 + ib) + (n + 1) * ib) + int(res.column_iters.sum()) * (nnz_A + 8 * n) * 4
        roof.append(dict(kernel="ppr float32", B=B, spmms=res.n_iter, ms=sec * 1e3, GBps=by / sec / 1e9))
        print(f"  diffusion ppr n={n:,} B={B}: {res.n_iter} iterations {sec * 1e3:.1f} ms, {by / sec / 1e9:.3g} GB/s", flush=True)
        del X, R

    bm25_M = make_bm25(n, dev, 12)
    kg = make_kg(max(n // 4, 1000), dev, 11)
    for B in batches:
        if not left():
            return
        q = make_queries(data, B, 100 + B)
        sec, (s, ids) = timed(lambda: tiled_topk_ip(q, data["emb"], K_DENSE), dev)
        add("seed: matmul + top-50 (float32)", B, sec)
        emb16 = data["emb"].half()
        sec16, (s16, ids16) = timed(lambda: tiled_topk_ip(q.half(), emb16, K_DENSE), dev)
        overlap = (ids16[:, :, None] == ids[:, None, :]).any(2).float().mean().item()
        add("seed: matmul + top-50 (float16)", B, sec16, f"top-50 overlap with float32 {overlap:.3f}")
        sec16s, _ = timed(lambda: tiled_topk_ip(q.half(), emb16, K_DENSE, tile=8192), dev)
        add("seed: float16, tile 8,192 (L2-sized)", B, sec16s, "vs the default tile of 65,536")
        del emb16
        if importlib.util.find_spec("faiss") is not None and dev.type == "cuda":
            try:
                import faiss  # noqa: PLC0415

                res_f = faiss.StandardGpuResources()
                index = faiss.GpuIndexFlatIP(res_f, D)
                index.add(data["emb"].cpu().numpy())
                qn = q.cpu().numpy()
                sec_f, _ = timed(lambda: index.search(qn, K_DENSE), dev)
                add("seed: faiss-gpu IndexFlatIP", B, sec_f, "host queries in/out")
            except Exception as e:  # noqa: BLE001
                print(f"  faiss-gpu: {type(e).__name__}: {e}")
        bm25_Q = bm25_queries(B, bm25_M.shape[0], dev, 200 + B)
        sec, (bs, _) = timed(lambda: bm25_search(bm25_Q, bm25_M, K_BM25), dev)
        add("seed: BM25 sparse product + top-50", B, sec, f"{bm25_M.values().numel():,} matrix entries")
        seeds, seed_w = ids[:, :N_SEEDS], s[:, :N_SEEDS] / s[:, :1].clamp(min=1e-30)
        sec, cand = timed(lambda: expand_device(data, seeds, seed_w), dev)
        add("expand: two hops, P = 200", B, sec)
        sec, blocks = timed(lambda: blocks_device(data, cand), dev)
        add("blocks: induced [B, 200, 200]", B, sec)
        mask = cand >= 0
        x = torch.where(mask, torch.rand(cand.shape, device=dev), torch.zeros((), device=dev))
        Lb = block_laplacian(blocks)
        for spmm in ("dense", "sparse"):  # bmm on [B, P, P] vs one block-diagonal CSR
            sec, _ = timed(lambda: chebyshev_heat_dense_batched(Lb, x, 1.0, mask=mask, spmm=spmm), dev)
            add(f"diffusion: heat on blocks ({spmm})", B, sec)
            sec, res = timed(lambda: personalized_pagerank_dense_batched(
                blocks, x + mask.float() * 1e-3, mask=mask, tol=1e-6, max_iter=200, raise_on_failure=False, spmm=spmm), dev)
            add(f"diffusion: PPR on blocks ({spmm}, float32)", B, sec, f"{res.n_iter} iterations")
        if not left():
            return
        qk = torch.randn(B, D, device=dev)
        qk /= qk.norm(dim=1, keepdim=True)
        sec, act = timed(lambda: spreading_activation(qk, **kg, hops=3), dev)
        add("activation: spectrag.kernels.spreading_activation", B, sec,
            f"{kg['node_emb'].shape[0]:,} entities, 3 hops, {act.value.numel():,} (query, node) pairs, layout {act.layout}")
        emb = data["emb"][cand.clamp(min=0)]
        rel = torch.bmm(emb, q[:, :, None]).squeeze(2).masked_fill(~mask, 0.0)
        ids_c = cand.clamp(min=0)
        sel_in = dict(scores=rel, prox=torch.rand(cand.shape, device=dev), tokens=data["tokens"][ids_c].masked_fill(~mask, 1),
                      mask=mask, embeddings=emb, clusters=data["cluster"][ids_c], docs=data["docs"][ids_c])
        sec, sel = timed(lambda: budget_select(**sel_in, config=cfg), dev)
        add("select: budget_select", B, sec, f"{sel.n_steps} steps")
        if not left():
            return
        sec, (order, parts) = timed(lambda: end_to_end(data, q, cfg), dev)
        add("end-to-end (engine spectral stages, no BM25)", B, sec,
            "stages ms: " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in parts.items()))


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="n = 1e4, B = 32, 128 (runs on a CPU in about a minute)")
    ap.add_argument("--n", type=int, default=None, help="chunks (default: 1e6, or 1e4 with --small)")
    ap.add_argument("--batches", default=None, help="comma-separated B (default: 256,1024, or 64,256 with --small)")
    ap.add_argument("--device", default="auto", help="auto (cuda when present) or a torch device")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new timings after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    n = args.n or (10_000 if args.small else 1_000_000)
    batches = [int(b) for b in (args.batches or ("32,128" if args.small else "256,1024")).split(",")]
    deadline = T0 + args.budget_s
    if dev.type == "cpu":  # small problems on a shared CPU: extra OpenMP threads only spin
        torch.set_num_threads(1)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    have = {m: importlib.util.find_spec(m) is not None for m in ("triton", "cupy", "faiss", "torch_geometric", "sentence_transformers")}
    print(f"device {dev}: {name}; torch {torch.__version__} (CUDA {torch.version.cuda}); n = {n:,}, B = {batches}; "
          f"present: {', '.join(k for k, v in have.items() if v) or 'none'}", flush=True)
    print(f"`import spectrag.kernels` pulled in: {HEAVY or 'nothing heavy'}", flush=True)

    checks: list = [dict(check="import spectrag.kernels pulls no sentence-transformers / faiss", error=float(len(HEAVY)),
                         tol=0.0, ok=not HEAVY, note=", ".join(HEAVY))]
    print("== copy bandwidth (ceiling)", flush=True)
    ceiling = copy_bandwidth(dev, 2048 if dev.type == "cuda" else 256)
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
    run_timings(dev, data, batches, deadline, rows, roof, args)
    for r in roof:
        if "GBps" in r:
            r["ratio"] = r["GBps"] / ceiling
    wall = time.perf_counter() - T0
    res = dict(command="bash bench/gpu_check.sh " + " ".join(sys.argv[1:]), device=name, torch=torch.__version__,
               cuda=torch.version.cuda, python=platform.python_version(), present=have, n=n, batches=batches,
               graph_nnz=data["values"].numel(), copy_GBps=ceiling, checks=checks, timings=rows, diffusion=roof,
               wall_seconds=wall, data_seconds=t_data)
    write(res, args.out, dev)


def write(res: dict, out_dir: str, dev: torch.device) -> None:
    fails = [c for c in res["checks"] if not c["ok"]]
    L = [f"# GPU check ({res['device']})", "",
         f"Command: `{res['command']}`  ",
         f"Device: {res['device']}; torch {res['torch']} (CUDA {res['cuda']}), Python {res['python']}; present: "
         + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in res["present"].items()) + ".  ",
         f"Data: n = {res['n']:,} synthetic chunks (d = {D}), graph nnz {res['graph_nnz']:,}; built on the device in "
         f"{res['data_seconds']:.1f} s. Wall time {res['wall_seconds']:.0f} s. Timings: median of 3 after a warm-up.", "",
         f"## Checks against the CPU reference: {len(res['checks']) - len(fails)}/{len(res['checks'])} passed", "",
         "| check | error | tolerance | result | note |", "|---|---:|---:|---|---|"]
    for c in res["checks"]:
        L.append(f"| {c['check']} | {c['error']:.2e} | {c['tol']:.0e} | {'ok' if c['ok'] else '**FAIL**'} | {c['note']} |")
    L += ["", f"## Diffusion on the whole graph (X [n, B]) against the copy ceiling ({res['copy_GBps']:.3g} GB/s, "
          "device-to-device copy measured in this run)", "",
          "Bytes: heat K [CSR + nnz B s + 8 n B s]; PPR iters CSR + sum over columns of iters (nnz + 8 n) s.", "",
          "| kernel | B | SpMMs | ms | GB/s | / ceiling | note |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in res["diffusion"]:
        if "ms" in r:
            note = f"max rel. error vs float32 {r['rel_err_vs_fp32']:.1e}" if "rel_err_vs_fp32" in r else ""
            L.append(f"| {r['kernel']} | {r['B']} | {r['spmms']} | {r['ms']:.1f} | {r['GBps']:.3g} | {r['ratio']:.0%} | {note} |")
        else:
            L.append(f"| {r['kernel']} | {r['B']} | | | | | {r['note']} |")
    L += ["", "## Stages at this n", "", "| stage | B | ms | queries/s | note |", "|---|---:|---:|---:|---|"]
    for r in res["timings"]:
        L.append(f"| {r['stage']} | {r['B']} | {r['ms']:.2f} | {r['qps']:,.0f} | {r['note']} |")
    e2e = [r for r in res["timings"] if r["stage"].startswith("end-to-end")]
    if e2e:
        best = max(e2e, key=lambda r: r["B"])
        L += ["", f"End-to-end at B = {best['B']}: **{best['qps']:,.0f} queries/s** (goal on the H200 at 10^6 chunks, "
              f"B = 1,024: 20,000)."]
    L.append("")
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, f"gpu_check_{dev.type}")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(L))
    with open(stem + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(f"written to {stem}.md and {stem}.json; {len(fails)} failed check(s)")


if __name__ == "__main__":
    main()
