"""Framework adapters: the engine behind the retriever interfaces RAG stacks are built on.

- :mod:`spectrag.adapters.langchain`: :class:`SpectragRetriever`, a LangChain ``BaseRetriever``
  (``invoke`` / ``ainvoke`` / ``batch`` / ``abatch``; ``batch`` scores its inputs as one tensor
  batch); ``pip install 'spectrag[langchain]'``.
- :mod:`spectrag.adapters.llamaindex`: :class:`SpectragLlamaRetriever`, a LlamaIndex
  ``BaseRetriever`` returning ``NodeWithScore``; ``pip install 'spectrag[llamaindex]'``.

Both return, per query, either the results (``output="top_k"``, the default: the top ``k`` of the
ranking) or the context in context order (``output="context"``: the same ``k`` chunks, or with a
``budget`` the token-budgeted selection), as :meth:`spectrag.retriever.Retriever.retrieve` gives
them, with the same metadata (:func:`spectrag.adapters.records.records`).
"""
