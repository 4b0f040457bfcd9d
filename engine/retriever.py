"""``Retriever(index).retrieve(queries)``: load once, then embed + :func:`spectrag.pipeline.run`
+ contexts for every batch of queries. Mode ``hyde`` embeds an LLM-written passage per query
instead of the query (``Retriever(index, config, llm=LLMConfig(...))``); answers with citations
and iterative retrieval are in :mod:`spectrag.generate`."""

from __future__ import annotations

import time

import torch

from spectrag.config import RetrieverConfig
from spectrag.contexts import Context, build_contexts
from spectrag.errors import ConfigError, SpectragError
from spectrag.llm import LLMClient, make_client
from spectrag.llm.tasks import hyde_passages
from spectrag.pipeline import BatchResult, QueryBatch, run
from spectrag.state import QueryState
from spectrag.util.threads import ThreadChooser, intra_op_threads


def resolve_device(device: str) -> torch.device:
    """``auto`` -> CUDA when present, else the CPU; a CUDA device without CUDA is a clear error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise SpectragError(f"device must be auto, cpu or cuda[:i], got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SpectragError(f"device {device!r}: CUDA is not available on this machine (torch {torch.__version__}); "
                            "use device = 'cpu' or 'auto'")
    return dev


def check_queries(queries: list[str]) -> list[str]:
    """The queries as a list; :class:`SpectragError` for none, or for an empty one."""
    queries = list(queries)
    if not queries:
        raise SpectragError("no queries given")
    for i, q in enumerate(queries):
        if not isinstance(q, str) or not q.strip():
            raise SpectragError(f"query {i} is empty; every query needs some text")
    return queries


class Retriever:
    """Batched retrieval over one index: ``Retriever(index).retrieve(queries) -> [Context]``.

    The query state (embeddings, graphs, coordinates on the device) is laid out once here; each
    call embeds its queries in one batch and runs :func:`spectrag.pipeline.run` on them.
    ``llm`` (an :class:`~spectrag.config.LLMConfig` or :class:`~spectrag.llm.LLMClient`): the
    endpoint of mode ``hyde`` and of :mod:`spectrag.generate`.
    """

    def __init__(self, index, config: RetrieverConfig | None = None, *, llm=None) -> None:
        self.index = index
        self.config = config or RetrieverConfig()
        self.state = QueryState.from_index(index, resolve_device(self.config.device))
        # batches of fewer queries are too short to time reliably
        self.threads = ThreadChooser.default(self.config.threads, min_units=32)
        self.llm: LLMClient | None = make_client(llm)

    def retrieve(self, queries: list[str], budget: int | None = None, mode: str | None = None) -> list[Context]:
        """One context per query, in query order."""
        result = self.score_batch(queries, budget=budget, mode=mode)
        return build_contexts(self.index, list(queries), result)

    def embed(self, queries: list[str]) -> torch.Tensor:
        """Query vectors ``[B, d]`` on the state's device."""
        return torch.from_numpy(self.index.embed_queries(queries)).to(self.state.device)

    def encode(self, queries: list[str], qvecs: torch.Tensor | None = None) -> QueryBatch:
        """The pipeline's view of query texts: their embeddings (``qvecs [B, d]`` when given)
        and their BM25 term counts."""
        queries = check_queries(queries)
        vectors = self.embed(queries) if qvecs is None else qvecs
        if vectors.shape[0] != len(queries):
            raise SpectragError(f"{len(queries)} queries but {vectors.shape[0]} query vectors")
        titles = self.state.titles
        return QueryBatch(vectors, self.index.bm25.query_matrix(queries), titles.named(queries) if titles else None,
                          queries)

    def hyde_vectors(self, queries: list[str], *, progress: bool = False) -> torch.Tensor:
        """Mode ``hyde``'s query vectors ``[B, d]``: the embeddings of one hypothetical passage
        per query, written by the LLM (HyDE; SpectRAG's HyDeRAG baseline)."""
        if self.llm is None:
            raise ConfigError("mode 'hyde' needs an LLM endpoint: pass --llm-base-url URL (Retriever(..., llm=...))")
        return self.embed(hyde_passages(list(queries), self.llm, progress=progress))

    def score_batch(self, queries: list[str], *, budget: int | None = None, mode: str | None = None,
                    qvecs: torch.Tensor | None = None) -> BatchResult:
        """:func:`spectrag.pipeline.run` on one batch; ``qvecs [B, d]`` skips embedding (for mode
        ``hyde``: the passages' vectors, else they are written and embedded here)."""
        config = self.config if mode is None else self.config.replace(mode=mode)
        threads = self.threads.pick(len(queries)) if self.state.device.type == "cpu" else torch.get_num_threads()
        start = time.perf_counter()
        with intra_op_threads(threads):
            if config.mode == "hyde" and qvecs is None:
                qvecs = self.hyde_vectors(check_queries(queries))  # empty queries refused before any LLM call
            batch = self.encode(queries, qvecs)
            encoded = time.perf_counter()
            result = run(self.state, batch, config, budget=budget)
        self.threads.record(threads, len(queries), time.perf_counter() - start)
        result.seconds["embed"] = result.seconds.get("embed", 0.0) + encoded - start
        return result
