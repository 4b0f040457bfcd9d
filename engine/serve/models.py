"""The HTTP API's request and response models (version 1: ``POST /v1/retrieve``), typed for
``/openapi.json``.

Stability: within ``/v1`` fields are only ever added (clients ignore fields they do not know);
none is removed, renamed or given another meaning. A change that breaks that gets ``/v2``, and
``/v1`` stays for at least one minor release beside it. The un-versioned ``/retrieve`` is an alias
of ``/v1/retrieve``. (:meth:`spectrag.contexts.Context.to_json`, the Python side's plain data, is
not this contract.)

By default a result carries the hits (with text) and the context's chunks (with text); the full
ranking with its scores and each chunk's per-stage scores come with ``"detail": true``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from spectrag.config import MAX_BUDGET, MODES
from spectrag.contexts import Context
from spectrag.util.where import check_where

API_VERSION = "1"

Mode = Literal[MODES]  # type: ignore[valid-type]


class RetrieveRequest(BaseModel):
    """One query (``query``) or a batch (``queries``), and how to answer them (the limits on
    lengths and counts are the server's settings, :func:`request_model`).

    Strict types: a number is a JSON number (``"k": "5"``, ``"k": true`` and ``"k": 5.0`` are
    422s), a flag is ``true`` / ``false`` (``"text": "yes"`` is a 422), a query is a string."""

    model_config = ConfigDict(extra="forbid", strict=True)
    query: str | None = Field(None, description="One query (give this or queries).")
    queries: list[str] | None = Field(None, min_length=1, description="Several queries, scored as one batch.")
    mode: Mode | None = Field(None, description="Retrieval mode (default: the server's).")
    budget: int | None = Field(None, ge=1, description="Context tokens per query: the context is the budgeted "
                               "selection. Default without k: the server's budget.")
    k: int | None = Field(None, ge=1, description="Results per query: the top k hits and, without budget, a context "
                          "of those k chunks.")
    text: bool = Field(True, description="Chunk texts in hits and chunks.")
    detail: bool = Field(False, description="Also the full ranking with its scores and each chunk's per-stage scores.")
    where: dict[str, Any] | None = Field(None, description='Metadata filter for every query: {"lang": "en"}, '
                                         '{"year": {"$gte": 2020}}; $eq $ne $gt $gte $lt $lte $in $nin $and $or.')

    @model_validator(mode="after")
    def _one_of(self) -> "RetrieveRequest":
        if (self.query is None) == (self.queries is None):
            raise ValueError("give exactly one of query (a string) or queries (a list of strings)")
        check_where(self.where)  # a bad filter is a 422 naming its place, operator and value
        return self

    def texts(self) -> list[str]:
        return [self.query] if self.query is not None else list(self.queries or [])


def request_model(*, max_query_chars: int, max_batch: int, max_k: int,
                  max_budget: int = MAX_BUDGET) -> type[RetrieveRequest]:
    """:class:`RetrieveRequest` with the server's limits on query length, batch size, ``k`` and
    ``budget`` (a request beyond them is a 422 naming the field; ``/openapi.json`` states them)."""

    def _long_queries(self: RetrieveRequest) -> RetrieveRequest:
        long = [i for i, q in enumerate(self.queries or []) if len(q) > max_query_chars]
        if long:
            raise ValueError(f"query {long[0] + 1} of {len(self.queries or [])} has more than {max_query_chars} characters")
        return self

    return create_model(
        "RetrieveRequest",
        __base__=RetrieveRequest,
        __doc__=RetrieveRequest.__doc__,
        __validators__={"_long_queries": model_validator(mode="after")(_long_queries)},
        query=(str | None, Field(None, max_length=max_query_chars, description="One query (give this or queries).")),
        queries=(list[str] | None, Field(None, min_length=1, max_length=max_batch,
                                         description="Several queries, scored as one batch.")),
        k=(int | None, Field(None, ge=1, le=max_k, description="Results per query: the top k hits and, without "
                             "budget, a context of those k chunks (at most the mode's pool: /v1/info limits.k).")),
        budget=(int | None, Field(None, ge=1, le=max_budget, description="Context tokens per query: the context is the "
                                  "budgeted selection. Default without k: the server's budget.")),
    )


class Hit(BaseModel):
    """One result, best first."""

    chunk_id: int
    doc_id: str
    title: str
    section: list[str]
    url: str
    score: float = Field(description="The final score the ranking is by.")
    text: str | None = Field(None, description="Absent when the request set text to false.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="The chunk's document's metadata.")


class ContextChunk(BaseModel):
    """One chunk of the context, in context order."""

    chunk_id: int
    doc_id: str
    title: str
    section: list[str]
    url: str
    n_tokens: int
    phase: Literal["core", "tail", "backfill", "ranked"] = Field(
        description="core / tail / backfill: how the budgeted selection took it; ranked: a top-k context.")
    text: str | None = Field(None, description="Absent when the request set text to false.")
    scores: dict[str, float] | None = Field(None, description="relevance, proximity, final (with detail).")
    truncated: bool = Field(False, description="The best chunk cut to the budget, which was smaller than it: the "
                                               "context is then that chunk alone, its first `budget` tokens.")


class Relation(BaseModel):
    """A knowledge-graph relation the spreading-activation modes used (activation, combined)."""

    model_config = ConfigDict(extra="allow")
    subject: str
    relation: str
    object: str
    text: str
    weight: float


class Result(BaseModel):
    """What one query gets."""

    query: str
    mode: str
    budget: int | None = Field(description="The token budget of the context; null for a top-k context.")
    used_tokens: int
    hits: list[Hit] = Field(description="The top k of the ranking (k given), else the context's chunks in rank order.")
    chunks: list[ContextChunk] = Field(description="The context: the top k (k without budget) or the budgeted "
                                       "selection.")
    relations: list[Relation] = Field(default_factory=list)
    ranking: list[int] | None = Field(None, description="Every candidate chunk id by final score (with detail).")
    ranking_scores: list[float] | None = Field(None, description="The final score of each ranking entry (with detail).")


class RetrieveResponse(BaseModel):
    """The answer of ``POST /v1/retrieve``: one result per query, in query order."""

    api_version: Literal["1"] = API_VERSION
    results: list[Result]
    generation: str | None = None  # the index generation that answered (spectrag.generations)
    took_ms: float


class ReloadResponse(BaseModel):
    """The answer of ``POST /v1/reload``: the generation served now, the one before, and whether
    it changed."""

    generation: str
    previous: str
    reloaded: bool


class ErrorResponse(BaseModel):
    """Every 4xx / 5xx: a message naming the field or value, and for a 422 pydantic's details."""

    error: str
    detail: list[dict[str, Any]] | None = None


class Health(BaseModel):
    status: Literal["ok", "closing"]


class Info(BaseModel):
    """The index, the retriever's settings, the batching settings and the counters."""

    model_config = ConfigDict(extra="allow")
    api_version: Literal["1"] = API_VERSION
    version: str
    index: dict[str, Any]
    retriever: dict[str, Any]
    device: str
    serve: dict[str, Any]
    stats: dict[str, Any]


def result_of(ctx: Context, *, text: bool = True, detail: bool = False) -> Result:
    """The HTTP form of a :class:`~spectrag.contexts.Context` (fields left unset are left out)."""
    hits = [Hit(chunk_id=h.chunk_id, doc_id=h.doc_id, title=h.title, section=list(h.section), url=h.url, score=h.score,
                metadata=h.metadata, **({"text": h.text} if text else {})) for h in ctx.hits]
    chunks = [ContextChunk(chunk_id=c.chunk_id, doc_id=c.doc_id, title=c.title, section=list(c.section), url=c.url,
                           n_tokens=c.n_tokens, phase=c.phase, truncated=c.truncated, **({"text": c.text} if text else {}),
                           **({"scores": c.scores} if detail else {})) for c in ctx.chunks]
    extra: dict[str, Any] = {"ranking": ctx.ranking, "ranking_scores": ctx.ranking_scores} if detail else {}
    if ctx.relations:
        extra["relations"] = [Relation(**r) for r in ctx.relations]
    return Result(query=ctx.query, mode=ctx.mode, budget=ctx.budget, used_tokens=ctx.used_tokens, hits=hits,
                  chunks=chunks, **extra)
