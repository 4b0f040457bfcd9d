"""A LangChain retriever over the engine: ``SpectragRetriever(engine=Retriever(index), k=4)``.

``invoke`` / ``ainvoke`` return ``list[Document]`` (``page_content``: the chunk text; metadata:
:func:`spectrag.adapters.records.records`); ``k``, ``mode`` and ``budget`` may also be given per
call (``retriever.invoke(q, k=3)``), and so may ``filter`` (a metadata filter, the ``where`` of
:meth:`Retriever.retrieve`: ``retriever.invoke(q, filter={"lang": "en"})``; the field ``filter``
is the default). ``batch`` / ``abatch`` score all their inputs as ONE tensor
batch (LangChain's default runs one ``invoke`` per input), and still report one retriever run per
input to the callbacks. Needs ``langchain-core`` (``pip install 'spectrag[langchain]'``).
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any, Literal

from spectrag.adapters.records import search
from spectrag.retriever import Retriever

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableConfig
    from pydantic import ConfigDict, Field
except ImportError as exc:  # pragma: no cover - exercised where the extra is absent
    raise ImportError("the LangChain adapter needs langchain-core: pip install 'spectrag[langchain]'") from exc

# within one batch()/abatch(): query -> documents, scored together before the per-input runs
_SCORED: ContextVar[dict[str, list[Document]] | None] = ContextVar("spectrag_langchain_scored", default=None)


class SpectragRetriever(BaseRetriever):
    """LangChain ``BaseRetriever``: the top-``k`` chunks of a query (``output="top_k"``) or its
    context (``output="context"``: the same ``k`` chunks, or with ``budget`` the token-budgeted
    selection in selection order), as :meth:`Retriever.retrieve` gives them.

    ``engine``: a :class:`spectrag.retriever.Retriever` (or build one with :meth:`from_index`).
    ``k``: results per query (default 4; None: the context of the budget). ``mode`` / ``budget``:
    default to the engine's config.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: Retriever
    k: int | None = Field(4, ge=1)
    mode: str | None = None
    budget: int | None = Field(None, ge=1)
    output: Literal["top_k", "context"] = "top_k"
    filter: dict[str, Any] | None = None  # the default metadata filter (spectrag.util.where)

    @classmethod
    def from_index(cls, path, *, config=None, device: str | None = None, **kwargs: Any) -> "SpectragRetriever":
        """A retriever over the index folder ``path``."""
        return cls(engine=Retriever(path, config, device=device), **kwargs)

    def _documents(self, queries: list[str], k: int | None = None, mode: str | None = None,
                   budget: int | None = None, filter: dict[str, Any] | None = None) -> list[list[Document]]:
        found = search(self.engine, queries, output=self.output, k=k or self.k, mode=mode or self.mode,
                       budget=budget or self.budget, where=self.filter if filter is None else filter)
        return [[Document(page_content=text, metadata=meta, id=f"{meta['doc_id']}#{meta['chunk_id']}")
                 for text, meta, _ in rows] for rows in found]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, mode: str | None = None, budget: int | None = None,
                                filter: dict[str, Any] | None = None) -> list[Document]:
        scored = _SCORED.get()
        if scored is not None and query in scored:
            return scored[query]
        return self._documents([query], k, mode, budget, filter)[0]

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None, mode: str | None = None,
                                       budget: int | None = None,
                                       filter: dict[str, Any] | None = None) -> list[Document]:
        scored = _SCORED.get()
        if scored is not None and query in scored:
            return scored[query]
        return (await asyncio.to_thread(self._documents, [query], k, mode, budget, filter))[0]

    def _options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {name: kwargs.get(name) for name in ("k", "mode", "budget", "filter")}

    def batch(self, inputs: list[str], config: RunnableConfig | list[RunnableConfig] | None = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        """Every input scored in one tensor batch, then one callback run per input."""
        if not inputs:
            return []
        token = _SCORED.set(dict(zip(inputs, self._documents(list(inputs), **self._options(kwargs)))))
        try:
            return super().batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        finally:
            _SCORED.reset(token)

    async def abatch(self, inputs: list[str], config: RunnableConfig | list[RunnableConfig] | None = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        """:meth:`batch` for asyncio: the tensor batch runs in a worker thread."""
        if not inputs:
            return []
        docs = await asyncio.to_thread(self._documents, list(inputs), **self._options(kwargs))
        token = _SCORED.set(dict(zip(inputs, docs)))
        try:
            return await super().abatch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        finally:
            _SCORED.reset(token)
