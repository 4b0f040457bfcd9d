"""Benchmark: batched spreading activation (``spectrag.kernels.spreading_activation``: seeds, n-hop
subgraphs, per-query edge weights, synchronous rounds) against plain per-query references
(``spectrag.reference.activation``: numpy dot products for the seeds and weights, Python BFS
and Python rounds over dicts), measured in the same run, with a check that they agree.

    python bench/bench_activation.py                              # MuSiQue KG + synthetic 10^6 entities
    python bench/bench_activation.py --kgs synthetic --synthetic-n 100000 --sizes 1,64
    python bench/bench_activation.py --threads 2 --ref-queries 16

**Knowledge graphs.**

* ``musique``: built from HippoRAG's OpenIE file of the 1,890 MuSiQue passages
  (``../shared/data/musique``) with :func:`spectrag.kg.build.build_kg` (names and relation texts
  embedded with all-MiniLM-L6-v2, d = 384, through the embedding cache in
  ``$SPECTRAG_CACHE_DIR`` or ``~/.cache/spectrag``: the first run embeds ~36,000 texts).
  Queries: the 100 questions, embedded once before any timing, tiled to reach B.
* ``synthetic``: ``--synthetic-n`` entities (default 10^6) in topics of 1,000; each entity is
  the subject of 1.5 relations on average (90 % inside its topic); embeddings generated here
  (d = ``--dim``, default 64): entity = topic centre + noise (cosine ~0.6 with it), relation =
  its subject's topic centre + noise (~0.7), query = a random topic's centre + noise (~0.9), so
  relations of the query's topic weigh about 0.6 and activation spreads inside the topic. No
  text. ``max(sizes)`` distinct queries.

Settings: the paper's MuSiQue values, k = 3 seeds, n = 4 hops, c = 0.4; layout ``auto``.

**Timing.** Inputs are tensors built before timing; batched: one warm-up call, then the median
of ``--repeats`` calls (default 3), with the kernel's default ``subgraph="reached"`` (or
``--subgraph full``). References, run once per query on the first ``--ref-queries`` distinct
queries (default 32, after one untimed warm-up query), the same numpy seed search for both:
``sync_reference`` spreads over the paper's whole n-hop subgraph (a cosine for every edge of
it), ``reached_reference`` only from activated nodes over positive-weight edges, as the kernel
does (like for like). A reference's time at batch size B is B x its mean time per query (it
has no batch dimension; the tables say so). **Agreement**: on those queries, the same seeds,
the same activated nodes and activations within 1e-5 (float32 kernel vs float64 reference).

Threads: ``--threads`` (default 1) for torch, OpenMP, MKL and OpenBLAS, with
``OMP_WAIT_POLICY=PASSIVE`` (a shared, loaded 2-core machine; see bench_query.py).
Results: ``results/activation_cpu.md`` / ``.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _common import ensure_spectrag, pin_threads

_THREADS = pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import ROOT, finish_record, median_seconds, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
from spectrag.kernels import spreading_activation  # noqa: E402
from spectrag.kernels.topk import tiled_topk_ip  # noqa: E402
from spectrag.reference import activation as reference  # noqa: E402

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data", "musique")
OPENIE = "openie_musique_train_gpt-3.5-turbo-1106_1890.json"


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def musique_kg() -> tuple[dict, np.ndarray, dict]:
    """KG arrays, query vectors [100, 384] and facts."""
    from spectrag.config import ChunkConfig, EmbedConfig, KGConfig
    from spectrag.index.chunk import chunk_document
    from spectrag.index.embed import Embedder
    from spectrag.index.load import iter_documents
    from spectrag.kg.build import build_kg

    corpus = os.path.join(SHARED, "musique_train_corpus.json")
    chunks = [c for d in iter_documents(corpus, "musique") for c in chunk_document(d, ChunkConfig())]
    embedder = Embedder(EmbedConfig())
    t0 = time.perf_counter()
    kg, facts = build_kg(chunks, KGConfig(enabled=True, source="openie", openie_file=os.path.join(SHARED, OPENIE)),
                         encode=embedder.encode)
    questions = [q["question"] for q in json.load(open(os.path.join(SHARED, "musique_train.json"), encoding="utf-8"))]
    qv = embedder.encode(questions)
    embedder.close()
    arrays = {
        "indptr": np.asarray(kg.adj_indptr, dtype=np.int64),
        "indices": np.asarray(kg.adj_indices, dtype=np.int64),
        "edge_index": np.asarray(kg.rel_text, dtype=np.int64)[np.asarray(kg.adj_relation)],
        "node_emb": np.asarray(kg.entity_emb, dtype=np.float32),
        "edge_emb": np.asarray(kg.text_emb, dtype=np.float32),
    }
    info = {"entities": kg.n_entities, "relations": kg.n_relations, "relation_texts": len(kg.texts), "dim": int(qv.shape[1]),
            "build_seconds_with_cache": round(time.perf_counter() - t0, 1), "queries": len(questions),
            "source": "OpenIE file, gpt-3.5-turbo-1106, 1,890 passages"}
    return arrays, np.asarray(qv, dtype=np.float32), info


def synthetic_kg(n: int, dim: int, n_queries: int, seed: int = 0) -> tuple[dict, np.ndarray, dict]:
    from spectrag.kg.graph import adjacency

    rng = np.random.default_rng(seed)
    topic_size = 1000
    topics = max(1, n // topic_size)
    topic = np.minimum(np.arange(n) // topic_size, topics - 1)
    centres = _unit(rng.standard_normal((topics, dim)))
    noise = lambda rows, s: s * rng.standard_normal((rows, dim)).astype(np.float32) / np.sqrt(dim)  # noqa: E731
    node_emb = _unit(centres[topic] + noise(n, 1.3))
    r = int(1.5 * n)
    subj = rng.integers(0, n, r)
    inside = rng.random(r) < 0.9
    obj = np.where(inside, topic[subj] * topic_size + rng.integers(0, topic_size, r), rng.integers(0, n, r))
    obj = np.minimum(obj, n - 1)
    keep = subj != obj
    subj, obj = subj[keep], obj[keep]
    edge_emb = _unit(centres[topic[subj]] + noise(subj.size, 1.0))
    indptr, nbr, rel = adjacency(n, subj.astype(np.int64), obj.astype(np.int64))
    qv = _unit(centres[rng.integers(0, topics, n_queries)] + noise(n_queries, 0.5))
    arrays = {"indptr": indptr, "indices": nbr, "edge_index": rel, "node_emb": node_emb, "edge_emb": edge_emb}
    info = {"entities": n, "relations": int(subj.size), "relation_texts": int(subj.size), "dim": dim,
            "topics": topics, "queries": n_queries, "source": "generated (topics of 1,000, 1.5 relations per entity)"}
    return arrays, qv, info


def products_only(q: torch.Tensor, node_emb: torch.Tensor) -> None:
    """The matrix products of the seed search alone, in its tiles (no top-k): the GEMM-rate
    floor under ``tiled_topk_ip``."""
    tile = min(1 << 16, max(2048, (1 << 19) // q.shape[0]))
    for lo in range(0, node_emb.shape[0], tile):
        q @ node_emb[lo : lo + tile].T


def run_kg(name: str, arrays: dict, qv: np.ndarray, sizes: list[int], args, ref) -> list[dict]:
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    settings = dict(k=args.k, hops=args.hops, c=args.c)
    adj = ref.adjacency_lists(arrays["indptr"], arrays["indices"], arrays["edge_index"])

    # references, one query at a time on distinct queries: the paper's whole n-hop subgraph, and
    # the same pruning as the kernel's default (spreading only from activated nodes)
    n_ref = min(args.ref_queries, qv.shape[0])
    ref.sync_reference(qv[0], arrays["node_emb"], arrays["edge_emb"], adj, **settings)  # warm-up
    ref_out, seed_t, full_t, reached_t = [], [], [], []
    for b in range(n_ref):
        t0 = time.perf_counter()
        seeds, _ = ref.top_k_seeds(qv[b], arrays["node_emb"], args.k)
        t1 = time.perf_counter()
        full = ref.sync_reference(qv[b], arrays["node_emb"], arrays["edge_emb"], adj, seeds=seeds, **settings)
        t2 = time.perf_counter()
        ref_out.append(ref.reached_reference(qv[b], arrays["node_emb"], arrays["edge_emb"], adj, seeds=seeds, **settings))
        t3 = time.perf_counter()
        assert {u for u, a in full[2].items() if a > 0} == ref_out[-1][2].keys(), "the two references disagree"
        seed_t.append(t1 - t0)
        full_t.append(t2 - t1)
        reached_t.append(t3 - t2)
    seed_pq, full_pq, reached_pq = (statistics.mean(x) for x in (seed_t, full_t, reached_t))
    print(f"[{name}] reference: seeds {seed_pq * 1e3:.1f} ms/query; spreading on the n-hop subgraph {full_pq * 1e3:.1f}, "
          f"on the reached one {reached_pq * 1e3:.1f} (mean of {n_ref})", flush=True)

    rows = []
    for B in sizes:
        reps = -(-B // qv.shape[0])
        qb = torch.from_numpy(np.tile(qv, (reps, 1))[:B])

        def batched(subgraph: str = args.subgraph, seeds: torch.Tensor | None = None):
            return spreading_activation(qb, t["node_emb"], t["edge_emb"], t["indptr"], t["indices"], t["edge_index"],
                                        layout=args.layout, subgraph=subgraph, seeds=seeds, **settings)

        secs, res = median_seconds(batched, args.repeats)
        seed_secs, _ = median_seconds(lambda: tiled_topk_ip(qb, t["node_emb"], args.k), args.repeats)
        product_secs, _ = median_seconds(lambda: products_only(qb, t["node_emb"]), args.repeats)
        spread_secs, _ = median_seconds(lambda: batched(seeds=res.seeds), args.repeats)
        spread_full_secs, _ = median_seconds(lambda: batched("full", res.seeds), args.repeats)
        # agreement with the reached reference on the queries it ran: seeds, nodes, activations
        same, worst = 0, 0.0
        for b in range(min(B, n_ref)):
            seeds, _, act, _ = ref_out[b]
            mine = (res.query == b) & (res.value > 0)
            got = dict(zip(res.node[mine].tolist(), res.value[mine].tolist()))
            diff = max((abs(got.get(u, -1.0) - a) for u, a in act.items()), default=0.0)
            worst = max(worst, diff)
            same += int(res.seeds[b].tolist() == seeds and got.keys() == act.keys() and diff <= 1e-5)
        full_ref_s, reached_ref_s = (seed_pq + full_pq) * B, (seed_pq + reached_pq) * B
        row = {
            "kg": name, "B": B, "subgraph": args.subgraph, "batched_s": secs, "batched_qps": B / secs,
            "reference_s": full_ref_s, "reference_qps": B / full_ref_s, "speedup": full_ref_s / secs,
            "reached_reference_s": reached_ref_s, "reached_reference_qps": B / reached_ref_s,
            "speedup_like_for_like": reached_ref_s / secs,
            "batched_seed_s": seed_secs, "batched_spread_s": spread_secs, "batched_spread_full_s": spread_full_secs,
            "reference_seed_s": seed_pq * B, "reference_spread_s": full_pq * B, "reached_reference_spread_s": reached_pq * B,
            "speedup_seeds": seed_pq * B / seed_secs, "speedup_spreading": full_pq * B / spread_secs,
            "speedup_spreading_like_for_like": reached_pq * B / spread_secs,
            "batched_product_s": product_secs, "product_gflops": 2 * B * t["node_emb"].numel() / product_secs / 1e9,
            # what the batch could reach if the seed search cost only its matrix products
            "speedup_ceiling": full_ref_s / (product_secs + spread_secs),
            "speedup_ceiling_like_for_like": reached_ref_s / (product_secs + spread_secs),
            "pairs": int(res.query.numel()), "edge_pairs": int(res.edge.numel()),
            "active_per_query": float((res.value >= 0.5).sum()) / B,
            "agree": f"{same}/{min(B, n_ref)}", "max_abs_diff": worst,
            "reference_note": "measured" if B <= n_ref else f"B x mean of {n_ref} queries",
        }
        rows.append(row)
        print(f"[{name}] B={B:4d}  batched {secs * 1e3:9.1f} ms ({B / secs:8.1f} q/s)  vs n-hop reference "
              f"{B / full_ref_s:6.1f} q/s: {row['speedup']:6.1f}x, vs reached reference {B / reached_ref_s:6.1f} q/s: "
              f"{row['speedup_like_for_like']:5.1f}x  agree {row['agree']} (max diff {worst:.1e}); seed search "
              f"{seed_secs * 1e3:.1f} ms (products {product_secs * 1e3:.1f}), spreading from given seeds "
              f"{spread_secs * 1e3:.1f} ms (full subgraph {spread_full_secs * 1e3:.1f})", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kgs", default="musique,synthetic")
    ap.add_argument("--sizes", default="1,64,256")
    ap.add_argument("--synthetic-n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--hops", type=int, default=4)
    ap.add_argument("--c", type=float, default=0.4)
    ap.add_argument("--layout", default="auto", choices=["auto", "ragged", "dense"])
    ap.add_argument("--subgraph", default="reached", choices=["reached", "full"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ref-queries", type=int, default=32)
    ap.add_argument("--threads", default=_THREADS)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "activation_cpu"))
    args = ap.parse_args()
    torch.set_num_threads(int(_THREADS))
    sizes = [int(s) for s in args.sizes.split(",")]
    record = new_record(f"batched: median of {args.repeats} after one warm-up; references: one run per query on "
                        f"the first {args.ref_queries} distinct queries, after one untimed warm-up query")
    rows, kgs = [], {}
    for name in args.kgs.split(","):
        t0 = time.perf_counter()
        if name == "musique":
            if not os.path.exists(os.path.join(SHARED, OPENIE)):
                print(f"[musique] skipped: {SHARED} is absent")
                continue
            arrays, qv, info = musique_kg()
        elif name == "synthetic":
            arrays, qv, info = synthetic_kg(args.synthetic_n, args.dim, max(sizes))
        else:
            raise SystemExit(f"unknown KG {name!r}: musique or synthetic")
        info["setup_seconds"] = round(time.perf_counter() - t0, 1)
        kgs[name] = info
        print(f"[{name}] {info}", flush=True)
        rows += run_kg(name, arrays, qv, sizes, args, reference)
        del arrays
    record.update(settings={"k": args.k, "hops": args.hops, "c": args.c, "layout": args.layout,
                            "subgraph": args.subgraph, "repeats": args.repeats, "ref_queries": args.ref_queries},
                  kgs=kgs, rows=rows)
    finish_record(record)
    lines = results_header("Spreading activation: batched kernel vs per-query reference (CPU)", record) + [
        f"Settings: k = {args.k} seeds, n = {args.hops} hops, c = {args.c}, subgraph {args.subgraph}, layout {args.layout} "
        f"(full subgraph only); batched: median of {args.repeats} after one warm-up. References (`spectrag.reference.activation`, "
        f"one query at a time, the same seed search): mean over the first {args.ref_queries} distinct queries, times B; "
        "*n-hop* = `sync_reference`, the paper's whole n-hop subgraph with a cosine for each of its edges; *reached* = "
        "`reached_reference`, spreading only from activated nodes over positive-weight edges, the kernel's default "
        "(like for like). Agreement (with the reached reference): same seeds, same activated nodes, activations within "
        "1e-5, on the queries the references ran; the two references give the same activated nodes (asserted).", "",
    ]
    for name, info in kgs.items():
        lines.append(f"- **{name}**: " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in info.items()))
    lines += ["", "| KG | B | batched (ms) | batched queries/s | n-hop reference queries/s | speed-up | reached reference "
              "queries/s | speed-up (like for like) | agree | max abs diff |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['kg']} | {r['B']} | {r['batched_s'] * 1e3:.1f} | {r['batched_qps']:.1f} | {r['reference_qps']:.1f} "
                     f"| {r['speedup']:.1f}x | {r['reached_reference_qps']:.1f} | {r['speedup_like_for_like']:.1f}x "
                     f"| {r['agree']} | {r['max_abs_diff']:.1e} |")
    lines += ["", "Stages (batched ms, speed-up against the same stage of the reference in brackets):", "",
              "| KG | B | seed search | its products alone: ms (GFLOP/s) | spreading from seeds, reached subgraph "
              "(vs n-hop; vs reached) | the same on the full n-hop subgraph | ceiling (n-hop; reached) "
              "| (query, node) pairs | (query, edge) pairs | active entities/query |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['kg']} | {r['B']} | {r['batched_seed_s'] * 1e3:.1f} ({r['speedup_seeds']:.1f}x) "
                     f"| {r['batched_product_s'] * 1e3:.1f} ({r['product_gflops']:.1f}) "
                     f"| {r['batched_spread_s'] * 1e3:.1f} ({r['speedup_spreading']:.1f}x; {r['speedup_spreading_like_for_like']:.1f}x) "
                     f"| {r['batched_spread_full_s'] * 1e3:.1f} "
                     f"| {r['speedup_ceiling']:.1f}x; {r['speedup_ceiling_like_for_like']:.1f}x | {r['pairs']:,} "
                     f"| {r['edge_pairs']:,} | {r['active_per_query']:.1f} |")
    lines += ["", "Seed search is the exact top-k over all entity vectors: a matrix product for the batch against one "
              "matrix-vector product per query in the reference. The reference's product streams the entity matrix "
              "from memory (4 d bytes per entity and query), the batch's is bound by the GEMM rate (2 d flops per "
              "entity and query), so once the matrix exceeds the caches the seed speed-up cannot pass about "
              "2 x GEMM rate / memory bandwidth, whatever B. *Products alone* times the batch's tiled products "
              "without any top-k; *ceiling* = reference time / (products alone + spreading from seeds): the speed-up "
              "the batch would reach if its seed search cost nothing beyond its matrix products. The spreading "
              "columns (seeds given) isolate the subgraph, weights and rounds; the full-subgraph column is the "
              "kernel's `subgraph=\"full\"` on the same seeds. Times on this shared machine vary by 2-3x between "
              "runs with the other jobs' load (the load average is in the machine line); the references run in "
              "the same process right before."]
    write_results(args.out, lines, record)


if __name__ == "__main__":
    main()
