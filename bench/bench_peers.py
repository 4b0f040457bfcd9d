"""Benchmark: the engine's batched modes against the peers' own per-query ways of doing the same
work (bench/peers.py), and against the project's exact per-query reference, in one process, on
the same index and the same queries (query vectors given: embedding excluded).

Per index, B queries at a time:

* engine: ``Retriever.score_batch`` (BM25 tokenization, seeding, expansion, blocks,
  propagation, bridging, selection) for modes hybrid, ppr, spectral (and activation, combined
  with a knowledge graph), and ppr over the whole graph (``propagate.scope = "graph"``,
  damping 0.5 as HippoRAG 2) for the PPR comparison; plus the batched whole-graph PPR kernel
  alone (``kernels.pagerank.personalized_pagerank``, B columns);
* SpectRAG code (per query): numpy dense top-20, networkx two-hop BFS capped at 200,
  ``networkx.pagerank`` on the induced subgraph, max-cosine spectral proximity, the
  head / tail-floor / backfill budget cut;
* HippoRAG 2 (per query): igraph personalized PageRank over the whole chunk graph, damping 0.5,
  reset on the same dense top-20 seeds;
* SA-RAG (per query, knowledge-graph indexes): sequential BFS spreading activation;
* reference: the project's exact per-query pipeline (``spectrag.reference.pipeline``), which
  also checks that the batched results are identical on those queries.

Threads: every engine figure with the default settings (``RetrieverConfig()``, which chooses
its threads from measured batch times) and pinned to one thread, on the quiet machine and with
one competing CPU-bound process the benchmark starts itself (``--contention``).

    python bench/bench_peers.py                                   # MuSiQue and 2Wiki dev
    python bench/bench_peers.py --indexes prebuilt:IDX:CORPUS     # a bench_scale.py index

Results: bench/results/peers_cpu.md / .json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.ensure_spectrag()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from peers import HippoRagPeer, SpectragCodePeer, sa_rag_activation  # noqa: E402
from spectrag.config import IndexConfig, RetrieverConfig, with_openie  # noqa: E402
from spectrag.eval.datasets import load_dataset  # noqa: E402
from spectrag.eval.runner import find_openie, resolve_index  # noqa: E402
from spectrag.kernels.pagerank import PageRankMatrix, personalized_pagerank  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402

ROOT = _common.ROOT
DATA = ROOT.parent / "shared" / "data"
DATASETS = {"musique": "musique", "2wiki": "2wiki-dev"}


def log(*a) -> None:
    print(*a, flush=True)


def dataset_index(name: str):
    """A dev set's index (the evaluation's cached one, built once) and its questions."""
    folder = DATA / DATASETS[name]
    if not folder.exists():
        log(f"{name} skipped: {folder} is absent")
        return None
    ds = load_dataset(name, f"../shared/data/{DATASETS[name]}")  # as the README spells it (the cache key)
    config = IndexConfig()
    openie = find_openie(ds)
    if openie is not None:
        config = with_openie(config, openie)
    index, _ = resolve_index(ds, None, config, log=log)
    return index, [q.text for q in ds.questions], {"name": name, "chunks": len(index.chunks),
                                                  "edges": int(index.graph["weights"].nnz // 2)}


def cached_query_vectors(index, name: str, texts: list[str]):
    """The dev set's questions embedded once by ``index`` and kept under bench/.cache (the
    speed benchmarks time the engine, not the encoder). Shapes: -> float32 tensor ``[Q, d]``."""
    import numpy as np
    import torch

    cache = Path(__file__).resolve().parent / ".cache" / f"qvecs-{name}-{len(texts)}.npy"
    if cache.exists():
        return torch.from_numpy(np.load(cache))
    qvecs = torch.from_numpy(index.embed_queries(texts))
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, qvecs.numpy())
    return qvecs


def prebuilt_index(spec: str):
    from make_synthetic import load_queries
    from spectrag.store import load_index

    index_dir, corpus_dir = spec.split(":", 1)
    index = load_index(index_dir, verify=False)
    texts, qv, _ = load_queries(corpus_dir)
    return index, texts, {"name": f"synthetic-{len(index.chunks)}", "chunks": len(index.chunks),
                          "edges": int(index.graph["weights"].nnz // 2), "qvecs": qv}


class Busy:
    """One competing CPU-bound process (a Python busy loop) for the contention runs."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def per_second(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def time_engine(index, texts, qvecs, config: RetrieverConfig, batch: int, repeats: int) -> dict:
    """Median queries/s of score_batch on B-query batches (one warm-up batch; the thread
    chooser's first batches are its probes, so a few more warm-ups are run for it)."""
    r = Retriever(index, config)
    tt, qv = texts[:batch], qvecs[:batch]
    for _ in range(5 if config.threads == 0 else 1):
        res = r.score_batch(tt, qvecs=qv)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = r.score_batch(tt, qvecs=qv)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    stages = {k: round(1000 * v, 1) for k, v in res.seconds.items()}
    return {"qps": per_second(batch, med), "seconds": med, "stages_ms": stages,
            "threads": (r.threads.cost and min(r.threads.cost, key=r.threads.cost.get)) or r.threads.choices[0]}


def dense_seeds(E: np.ndarray, qv: np.ndarray, k: int = 20) -> np.ndarray:
    """Dense top-k ids per query (numpy, as the peers seed). ``[B, d]`` -> ``[B, k]``."""
    s = qv @ E.T
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


def time_peer(fn, items: list, budget_s: float) -> dict:
    """Queries/s of ``fn(item)`` over ``items`` one at a time (stops after ``budget_s``)."""
    done, t0 = 0, time.perf_counter()
    for it in items:
        fn(it)
        done += 1
        if time.perf_counter() - t0 > budget_s:
            break
    sec = time.perf_counter() - t0
    return {"qps": per_second(done, sec), "queries": done, "seconds": sec}


def reference_check(index, texts, qvecs, config: RetrieverConfig, n: int, budget: int) -> dict:
    """The project's per-query reference on ``n`` queries: its speed, and whether the batched
    pipeline's selections and rankings equal it."""
    from spectrag.reference.pipeline import reference_retrieve

    r = Retriever(index, config.replace(threads=1))
    batch = r.score_batch(texts[:n], qvecs=qvecs[:n])
    same, t0 = 0, time.perf_counter()
    ranking, selected = batch.ranking(), batch.selected_ids()
    for b in range(n):
        ref = reference_retrieve(index, qvecs[b].numpy(), texts[b], config, budget)
        got_sel = [int(c) for c in selected[b].tolist() if c >= 0]
        got_rank = [int(c) for c in ranking[b].tolist() if c >= 0]
        same += got_sel == ref["selected"] and got_rank[:20] == ref["ranking"][:20]
    sec = time.perf_counter() - t0
    return {"qps": per_second(n, sec), "queries": n, "identical": same}


def bench_index(index, texts, qvecs, info: dict, args) -> dict:
    B = args.batch
    texts = (texts * (B // len(texts) + 1))[:B]
    qvecs = torch.cat([qvecs] * (B // len(qvecs) + 1))[:B]
    out = {"info": info, "engine": {}, "peers": {}, "kernels": {}}
    modes = ["hybrid", "ppr", "spectral"] + (["activation", "combined"] if index.kg is not None else [])
    base = RetrieverConfig(device="cpu", budget=12_000)  # the budget the recorded results used (the earlier default)
    settings = [("default", base), ("1 thread", base.replace(threads=1))]
    for label, cfg in settings:
        for mode in modes + ["ppr-graph"]:
            c = cfg.replace(mode="ppr", propagate__scope="graph", propagate__damping=0.5) if mode == "ppr-graph" \
                else cfg.replace(mode=mode)
            row = time_engine(index, texts, qvecs, c, B, args.repeats)
            out["engine"][f"{mode} | {label}"] = row
            log(f"  engine {mode:10s} {label:9s}: {row['qps']:8.1f} q/s {row['stages_ms']}")
    if args.contention:
        with Busy():
            log("  (one competing busy process)")
            for label, cfg in settings + [("2 threads, fixed", base.replace(threads=torch.get_num_threads()))]:
                row = time_engine(index, texts, qvecs, cfg.replace(mode="spectral"), B, args.repeats)
                out["engine"][f"spectral | {label} | contention"] = row
                log(f"  engine spectral {label:16s} under contention: {row['qps']:8.1f} q/s")
    E = np.asarray(index.embeddings, dtype=np.float32)
    qv = qvecs.numpy()
    W = index.graph["weights"]
    peer = SpectragCodePeer(E, W, index.graph["coordinates"], np.array([c.n_tokens for c in index.chunks]))
    with _common.limit_threads(1):  # the peers at one thread, numpy's BLAS (threadpoolctl) included
        _time_peers(out, index, texts, qvecs, E, qv, W, peer, base, B, args)
    torch.set_num_threads(os.cpu_count() or 1)
    return out


def _time_peers(out, index, texts, qvecs, E, qv, W, peer, base, B, args) -> None:
    out["peers"]["SpectRAG code (networkx, per query)"] = row = time_peer(lambda q: peer.query(q, base.budget),
                                                                         list(qv[: args.peer_queries]), args.peer_budget_s)
    log(f"  peer SpectRAG code: {row['qps']:.1f} q/s over {row['queries']} queries")
    seeds = dense_seeds(E, qv)
    hippo = HippoRagPeer(W, damping=0.5)
    n = len(index.chunks)

    def one_ppr(ids):
        reset = np.zeros(n)
        reset[ids] = 1.0
        return hippo.query(reset)

    out["peers"]["HippoRAG 2 (igraph PPR over the graph, per query)"] = row = time_peer(one_ppr, list(seeds), args.peer_budget_s)
    log(f"  peer HippoRAG igraph PPR: {row['qps']:.1f} q/s over {row['queries']} queries")
    state = Retriever(index, base).state
    walk = state.walk_operator()
    restart = torch.zeros(n, B, dtype=torch.float64)
    restart[torch.from_numpy(seeds).T, torch.arange(B)[None, :]] = 1.0
    sec, _ = _common.median_seconds(lambda: personalized_pagerank(walk, restart, damping=0.5, tol=1e-8, max_iter=200),
                                    args.repeats)
    out["kernels"]["batched whole-graph PPR, power iteration (every node)"] = {"qps": per_second(B, sec), "seconds": sec}
    log(f"  kernel whole-graph PPR (power iteration), B = {B}: {per_second(B, sec):.1f} q/s")
    solver = state.ppr_solver(0.5)
    if isinstance(solver, PageRankMatrix):
        ids, ones = torch.from_numpy(seeds), torch.ones(seeds.shape, dtype=torch.float64)
        sec, _ = _common.median_seconds(lambda: solver.scores(ids, ones), args.repeats)
        t0 = time.perf_counter()
        PageRankMatrix.build(walk, 0.5)
        out["kernels"]["batched whole-graph PPR, exact PageRankMatrix (every node)"] = {
            "qps": per_second(B, sec), "seconds": sec, "build_s": time.perf_counter() - t0}
        log(f"  kernel whole-graph PPR (exact matrix), B = {B}: {per_second(B, sec):.1f} q/s")
    if index.kg is not None:
        kg = index.kg
        ent, txt = np.asarray(kg.entity_emb), np.asarray(kg.text_emb)
        edge_text = np.asarray(kg.rel_text)[np.asarray(kg.adj_relation)]
        a = base.activation
        out["peers"]["SA-RAG (sequential BFS activation, per query)"] = row = time_peer(
            lambda q: sa_rag_activation(q, ent, txt, np.asarray(kg.adj_indptr), np.asarray(kg.adj_indices), edge_text,
                                        k=a.k, hops=a.hops, c=a.c), list(qv[: args.peer_queries]), args.peer_budget_s)
        log(f"  peer SA-RAG activation: {row['qps']:.1f} q/s over {row['queries']} queries")
    ref = reference_check(index, texts, qvecs, base.replace(mode="spectral"), min(args.peer_queries, 32), base.budget)
    out["peers"]["project reference (spectral, per query)"] = ref
    log(f"  reference: {ref['qps']:.2f} q/s; identical on {ref['identical']}/{ref['queries']}")


def markdown(record: dict) -> str:
    lines = _common.results_header("The engine against the peers' per-query code", record)
    for res in record["indexes"]:
        info, eng, peers = res["info"], res["engine"], res["peers"]
        lines += [f"## {info['name']} ({info['chunks']:,} chunks, {info['edges']:,} edges), B = {record['batch']}", ""]
        sc = peers["SpectRAG code (networkx, per query)"]["qps"]
        hip = peers["HippoRAG 2 (igraph PPR over the graph, per query)"]["qps"]
        rows = []
        for key, row in eng.items():
            mode = key.split(" | ")[0]
            peer = hip if mode == "ppr-graph" else peers.get("SA-RAG (sequential BFS activation, per query)", {}).get("qps") \
                if mode == "activation" else sc
            rows.append({"what": "engine " + key.replace(" | ", ", "), "qps": row["qps"], "vs": peer and row["qps"] / peer,
                         "vs hybrid": row["qps"] / eng[f"hybrid | {key.split(' | ')[1]}"]["qps"]
                         if f"hybrid | {key.split(' | ')[1]}" in eng else None,
                         "stages": ", ".join(f"{k} {v}" for k, v in row["stages_ms"].items() if v >= 0.5)})
        for key, row in {**peers, **res["kernels"]}.items():
            rows.append({"what": key, "qps": row["qps"], "vs": row["qps"] / hip if key in res["kernels"] else None,
                         "stages": f"{row.get('queries', record['batch'])} queries"
                         + (f"; batched results identical on {row['identical']}" if "identical" in row else "")
                         + (f"; matrix built once in {row['build_s']:.2f} s" if "build_s" in row else "")})
        lines += _common.md_table(rows, [("", "what", ""), ("queries/s", "qps", ",.1f"),
                                         ("x the peer", "vs", ".1f"), ("/ hybrid", "vs hybrid", ".2f"),
                                         ("ms per batch by stage / notes", "stages", "")])
        lines.append("")
    lines += ["Peers: `bench/peers.py` (SpectRAG code path per query: numpy dense top-20, networkx two-hop BFS capped at 200, "
              "networkx.pagerank on the induced subgraph, max-cosine spectral proximity, head/tail-floor/backfill cut; "
              "HippoRAG 2: igraph personalized PageRank over the whole graph, damping 0.5; SA-RAG: sequential BFS "
              "activation). `x the peer`: engine spectral/hybrid/ppr/combined rows against the SpectRAG-code peer, "
              "ppr-graph and the PPR kernels against HippoRAG's igraph PPR (same graph, same seeds, same damping), "
              "activation against SA-RAG. Peers and the reference run with one "
              "thread, numpy's BLAS pinned to one thread as well (threadpoolctl); `default` is `RetrieverConfig()` "
              "(its thread count chosen from measured batch times), `1 thread` pins the engine to one."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--indexes", default="musique,2wiki", help="comma-separated: musique, 2wiki, prebuilt:INDEX_DIR:CORPUS_DIR")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peer-queries", type=int, default=64, help="queries each per-query peer runs (default: 64)")
    ap.add_argument("--peer-budget-s", type=float, default=60.0, help="seconds a peer may run per index (default: 60)")
    ap.add_argument("--contention", action="store_true", help="also time under one competing busy process")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "peers_cpu"))
    args = ap.parse_args()
    record = _common.new_record(f"engine: median of {args.repeats} batches after warm-up; peers: one query at a time")
    record["batch"] = args.batch
    record["indexes"] = []
    for spec in args.indexes.split(","):
        if spec.startswith("prebuilt:"):
            got = prebuilt_index(spec[len("prebuilt:"):])
            if got is None:
                continue
            index, texts, info = got
            qvecs = torch.from_numpy(np.ascontiguousarray(info.pop("qvecs"), dtype=np.float32))
        else:
            got = dataset_index(spec)
            if got is None:
                continue
            index, texts, info = got
            qvecs = torch.from_numpy(index.embed_queries(texts))
        log(f"== {info['name']}")
        record["indexes"].append(bench_index(index, texts, qvecs, info, args))
    _common.finish_record(record)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2, default=float))
    out.with_suffix(".md").write_text(markdown(record))
    log(markdown(record))


if __name__ == "__main__":
    main()
