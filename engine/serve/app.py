"""The HTTP face of the engine: ``spectrag serve DIR`` (FastAPI + uvicorn, the ``serve`` extra).

The model and the index are loaded once; requests go through a :class:`MicroBatcher`, so
concurrent callers share one tensor batch. Endpoints (request and response models, and the
stability promise of ``/v1``: :mod:`spectrag.serve.models`)::

    POST /v1/retrieve  {"query": "..."} or {"queries": [...]}, optional "mode", "budget", "k", "text",
                       "detail" -> {"api_version": "1", "results": [Result per query], "took_ms": ...}
    GET  /healthz      {"status": "ok"} (503 "closing" while shutting down)
    GET  /v1/info      the index, the retriever's settings, the batching settings and counters

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
from spectrag.errors import SpectragError
from spectrag.retriever import Retriever
from spectrag.serve.batcher import Busy, Closing, MicroBatcher
from spectrag.serve.body import BodyLimit

try:  # the `serve` extra
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    from spectrag.serve.models import API_VERSION, ErrorResponse, Health, Info, RetrieveResponse, request_model, result_of
    from spectrag.serve.shutdown import BACKSTOP_S, GracefulServer, GracePeriod
except ImportError as exc:  # pragma: no cover - exercised where the extra is absent
    raise ImportError("spectrag serve needs FastAPI and uvicorn: pip install 'spectrag[serve]'") from exc


@dataclass(frozen=True)
class ServeSettings:
    """Micro-batching and request limits (``spectrag serve --help`` names each)."""

    max_batch: int = 256  # queries per score_batch call, and per request
    max_wait_ms: float = 5.0  # how long a batch's first request waits for company
    batching: bool = True  # False: every request scored alone
    max_k: int = 1000
    max_body_bytes: int = 1 << 20
    body_timeout_s: float = 30.0  # a request body must arrive in full within this (else 408)
    max_query_chars: int = 4096
    max_pending: int | None = None  # queries waiting at most (default 16 * max_batch)


def _message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts) or "invalid request"


def create_app(retriever: Retriever, settings: ServeSettings | None = None) -> FastAPI:
    """The app over ``retriever``; its batcher starts with the app and drains when it stops
    (``app.state.batcher`` holds it, with its counters in ``.stats``)."""
    settings = settings or ServeSettings()
    RetrieveRequest = request_model(max_query_chars=settings.max_query_chars, max_batch=settings.max_batch,
                                    max_k=settings.max_k)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.batcher = MicroBatcher(retriever, max_batch=settings.max_batch, max_wait_ms=settings.max_wait_ms,
                                         enabled=settings.batching, max_pending=settings.max_pending)
        yield
        # uvicorn has waited for the open requests; answer anything still queued (no longer than the
        # grace period leaves, when one was started), then stop
        await asyncio.to_thread(app.state.batcher.close, app.state.grace.remaining())

    app = FastAPI(title="spectrag", version=__version__, lifespan=lifespan)
    app.state.grace = GracePeriod()  # started by GracefulServer when shutdown begins (serve())
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        detail = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"error": _message(exc), "detail": detail})

    errors = {code: {"model": ErrorResponse} for code in (400, 408, 413, 422, 503)}

    @app.post("/v1/retrieve", response_model=RetrieveResponse, response_model_exclude_unset=True, responses=errors)
    @app.post("/retrieve", response_model=RetrieveResponse, response_model_exclude_unset=True, responses=errors,
              deprecated=True, summary="Retrieve (alias of /v1/retrieve)")
    async def retrieve(req: RetrieveRequest, request: Request) -> Any:
        start = time.perf_counter()
        queries = req.texts()
        batcher: MicroBatcher = request.app.state.batcher
        try:
            contexts = await request.app.state.grace.answer(batcher.submit(queries, mode=req.mode, budget=req.budget, k=req.k,
                                                                            where=req.where))
        except (Busy, Closing) as exc:
            return JSONResponse(status_code=503, content={"error": str(exc)})
        except SpectragError as exc:
            return JSONResponse(status_code=400, content={"error": str(exc)})
        results = [result_of(c, text=req.text, detail=req.detail) for c in contexts]
        return RetrieveResponse(api_version=API_VERSION, results=results,
                                took_ms=round(1000 * (time.perf_counter() - start), 3))

    @app.get("/healthz", response_model=Health, responses={503: {"model": Health}})
    async def healthz(request: Request) -> Any:
        if request.app.state.batcher.closed:
            return JSONResponse(status_code=503, content={"status": "closing"})
        return {"status": "ok"}

    @app.get("/v1/info", response_model=Info)
    @app.get("/info", response_model=Info, deprecated=True, summary="Info (alias of /v1/info)")
    async def info(request: Request) -> Any:
        index = retriever.index
        return {
            "version": __version__,
            "index": {"path": str(index.path), "counts": index.manifest["counts"],
                      "embedding": index.manifest["embedding"], "graph": index.graph is not None,
                      "knowledge_graph": index.kg is not None},
            "retriever": asdict(retriever.config),
            "device": str(retriever.state.device),
            "serve": asdict(settings),
            "stats": asdict(request.app.state.batcher.stats),
        }

    return app


def make_server(app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, graceful_s: float = 30.0,
                log_level: str = "info") -> GracefulServer:
    """The uvicorn server of ``app``: on SIGINT / SIGTERM the app stops taking requests and
    starts its grace period of ``graceful_s`` seconds; uvicorn's own wait is a backstop
    ``BACKSTOP_S`` later (:mod:`spectrag.serve.shutdown`)."""
    import uvicorn  # the `serve` extra

    def begin_shutdown() -> None:
        app.state.grace.begin(graceful_s)
        batcher = getattr(app.state, "batcher", None)
        if batcher is not None:
            batcher.close(timeout=0)  # takes nothing more (/healthz says closing); what it holds is scored

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            timeout_graceful_shutdown=graceful_s + BACKSTOP_S)
    return GracefulServer(config, begin_shutdown)


def serve(retriever: Retriever, settings: ServeSettings | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          graceful_s: float = 30.0, log_level: str = "info") -> None:
    """Run the app under uvicorn until SIGINT / SIGTERM, then answer the open requests within
    ``graceful_s`` seconds (a 503 for those the batcher has not answered by then) and exit."""
    make_server(create_app(retriever, settings), host=host, port=port, graceful_s=graceful_s, log_level=log_level).run()
