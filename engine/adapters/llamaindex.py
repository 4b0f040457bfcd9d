"""A LlamaIndex retriever over the engine: ``SpectragLlamaRetriever(Retriever(index), k=4)``.

``retrieve`` / ``aretrieve`` return ``list[NodeWithScore]``: a ``TextNode`` per chunk (id
``<doc_id>#<chunk_id>``, its source document as the ``SOURCE`` relationship, so ``node.ref_doc_id``
is the document id; metadata: :func:`spectrag.adapters.records.records`) and its final score.
:meth:`retrieve_batch` scores many queries as one tensor batch. It plugs into LlamaIndex's query
engines (``RetrieverQueryEngine.from_args(retriever, llm=...)``). Needs ``llama-index-core``
(``pip install 'spectrag[llamaindex]'``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from spectrag.adapters.records import check_output, search
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode
except ImportError as exc:  # pragma: no cover - exercised where the extra is absent
    raise ImportError("the LlamaIndex adapter needs llama-index-core: pip install 'spectrag[llamaindex]'") from exc


class SpectragLlamaRetriever(BaseRetriever):
    """LlamaIndex ``BaseRetriever``: the top-``k`` chunks of a query (``output="top_k"``) or its
    context (``output="context"``: the same ``k`` chunks, or with ``budget`` the token-budgeted
    selection), as :meth:`Retriever.retrieve` gives them; ``k=None``: the context of the budget."""

    def __init__(self, engine: Retriever, *, k: int | None = 4, mode: str | None = None, budget: int | None = None,
                 output: str = "top_k", **kwargs: Any) -> None:
        for name, value in (("k", k), ("budget", budget)):
            if value is not None and value < 1:
                raise SpectragError(f"{name} must be >= 1, got {value}")
        self.engine, self.k, self.mode, self.budget = engine, k, mode, budget
        self.output = check_output(output)
        super().__init__(**kwargs)

    @classmethod
    def from_index(cls, path, *, config=None, device: str | None = None, **kwargs: Any) -> "SpectragLlamaRetriever":
        """A retriever over the index folder ``path``."""
        return cls(Retriever(path, config, device=device), **kwargs)

    def _nodes(self, queries: list[str]) -> list[list[NodeWithScore]]:
        found = search(self.engine, queries, output=self.output, k=self.k, mode=self.mode, budget=self.budget)
        return [[NodeWithScore(node=TextNode(id_=f"{meta['doc_id']}#{meta['chunk_id']}", text=text, metadata=meta,
                                             relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=meta["doc_id"])}),
                               score=score) for text, meta, score in rows] for rows in found]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes([query_bundle.query_str])[0]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return (await asyncio.to_thread(self._nodes, [query_bundle.query_str]))[0]

    def retrieve_batch(self, queries: Sequence[str | QueryBundle]) -> list[list[NodeWithScore]]:
        """The nodes of every query, scored as one tensor batch (no callback events)."""
        return self._nodes([q.query_str if isinstance(q, QueryBundle) else q for q in queries])
