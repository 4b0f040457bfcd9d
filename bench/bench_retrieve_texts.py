"""Benchmark: batch retrieval from query texts to contexts, the whole path (`Retriever.retrieve`),
with the query encoder's default recipe (texts of one token length stacked in one ONNX Runtime
call) against the earlier one (each text alone), in the same process, interleaved.

A user scoring a file of questions (`spectrag retrieve INDEX --queries FILE`) waits for this
path: at large batches the query encoder is most of it. Both recipes give every query the same
vector bits (checked here, question by question), so the contexts are the same; only the time
differs. Default settings (spectral, the 2,000-token context, torch's thread count). The peers'
way is timed in the same rounds: one plain sentence-transformers ``encode`` of each batch, then
the SpectRAG public code one query at a time (``bench/peers.py``, the same budget, numpy at the
process's threads); its contexts are its own method's, so only its time compares.

    python bench/bench_retrieve_texts.py --index DIR [--queries 768] [--batch 256] [--rounds 3]

Results: bench/results/retrieve_texts_cpu.md / .json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

_common.ensure_spectrag()

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_embed_runtime import questions_of  # noqa: E402
from peers import SpectragCodePeer  # noqa: E402

from spectrag.config import RetrieverConfig  # noqa: E402
from spectrag.index.embed import resolve_model_path  # noqa: E402
from spectrag.retriever import Retriever  # noqa: E402

ROOT = _common.ROOT
RECIPES = {True: "stacked (default)", False: "each text alone (earlier default)"}
PEER = "the peers' way: plain sentence-transformers encode, then the SpectRAG code per query"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, help="an index folder (MuSiQue's passages in the recorded runs)")
    ap.add_argument("--queries", type=int, default=768, help="questions of MuSiQue, 2wiki-dev and docs-dev, in that order")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "retrieve_texts_cpu"))
    args = ap.parse_args()
    record = _common.new_record(f"median of {args.rounds} rounds, the two recipes and the peers' way in turn in each, after one "
                                "warm-up batch")
    texts = questions_of("all")[: args.queries]
    retriever = Retriever(args.index)
    retriever.retrieve(texts[: args.batch])  # warm-up: the model, the kernels
    encoder = getattr(retriever.index.query_embedder("onnx"), "encoder", None)
    if encoder is None:
        raise SystemExit("the index's ONNX query export is not verified yet: run one query first (spectrag retrieve)")
    from sentence_transformers import SentenceTransformer

    index = retriever.index
    plain = SentenceTransformer(str(resolve_model_path(index.config.embed.model)), device="cpu")
    peer = SpectragCodePeer(np.asarray(index.embeddings, dtype=np.float32), index.graph["weights"],
                            index.graph["coordinates"], np.array([c.n_tokens for c in index.chunks]))
    budget = RetrieverConfig().budget

    def peers_way() -> None:
        for lo in range(0, len(texts), args.batch):
            vectors = plain.encode(texts[lo : lo + args.batch], batch_size=64, normalize_embeddings=True)
            for q in vectors:
                peer.query(q, budget)

    peers_way()  # warm-up
    seconds: dict[object, list[float]] = {True: [], False: [], PEER: []}
    vectors, contexts = {}, {}
    for rnd in range(args.rounds):
        # the recipes' order alternates by round, and an untimed batch follows the peers' way, so
        # that neither recipe always runs first on the caches the peers left
        retriever.retrieve(texts[: args.batch], batch_size=args.batch)
        for stack in (True, False) if rnd % 2 == 0 else (False, True):
            encoder.stack = stack
            start = time.perf_counter()
            contexts[stack] = retriever.retrieve(texts, batch_size=args.batch)
            seconds[stack].append(time.perf_counter() - start)
            print(f"{RECIPES[stack]}: {seconds[stack][-1]:.2f} s", flush=True)
        start = time.perf_counter()
        peers_way()
        seconds[PEER].append(time.perf_counter() - start)
        print(f"{PEER}: {seconds[PEER][-1]:.2f} s", flush=True)
    for stack in (True, False):
        encoder.stack = stack
        vectors[stack] = retriever.embed(texts).numpy()
    encoder.stack = True
    same_vectors = int((vectors[True] == vectors[False]).all(axis=1).sum())
    same_contexts = sum([c.chunk_id for c in a.chunks] == [c.chunk_id for c in b.chunks] and a.ranking == b.ranking
                        for a, b in zip(contexts[True], contexts[False]))
    rows = [{"recipe": RECIPES.get(s, s), "s": statistics.median(seconds[s]),
             "qps": len(texts) / statistics.median(seconds[s])} for s in (True, False, PEER)]
    record.update(queries=len(texts), batch=args.batch, threads=torch.get_num_threads(), results=rows,
                  same_vectors=same_vectors, same_contexts=same_contexts,
                  raw_seconds={RECIPES.get(k, k): v for k, v in seconds.items()})
    _common.finish_record(record)
    speedup, over_peer = rows[0]["qps"] / rows[1]["qps"], rows[0]["qps"] / rows[2]["qps"]
    lines = _common.results_header("Batch retrieval from query texts: the query encoder's recipes", record) + [
        f"{len(texts)} questions (MuSiQue, 2wiki-dev, docs-dev in that order) through `Retriever.retrieve` in batches "
        f"of {args.batch}, default settings (mode spectral, 2,000-token contexts), torch threads "
        f"{torch.get_num_threads()}. Index: `{args.index}`.",
        "",
        *_common.md_table(rows, [("path", "recipe", ""), ("s (median)", "s", ".2f"),
                                 ("queries/s", "qps", ".1f")]),
        "",
        f"Stacked / alone: **{speedup:.2f}x** the queries per second; stacked / the peers' way: **{over_peer:.2f}x**. "
        f"Same vector bits for {same_vectors} of "
        f"{len(texts)} questions, the same context chunks and ranking for {same_contexts} of {len(texts)}.",
    ]
    _common.write_results(args.out, lines, record)
    print("\n".join(lines))
    if same_vectors != len(texts) or same_contexts != len(texts):
        raise SystemExit("the recipes gave different vectors or contexts")


if __name__ == "__main__":
    main()
