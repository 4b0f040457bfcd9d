"""``Retriever(index).retrieve(queries)``: load once, then embed + :func:`spectrag.pipeline.run`
+ contexts for every batch of queries.

Like a FAISS index, the retriever takes any number of queries and splits them into batches of
``batch_size`` itself, so the memory of one call is that of one batch plus the contexts it
returns (:meth:`Retriever.batches` streams them instead)::

    retriever = Retriever("my-index")
    ctx = retriever.retrieve("who designed the bridge?", k=5)     # one Context: 5 hits, a context of those 5
    contexts = retriever.retrieve(questions, budget=2000)           # [Context], one per question
    for hit in ctx.hits: hit.text, hit.title, hit.doc_id, hit.score

Mode ``hyde`` embeds an LLM-written passage per query instead of the query
(``Retriever(index, config, llm=LLMConfig(...))``); answers with citations and iterative
retrieval are in :mod:`spectrag.generate`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

import torch

from spectrag.config import RetrieverConfig
from spectrag.contexts import Context, build_contexts
from spectrag.errors import ConfigError, SpectragError, brief
from spectrag.limits import _positive, check_k, check_queries, pool_limit  # noqa: F401  (re-exported)
from spectrag.llm import LLMClient, make_client
from spectrag.llm.tasks import hyde_passages
from spectrag.pipeline import PROPAGATION_MODES, BatchResult, QueryBatch, run
from spectrag.state import QueryState
from spectrag.store import Index, load_index
from spectrag.util.threads import ThreadChooser, intra_op_threads
from spectrag.util.where import per_query_where

#: a ``where`` argument: one filter (a dict, or None) for every query, or one per query
Where = dict | Sequence[dict | None] | None


def resolve_device(device: str) -> torch.device:
    """``auto`` -> CUDA when present, else the CPU; a CUDA device without CUDA is a clear error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise SpectragError(f"device must be auto, cpu or cuda[:i], got {brief(device)}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SpectragError(f"device {brief(device)}: CUDA is not available on this machine (torch {torch.__version__}); "
                            "use device = 'cpu' or 'auto'")
    return dev


@functools.cache
def _onnx_installed() -> bool:
    """ONNX Runtime (and onnx, to export the model once) importable; looked up once."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def query_backend(choice: str, device: torch.device) -> str | None:
    """The embedder backend ``RetrieverConfig.embed_backend`` names (None: the index's own);
    ``auto`` takes ONNX Runtime on the CPU where it (and onnx, to export) is installed."""
    if choice == "auto":
        return "onnx" if device.type == "cpu" and _onnx_installed() else None
    if choice == "onnx-int8" and device.type != "cpu":
        raise ConfigError(f"retriever.embed_backend = 'onnx-int8' runs on the CPU; the retriever's device is {device}")
    return None if choice == "index" else choice


class Retriever:
    """Batched retrieval over one index: ``Retriever(index).retrieve(queries) -> [Context]``.

    ``index``: a loaded :class:`~spectrag.store.Index` or an index folder. ``device`` (default:
    ``config.device``): ``auto``, ``cpu`` or ``cuda[:i]``; CUDA where there is none is an error.
    The query state (embeddings, graphs, coordinates on the device) is laid out once here; each
    batch is embedded together and goes through :func:`spectrag.pipeline.run` as one tensor batch.
    ``llm`` (an :class:`~spectrag.config.LLMConfig` or :class:`~spectrag.llm.LLMClient`): the
    endpoint of mode ``hyde`` and of :mod:`spectrag.generate`.
    """

    def __init__(self, index: Index | str | Path, config: RetrieverConfig | None = None, *,
                 device: str | None = None, llm=None) -> None:
        self.index = index if isinstance(index, Index) else load_index(index)
        self.config = config or RetrieverConfig()
        if device is not None:
            self.config = self.config.replace(device=device)
        self.state = QueryState.from_index(self.index, resolve_device(self.config.device))
        # batches of fewer queries are too short to time reliably
        self.threads = ThreadChooser.default(self.config.threads, min_units=32)
        self.llm: LLMClient | None = make_client(llm)

    @overload
    def retrieve(self, queries: str, k: int | None = None, *, budget: int | None = None, mode: str | None = None,
                 batch_size: int = 256, where: Where = None) -> Context: ...

    @overload
    def retrieve(self, queries: Sequence[str], k: int | None = None, *, budget: int | None = None,
                 mode: str | None = None, batch_size: int = 256, where: Where = None) -> list[Context]: ...

    def retrieve(self, queries: str | Sequence[str], k: int | None = None, *, budget: int | None = None,
                 mode: str | None = None, batch_size: int = 256, where: Where = None) -> Context | list[Context]:
        """One :class:`Context` per query, in query order (a single one for a ``str``).

        ``k``: the number of results. ``Context.hits`` are the top ``k`` of the ranking (each with
        its text, title, doc id, section, url and final score) and, unless ``budget`` is given,
        the context (``Context.chunks``) is those ``k`` chunks. ``budget``: tokens per context;
        the context is the token-budgeted selection (SpectRAG eq. 19-22), and without ``k`` the
        hits are its chunks in rank order. Neither: the config's budget (``RetrieverConfig.budget``).
        A ``k`` larger than the mode's candidate pool (``expand.max_candidates``; the seed depth
        for the baselines) is an error naming the setting. ``mode`` defaults to the config's.
        ``batch_size``: queries scored together; any number of queries is split into such batches
        (the results equal one big batch's). ``where``: a metadata filter (:mod:`spectrag.util.where`:
        ``{"lang": "en"}``, ``$eq $ne $gt $gte $lt $lte $in $nin $and $or``) for every query, or a
        list of one filter (or None) per query; no hit, context chunk or ranking entry is ever a
        chunk it leaves out, and ``k`` is filled from the chunks it allows.
        """
        single = isinstance(queries, str)
        texts = [queries] if single else check_queries(queries)  # None, 123, bytes: a clear error
        out = [ctx for part in self.batches(texts, k, budget=budget, mode=mode, batch_size=batch_size, where=where)
               for ctx in part]
        return out[0] if single else out

    def batches(self, queries: Sequence[str], k: int | None = None, *, budget: int | None = None,
                mode: str | None = None, batch_size: int = 256, where: Where = None) -> Iterator[list[Context]]:
        """:meth:`retrieve` as a stream: the contexts of each batch of ``batch_size`` queries as
        soon as it is scored (every query and setting is checked before the first batch runs)."""
        queries = list(queries)
        check_queries(queries)
        check_k(k, self.config, mode)
        _positive("batch_size", batch_size)
        wheres = per_query_where(where, len(queries))
        for lo in range(0, len(queries), batch_size):
            part = queries[lo : lo + batch_size]
            result = self.score_batch(part, budget=budget, mode=mode, where=wheres[lo : lo + batch_size])
            yield build_contexts(self.index, part, result, k, budgeted=k is None or budget is not None)

    def embed(self, queries: list[str]) -> torch.Tensor:
        """Query vectors ``[B, d]`` on the state's device (``config.embed_backend`` embeds them)."""
        vectors = self.index.embed_queries(queries, backend=query_backend(self.config.embed_backend, self.state.device))
        return torch.from_numpy(vectors).to(self.state.device)

    def encode(self, queries: list[str], qvecs: torch.Tensor | None = None, *, named: bool = True,
               where: Where = None) -> QueryBatch:
        """The pipeline's view of query texts: their embeddings (``qvecs [B, d]`` when given),
        their BM25 term counts, (``named``: the graph modes read them) the chunks of the
        documents they name and (``where``: one filter or one per query) the chunks each allows."""
        queries = check_queries(queries)
        allowed = self.state.allowed(per_query_where(where, len(queries)))
        vectors = self.embed(queries) if qvecs is None else qvecs
        if vectors.shape[0] != len(queries):
            raise SpectragError(f"{len(queries)} queries but {vectors.shape[0]} query vectors")
        titles = self.state.titles if named else None
        named_chunks = name_terms = None
        if titles:  # the documents each names, and the terms of those names (what the question asks
            # beyond them is the rest: the bridged chunks' lexical evidence, pipeline.run)
            named_chunks, _, names = titles.read(queries, min_specificity=self.config.seed.named_specificity,
                                                 blanked=False)
            if self.config.bridge.target_lexical_weight > 0:
                terms, name_terms = self.index.bm25.query_matrices(queries, names)  # one tokenizer call
                name_terms = name_terms.minimum(terms).tocsr()
        if name_terms is None:
            terms = self.index.bm25.query_matrix(queries)
        return QueryBatch(vectors, terms, named_chunks, queries, allowed, name_terms)

    def hyde_vectors(self, queries: list[str], *, progress: bool = False) -> torch.Tensor:
        """Mode ``hyde``'s query vectors ``[B, d]``: the embeddings of one hypothetical passage
        per query, written by the LLM (HyDE; SpectRAG's HyDeRAG baseline)."""
        if self.llm is None:
            raise ConfigError("mode 'hyde' needs an LLM endpoint: pass --llm-base-url URL (Retriever(..., llm=...))")
        return self.embed(hyde_passages(list(queries), self.llm, progress=progress))

    def score_batch(self, queries: list[str], *, budget: int | None = None, mode: str | None = None,
                    qvecs: torch.Tensor | None = None, where: Where = None, threads: int | None = None) -> BatchResult:
        """:func:`spectrag.pipeline.run` on one batch; ``qvecs [B, d]`` skips embedding (for mode
        ``hyde``: the passages' vectors, else they are written and embedded here); ``where``: one
        metadata filter, or one per query (see :meth:`retrieve`); ``threads``: the CPU threads
        this batch runs on (default: the ones measured fastest, ``RetrieverConfig.threads``); the
        answers do not depend on it."""
        wheres = per_query_where(where, len(queries))  # a bad filter is refused before any work
        config = self.config if mode is None else self.config.replace(mode=mode)
        if threads is not None and threads < 1:
            raise ConfigError(f"threads must be >= 1, got {threads}")
        if self.state.device.type != "cpu":
            threads = torch.get_num_threads()
        elif threads is None:
            threads = self.threads.pick(len(queries))
        start = time.perf_counter()
        with intra_op_threads(threads):
            if config.mode == "hyde" and qvecs is None:
                qvecs = self.hyde_vectors(check_queries(queries))  # empty queries refused before any LLM call
            batch = self.encode(queries, qvecs, named=config.mode in PROPAGATION_MODES, where=wheres)
            encoded = time.perf_counter()
            result = run(self.state, batch, config, budget=budget)
        self.threads.record(threads, len(queries), time.perf_counter() - start)
        result.seconds["embed"] = result.seconds.get("embed", 0.0) + encoded - start
        return result
