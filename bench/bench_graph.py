"""Benchmark: chunk-graph build per signal, fusion, and the spectrum (``spectrag.kernels.lanczos`` vs
scipy's ARPACK ``eigsh`` in the same run) on synthetic corpora of 10^4 .. 10^6 chunks.

**Data** (seeded, :func:`make_corpus`): ``n`` chunks with L2-normalized ``d = 32`` embeddings
drawn around about ``sqrt(n)`` Gaussian cluster centres (cluster sizes log-normal; a
per-document offset keeps a document's chunks closer together; within-cluster cosine about
0.6-0.8, across clusters about 0 +- 0.18), grouped into documents of 5-20 consecutive chunks
(85 % of a document's chunks lie in its topic cluster, the rest in random clusters) with
section paths of 1-3 levels, and 30-80 word texts: filler pseudo-words plus capitalized
entity names drawn per cluster (Zipf-weighted, a few shared across clusters), some years, and
mentions of other documents' titles, Markdown links and bare URLs, so every signal has edges.

**Graph build** (one run per size; timed like ``engine/graph/build.py`` does it, with
``GraphConfig()`` defaults): semantic = ``semantic_edges(k=10)`` (exact FAISS flat search);
adjacency; section; entity = ``extract_entities`` + ``entity_incidence`` + ``entity_edges``;
citation = ``citation_edges`` on :class:`spectrag.index.chunk.Chunk` objects; then
``fuse_signals`` with the default weights, tau 0.05, max_degree 40. Where exact kNN would run
longer than ``--knn-max-seconds`` (10^6 chunks on 2 cores), its time is *extrapolated* from a
measured FAISS search of ``--knn-sample`` query rows against all ``n`` (plus the measured index
add and post-processing), and the graph is built from an approximate FAISS IVF kNN instead
(timed, its recall@10 against exact measured on the sample rows); the tables say so.

**Spectrum**: the ``m = 32`` smallest non-trivial eigenpairs of ``L_sym``, via the deflated
operator ``L' = L_sym + 3 N N^T`` of ``engine/graph/spectrum.py`` (``_deflated_operator``,
one torch SpMM per application). ``lanczos_eigsh(..., which="SA")`` runs on it; scipy runs
ARPACK on the *same* torch operator wrapped as a ``LinearOperator``, shifted to
``2 I - L'`` with ``which="LA"`` (eigenvalues mapped back by ``2 - mu``; the trivial ones
sit at ``-1``), which converges far faster than ``which="SA"`` on ``L'`` (also run, at small
sizes, to show it). scipy's ``tol`` is relative to ``|mu|`` (about 2 here) and ours is
``tol * max(1, |lambda|)``, so scipy gets ``tol / 2``: both then target residuals of about
``tol``. Residuals ``||L' v - lambda v||`` of both are recomputed in float64 with the same
operator. Same ``ncv`` (65) for both. Each solver run has a wall-clock cap
(``--solver-limit``); a capped run is reported as "not converged in X s". k-means (which
``spectral_coordinates`` also runs) is not timed here.

Threads: torch, BLAS (threadpoolctl) and FAISS/OpenMP all get ``--threads``. Each size runs
in a fresh subprocess so its peak RSS (``getrusage``) is its own.

Usage::

    python bench/bench_graph.py --sizes 10000 100000 1000000 --repeats 3 1 1 --threads 2 \\
        --out bench/results/graph_cpu.md
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

# thread counts must be fixed before numpy/scipy/torch/faiss load their libraries
from _common import pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("2", passive=True)
# Idle OpenMP workers sleep instead of spinning. On this shared 2-core machine (other jobs keep
# the load average at 3-6) spinning workers made torch's 2-thread SpMV 10-30x slower than one
# thread (e.g. 33 ms vs 1 ms at n = 10^4); with PASSIVE, 2 threads are on par or faster.

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as sla  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from spectrag.config import GraphConfig  # noqa: E402
from spectrag.graph import signals as sig  # noqa: E402
from spectrag.graph.citations import citation_edges# noqa: E402
from spectrag.extract.entities import entity_incidence, extract_entities# noqa: E402
from spectrag.graph.fuse import fuse_signals  # noqa: E402
from spectrag.graph.spectrum import _deflated_operator  # noqa: E402
from spectrag.types import Chunk# noqa: E402
from spectrag.kernels.lanczos import lanczos_eigsh  # noqa: E402
from make_synthetic import pseudo_word  # noqa: E402

# --------------------------------------------------------------------------------------------
# synthetic corpus
# --------------------------------------------------------------------------------------------

_SYL = [
    "ka", "ver", "lo", "man", "dri", "tho", "sel", "pra", "gun", "bel", "tor", "nim", "ras",
    "quel", "fen", "dor", "zil", "hav", "mor", "tan", "wex", "ul", "bri", "cas",
]
_FILL_SYL = ["ab", "re", "on", "it", "us", "el", "am", "ot", "ir", "en", "ul", "ax", "em", "od", "ip", "ur"]
_FUNCTION = ["the", "of", "and", "in", "to", "a", "was", "is", "for", "on", "with", "by", "as", "from", "at"]
_ENTITY_SUFFIX = ["Institute", "Company", "Bridge", "Observatory", "Society", "Railway", "Abbey", "Harbour", "Council"]
_TITLE_SUFFIX = ["Affair", "Treaty", "Expedition", "Charter", "Festival", "Survey", "Accord", "Uprising"]
_H1 = ["Overview", "History", "Design", "Operations", "Legacy", "Reception", "Geography", "Economy"]


def make_corpus(n: int, *, d: int = 32, seed: int = 0, spread: float = 0.6):
    """``n`` synthetic chunks and their embeddings. Returns ``(chunks, embeddings [n, d] float32,
    facts)``; see the module docstring for the structure."""
    rng = np.random.default_rng(seed)
    n_clusters = max(2, int(round(math.sqrt(n))))
    weights = rng.lognormal(0.0, 0.5, n_clusters)
    weights /= weights.sum()

    # documents of 5..20 consecutive chunks, each with a topic cluster
    lengths = rng.integers(5, 21, size=n // 5 + 2)
    ends = np.cumsum(lengths)
    n_docs = int(np.searchsorted(ends, n)) + 1
    lengths = lengths[:n_docs].copy()
    lengths[-1] -= int(ends[n_docs - 1] - n)
    if lengths[-1] <= 0:  # cannot happen with searchsorted, but keep the invariant visible
        raise AssertionError("empty last document")
    doc_of = np.repeat(np.arange(n_docs), lengths)
    doc_topic = rng.choice(n_clusters, size=n_docs, p=weights)
    cluster = doc_topic[doc_of].copy()
    off = rng.random(n) < 0.15
    cluster[off] = rng.choice(n_clusters, size=int(off.sum()), p=weights)

    # embeddings: centre + document offset + noise, normalized
    centres = rng.standard_normal((n_clusters, d)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    emb = np.empty((n, d), dtype=np.float32)
    step = 262_144
    doc_shift = (0.25 / math.sqrt(d)) * rng.standard_normal((n_docs, d)).astype(np.float32)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        noise = rng.standard_normal((hi - lo, d)).astype(np.float32) * (spread / math.sqrt(d))
        block = centres[cluster[lo:hi]] + doc_shift[doc_of[lo:hi]] + noise
        emb[lo:hi] = block / np.linalg.norm(block, axis=1, keepdims=True)

    # entity names per cluster (about one per 8 chunks of the cluster, at least 4)
    sizes = np.bincount(cluster, minlength=n_clusters)
    per_cluster = np.maximum(4, sizes // 8)
    ent_ptr = np.zeros(n_clusters + 1, dtype=np.int64)
    np.cumsum(per_cluster, out=ent_ptr[1:])
    n_ent = int(ent_ptr[-1])
    kind = rng.random(n_ent)
    names = []
    for e in range(n_ent):
        base = pseudo_word(e + 1000, _SYL, 4).capitalize()
        if kind[e] < 0.5:
            names.append(base)
        elif kind[e] < 0.8:
            names.append(f"{base} {pseudo_word(e * 7 + 13, _SYL, 3).capitalize()}")
        else:
            names.append(f"{base} {_ENTITY_SUFFIX[e % len(_ENTITY_SUFFIX)]}")
    # a few hundred popular names shared by all clusters (frequent ones get dropped by max_df)
    popular = [pseudo_word(i + 500_000, _SYL, 4).capitalize() for i in range(200)]
    titles = [f"{pseudo_word(i + 700_000, _SYL, 4).capitalize()} {_TITLE_SUFFIX[i % len(_TITLE_SUFFIX)]}" for i in range(n_docs)]
    doc_ids = [f"doc{i:07d}.md" for i in range(n_docs)]
    urls = [f"https://wiki.example.org/doc{i:07d}" for i in range(n_docs)]
    fillers = [pseudo_word(i, _FILL_SYL, 2 + i % 2) for i in range(3000)]
    vocab = fillers + _FUNCTION * 40  # function words about 1/6 of the filler draws

    # documents of each cluster (for within-topic title mentions)
    by_topic = np.argsort(doc_topic, kind="stable")
    topic_ptr = np.zeros(n_clusters + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc_topic, minlength=n_clusters), out=topic_ptr[1:])

    # random draws, vectorized
    n_words = rng.integers(30, 81, size=n)
    fill = rng.integers(0, len(vocab), size=int(n_words.sum()))
    n_ents = rng.integers(2, 5, size=n)
    ent_u = rng.random((n, 4))
    year = np.where(rng.random(n) < 0.1, rng.integers(1500, 2021, size=n), 0)
    pop = np.where(rng.random(n) < 0.2, rng.integers(0, len(popular), size=n), -1)
    mention = rng.random(n) < 0.10
    mention_local = rng.random(n) < 0.8
    mention_u = rng.random(n)
    mention_any = rng.integers(0, n_docs, size=n)
    link = np.where(rng.random(n) < 0.02, rng.integers(0, n_docs, size=n), -1)
    bare = np.where(rng.random(n) < 0.01, rng.integers(0, n_docs, size=n), -1)
    sentence_len = rng.integers(8, 15, size=n)

    # sections: runs of 1..5 chunks; a run opens a new h1 (p 0.4), else a new h2, else a new h3
    sections: list[tuple[str, ...]] = [()] * n
    pos = 0
    for doc in range(n_docs):
        end = pos + int(lengths[doc])
        h1 = h2 = h3 = 0
        depth = 1
        first = True
        while pos < end:
            run = int(rng.integers(1, 6))
            u = rng.random()
            if first or u < 0.4:
                h1, h2, h3 = h1 + (0 if first else 1), 0, 0
                depth = int(rng.integers(1, 4))
            elif u < 0.7 or depth < 3:
                h2, h3 = h2 + 1, 0
                depth = max(depth, 2)
            else:
                h3 += 1
            first = False
            path = (_H1[h1 % len(_H1)] + ("" if h1 < len(_H1) else f" {h1}"), f"Part {h2 + 1}", f"Item {h3 + 1}")[:depth]
            for i in range(pos, min(end, pos + run)):
                sections[i] = path
            pos = min(end, pos + run)

    # Zipf weights inside a cluster's name list: rank r drawn as floor(m * u^2)
    chunks = []
    cursor = 0
    offset_in_doc = 0
    prev_doc = -1
    for i in range(n):
        doc = int(doc_of[i])
        if doc != prev_doc:
            offset_in_doc, prev_doc = 0, doc
        c = int(cluster[i])
        lo, m = int(ent_ptr[c]), int(per_cluster[c])
        words = [vocab[j] for j in fill[cursor : cursor + n_words[i]]]
        cursor += int(n_words[i])
        inserts = [names[lo + int(m * ent_u[i, k] ** 2)] for k in range(int(n_ents[i]))]
        if year[i]:
            inserts.append(f"in {int(year[i])}")
        if pop[i] >= 0:
            inserts.append(popular[int(pop[i])])
        if mention[i]:
            t = topic_ptr[c] + int(mention_u[i] * (topic_ptr[c + 1] - topic_ptr[c])) if mention_local[i] else -1
            target = int(by_topic[t]) if mention_local[i] and topic_ptr[c + 1] > topic_ptr[c] else int(mention_any[i])
            inserts.append(f"the {titles[target]}")
        if link[i] >= 0:
            inserts.append(f"[see also]({doc_ids[int(link[i])]})")
        if bare[i] >= 0:
            inserts.append(f"({urls[int(bare[i])]})")
        # entities go after the 2nd word of successive sentences (never sentence-initial)
        sl = int(sentence_len[i])
        out = []
        k = 0
        for s in range(0, len(words), sl):
            sent = words[s : s + sl]
            if k < len(inserts):
                sent = sent[:2] + [inserts[k]] + sent[2:]
                k += 1
            out.append("The " + " ".join(sent) + ".")
        if k < len(inserts):
            out.append("It also mentions " + ", ".join(inserts[k:]) + ".")
        text = " ".join(out)
        start = offset_in_doc
        offset_in_doc += len(text) + 1
        chunks.append(Chunk(doc_ids[doc], titles[doc], sections[i], urls[doc], text, len(text.split()), start, start + len(text)))
    facts = {
        "chunks": n, "dim": d, "clusters": n_clusters, "documents": n_docs,
        "entity_names": n_ent, "mean_words": round(float(n_words.mean()), 1),
        "spread": spread,
    }
    return chunks, emb, facts


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


class _Deadline(Exception):
    pass


def _capped(fn, limit_s: float, counter: list):
    """``fn`` that counts applied vectors (``counter[0]``), sums its own time (``counter[1]``)
    and raises :class:`_Deadline` once ``limit_s`` seconds have passed."""
    t_end = time.perf_counter() + limit_s

    def wrapped(x):
        t0 = time.perf_counter()
        if t0 > t_end:
            raise _Deadline
        counter[0] += x.shape[1]
        y = fn(x)
        counter[1] += time.perf_counter() - t0
        return y

    return wrapped


def _doc_codes(chunks) -> np.ndarray:
    codes: dict[str, int] = {}
    return np.fromiter((codes.setdefault(c.doc_id, len(codes)) for c in chunks), dtype=np.int64, count=len(chunks))


def _knn_post(n: int, ids: np.ndarray, scores: np.ndarray, k: int) -> sp.csr_matrix:
    """The post-processing of ``semantic_edges`` on FAISS results ``[n, k + 1]``."""
    kk = ids.shape[1]
    r = np.repeat(np.arange(n), kk)
    c, w = ids.ravel(), scores.ravel()
    keep = (c >= 0) & (c != r) & (w > 0.0)
    return sig.top_k_per_row(sig.coo(r[keep], c[keep], np.minimum(w[keep], 1.0), n), k)


# --------------------------------------------------------------------------------------------
# one size
# --------------------------------------------------------------------------------------------


def build_graph_timed(chunks, emb, args, rec: dict) -> sp.csr_matrix:
    import faiss

    cfg = GraphConfig()
    n = len(chunks)
    k = cfg.k_semantic
    signals: dict[str, sp.csr_matrix] = {}
    sec: dict[str, float] = {}
    notes: dict[str, str] = {}
    rss: dict[str, float] = {}

    # ---- semantic ------------------------------------------------------------------------
    exact = True
    if n > args.exact_knn_max_n:
        s = min(args.knn_sample, n)
        idx = faiss.IndexFlatIP(emb.shape[1])
        t_add, _ = timed(lambda: idx.add(np.ascontiguousarray(emb)))
        log(f"  semantic: exact FAISS search of {s} sample rows against all {n} ...")
        t_search, (ex_scores, ex_ids) = timed(lambda: idx.search(np.ascontiguousarray(emb[:s]), min(k + 1, n)))
        del idx
        est_search = t_search * n / s
        rec["knn_sample"] = {"rows": s, "add_s": t_add, "search_s": t_search, "rows_per_s": s / t_search}
        if t_add + est_search <= args.knn_max_seconds:
            exact = True
        else:
            exact = False
    if exact:
        log("  semantic: exact semantic_edges ...")
        sec["semantic"], signals["semantic"] = timed(lambda: sig.semantic_edges(emb, k, min_cos=cfg.min_cos))
        notes["semantic"] = "measured (exact FAISS flat search)"
    else:
        nlist = max(16, int(round(math.sqrt(n))))
        log(f"  semantic: approximate IVF{nlist} kNN for the graph ...")
        t0 = time.perf_counter()
        quant = faiss.IndexFlatIP(emb.shape[1])
        ivf = faiss.IndexIVFFlat(quant, emb.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
        train = emb[np.random.default_rng(1).choice(n, size=min(n, 50 * nlist), replace=False)]
        ivf.train(np.ascontiguousarray(train))
        ivf.add(np.ascontiguousarray(emb))
        ivf.nprobe = args.nprobe
        t_build = time.perf_counter() - t0
        scores = np.empty((n, k + 1), dtype=np.float32)
        ids = np.empty((n, k + 1), dtype=np.int64)
        tile = 65_536
        t0 = time.perf_counter()
        for lo in range(0, n, tile):
            scores[lo : lo + tile], ids[lo : lo + tile] = ivf.search(np.ascontiguousarray(emb[lo : lo + tile]), k + 1)
        t_ivf_search = time.perf_counter() - t0
        del ivf, quant
        t_post, signals["semantic"] = timed(lambda: _knn_post(n, ids, scores, k))
        # recall@k of IVF on the sample rows against the exact result
        s = rec["knn_sample"]["rows"]
        hits = 0
        total = 0
        for i in range(s):
            truth = set(int(j) for j in ex_ids[i] if j >= 0 and j != i)
            truth = set(list(truth)[:k]) if len(truth) > k else truth
            got = set(int(j) for j in ids[i] if j >= 0 and j != i)
            hits += len(truth & got)
            total += len(truth)
        del scores, ids
        t_exact_est = rec["knn_sample"]["add_s"] + est_search + t_post
        sec["semantic"] = t_exact_est
        sec["semantic (IVF, used)"] = t_build + t_ivf_search + t_post
        rec["knn_sample"].update(
            extrapolated_exact_s=t_exact_est, ivf_nlist=nlist, ivf_nprobe=args.nprobe, ivf_build_s=t_build,
            ivf_search_s=t_ivf_search, post_s=t_post, ivf_recall_at_k=hits / max(1, total),
        )
        notes["semantic"] = (
            f"EXTRAPOLATED, not measured: exact search of {s} rows took {rec['knn_sample']['search_s']:.1f} s, "
            f"x n/{s} + index add + post-processing"
        )
        notes["semantic (IVF, used)"] = (
            f"measured; approximate FAISS IVF (nlist {nlist}, nprobe {args.nprobe}), "
            f"recall@{k} {hits / max(1, total):.3f} on the {s} sample rows; this graph is used below"
        )
    rss["semantic"] = peak_rss_mib()
    log(f"  semantic done ({sec['semantic']:.1f} s{' est.' if not exact else ''}); adjacency, section ...")

    # ---- adjacency, section --------------------------------------------------------------
    sec["adjacency"], signals["adjacency"] = timed(lambda: sig.adjacency_edges(_doc_codes(chunks)))
    sec["section"], signals["section"] = timed(
        lambda: sig.section_edges([c.doc_id for c in chunks], [c.section for c in chunks], band=cfg.section_band)
    )
    rss["section"] = peak_rss_mib()

    # ---- entity ----------------------------------------------------------------------------
    log("  entity: extract ...")
    texts = [c.text for c in chunks]
    titles = sorted({c.title for c in chunks if c.title})
    t_ext, lists = timed(lambda: extract_entities(texts, titles))
    t_inc, inc = timed(lambda: entity_incidence(lists, max_df=cfg.entity_max_df))
    mentions = int(sum(len(x) for x in lists))
    del lists
    log("  entity: edges ...")
    t_edges, signals["entity"] = timed(lambda: sig.entity_edges(inc.matrix, inc.idf, top_k=cfg.entity_top_k))
    sec["entity"] = t_ext + t_inc + t_edges
    sec["  entity: extract_entities"] = t_ext
    sec["  entity: entity_incidence"] = t_inc
    sec["  entity: entity_edges"] = t_edges
    rec["entities"] = {
        "extracted_mentions": mentions, "kept_vocab": len(inc.vocab), "kept_mentions": int(inc.matrix.nnz),
        "dropped_frequent": int(inc.dropped_frequent),
    }
    del inc, texts
    rss["entity"] = peak_rss_mib()

    # ---- citation --------------------------------------------------------------------------
    log("  citation ...")

    def citation():
        edges = citation_edges(list(chunks), max_targets_per_doc=cfg.citation_max_targets, title_mentions=cfg.title_mentions)
        rec["citations"] = {kk: int(v) for kk, v in edges.counts.items()}
        return sig.coo(edges.rows, edges.cols, edges.weights, n)

    sec["citation"], signals["citation"] = timed(citation)
    rss["citation"] = peak_rss_mib()

    # ---- fuse ------------------------------------------------------------------------------
    log("  fuse ...")
    sec["fuse"], fused = timed(
        lambda: fuse_signals(signals, cfg.signal_weights(), tau=cfg.tau, max_degree=cfg.max_degree)
    )
    rss["fuse"] = peak_rss_mib()
    w = fused.weights
    rec["build_seconds"] = sec
    rec["build_notes"] = notes
    rec["directed_edges"] = {name: int(m.nnz) for name, m in signals.items()}
    rec["undirected_edges"] = dict(fused.signal_edges)
    rec["fused"] = {"edges": int(w.nnz // 2), "mean_degree": float(w.nnz / n), "max_degree": int(np.diff(w.indptr).max())}
    rec["rss_after_mib"] = rss
    return w


def _scipy_op(matvec, n: int, dtype: torch.dtype, shift: float | None):
    """``shift * I - L'`` (or ``L'`` when shift is None) as a LinearOperator over the torch matvec."""
    np_dtype = np.float64 if dtype == torch.float64 else np.float32

    def apply(x):
        x = np.asarray(x, dtype=np_dtype)
        one = x.ndim == 1
        xt = torch.from_numpy(np.ascontiguousarray(x.reshape(n, -1)))
        y = matvec(xt)
        if shift is not None:
            y = shift * xt - y
        y = y.numpy()
        return y.ravel() if one else y

    return sla.LinearOperator((n, n), matvec=apply, matmat=apply, dtype=np_dtype)


def spectrum_timed(w: sp.csr_matrix, args, rec: dict, repeats: int) -> None:
    from threadpoolctl import threadpool_limits

    n = w.shape[0]
    m = args.m
    t_setup64, (mv64, n_comp, isolated) = timed(lambda: _deflated_operator(w, torch.float64))
    m_eff = max(1, min(m, n - n_comp - 1))
    ncv = min(n, max(2 * m_eff + 1, m_eff + 32))  # lanczos_eigsh's default, given to scipy too
    rec["spectrum_setup"] = {"operator_setup_s_float64": t_setup64, "components": n_comp, "isolated": isolated,
                             "m": m_eff, "ncv": ncv}

    def residuals(vecs: np.ndarray, lam: np.ndarray) -> float:
        v = torch.from_numpy(np.ascontiguousarray(vecs, dtype=np.float64))
        r = mv64(v) - v * torch.from_numpy(np.asarray(lam, dtype=np.float64))[None, :]
        return float(torch.linalg.vector_norm(r, dim=0).max())

    configs = [(torch.float64, args.tol64, mv64)]
    if n <= args.f32_max_n:
        t_setup32, (mv32, _, _) = timed(lambda: _deflated_operator(w, torch.float32))
        rec["spectrum_setup"]["operator_setup_s_float32"] = t_setup32
        configs.append((torch.float32, args.tol32, mv32))
    # scipy variants: (setting, shift, BLAS threads for ARPACK's own dense work)
    blas_all = list(dict.fromkeys(args.scipy_blas or [args.threads, 1]))
    rows = []
    ref_lam = None
    for dtype, tol, mv in configs:
        dname = str(dtype).replace("torch.", "")
        # ---- ours
        times, op_times, res, aborted, counts = [], [], None, False, 0
        for rep in range(repeats):
            counter = [0, 0.0]
            f = _capped(mv, args.solver_limit, counter)
            log(f"  lanczos {dname} tol {tol:g} (run {rep + 1}/{repeats}) ...")
            t0 = time.perf_counter()
            try:
                res = lanczos_eigsh(f, m_eff, which="SA", tol=tol, seed=0, n=n, dtype=dtype, device="cpu",
                                    raise_on_failure=False)
            except _Deadline:
                aborted = True
            times.append(time.perf_counter() - t0)
            op_times.append(counter[1])
            counts = counter[0]
            if aborted:
                break
        row = {"solver": "lanczos_eigsh", "setting": "SA on L'", "dtype": dname, "tol": tol, "blas_threads": "-",
               "runs": len(times), "seconds": statistics.median(times), "times": times,
               "operator_seconds": statistics.median(op_times)}
        if aborted:
            row.update(converged=False, status=f"not converged in {args.solver_limit:.0f} s (capped)", matvecs=counts)
        else:
            lam = res.eigenvalues.double().numpy()
            row.update(converged=bool(res.converged), status="converged" if res.converged else "not converged",
                       matvecs=int(res.n_matvec), iters=int(res.n_iter),
                       max_residual=residuals(res.eigenvectors.double().numpy(), lam),
                       lam_first=float(lam[0]), lam_last=float(lam[-1]), _lam=lam)
            if dtype == torch.float64 and res.converged:
                ref_lam = lam
        row["loadavg_1min_after"] = os.getloadavg()[0]
        rows.append(row)
        log(f"    -> {row['status']} {row['seconds']:.2f} s (operator {row['operator_seconds']:.2f} s), {row['matvecs']} matvecs")
        del res

        # ---- scipy ARPACK on the same operator
        settings = []
        big = n > args.scipy_variants_max_n or dtype == torch.float32
        for b in (blas_all[-1:] if big else blas_all):
            settings.append(("LA on 2I - L'", 2.0, b))
        if n <= args.scipy_sa_max_n and dtype == torch.float64:
            settings.append(("SA on L'", None, blas_all[-1]))
        np_dtype = np.float64 if dtype == torch.float64 else np.float32
        v0 = np.random.default_rng(0).standard_normal(n).astype(np_dtype)
        for name, shift, blas in settings:
            times, op_times, aborted, counts, out = [], [], False, 0, None
            for rep in range(repeats):
                counter = [0, 0.0]
                op = _scipy_op(_capped(mv, args.solver_limit, counter), n, dtype, shift)
                log(f"  scipy eigsh {name} {dname} BLAS threads {blas} (run {rep + 1}/{repeats}) ...")
                t0 = time.perf_counter()
                try:
                    with threadpool_limits(limits=blas, user_api="blas"):
                        out = sla.eigsh(op, k=m_eff, which="LA" if shift else "SA", tol=tol / 2, v0=v0, ncv=ncv)
                except _Deadline:
                    aborted = True
                except sla.ArpackNoConvergence as exc:
                    aborted = True
                    log(f"    ARPACK no convergence: {exc}")
                times.append(time.perf_counter() - t0)
                op_times.append(counter[1])
                counts = counter[0]
                if aborted:
                    break
            row = {"solver": "scipy eigsh (ARPACK)", "setting": name, "dtype": dname, "tol": tol / 2,
                   "blas_threads": blas, "runs": len(times), "seconds": statistics.median(times), "times": times,
                   "operator_seconds": statistics.median(op_times), "matvecs": counts}
            if aborted:
                row.update(converged=False, status=f"not converged in {args.solver_limit:.0f} s (capped)")
            else:
                mu, vecs = out
                lam = (shift - mu) if shift else mu
                order = np.argsort(lam)
                lam, vecs = lam[order].astype(np.float64), vecs[:, order]
                row.update(converged=True, status="converged", max_residual=residuals(vecs, lam),
                           lam_first=float(lam[0]), lam_last=float(lam[-1]), _lam=lam)
                if ref_lam is None and dtype == torch.float64 and shift:
                    ref_lam = lam
            row["loadavg_1min_after"] = os.getloadavg()[0]
            rows.append(row)
            log(f"    -> {row['status']} {row['seconds']:.2f} s (operator {row['operator_seconds']:.2f} s), {row['matvecs']} matvecs")
            out = None
    for row in rows:
        lam = row.pop("_lam", None)
        row.setdefault("loadavg_1min_after", None)
        if lam is not None and ref_lam is not None:
            row["max_dlam_vs_ref"] = float(np.abs(lam - ref_lam).max())
    rec["spectrum"] = rows
    rec["spectrum_reference"] = "lanczos float64" if rows and rows[0].get("converged") else "scipy LA float64"


def run_one(n: int, args, repeats: int) -> dict:
    torch.set_num_threads(args.threads)
    import faiss
    from threadpoolctl import threadpool_limits

    faiss.omp_set_num_threads(args.threads)
    rec: dict = {"n": n, "repeats": repeats, "loadavg_start": os.getloadavg()}
    with threadpool_limits(limits=args.threads):
        log(f"n={n}: generating corpus ...")
        rec["generate_s"], (chunks, emb, facts) = timed(lambda: make_corpus(n, seed=args.seed))
        rec["corpus"] = facts
        rec["rss_after_mib"] = {"corpus": peak_rss_mib()}
        log(f"  corpus: {facts} in {rec['generate_s']:.1f} s")
        rss0 = dict(rec["rss_after_mib"])
        w = build_graph_timed(chunks, emb, args, rec)
        rec["rss_after_mib"] = {**rss0, **rec["rss_after_mib"]}
        del chunks, emb
        spectrum_timed(w, args, rec, repeats)
        rec["rss_after_mib"]["spectrum"] = peak_rss_mib()
    rec["peak_rss_mib"] = peak_rss_mib()
    rec["loadavg_end"] = os.getloadavg()
    return rec


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def machine_info(threads: int) -> dict:
    import faiss

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": model, "logical_cpus": os.cpu_count(), "affinity_cpus": len(os.sched_getaffinity(0)),
        "threads": threads, "memory_gib": round(mem_gib, 1), "python": platform.python_version(),
        "torch": torch.__version__, "scipy": scipy.__version__, "numpy": np.__version__, "faiss": faiss.__version__,
        "loadavg_at_start": load, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }


def _fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def _fmt_lam(x: float | None) -> str:
    return "-" if x is None else f"{x:.6f}"


def write_report(path_md: str, result: dict) -> None:
    results = [r for r in result["sizes"] if "error" not in r]
    sizes = [r["n"] for r in results]
    lines = []
    lines.append("# Chunk-graph build and spectrum on the CPU (synthetic corpora)\n")
    lines.append(f"Command: `{result['command']}`  ")
    lines.append(f"Date: {result['date']}  ")
    mi = result["machine"]
    lines.append(
        f"Machine: {mi['cpu']}, {mi['logical_cpus']} logical CPUs (affinity {mi['affinity_cpus']}), "
        f"{mi['memory_gib']} GiB RAM, shared with other jobs (load average at start "
        f"{', '.join(f'{x:.2f}' for x in mi['loadavg_at_start']) if mi['loadavg_at_start'] else '?'}); "
        f"threads: {mi['threads']} for torch, BLAS and FAISS/OpenMP, OMP_WAIT_POLICY={mi['omp_wait_policy']}.  "
    )
    lines.append(
        f"Versions: Python {mi['python']}, torch {mi['torch']}, scipy {mi['scipy']}, numpy {mi['numpy']}, "
        f"faiss {mi['faiss']}. Total wall time {result['total_s'] / 60:.1f} min.\n"
    )
    lines.append(
        "Data: `make_corpus` in `bench/bench_graph.py` (seed 0): d = 32 L2-normalized embeddings around "
        "~sqrt(n) Gaussian clusters, documents of 5-20 chunks with 1-3-level section paths, 30-80-word "
        "texts with per-cluster entity names, years, title mentions, links and URLs. Graph settings: "
        "`GraphConfig()` defaults (k_g = 10, section band 8, entity max_df 0.01 / top_k 10, citation "
        "max_targets 4, weights = paper configuration 1, tau 0.05, max_degree 40); no utility signal.\n"
    )
    for r in result["sizes"]:
        if "error" in r:
            lines.append(f"**n = {r['n']}: run failed** ({r['error']})\n")

    # ---- corpus
    lines.append("## Corpora\n")
    lines.append("| n | clusters | documents | entity names | extracted mentions | kept entities | dropped (max_df) | citations link/url/title | generate [s] |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        c, e, ci = r["corpus"], r["entities"], r["citations"]
        lines.append(
            f"| {r['n']:,} | {c['clusters']:,} | {c['documents']:,} | {c['entity_names']:,} | {e['extracted_mentions']:,} | "
            f"{e['kept_vocab']:,} | {e['dropped_frequent']:,} | {ci['link']:,} / {ci['url']:,} / {ci['title']:,} | {r['generate_s']:.1f} |"
        )
    lines.append("")

    # ---- build table
    lines.append("## Graph build time per signal\n")
    lines.append("Seconds of one run per size (not repeated); edges = undirected edges the signal contributes "
                 "(after symmetrizing, before fusion); on the fuse row, the edges of the fused graph.\n")
    names: list[str] = []
    for r in results:
        for k in r["build_seconds"]:
            if k not in names:
                names.append(k)
    if "semantic (IVF, used)" in names:  # right below the exact semantic row
        names.remove("semantic (IVF, used)")
        names.insert(names.index("semantic") + 1, "semantic (IVF, used)")
    head = "| stage | " + " | ".join(f"n = {n:,} [s] | edges" for n in sizes) + " |"
    lines.append(head)
    lines.append("|---|" + "---|---|" * len(sizes))
    for name in names:
        cells = []
        for r in results:
            s = r["build_seconds"].get(name)
            if s is None:
                cells.append(" | ")
                continue
            note = r["build_notes"].get(name, "")
            tag = " (extrapolated)" if note.startswith("EXTRAPOLATED") else ""
            edges = r["undirected_edges"].get(name.split(" ")[0]) if not name.startswith(" ") else None
            if name == "semantic" and tag:
                edges = None
            if name.startswith("fuse"):
                edges = r["fused"]["edges"]
            cells.append(f"{_fmt_s(s)}{tag} | {edges:,}" if edges is not None else f"{_fmt_s(s)}{tag} | ")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    # totals
    cells = []
    for r in results:
        b = r["build_seconds"]
        used = [k for k in ("semantic (IVF, used)" if "semantic (IVF, used)" in b else "semantic",
                            "adjacency", "section", "entity", "citation", "fuse")]
        total = sum(b[k] for k in used)
        cells.append(f"{_fmt_s(total)} | ")
    lines.append("| **total as built** | " + " | ".join(cells) + " |")
    cells = []
    for r in results:
        b = r["build_seconds"]
        total = sum(b[k] for k in ("semantic", "adjacency", "section", "entity", "citation", "fuse"))
        tag = " (incl. extrapolated exact kNN)" if "semantic (IVF, used)" in b else ""
        cells.append(f"{_fmt_s(total)}{tag} | ")
    lines.append("| **total with exact kNN** | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("| n | fused edges | mean degree | max degree | peak RSS [MiB] (whole size run) | RSS after corpus / semantic / entity / fuse [MiB] |")
    lines.append("|---|---|---|---|---|---|")
    for r in results:
        f, rs = r["fused"], r["rss_after_mib"]
        lines.append(
            f"| {r['n']:,} | {f['edges']:,} | {f['mean_degree']:.1f} | {f['max_degree']} | {r['peak_rss_mib']:.0f} | "
            f"{rs['corpus']:.0f} / {rs['semantic']:.0f} / {rs['entity']:.0f} / {rs['fuse']:.0f} |"
        )
    lines.append("")
    notes = [(r["n"], k, v) for r in results for k, v in r["build_notes"].items() if not v.startswith("measured (exact")]
    for n, k, v in notes:
        lines.append(f"* n = {n:,}, {k}: {v}.")
    for r in results:
        ks = r.get("knn_sample")
        if ks:
            lines.append(
                f"* n = {r['n']:,}: exact FAISS flat search throughput {ks['rows_per_s']:.0f} query rows/s "
                f"against {r['n']:,} vectors ({ks['rows']} rows in {ks['search_s']:.1f} s)."
            )
    lines.append("")

    # ---- spectrum table
    lines.append("## Spectrum: 32 smallest non-trivial eigenpairs of L_sym (deflated operator)\n")
    lines.append(
        "Both solvers apply the same torch operator `L' = L_sym + 3 N N^T` (`_deflated_operator`); scipy gets it "
        "as a `LinearOperator`, shifted to `2I - L'` with `which=\"LA\"` (`which=\"SA\"` on `L'` is also run "
        "at small n for comparison), `tol/2` (its tolerance is relative to |mu| ~ 2), same ncv = 65, fixed v0. "
        "\"BLAS thr.\" = threads of the OpenBLAS that ARPACK's own dense work uses. "
        "Residual = max_i ||L' v_i - lambda_i v_i|| recomputed in float64; |dlam| = max |lambda_i - "
        "lambda_i(reference)| against the float64 Lanczos result. Seconds = median over the runs column; "
        "operator setup (Laplacian, components) is listed separately and shared by both.\n"
    )
    lines.append("| n | solver | setting | dtype | tol | BLAS thr. | runs | seconds | in operator [s] | matvecs | status | max residual | max abs dlam | lambda_1 | lambda_32 | load 1 min |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for row in r["spectrum"]:
            res = row.get("max_residual")
            dl = row.get("max_dlam_vs_ref")
            lines.append(
                f"| {r['n']:,} | {row['solver']} | {row['setting']} | {row['dtype']} | {row['tol']:g} | {row['blas_threads']} | "
                f"{row['runs']} | {_fmt_s(row['seconds'])} | {_fmt_s(row['operator_seconds'])} | {row['matvecs']:,} | {row['status']} | "
                f"{f'{res:.2e}' if res is not None else '-'} | {f'{dl:.1e}' if dl is not None else '-'} | "
                f"{_fmt_lam(row.get('lam_first'))} | {_fmt_lam(row.get('lam_last'))} | "
                f"{row['loadavg_1min_after']:.1f} |"
            )
    lines.append("")
    lines.append("| n | operator setup float64 [s] | components | isolated nodes | m |")
    lines.append("|---|---|---|---|---|")
    for r in results:
        s = r["spectrum_setup"]
        lines.append(f"| {r['n']:,} | {s['operator_setup_s_float64']:.2f} | {s['components']} | {s['isolated']} | {s['m']} |")
    lines.append("")
    # speed-up summary
    lines.append("## Lanczos vs ARPACK (float64, same tolerance target)\n")
    lines.append(
        "scipy best = the fastest converged scipy float64 run of that size (its setting and BLAS thread "
        "count in brackets); equal-threads = the `LA` run with BLAS threads = torch threads, where one was "
        "made. In every run the operator itself (torch SpMM) uses the torch threads.\n"
    )
    lines.append("| n | lanczos [s] | scipy best [s] | scipy best / lanczos | scipy equal-threads [s] | equal / lanczos | lanczos matvecs | scipy matvecs |")
    lines.append("|---|---|---|---|---|---|---|---|")
    threads = result["machine"]["threads"]
    for r in results:
        lz = next((x for x in r["spectrum"] if x["solver"] == "lanczos_eigsh" and x["dtype"] == "float64"), None)
        scs = [x for x in r["spectrum"] if x["solver"].startswith("scipy") and x["dtype"] == "float64"]
        if not lz or not scs:
            continue
        conv = [x for x in scs if x.get("converged")]
        best = min(conv, key=lambda x: x["seconds"]) if conv else max(scs, key=lambda x: x["seconds"])
        eq = next((x for x in scs if x["blas_threads"] == threads and x["setting"].startswith("LA")), None)

        def cell(x):
            return f"{_fmt_s(x['seconds'])}{'' if x.get('converged') else ' (' + x['status'] + ')'}"

        def ratio(x):
            return f"{x['seconds'] / lz['seconds']:.2f}" if (x.get("converged") and lz.get("converged")) else "n/a"

        lines.append(
            f"| {r['n']:,} | {cell(lz)} | {cell(best)} [{best['setting'].split(' ')[0]}, {best['blas_threads']}] | {ratio(best)} | "
            f"{cell(eq) if eq else '-'} | {ratio(eq) if eq else '-'} | {lz['matvecs']:,} | {best['matvecs']:,} |"
        )
    lines.append("")
    if result.get("conclusions"):
        lines.append("## Conclusions\n")
        lines.append(result["conclusions"].strip() + "\n")
    with open(path_md, "w") as fh:
        fh.write("\n".join(lines))


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, nargs="+", default=[3, 1, 1],
                    help="spectrum repeats per size (the last value applies to further sizes)")
    ap.add_argument("--threads", type=int, default=int(_THREADS), help="torch / BLAS / FAISS threads")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "graph_cpu.md"),
                    help="Markdown report; the JSON goes next to it (.json)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--m", type=int, default=32, help="eigenpairs")
    ap.add_argument("--tol64", type=float, default=1e-6)
    ap.add_argument("--tol32", type=float, default=1e-5)
    ap.add_argument("--f32-max-n", type=int, default=100_000, help="float32 runs only up to this size")
    ap.add_argument("--scipy-blas", type=int, nargs="+", default=None,
                    help="BLAS thread counts for ARPACK's dense work, one scipy run each (default: --threads, 1); "
                         "float32 and sizes above --scipy-variants-max-n run only the last one")
    ap.add_argument("--scipy-variants-max-n", type=int, default=100_000)
    ap.add_argument("--scipy-sa-max-n", type=int, default=10_000, help="scipy which='SA' runs only up to this size")
    ap.add_argument("--solver-limit", type=float, default=600.0, help="wall-clock cap per solver run [s]")
    ap.add_argument("--exact-knn-max-n", type=int, default=200_000,
                    help="above this size, time an exact kNN sample first and extrapolate when too slow")
    ap.add_argument("--knn-sample", type=int, default=16_384, help="query rows of the exact kNN sample")
    ap.add_argument("--knn-max-seconds", type=float, default=600.0, help="run exact kNN only if estimated below this")
    ap.add_argument("--nprobe", type=int, default=8, help="IVF probes of the approximate kNN")
    ap.add_argument("--render", default=None, metavar="JSON",
                    help="only re-render the Markdown report from an earlier JSON result")
    ap.add_argument("--conclusions", default=None, metavar="FILE", help="Markdown text appended as Conclusions")
    ap.add_argument("--one-size", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.one_size is not None:
        reps = int(os.environ.get("BENCH_GRAPH_REPEATS", "1"))
        rec = run_one(args.one_size, args, reps)
        with open(args.child_json, "w") as fh:
            json.dump(rec, fh)
        return

    if args.render:
        with open(args.render) as fh:
            result = json.load(fh)
        if args.conclusions:
            with open(args.conclusions) as fh:
                result["conclusions"] = fh.read()
            with open(args.render, "w") as fh:
                json.dump(result, fh, indent=1)
        write_report(args.out, result)
        return

    t_start = time.perf_counter()
    result = {
        "command": "python " + " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)] + sys.argv[1:]),
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": machine_info(args.threads),
        "sizes": [],
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    json_path = os.path.splitext(args.out)[0] + ".json"
    for i, n in enumerate(args.sizes):
        reps = args.repeats[min(i, len(args.repeats) - 1)]
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            child_json = tmp.name
        cmd = [sys.executable, os.path.abspath(__file__), "--one-size", str(n), "--child-json", child_json]
        for key in ("threads", "seed", "m", "tol64", "tol32", "f32_max_n", "scipy_sa_max_n", "solver_limit",
                    "exact_knn_max_n", "knn_sample", "knn_max_seconds", "nprobe", "scipy_variants_max_n"):
            cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
        if args.scipy_blas:
            cmd += ["--scipy-blas", *map(str, args.scipy_blas)]
        log(f"=== size {n:,} (spectrum repeats {reps}) ===")
        proc = subprocess.run(cmd, env={**os.environ, "BENCH_GRAPH_REPEATS": str(reps)})
        if proc.returncode == 0:
            with open(child_json) as fh:
                rec = json.load(fh)
        else:
            rec = {"n": n, "error": f"subprocess exit status {proc.returncode}"}
        os.unlink(child_json)
        result["sizes"].append(rec)
        result["total_s"] = time.perf_counter() - t_start
        with open(json_path, "w") as fh:
            json.dump(result, fh, indent=1)
        write_report(args.out, result)
    log(f"done in {(time.perf_counter() - t_start) / 60:.1f} min: {args.out}, {json_path}")


if __name__ == "__main__":
    main()
