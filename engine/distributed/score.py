"""Batch scoring on Ray: an actor pool of :class:`spectrag.retriever.Retriever`\\ s, each over one
memory-mapped copy of the index (:func:`spectrag.store.load_index` once per actor), fed batches
of queries through Ray Data; results come back in batch order."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spectrag.config import RetrieverConfig
from spectrag.contexts import Context, build_contexts
from spectrag.distributed.cluster import quiet_data_context, require_ray
from spectrag.errors import SpectragError
from spectrag.limits import check_k, check_queries
from spectrag.retriever import Retriever
from spectrag.store import load_index, read_manifest


class ScoreBatches:
    """Ray Data callable class: a :class:`Retriever` over the index at ``path`` (checked by the
    driver, so loaded here without re-hashing); each row is one query batch, scored whole."""

    def __init__(self, path: str, config: RetrieverConfig, budget: int | None, mode: str | None,
                 k: int | None = None) -> None:
        self.retriever = Retriever(load_index(path, verify=False), config)
        self.budget, self.mode, self.k = budget, mode, k

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        contexts = []
        for i, texts in enumerate(batch["texts"]):
            texts = [str(t) for t in texts]
            vectors = batch["vectors"][i] if "vectors" in batch else None
            if vectors is None:
                # the batch scored whole, as the single process scores it (not re-split)
                contexts.append(self.retriever.retrieve(texts, k=self.k, budget=self.budget, mode=self.mode,
                                                        batch_size=len(texts)))
            else:  # query vectors given (an index built from supplied embeddings): no embedding
                qvecs = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(self.retriever.state.device)
                result = self.retriever.score_batch(texts, budget=self.budget, mode=self.mode, qvecs=qvecs)
                contexts.append(build_contexts(self.retriever.index, texts, result, self.k,
                                               budgeted=self.k is None or self.budget is not None))
        # contexts travel as JSON text (Context.to_json / from_json: plain data, no pickle)
        return {"b": np.asarray(batch["b"], dtype=np.int64),
                "contexts": np.array([json.dumps([c.to_json() for c in part]) for part in contexts], dtype=object)}


class RayRetriever:
    """``Retriever`` on a Ray cluster: ``workers`` actors, each with the index at ``path``
    memory-mapped once. :meth:`retrieve_batches` scores an iterable of query batches, several at
    a time, and yields each batch's contexts in input order; the batches are scored exactly as
    given, so the output equals ``Retriever.retrieve`` on the same batches (a query's embedding
    depends, at float32 rounding, on the queries batched with it). One GPU per actor when the
    cluster has GPUs. Call inside :func:`spectrag.distributed.ray_cluster` (or after ``ray.init``).
    """

    def __init__(self, path: str | Path, config: RetrieverConfig | None = None, *, workers: int = 0) -> None:
        ray = require_ray()
        if not ray.is_initialized():
            raise SpectragError("RayRetriever needs a connected Ray (spectrag.distributed.ray_cluster or ray.init)")
        self.path = Path(path)
        read_manifest(self.path, verify=True)  # once, here: a corrupt index fails before any actor starts
        self.config = config or RetrieverConfig()
        resources = ray.cluster_resources()
        self.gpus = int(resources.get("GPU", 0))
        self.workers = workers or max(1, self.gpus or int(resources.get("CPU", 1)))

    def retrieve_batches(self, batches: Iterable[list[str]], *, k: int | None = None, budget: int | None = None,
                         mode: str | None = None, vectors: Iterable[np.ndarray] | None = None) -> Iterator[list[Context]]:
        """One list of contexts per batch of query texts, in order; ``k``, ``budget`` and ``mode``
        as :meth:`Retriever.retrieve`'s. ``vectors``: one float32 ``[B, d]`` array per batch, the
        query embeddings (``Retriever.score_batch(qvecs=)``)."""
        ray = require_ray()
        quiet_data_context(ray)
        check_k(k, self.config, mode)
        rows = [{"b": b, "texts": list(texts)} for b, texts in enumerate(batches)]
        if not rows:
            return
        if vectors is not None:
            vectors = list(vectors)
            if len(vectors) != len(rows) or any(len(v) != len(r["texts"]) for v, r in zip(vectors, rows)):
                raise SpectragError("vectors must hold one [B, d] array per batch, B its number of queries")
            for row, v in zip(rows, vectors):
                row["vectors"] = np.ascontiguousarray(v, dtype=np.float32)
        for row in rows:
            if not row["texts"]:
                raise SpectragError(f"query batch {row['b']} is empty")
        gpus = min(self.gpus, self.workers)
        ds = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            ScoreBatches,
            fn_constructor_kwargs={"path": str(self.path), "config": self.config, "budget": budget, "mode": mode, "k": k},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=max(1, min(gpus or self.workers, len(rows)))),
            num_gpus=1 if gpus else 0,  # Ray Data restarts dead actors and retries their batches
        )
        pending: dict[int, list[Context]] = {}
        expected = 0
        for out in ds.iter_batches(batch_format="numpy", batch_size=None):
            for b, contexts in zip(out["b"], out["contexts"]):
                pending[int(b)] = [Context.from_json(c) for c in json.loads(contexts)]
            while expected in pending:  # in order, whatever order Ray finishes them in
                yield pending.pop(expected)
                expected += 1
        if expected != len(rows):
            raise RuntimeError(f"the scoring pool returned {expected} of {len(rows)} batches")

    def retrieve(self, queries: list[str], *, k: int | None = None, budget: int | None = None, mode: str | None = None,
                 batch_size: int = 256) -> list[Context]:
        """One context per query, in order, the queries scored in batches of ``batch_size``."""
        queries = list(queries)
        if batch_size < 1:
            raise SpectragError(f"batch_size must be >= 1, got {batch_size}")
        batches = [queries[lo : lo + batch_size] for lo in range(0, len(queries), batch_size)]
        return [c for part in self.retrieve_batches(batches, k=k, budget=budget, mode=mode) for c in part]


def scored_batches(path: str | Path, config: RetrieverConfig, batches: Iterable[list[tuple[str, str]]], *,
                   k: int | None = None, budget: int | None = None, address: str | None = "local",
                   workers: int = 0) -> Iterator[tuple[list[tuple[str, str]], list[Context]]]:
    """``(batch, contexts)`` for batches of ``(query id, text)`` pairs (``spectrag retrieve
    --ray``), scored by a :class:`RayRetriever` on the cluster at ``address``, in order."""
    from spectrag.distributed.cluster import ray_cluster

    batches = list(batches)
    for batch in batches:
        check_queries([t for _, t in batch])  # a bad query is an error line here, not a worker traceback
    with ray_cluster(address):
        scorer = RayRetriever(path, config, workers=workers)
        yield from zip(batches, scorer.retrieve_batches([[t for _, t in b] for b in batches], k=k, budget=budget))
