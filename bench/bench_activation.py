"""Benchmark: batched spreading activation (``kernels.spreading_activation``: seeds, n-hop
subgraphs, per-query edge weights, synchronous rounds) against the plain per-query reference
(``tests/kg/sa_reference.py``: numpy dot products for the seeds and weights, Python BFS and
Python rounds over dicts), measured in the same run, with a check that both agree.

    python bench/bench_activation.py                              # MuSiQue KG + synthetic 10^6 entities
    python bench/bench_activation.py --kgs synthetic --synthetic-n 100000 --sizes 1,64
    python bench/bench_activation.py --threads 2 --ref-queries 16

**Knowledge graphs.**

* ``musique``: built from HippoRAG's OpenIE file of the 1,890 MuSiQue passages
  (``../shared/data/musique``) with :func:`engine.kg.build.build_kg` (names and relation texts
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
of ``--repeats`` calls (default 3). Reference: run once per query on the first
``--ref-queries`` distinct queries (default 32, after one untimed warm-up query); its time at
batch size B is B x its mean time per query (it has no batch dimension; the tables say so).
**Agreement**: on those queries, the same seeds, the same n-hop neighbourhood and activations
within 1e-5 (float32 kernel vs float64 reference).

Threads: ``--threads`` (default 1) for torch, OpenMP, MKL and OpenBLAS, with
``OMP_WAIT_POLICY=PASSIVE`` (a shared, loaded 2-core machine; see bench_query.py).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import statistics
import sys
import time

from _common import cpu_model, median_seconds, pin_threads  # noqa: E402  (before numpy: sets thread counts)

_THREADS = pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from kernels import spreading_activation  # noqa: E402
from kernels.activation import top_k_nodes  # noqa: E402

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data", "musique")
OPENIE = "openie_musique_train_gpt-3.5-turbo-1106_1890.json"


def _reference():
    spec = importlib.util.spec_from_file_location("sa_reference", os.path.join(ROOT, "tests", "kg", "sa_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def musique_kg() -> tuple[dict, np.ndarray, dict]:
    """KG arrays, query vectors [100, 384] and facts."""
    from engine.config import ChunkConfig, EmbedConfig, KGConfig
    from engine.index.chunk import chunk_document
    from engine.index.embed import Embedder
    from engine.index.load import iter_documents
    from engine.kg.build import build_kg

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
    from engine.kg.graph import adjacency

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
    floor under ``top_k_nodes``."""
    tile = min(1 << 16, max(2048, (1 << 19) // q.shape[0]))
    for lo in range(0, node_emb.shape[0], tile):
        q @ node_emb[lo : lo + tile].T


def run_kg(name: str, arrays: dict, qv: np.ndarray, sizes: list[int], args, ref) -> list[dict]:
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    settings = dict(k=args.k, hops=args.hops, c=args.c)
    adj = ref.adjacency_lists(arrays["indptr"], arrays["indices"], arrays["edge_index"])

    # reference: one query at a time on distinct queries
    n_ref = min(args.ref_queries, qv.shape[0])
    ref.sync_reference(qv[0], arrays["node_emb"], arrays["edge_emb"], adj, **settings)  # warm-up
    ref_out, ref_seed_t, ref_spread_t = [], [], []
    for b in range(n_ref):
        t0 = time.perf_counter()
        seeds, _ = ref.top_k_seeds(qv[b], arrays["node_emb"], args.k)
        t1 = time.perf_counter()
        ref_out.append(ref.sync_reference(qv[b], arrays["node_emb"], arrays["edge_emb"], adj, seeds=seeds, **settings))
        ref_spread_t.append(time.perf_counter() - t1)
        ref_seed_t.append(t1 - t0)
    seed_pq, spread_pq = statistics.mean(ref_seed_t), statistics.mean(ref_spread_t)
    per_query = seed_pq + spread_pq
    print(f"[{name}] reference: {per_query * 1e3:.1f} ms/query = seeds {seed_pq * 1e3:.1f} + spreading "
          f"{spread_pq * 1e3:.1f} (mean of {n_ref}; median neighbourhood "
          f"{int(statistics.median(len(o[1]) for o in ref_out))} nodes)", flush=True)

    rows = []
    for B in sizes:
        reps = -(-B // qv.shape[0])
        qb = torch.from_numpy(np.tile(qv, (reps, 1))[:B])
        secs, res = median_seconds(lambda: spreading_activation(qb, t["node_emb"], t["edge_emb"], t["indptr"], t["indices"],
                                                       t["edge_index"], layout=args.layout, **settings), args.repeats)
        seed_secs, _ = median_seconds(lambda: top_k_nodes(qb, t["node_emb"], args.k), args.repeats)
        product_secs, _ = median_seconds(lambda: products_only(qb, t["node_emb"]), args.repeats)
        spread_secs, _ = median_seconds(lambda: spreading_activation(qb, t["node_emb"], t["edge_emb"], t["indptr"], t["indices"],
                                                            t["edge_index"], layout=args.layout, seeds=res.seeds,
                                                            **settings), args.repeats)
        # agreement on the queries the reference ran
        same, worst = 0, 0.0
        for b in range(min(B, n_ref)):
            seeds, depth, act, _ = ref_out[b]
            mine = res.query == b
            got = dict(zip(res.node[mine].tolist(), res.value[mine].tolist()))
            diff = max((abs(got.get(u, -1.0) - a) for u, a in act.items()), default=0.0)
            worst = max(worst, diff)
            same += int(res.seeds[b].tolist() == seeds and got.keys() == act.keys() and diff <= 1e-5)
        ref_secs = per_query * B
        row = {
            "kg": name, "B": B, "batched_s": secs, "batched_qps": B / secs, "reference_s": ref_secs,
            "reference_qps": 1 / per_query, "speedup": ref_secs / secs, "layout": res.layout,
            "batched_seed_s": seed_secs, "batched_spread_s": spread_secs,
            "reference_seed_s": seed_pq * B, "reference_spread_s": spread_pq * B,
            "speedup_seeds": seed_pq * B / seed_secs, "speedup_spreading": spread_pq * B / spread_secs,
            "batched_product_s": product_secs, "product_gflops": 2 * B * t["node_emb"].numel() / product_secs / 1e9,
            # what the batch could reach if the seed search cost only its matrix products
            "speedup_ceiling": per_query * B / (product_secs + spread_secs),
            "pairs": int(res.query.numel()), "edge_pairs": int(res.edge.numel()),
            "active_per_query": float((res.value >= 0.5).sum()) / B,
            "agree": f"{same}/{min(B, n_ref)}", "max_abs_diff": worst,
            "reference_note": "measured" if B <= n_ref else f"B x mean of {n_ref} queries",
        }
        rows.append(row)
        print(f"[{name}] B={B:4d}  batched {secs * 1e3:9.1f} ms ({B / secs:8.1f} q/s, {res.layout})  reference "
              f"{ref_secs:8.2f} s ({1 / per_query:6.1f} q/s)  speed-up {ref_secs / secs:6.1f}x  "
              f"agree {row['agree']} (max diff {worst:.1e}); seed search {seed_secs * 1e3:.1f} ms "
              f"({row['speedup_seeds']:.1f}x), spreading from given seeds {spread_secs * 1e3:.1f} ms "
              f"({row['speedup_spreading']:.1f}x)", flush=True)
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
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ref-queries", type=int, default=32)
    ap.add_argument("--threads", default=_THREADS)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "activation_cpu"))
    args = ap.parse_args()
    torch.set_num_threads(int(_THREADS))
    sizes = [int(s) for s in args.sizes.split(",")]
    ref = _reference()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    machine = f"{cpu_model()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}, {_THREADS} thread(s); Python {platform.python_version()}; 1-min load average at start {load:.2f}"
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
        rows += run_kg(name, arrays, qv, sizes, args, ref)
        del arrays
    command = "python bench/bench_activation.py " + " ".join(sys.argv[1:])
    result = {"command": command.strip(), "date": _dt.date.today().isoformat(), "machine": machine, "threads": _THREADS,
              "settings": {"k": args.k, "hops": args.hops, "c": args.c, "layout": args.layout, "repeats": args.repeats,
                           "ref_queries": args.ref_queries}, "kgs": kgs, "rows": rows}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
    lines = [
        "# Spreading activation: batched kernel vs per-query reference (CPU)", "",
        f"Command: `{result['command']}` ({result['date']}).", "",
        f"Machine: {machine}.", "",
        f"Settings: k = {args.k} seeds, n = {args.hops} hops, c = {args.c}, layout {args.layout}; batched: median of "
        f"{args.repeats} after one warm-up; reference (tests/kg/sa_reference.py, one query at a time): mean over the "
        f"first {args.ref_queries} distinct queries, times B. Agreement: same seeds, same neighbourhood, activations "
        "within 1e-5, on the queries the reference ran.", "",
    ]
    for name, info in kgs.items():
        lines.append(f"- **{name}**: " + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in info.items()))
    lines += ["", "| KG | B | batched (ms) | batched queries/s | reference queries/s | speed-up | seed search: batched ms "
              "(speed-up) | its products alone: ms (GFLOP/s) | ceiling | spreading from seeds: batched ms (speed-up) "
              "| layout | (query, node) pairs | (query, edge) pairs | active entities/query | agree | max abs diff |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['kg']} | {r['B']} | {r['batched_s'] * 1e3:.1f} | {r['batched_qps']:.1f} | {r['reference_qps']:.1f} "
                     f"| {r['speedup']:.1f}x | {r['batched_seed_s'] * 1e3:.1f} ({r['speedup_seeds']:.1f}x) "
                     f"| {r['batched_product_s'] * 1e3:.1f} ({r['product_gflops']:.1f}) | {r['speedup_ceiling']:.1f}x "
                     f"| {r['batched_spread_s'] * 1e3:.1f} ({r['speedup_spreading']:.1f}x) | {r['layout']} | {r['pairs']:,} "
                     f"| {r['edge_pairs']:,} | {r['active_per_query']:.1f} | {r['agree']} | {r['max_abs_diff']:.1e} |")
    lines += ["", "Seed search is the exact top-k over all entity vectors: a matrix product for the batch against one "
              "matrix-vector product per query in the reference. The reference's product streams the entity matrix "
              "from memory (4 d bytes per entity and query), the batch's is bound by the GEMM rate (2 d flops per "
              "entity and query), so once the matrix exceeds the caches the seed speed-up cannot pass about "
              "2 x GEMM rate / memory bandwidth, whatever B. *Products alone* times the batch's tiled products "
              "without any top-k; *ceiling* = reference time / (products alone + spreading from seeds): the speed-up "
              "the batch would reach if its seed search cost nothing beyond its matrix products. The spreading "
              "columns (seeds given) isolate the subgraph, weights and rounds. Times on this shared machine vary by 2-3x between runs with the other jobs' load "
              "(the load average is in the machine line); the reference runs in the same process right before.",
              "", "B = 1 takes the dense layout ([E, 1] weights); larger B the ragged one (each query's own subgraph "
              "as flat pairs): the neighbourhoods barely overlap."]
    with open(args.out + ".md", "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}.md and .json")


if __name__ == "__main__":
    main()
