"""A LlamaIndex retriever over the engine: ``SpectragLlamaRetriever(Retriever(index), k=4)``.

``retrieve`` / ``aretrieve`` return ``list[NodeWithScore]``: a ``TextNode`` per chunk (id
``<doc_id>#<chunk_id>``, its source document as the ``SOURCE`` relationship, so ``node.ref_doc_id``
is the document id; metadata: :func:`spectrag.adapters.records.records`) and its final score.
:meth:`retrieve_batch` scores many queries as one tensor batch. It plugs into LlamaIndex's query
engines (``RetrieverQueryEngine.from_args(retriever, llm=...)``). Needs ``llama-index-core``
(``pip install 'spectrag[llamaindex]'``).

``filters`` (LlamaIndex ``MetadataFilters``, nested ones and ``AND`` / ``OR`` conditions
included) become the engine's ``where`` (:func:`where_of`): ``==`` ``!=`` ``>`` ``>=`` ``<``
``<=`` ``in`` ``nin`` map to ``$eq`` ... ``$nin``; ``contains`` (a list field holds the value) to
``$eq``, ``any`` to ``$in``, ``all`` to one ``$eq`` per value; ``text_match``, ``is_empty`` and the
``NOT`` condition are refused with an error naming them.
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
    from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilters
except ImportError as exc:  # pragma: no cover - exercised where the extra is absent
    raise ImportError("the LlamaIndex adapter needs llama-index-core: pip install 'spectrag[llamaindex]'") from exc


_OPERATORS = {"==": "$eq", "!=": "$ne", ">": "$gt", ">=": "$gte", "<": "$lt", "<=": "$lte", "in": "$in",
              "nin": "$nin", "contains": "$eq", "any": "$in"}


def where_of(filters: MetadataFilters | None) -> dict[str, Any] | None:
    """The engine's ``where`` (:mod:`spectrag.util.where`) for LlamaIndex ``filters``."""
    if filters is None or not filters.filters:
        return None
    condition = FilterCondition(filters.condition or FilterCondition.AND)
    if condition not in (FilterCondition.AND, FilterCondition.OR):
        raise SpectragError(f"MetadataFilters condition {condition.value!r} is not supported; use 'and' or 'or'")
    parts = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            part = where_of(f)
            if part is not None:
                parts.append(part)
            continue
        op = FilterOperator(f.operator).value
        if op == "all":
            values = f.value if isinstance(f.value, list) else [f.value]
            parts.append({"$and": [{f.key: {"$eq": v}} for v in values]})
        elif op in _OPERATORS:
            parts.append({f.key: {_OPERATORS[op]: f.value}})
        else:
            raise SpectragError(f"MetadataFilter operator {op!r} (key {f.key!r}) is not supported; "
                                f"supported: {', '.join([*_OPERATORS, 'all'])}")
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$" + condition.value: parts}


class SpectragLlamaRetriever(BaseRetriever):
    """LlamaIndex ``BaseRetriever``: the top-``k`` chunks of a query (``output="top_k"``) or its
    context (``output="context"``: the same ``k`` chunks, or with ``budget`` the token-budgeted
    selection), as :meth:`Retriever.retrieve` gives them; ``k=None``: the context of the budget.
    ``filters``: LlamaIndex ``MetadataFilters`` every query is restricted by (:func:`where_of`)."""

    def __init__(self, engine: Retriever, *, k: int | None = 4, mode: str | None = None, budget: int | None = None,
                 output: str = "top_k", filters: MetadataFilters | None = None, **kwargs: Any) -> None:
        for name, value in (("k", k), ("budget", budget)):
            if value is not None and value < 1:
                raise SpectragError(f"{name} must be >= 1, got {value}")
        self.engine, self.k, self.mode, self.budget = engine, k, mode, budget
        self.where = where_of(filters)
        self.output = check_output(output)
        super().__init__(**kwargs)

    @classmethod
    def from_index(cls, path, *, config=None, device: str | None = None, **kwargs: Any) -> "SpectragLlamaRetriever":
        """A retriever over the index folder ``path``."""
        return cls(Retriever(path, config, device=device), **kwargs)

    def _nodes(self, queries: list[str]) -> list[list[NodeWithScore]]:
        found = search(self.engine, queries, output=self.output, k=self.k, mode=self.mode, budget=self.budget,
                       where=self.where)
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
