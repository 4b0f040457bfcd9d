"""``Retriever(index).retrieve(queries)``: load once, then embed + :func:`spectrag.pipeline.run`
+ contexts for every batch of queries."""

from __future__ import annotations

import torch

from spectrag.config import RetrieverConfig
from spectrag.contexts import Context, build_contexts
from spectrag.errors import SpectragError
from spectrag.pipeline import BatchResult, QueryBatch, run
from spectrag.state import QueryState


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


def check_queries(queries) -> list[str]:
    """``queries`` as a list, or a :class:`SpectragError` naming the first empty one."""
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
    """

    def __init__(self, index, config: RetrieverConfig | None = None) -> None:
        self.index = index
        self.config = config or RetrieverConfig()
        self.state = QueryState.from_index(index, resolve_device(self.config.device))

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
        return QueryBatch(vectors, self.index.bm25.query_matrix(queries))

    def score_batch(self, queries: list[str], *, budget: int | None = None, mode: str | None = None,
                    qvecs: torch.Tensor | None = None) -> BatchResult:
        """:func:`spectrag.pipeline.run` on one batch; ``qvecs [B, d]`` skips embedding."""
        config = self.config if mode is None else self.config.replace(mode=mode)
        return run(self.state, self.encode(queries, qvecs), config, budget=budget)
