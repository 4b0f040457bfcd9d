"""Benchmark: the batched online pipeline (``spectrag.pipeline.run``, through
``Retriever.score_batch``) against the plain per-query reference pipeline
(``spectrag.reference.pipeline``: numpy brute-force dense search, BM25 row sorted in Python, RRF
with a dict, Python BFS expansion, networkx PPR on each candidate subgraph, Python-loop
selection), measured in the same run, with a check that both give the same results.

    python bench/bench_query.py                                  # MuSiQue + synthetic 10^5
    python bench/bench_query.py --indexes synthetic --synthetic-n 20000 --sizes 1,16,256
    python bench/bench_query.py --modes hybrid,ppr,spectral,heat --threads 1

**Indexes** (built once under ``bench/indexes/``, git-ignored, and reused afterwards):

* ``musique``: the 1,890 MuSiQue passages of ``../shared/data/musique`` with the default
  ``IndexConfig`` (all-MiniLM-L6-v2, d = 384; the embedding cache in ``~/.cache/spectrag`` is
  used when it holds them). Skipped with a message when the data is absent. Queries: the 100
  questions of ``musique_train.json``, embedded once before any timing, tiled to reach B.
* ``synthetic``: ``--synthetic-n`` chunks (default 10^5): generated passages (the ``musique``
  corpus format, one chunk each: chunking Markdown documents would dominate the build, see the
  report's build stages), in topics of ~400 passages; pseudo-word text with per-topic vocabulary (BM25
  material), per-topic capitalized names (entity edges) and a mention of another passage's
  title (citation edges). Embeddings are *supplied* (``build_index(..., embeddings=...)``):
  d = ``--dim`` (default 128), topic centre + offset shared by runs of 4 passages + noise,
  L2-normalized. Queries: ``max(sizes)`` random vectors near topic centres, each with a short
  random text of its topic's words and names (no tiling).

**Timing.** Query vectors are given (``qvecs=``), so *embedding is excluded* from every time.
Batched: for each mode and B, one warm-up call, then the median of ``--repeats`` calls (default
3); the per-stage ``seconds`` of the median call are reported. Reference: run once per query on
the first ``--ref-queries`` queries (default 32; after one untimed warm-up query) per index and
mode. Its time at B = 1 is that of query 0, at B = 16 the sum over queries 0-15; for B larger
than the number of reference queries it is *extrapolated*: mean time per query over the
reference queries x B (the tables say so). The reference has no batch dimension, so this is
its throughput at any B.

**Identical results.** On every query the reference ran (the first min(B, ref-queries) rows of
each batch): same candidate set, scores within 1e-5, same ranking (swaps allowed only between
scores within 1e-5) and the same selected chunk ids in order. A query where the engine's BM25
list differs from the reference's (smaller-id) list only by which chunks tied at the k-th score
it keeps (``BM25Index.search`` did that before its ties were fixed; with the fix there are none)
is counted separately and compared again with the reference run on the engine's BM25 list
(untimed). A mismatch is diagnosed: does the same query alone (B = 1) equal the reference, and
does FAISS return another dense list for that row inside the batch than alone?

Threads: ``--threads`` (default 1) for torch intra-op, OpenMP, MKL and OpenBLAS (FAISS too),
with ``OMP_WAIT_POLICY=PASSIVE``: on a shared 2-core machine two threads were slower than one
in a trial (the load average is in the results). Results: ``results/query_cpu.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

from _common import ensure_spectrag, pin_threads

_THREADS = pin_threads("1", passive=True)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import ROOT, finish_record, machine_line, new_record, results_header, write_results  # noqa: E402

ensure_spectrag()
from make_synthetic import SYLLABLES, pseudo_word  # noqa: E402
from spectrag.config import RetrieverConfig  # noqa: E402
from spectrag.reference.pipeline import bm25_list, reference_retrieve  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402

HERE = str(ROOT / "bench")
ROOT = str(ROOT)
MUSIQUE = os.path.join(ROOT, "..", "shared", "data", "musique")
TOL = 1e-5
STAGES = ("seed", "expand", "blocks", "propagate", "bridge", "score", "select")


def log(*a) -> None:
    print(*a, flush=True)


# --------------------------------------------------------------------------------------------
# indexes and queries
# --------------------------------------------------------------------------------------------


def musique(index_dir: str):
    """The MuSiQue index (built once) and its 100 questions, or None when the data is absent."""
    corpus = os.path.join(MUSIQUE, "musique_train_corpus.json")
    questions = os.path.join(MUSIQUE, "musique_train.json")
    if not (os.path.exists(corpus) and os.path.exists(questions)):
        log(f"MuSiQue skipped: {corpus} or {questions} is absent")
        return None
    from spectrag.build import build_index
    from spectrag.store import load_index

    path = os.path.join(index_dir, "musique")
    info = {"name": "musique", "path": os.path.relpath(path, ROOT)}
    t0 = time.perf_counter()
    if os.path.exists(os.path.join(path, "manifest.json")):
        index = load_index(path, verify=False)
        info["build"] = "reused"
    else:
        log("building the MuSiQue index (embedding 1,890 passages unless cached) ...")
        index = build_index(corpus, path, fmt="musique")
        info["build"] = f"built in {time.perf_counter() - t0:.0f} s"
    build_facts(index, info)
    with open(questions, encoding="utf-8") as f:
        texts = [q["question"] for q in json.load(f)]
    t0 = time.perf_counter()
    qvecs = torch.from_numpy(index.embed_queries(texts))
    info["query_embedding_s"] = round(time.perf_counter() - t0, 2)
    info["queries"] = f"{len(texts)} MuSiQue questions (all-MiniLM-L6-v2, embedded once, outside timing), tiled to B"
    info["dim"] = int(qvecs.shape[1])
    return index, texts, qvecs, info


def build_facts(index, info: dict) -> None:
    """Build seconds per stage (and per graph signal) as the manifest recorded them."""
    info["build_stages_s"] = index.manifest.get("seconds", {})
    info["graph_stages_s"] = (index.manifest.get("graph") or {}).get("seconds", {})
    info["build_total_s"] = round(sum(info["build_stages_s"].values()), 1)


def _word(i: int, length: int) -> str:
    return pseudo_word(i, SYLLABLES, length)


def synthetic_passages(n: int, seed: int):
    """``n`` passages ``{title, text}`` in topics of about 400. Returns the passages, the topic of
    each, and the per-topic vocabularies and names (for query texts)."""
    rng = random.Random(seed)
    n_topics = max(2, n // 400)
    common = [_word(i, 2) for i in range(200)]
    vocab = [[_word(20_000 + t * 40 + j, 3) for j in range(40)] for t in range(n_topics)]
    names = [[f"{_word(300_000 + t * 24 + 2 * j, 2).capitalize()} {_word(300_001 + t * 24 + 2 * j, 3).capitalize()}"
              for j in range(12)] for t in range(n_topics)]
    titles = [f"{_word(1_000_000 + 2 * i, 3).capitalize()} {_word(1_000_001 + 2 * i, 2).capitalize()}" for i in range(n)]
    # consecutive runs of 4 passages share a topic (an "article"; they also share an embedding offset)
    topic = [t for t in (rng.randrange(n_topics) for _ in range((n + 3) // 4)) for _ in range(4)][:n]
    members: list[list[int]] = [[] for _ in range(n_topics)]
    for i, t in enumerate(topic):
        members[t].append(i)
    passages = []
    for i, title in enumerate(titles):
        t = topic[i]
        sentences = []
        for _ in range(rng.randint(3, 5)):
            w = rng.sample(vocab[t], 3)
            sentences.append(f"The {w[0]} {rng.choice(common)} of {title} met {rng.choice(names[t])} near the "
                             f"{w[1]} {w[2]} {rng.choice(common)} in {rng.randint(1600, 1999)}.")
        sentences.append(f"It is often compared with {titles[rng.choice(members[t])]}.")
        passages.append({"title": title, "text": " ".join(sentences)})
    return passages, topic, vocab, names


def synthetic(index_dir: str, n_chunks: int, dim: int, n_queries: int, seed: int = 0):
    """The synthetic index of ``n_chunks`` one-chunk passages (built once) and its query set."""
    from spectrag.config import EmbedConfig, IndexConfig
    from spectrag.build import build_index
    from spectrag.store import load_index

    name = f"synthetic-{n_chunks}-d{dim}"
    path = os.path.join(index_dir, name)
    t0 = time.perf_counter()
    passages, topic, vocab, names = synthetic_passages(n_chunks, seed)
    n_topics = len(vocab)
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_topics, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    info = {"name": name, "path": os.path.relpath(path, ROOT), "dim": dim, "topics": n_topics}
    if os.path.exists(os.path.join(path, "manifest.json")):
        index = load_index(path, verify=False)
        info["build"] = "reused"
    else:
        corpus = os.path.join(index_dir, f"{name}.json")
        os.makedirs(index_dir, exist_ok=True)
        with open(corpus, "w", encoding="utf-8") as f:
            json.dump(passages, f)
        t_gen = time.perf_counter() - t0
        # passages ("musique" format) that fit in a chunk stay whole: chunk i is passage i
        article = np.arange(n_chunks) // 4
        offset = rng.standard_normal((int(article[-1]) + 1, dim)).astype(np.float32) / np.sqrt(dim)
        noise = rng.standard_normal((n_chunks, dim)).astype(np.float32) / np.sqrt(dim)
        vec = centres[np.asarray(topic)] + 0.7 * offset[article] + 0.6 * noise
        vec /= np.linalg.norm(vec, axis=1, keepdims=True)
        log(f"building {name}: {n_chunks:,} passages (generated in {t_gen:.0f} s) ...")
        index = build_index(corpus, path, IndexConfig(embed=EmbedConfig(cache_dir="")), fmt="musique",
                            embeddings=vec.astype(np.float32))
        info["build"] = f"built in {time.perf_counter() - t0:.0f} s"
    build_facts(index, info)
    qrng, qnp = random.Random(seed + 1), np.random.default_rng(seed + 2)
    qt = qnp.integers(0, n_topics, size=n_queries)
    qv = centres[qt] + 0.9 * qnp.standard_normal((n_queries, dim)).astype(np.float32) / np.sqrt(dim)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    texts = [" ".join(qrng.sample(vocab[t], 2)) + " " + qrng.choice(names[t]) for t in qt.tolist()]
    info["queries"] = (f"{n_queries} random vectors near topic centres + random texts of the topic's words and "
                       "names (no tiling)")
    return index, texts, torch.from_numpy(qv.astype(np.float32)), info


def prebuilt(spec: str):
    """``INDEX_DIR:CORPUS_DIR``: an index built by ``bench/bench_scale.py`` from a corpus of
    ``bench/make_synthetic.py``, queried with that corpus's query set."""
    from spectrag.store import load_index
    from make_synthetic import load_queries

    index_dir, corpus_dir = spec.split(":", 1)
    index = load_index(index_dir, verify=False)
    texts, qv, _ = load_queries(corpus_dir)
    info = {"name": f"scale-{len(index.chunks)}", "path": index_dir, "dim": int(qv.shape[1]), "build": "reused",
            "queries": f"{len(texts)} queries of bench/make_synthetic.py (vector near a topic centre, text of "
                       "two topic words and a topic name)"}
    build_facts(index, info)
    return index, texts, torch.from_numpy(np.ascontiguousarray(qv, dtype=np.float32)), info


# --------------------------------------------------------------------------------------------
# comparison (as tests/test_pipeline.py)
# --------------------------------------------------------------------------------------------


def batch_row(result, b: int, ranking) -> dict:
    cand = result.candidates[b].tolist()
    real = [(pos, c) for pos, c in enumerate(cand) if c >= 0]
    scores = result.scores[b].tolist()
    return {
        "candidates": [c for _, c in real],
        "scores": {c: scores[pos] for pos, c in real},
        "ranking": [c for c in ranking[b].tolist() if c >= 0],
        "selected": [cand[p] for p in result.selected[b].tolist() if p >= 0],
    }


def differences(got: dict, want: dict) -> str | None:
    """None when equal (candidates, scores within TOL, tie-aware ranking, selection)."""
    if set(got["candidates"]) != set(want["candidates"]):
        return (f"candidate sets differ (only batched {sorted(set(got['candidates']) - set(want['candidates']))[:5]}, "
                f"only reference {sorted(set(want['candidates']) - set(got['candidates']))[:5]})")
    worst = max(abs(got["scores"][c] - want["scores"][c]) for c in want["candidates"]) if want["candidates"] else 0.0
    if worst > TOL:
        return f"scores differ by up to {worst:.3g}"
    if got["ranking"] != want["ranking"]:
        pos = {c: k for k, c in enumerate(want["ranking"])}
        s = want["scores"]
        for k, a in enumerate(got["ranking"]):
            for b in got["ranking"][k + 1 :]:
                if pos[a] > pos[b] and abs(s[a] - s[b]) > TOL:
                    return f"ranking swaps {a} and {b} (scores {s[a]:.7g}, {s[b]:.7g})"
    if got["selected"] != want["selected"]:
        return f"selection differs: {got['selected'][:8]}... vs {want['selected'][:8]}..."
    return None


def bm25_tie_lists(index, texts: list[str], k: int) -> dict[int, list[int]]:
    """Queries whose engine BM25 list differs from the smaller-id list only by a tie at the cut."""
    _, ids = index.bm25.search(texts, k)
    out = {}
    for b, text in enumerate(texts):
        want, want_s = bm25_list(index, text, k)
        got = [int(i) for i in ids[b] if i >= 0]
        if got != want:
            row = index.bm25.score([text]).toarray()[0]
            if len(got) == len(want) and all(float(row[c]) == want_s[-1] for c in set(got) ^ set(want)):
                out[b] = got
            else:
                out[b] = None  # a real difference: compared as is (and reported as a mismatch)
    return out


def diagnose(retriever, btexts, bvecs, b: int, mode: str, want: dict) -> str:
    """Why row ``b`` of a batch differs from the reference: is the batch-of-one result equal to
    the reference, and does FAISS give row ``b`` another dense list inside the batch than alone?"""
    one = retriever.score_batch([btexts[b]], qvecs=bvecs[b : b + 1], mode=mode)
    alone = differences(batch_row(one, 0, one.ranking()), want)
    out = "the same query alone (B = 1) " + ("equals the reference" if alone is None else f"also differs ({alone})")
    k = retriever.config.seed.k_dense
    s_in, i_in = retriever.index.dense.search(bvecs.numpy(), k)
    s_1, i_1 = retriever.index.dense.search(bvecs[b : b + 1].numpy(), k)
    swaps = [(r + 1, int(x), float(sx), int(y), float(sy)) for r, (x, sx, y, sy)
             in enumerate(zip(i_in[b], s_in[b], i_1[0], s_1[0])) if x != y]
    if swaps:
        r, x, sx, y, sy = swaps[0]
        out += (f"; FAISS dense list of this row differs inside the batch of {len(btexts)} from the query alone "
                f"at {len(swaps)} rank(s), first rank {r}: chunk {x} ({sx!r}) vs chunk {y} ({sy!r})")
    return out


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------


def run_reference(index, texts, qvecs, cfg, budget: int, n: int):
    """Per-query reference on queries 0..n-1: results and seconds per query (one untimed warm-up)."""
    reference_retrieve(index, qvecs[0].numpy(), texts[0], cfg, budget)
    results, times = [], []
    for b in range(n):
        t0 = time.perf_counter()
        results.append(reference_retrieve(index, qvecs[b].numpy(), texts[b], cfg, budget))
        times.append(time.perf_counter() - t0)
    return results, times


def bench_index(index, texts, qvecs, info, args, record) -> None:
    retriever = Retriever(index, RetrieverConfig(device="cpu", budget=12_000))  # the recorded results' budget
    budget = retriever.config.budget
    n_unique = len(texts)
    n_ref = min(args.ref_queries, n_unique, max(args.sizes))
    info.update(chunks=len(index.chunks), graph_edges=int(index.graph["weights"].nnz // 2) if index.graph else 0)
    log(f"\n== {info['name']}: {len(index.chunks):,} chunks, d = {info['dim']}, "
        f"{info['graph_edges']:,} graph edges; {info['build']}")
    for mode in args.modes:
        cfg = retriever.config.replace(mode=mode)
        t0 = time.perf_counter()
        ref, ref_times = run_reference(index, texts, qvecs, cfg, budget, n_ref)
        ref_wall = time.perf_counter() - t0
        ties = bm25_tie_lists(index, texts[:n_ref], cfg.seed.k_bm25) if mode != "dense" else {}
        for b, lst in ties.items():  # re-run (untimed) on the engine's BM25 list where it only broke a tie
            if lst is not None:
                ref[b] = reference_retrieve(index, qvecs[b].numpy(), texts[b], cfg, budget, bm25_ids=lst)
        per_query = statistics.fmean(ref_times)
        log(f"-- mode {mode}: reference {per_query:.3f} s/query over {n_ref} queries "
            f"({ref_wall:.0f} s); BM25 cut ties on {sum(v is not None for v in ties.values())} of them")
        for B in args.sizes:
            idx = torch.arange(B) % n_unique
            btexts = [texts[i] for i in idx.tolist()]
            bvecs = qvecs[idx].contiguous()
            retriever.score_batch(btexts, qvecs=bvecs, mode=mode)  # warm-up
            runs = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                res = retriever.score_batch(btexts, qvecs=bvecs, mode=mode)
                runs.append((time.perf_counter() - t0, res.seconds, res))
            runs.sort(key=lambda r: r[0])
            t_batch, stages, res = runs[len(runs) // 2]
            ranking = res.ranking()
            checked = min(B, n_ref)
            same, same_tie, bad = 0, 0, []
            for b in range(checked):
                q = int(idx[b])
                diff = differences(batch_row(res, b, ranking), ref[q])
                if diff is None:
                    same += 1
                    same_tie += ties.get(q) is not None
                else:
                    bad.append(f"query {q}: {diff}; " + diagnose(retriever, btexts, bvecs, b, mode, ref[q]))
            if B <= n_ref:
                t_ref, ref_note = sum(ref_times[:B]), "measured"
            else:
                t_ref, ref_note = per_query * B, f"extrapolated from {n_ref} queries"
            row = {
                "index": info["name"], "mode": mode, "B": B, "batched_s": t_batch,
                "batched_runs_s": [r[0] for r in runs], "batched_qps": B / t_batch,
                "stages_s": {k: stages.get(k, 0.0) for k in STAGES},
                "reference_s": t_ref, "reference_note": ref_note, "reference_qps": B / t_ref,
                "reference_s_per_query": per_query, "speedup": t_ref / t_batch,
                "checked": checked, "identical": same, "identical_after_bm25_tie": same_tie,
                "mismatches": bad, "load_1min": round(os.getloadavg()[0], 2),
            }
            record["rows"].append(row)
            log(f"   B={B:5d}  batched {t_batch:8.3f} s ({B / t_batch:8.1f} q/s)  reference {t_ref:8.2f} s "
                f"({ref_note}; {B / t_ref:6.2f} q/s)  speed-up {t_ref / t_batch:7.1f}x  identical {same}/{checked}"
                + (f" ({same_tie} after the BM25 tie)" if same_tie else "")
                + "  stages " + " ".join(f"{k}={v * 1e3:.0f}ms" for k, v in row["stages_s"].items() if v > 0))
            for line in bad[:5]:
                log("      MISMATCH " + line)
            save(record, args)  # partial results survive an interruption


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------


def markdown(record: dict) -> str:
    lines = results_header("Online retrieval: batched `spectrag.pipeline.run` vs the per-query reference pipeline "
                           "(CPU)", record) + [
        "Timing: query vectors are passed in (`qvecs=`), so **query embedding is excluded**. Batched = median of "
        f"{record['repeats']} `score_batch` calls after one warm-up at the same B, default `RetrieverConfig` "
        "(K = 50 + 50, 20 seeds, P = 200, 2 hops, budget 12,000 tokens). Reference = `spectrag.reference.pipeline` "
        "(numpy brute-force dense top-K, BM25 row sorted in Python, RRF dict, Python BFS expansion, networkx "
        "subgraph + `networkx.pagerank`, numpy-loop spectral proximity, `budget_select_reference`), one run per "
        f"query on the first {record['ref_queries']} queries: its time at B = 1 is query 0's, at B = 16 the sum "
        "over queries 0-15, and **for larger B it is extrapolated** (mean seconds per query x B).",
        "Identical = queries (of those the reference ran) with the same candidate set, scores within 1e-5, the "
        "same ranking (swaps only between scores within 1e-5) and the same selected chunk ids in order.",
        "",
        "## Indexes",
        "",
        "| index | chunks | d | graph edges | this run | build stages as recorded in the manifest [s] | queries |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for i in record["indexes"]:
        stages = ", ".join(f"{k} {v:.0f}" for k, v in i.get("build_stages_s", {}).items())
        graph = ", ".join(f"{k} {v:.0f}" for k, v in i.get("graph_stages_s", {}).items())
        lines.append(f"| {i['name']} | {i.get('chunks', 0):,} | {i['dim']} | {i.get('graph_edges', 0):,} | {i['build']} "
                     f"| total {i.get('build_total_s', 0):.0f}: {stages} (graph: {graph}) | {i['queries']} |")
    for note in record["notes"]:
        lines.append("")
        lines.append(note)
    lines += [
        "",
        "## Throughput",
        "",
        "| index | mode | B | batched [s] | batched q/s | reference [s] | reference q/s | speed-up | identical |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in record["rows"]:
        ref = f"{r['reference_s']:.2f}" + (" (extrap.)" if r["reference_note"].startswith("extra") else "")
        ident = f"{r['identical']}/{r['checked']}"
        if r["identical_after_bm25_tie"]:
            ident += f" ({r['identical_after_bm25_tie']} on the engine's BM25 list: BM25 tie at the cut)"
        lines.append(f"| {r['index']} | {r['mode']} | {r['B']} | {r['batched_s']:.3f} | {r['batched_qps']:,.1f} | {ref} "
                     f"| {r['reference_qps']:.2f} | **{r['speedup']:,.1f}x** | {ident} |")
    lines += ["", "## Goal: >= 30x the reference's throughput at B = 256", ""]
    for r in record["rows"]:
        if r["B"] == 256:
            verdict = "met" if r["speedup"] >= 30 else "NOT met"
            lines.append(f"- {r['index']}, {r['mode']}: {r['speedup']:.2f}x (batched {r['batched_qps']:.1f} q/s vs "
                         f"reference {r['reference_qps']:.2f} q/s) -- {verdict}")
    lines += [
        "",
        "## Per-stage time of the batched call (ms, the median call's `seconds`)",
        "",
        "| index | mode | B | " + " | ".join(STAGES) + " | total | ms/query | largest stage |",
        "|---|---|---:|" + "---:|" * (len(STAGES) + 2) + "---|",
    ]
    for r in record["rows"]:
        st = r["stages_s"]
        top = max(STAGES, key=lambda k: st[k])
        lines.append(f"| {r['index']} | {r['mode']} | {r['B']} | " + " | ".join(f"{st[k] * 1e3:.1f}" for k in STAGES)
                     + f" | {r['batched_s'] * 1e3:.1f} | {r['batched_s'] * 1e3 / r['B']:.2f} "
                     f"| {top} ({st[top] / r['batched_s']:.0%}) |")
    mism = [(r, m) for r in record["rows"] for m in r["mismatches"]]
    lines += ["", "## Mismatches", ""]
    if mism:
        for r, m in mism[:40]:
            lines.append(f"- {r['index']}, {r['mode']}, B = {r['B']}: {m}")
    else:
        lines.append("None: every query the reference ran gave identical results.")
    lines.append("")
    return "\n".join(lines)


def save(record: dict, args) -> None:
    """The results so far (partial results survive an interruption)."""
    write_results(args.out, markdown(finish_record(record)).splitlines(), record)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--indexes", default="musique,synthetic",
                    help="comma-separated: musique, synthetic, or prebuilt:INDEX_DIR:CORPUS_DIR (bench_scale.py)")
    ap.add_argument("--sizes", default="1,16,256,1024", help="batch sizes B (default: 1,16,256,1024)")
    ap.add_argument("--modes", default="hybrid,ppr,spectral", help="modes (default: hybrid,ppr,spectral)")
    ap.add_argument("--synthetic-n", type=int, default=100_000, help="synthetic chunks (default: 100000)")
    ap.add_argument("--dim", type=int, default=128, help="synthetic embedding dimension (default: 128)")
    ap.add_argument("--repeats", type=int, default=3, help="timed batched calls per point (default: 3)")
    ap.add_argument("--ref-queries", type=int, default=32, help="queries the reference runs (default: 32)")
    ap.add_argument("--threads", type=int, default=1, help="torch/BLAS/OpenMP threads (default: 1)")
    ap.add_argument("--index-dir", default=os.path.join(HERE, "indexes"), help="where indexes are built/reused")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "query_cpu.md"))
    ap.add_argument("--note", action="append", default=[], help="a line added under the index table")
    ap.add_argument("--render-only", metavar="JSON", help="only re-render the Markdown of an earlier run's JSON")
    args = ap.parse_args()
    if args.render_only:
        with open(args.render_only) as f:
            record = json.load(f)
        out = os.path.splitext(args.render_only)[0] + ".md"
        with open(out, "w") as f:
            f.write(markdown(record))
        log(f"re-rendered {out}")
        return
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.modes = [m.strip() for m in args.modes.split(",")]
    torch.set_num_threads(args.threads)
    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)
    except Exception:  # noqa: BLE001 - FAISS without OpenMP controls
        pass
    record = new_record(f"batched: median of {args.repeats} calls after one warm-up; reference: one run per query "
                        f"on the first {args.ref_queries} queries after one untimed warm-up query",
                        packages=("faiss", "networkx"))
    record.update(repeats=args.repeats, ref_queries=args.ref_queries, sizes=args.sizes, modes=args.modes,
                  indexes=[], rows=[], notes=list(args.note))
    log(machine_line(record["machine"]))
    for name in args.indexes.split(","):
        if name == "musique":
            got = musique(args.index_dir)
        elif name == "synthetic":
            got = synthetic(args.index_dir, args.synthetic_n, args.dim, max(args.sizes))
        elif name.startswith("prebuilt:"):
            got = prebuilt(name[len("prebuilt:"):])
        else:
            raise SystemExit(f"unknown index {name!r}")
        if got is None:
            record["notes"].append(f"{name}: skipped (data absent).")
            continue
        index, texts, qvecs, info = got
        record["indexes"].append(info)
        bench_index(index, texts, qvecs, info, args, record)
        if name == "synthetic" and args.synthetic_n < 1_000_000 and "prebuilt:" not in args.indexes:
            g = info.get("graph_stages_s", {})
            record["notes"].append(
                f"10^6 chunks: not run. The {args.synthetic_n:,}-chunk index took {info['build_total_s']:.0f} s to build "
                f"(chunk {info['build_stages_s'].get('chunk', 0):.0f} s, exact semantic kNN {g.get('semantic', 0):.0f} s, "
                f"entity signal {g.get('entity', 0):.0f} s, spectrum {g.get('spectrum', 0):.0f} s); at 10x the chunks the "
                "exact kNN of `build_index` grows ~100x and chunking / entities ~10x, so the build alone would take hours, "
                "far past the ~15 min this benchmark may spend on it.")
        save(record, args)
    save(record, args)
    log(f"done in {record['wall_seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
