"""The HTTP face of the engine: ``spectrag serve DIR`` (FastAPI + uvicorn, the ``serve`` extra).

The model and the index are loaded once; requests go through a :class:`MicroBatcher`, so
concurrent callers share one tensor batch. Endpoints (request and response models, and the
stability promise of ``/v1``: :mod:`spectrag.serve.models`)::

    POST /v1/retrieve  {"query": "..."} or {"queries": [...]}, optional "mode", "budget", "k", "text",
                       "detail" -> {"api_version": "1", "results": [Result per query], "took_ms": ...}
    GET  /healthz      {"status": "ok"} (503 "closing" while shutting down)
    GET  /v1/info      the index (and its generation), the retriever's settings, the batching settings and counters
    POST /v1/reload    serve the index's current generation now -> {"generation", "previous", "reloaded"}

The server follows its index (:mod:`spectrag.serve.follow`): a new generation written by an edit
is noticed within ``follow_s`` seconds (or at once on ``POST /v1/reload``), loaded beside the
served one and swapped in between batches; every retrieve answer names its ``generation``.

``/retrieve`` and ``/info`` are aliases of the ``/v1`` paths.

Bad input is a 4xx with a message: 422 for a malformed body (pydantic: a field's type or range,
an unknown field or mode, neither or both of query/queries, too many queries), 400 for what the
engine refuses (an empty query, a mode this index cannot run, a budget out of its range), 413 for a
body over the size limit (counted as it arrives, chunked or not), 408 for a body that does not
arrive in full within ``body_timeout_s`` (:mod:`spectrag.serve.body`), 503 when the queue is full
or the server is shutting down. ``/healthz`` and ``/info`` are answered on the event loop and never
wait for the batcher. On shutdown (SIGINT / SIGTERM) uvicorn stops accepting connections and the
open requests get their answers until the grace period ends; those still waiting then get a 503,
and the process exits (:mod:`spectrag.serve.shutdown`).
"""

# no `from __future__ import annotations`: FastAPI reads the request model from the route's
# annotations at run time, and that model is local to create_app (its limits are settings)
import asyncio
import time
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

from spectrag import __version__
from spectrag.config import MAX_BUDGET, MAX_QUERY_CHARS, MODES
from spectrag.errors import SpectragError
from spectrag.limits import pool_limit
from spectrag.retriever import Retriever
from spectrag.serve.batcher import Busy, Closing, MicroBatcher
from spectrag.serve.body import BodyLimit

try:  # the `serve` extra
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse
    from starlette.exceptions import HTTPException

    from spectrag.serve.docs import docs_page
    from spectrag.serve.follow import IndexFollower
    from spectrag.serve.headers import header_timeout_protocol
    from spectrag.serve.models import (
        API_VERSION,
        ErrorResponse,
        Health,
        Info,
        ReloadResponse,
        RetrieveResponse,
        request_model,
        result_of,
    )
    from spectrag.serve.shutdown import BACKSTOP_S, EXIT_DEADLINE_S, GracefulServer, GracePeriod, exit_within
except ImportError as exc:  # pragma: no cover - exercised where the extra is absent
    raise ImportError("spectrag serve needs FastAPI and uvicorn: pip install 'spectrag[serve]'") from exc


@dataclass(frozen=True)
class ServeSettings:
    """Micro-batching and request limits (``spectrag serve --help`` names each)."""

    max_batch: int = 256  # queries per score_batch call, and per request
    max_wait_ms: float = 5.0  # how long a batch's first request waits for company
    batching: bool = True  # False: every request scored alone
    overlap: bool = True  # False: a batch is embedded by the scorer, after the one before (MicroBatcher)
    max_k: int = 1000
    max_body_bytes: int = 1 << 20
    body_timeout_s: float = 30.0  # a request body must arrive in full within this (else 408)
    header_timeout_s: float = 10.0  # a request's line and headers must arrive within this (else 408)
    max_query_chars: int = MAX_QUERY_CHARS  # at most spectrag.config.MAX_QUERY_CHARS (the engine's own limit)
    max_pending: int | None = None  # queries waiting at most (default 16 * max_batch)
    follow_s: float = 2.0  # seconds between looks for a new index generation (0: only POST /v1/reload)


def _message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":  # loc is ("body", character offset)
            at = [p for p in err.get("loc", ()) if isinstance(p, int)]
            reason = (err.get("ctx") or {}).get("error", "")
            parts.append(f"the request body is not valid JSON ({reason}{' ' if reason else ''}"
                         f"at character {at[0] if at else '?'})")
            continue
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts) or "invalid request"


def _unparsable(cause: BaseException | None) -> str:
    """Why FastAPI could not read a body as JSON (it says only "There was an error parsing the body")."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the request body is not UTF-8 (byte {cause.start}: {cause.reason})"
    if isinstance(cause, RecursionError):
        return "the request body is not valid JSON (nested too deeply)"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "the request body is not valid JSON (an integer with too many digits)"
    return f"the request body is not valid JSON ({type(cause).__name__ if cause else 'unreadable'})"


def limits(retriever: Retriever, settings: ServeSettings) -> dict[str, Any]:
    """The request limits the server enforces, as ``/v1/info`` and ``/openapi.json`` state them:
    ``k`` is at most ``--max-k`` and what the mode ranks per query (``per_mode``; a larger one is a
    400 naming the setting), queries at most ``MAX_QUERY_CHARS`` characters (the CLI's and
    Python's limit too), ``budget`` in the config's range."""
    per_mode = {mode: min(pool_limit(retriever.config, mode)[0], settings.max_k) for mode in MODES}
    return {
        "queries_per_request": settings.max_batch,
        "query_chars": min(settings.max_query_chars, MAX_QUERY_CHARS),
        "k": {"min": 1, "max": max(per_mode.values()), "per_mode": per_mode},
        "budget": {"min": 1, "max": MAX_BUDGET},
        "body_bytes": settings.max_body_bytes,
        "body_timeout_s": settings.body_timeout_s,
        "header_timeout_s": settings.header_timeout_s,
    }


def create_app(retriever: Retriever, settings: ServeSettings | None = None) -> FastAPI:
    """The app over ``retriever``; its batcher starts with the app and drains when it stops
    (``app.state.batcher`` holds it, with its counters in ``.stats``)."""
    settings = settings or ServeSettings()
    stated = limits(retriever, settings)
    RetrieveRequest = request_model(max_query_chars=stated["query_chars"], max_batch=settings.max_batch,
                                    max_k=stated["k"]["max"], max_budget=stated["budget"]["max"])

    app_state: dict[str, Any] = {"retriever": retriever}  # handed to the batcher, then no longer held here
    del retriever  # the batcher holds the retriever (a reload replaces it: serve/follow.py)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.batcher = MicroBatcher(app_state.pop("retriever"), max_batch=settings.max_batch,
                                         max_wait_ms=settings.max_wait_ms, enabled=settings.batching,
                                         max_pending=settings.max_pending, overlap=settings.overlap)
        app.state.follower = IndexFollower(app.state.batcher, poll_s=settings.follow_s)
        yield
        app.state.follower.close()
        app_state["retriever"] = app.state.batcher.retriever  # for a later start of the same app (tests)
        # uvicorn has waited for the open requests; answer anything still queued (no longer than the
        # grace period leaves, when one was started), then stop
        await asyncio.to_thread(app.state.batcher.close, app.state.grace.remaining())

    # /docs is our own page: FastAPI's loads Swagger UI from a CDN (blank offline)
    app = FastAPI(title="spectrag", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description=_describe(stated))
    app.state.grace = GracePeriod()  # started by GracefulServer when shutdown begins (serve())
    app.state.limits = stated
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        detail = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"error": _message(exc), "detail": detail})

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        """Starlette's and FastAPI's own refusals (404, 405, an unparsable body) in our shape."""
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            return JSONResponse(status_code=422, content={"error": _unparsable(exc.__cause__)})
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow")
            message = f"method {request.method} is not allowed on {request.url.path}" + (
                f"; use {allowed}" if allowed else "")
        elif exc.status_code == 404:
            message = f"no endpoint {request.url.path}: see /openapi.json (or /docs)"
        else:
            message = str(exc.detail)
        return JSONResponse(status_code=exc.status_code, content={"error": message}, headers=exc.headers)

    errors = {code: {"model": ErrorResponse} for code in (400, 408, 413, 422, 503)}

    @app.post("/v1/retrieve", response_model=RetrieveResponse, response_model_exclude_unset=True, responses=errors)
    @app.post("/retrieve", response_model=RetrieveResponse, response_model_exclude_unset=True, responses=errors,
              deprecated=True, summary="Retrieve (alias of /v1/retrieve)")
    async def retrieve(req: RetrieveRequest, request: Request) -> Any:
        start = time.perf_counter()
        queries = req.texts()
        batcher: MicroBatcher = request.app.state.batcher
        try:
            future = batcher.submit(queries, mode=req.mode, budget=req.budget, k=req.k, where=req.where)
            contexts = await request.app.state.grace.answer(future)
        except (Busy, Closing) as exc:
            return JSONResponse(status_code=503, content={"error": str(exc)})
        except SpectragError as exc:
            return JSONResponse(status_code=400, content={"error": str(exc)})
        results = [result_of(c, text=req.text, detail=req.detail) for c in contexts]
        return RetrieveResponse(api_version=API_VERSION, results=results, generation=future.generation,
                                took_ms=round(1000 * (time.perf_counter() - start), 3))

    @app.post("/v1/reload", response_model=ReloadResponse, responses={409: {"model": ErrorResponse}})
    async def reload(request: Request) -> Any:
        done = await asyncio.to_thread(request.app.state.follower.reload, force=True)
        if done.error is not None:
            return JSONResponse(status_code=409, content={"error": done.error})
        return {"generation": done.generation, "previous": done.previous, "reloaded": done.reloaded}

    @app.get("/healthz", response_model=Health, responses={503: {"model": Health}})
    async def healthz(request: Request) -> Any:
        if request.app.state.batcher.closed:
            return JSONResponse(status_code=503, content={"status": "closing"})
        return {"status": "ok"}

    @app.get("/v1/info", response_model=Info)
    @app.get("/info", response_model=Info, deprecated=True, summary="Info (alias of /v1/info)")
    async def info(request: Request) -> Any:
        retriever = request.app.state.batcher.retriever  # the generation served now
        index = retriever.index
        return {
            "version": __version__,
            "index": {"path": str(index.path), "generation": index.generation, "counts": index.manifest["counts"],
                      "embedding": index.manifest["embedding"], "graph": index.graph is not None,
                      "knowledge_graph": index.kg is not None},
            "retriever": asdict(retriever.config),
            "device": str(retriever.state.device),
            "serve": asdict(settings),
            "limits": stated,
            "stats": asdict(request.app.state.batcher.stats),
        }

    schema = app.openapi

    def openapi() -> dict[str, Any]:
        """FastAPI's schema, and the limits as ``info.x-limits`` (the body size is not a field)."""
        if app.openapi_schema is None:
            schema()["info"]["x-limits"] = stated
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/docs", include_in_schema=False, response_class=HTMLResponse)
    async def docs() -> HTMLResponse:
        return HTMLResponse(docs_page(app.openapi()))

    return app


def _describe(stated: dict[str, Any]) -> str:
    return ("Batched graph retrieval. Every error is `{\"error\": \"...\"}` (with pydantic's `detail` on a 422). "
            f"Limits: at most {stated['queries_per_request']} queries per request, {stated['query_chars']:,} "
            f"characters per query, k at most {stated['k']['max']} (per mode: `GET /v1/info` limits.k.per_mode), "
            f"budget 1 to {stated['budget']['max']:,} tokens, a body of at most {stated['body_bytes']:,} bytes "
            f"received within {stated['body_timeout_s']:g} s, headers within {stated['header_timeout_s']:g} s.")


def make_server(app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, graceful_s: float = 30.0,
                log_level: str = "info", exit_deadline: bool = False) -> GracefulServer:
    """The uvicorn server of ``app``: on SIGINT / SIGTERM the app stops taking requests and
    starts its grace period of ``graceful_s`` seconds; uvicorn's own wait is a backstop
    ``BACKSTOP_S`` later (:mod:`spectrag.serve.shutdown`). ``exit_deadline`` (a server that owns
    its process): the process ends ``EXIT_DEADLINE_S`` after the backstop whatever is still running."""
    import uvicorn  # the `serve` extra

    def begin_shutdown() -> None:
        app.state.grace.begin(graceful_s)
        if exit_deadline:
            exit_within(graceful_s + BACKSTOP_S + EXIT_DEADLINE_S)
        batcher = getattr(app.state, "batcher", None)
        if batcher is not None:
            batcher.close(timeout=0)  # takes nothing more (/healthz says closing); what it holds is scored

    header_timeout_s = app.state.limits["header_timeout_s"] if hasattr(app.state, "limits") else 10.0
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, http=header_timeout_protocol(header_timeout_s),
                            timeout_graceful_shutdown=graceful_s + BACKSTOP_S)
    return GracefulServer(config, begin_shutdown)


def serve(retriever: Retriever, settings: ServeSettings | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          graceful_s: float = 30.0, log_level: str = "info") -> None:
    """Run the app under uvicorn until SIGINT / SIGTERM, then answer the open requests within
    ``graceful_s`` seconds (a 503 for those the batcher has not answered by then) and exit."""
    app = create_app(retriever, settings)
    del retriever  # held by the app's batcher only: a reload frees the old generation
    make_server(app, host=host, port=port, graceful_s=graceful_s, log_level=log_level, exit_deadline=True).run()
