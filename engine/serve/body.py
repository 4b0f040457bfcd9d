"""Request bodies under a size and a time limit, whatever their framing (an ASGI middleware).

The size limit counts bytes as they arrive: a chunked upload has no ``Content-Length`` to
trust, so the body is read message by message and the 413 goes out the moment the count
passes ``max_bytes``; an oversized body is never held whole or parsed. A ``Content-Length``
over the limit is answered before any of the body is read. The time limit bounds how long
the whole body may take to arrive (``timeout_s`` from the first read): a client that trickles
or stops half-way gets a 408 instead of holding a request open for good. Both refusals close
the connection (``Connection: close``), so the rest of the upload is not read either.

A body within both limits reaches the app as one message (at most ``max_bytes``, which the app
would read whole anyway); requests without a body pass straight through.

Our own because uvicorn has neither limit and Starlette reads a body whole before the route
sees it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

Scope = dict[str, Any]


async def refuse(send, status: int, message: str) -> None:
    """A JSON ``{"error": message}`` answer with ``status`` that closes the connection."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class BodyLimit:
    """ASGI middleware: at most ``max_bytes`` of request body, all of it within ``timeout_s``
    seconds (413 / 408 with a message otherwise)."""

    def __init__(self, app, *, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await refuse(send, 413, f"request body of {length.decode(errors='replace')[:40]} bytes; "
                                    f"at most {self.max_bytes}")
            return
        body = await self._read(receive, send)
        if body is None:
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the client's disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive, send) -> bytes | None:
        """The whole body, or None once the request has been answered (413, 408) or the client left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        chunks, size = [], 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                await refuse(send, 408, f"request body not received in full within {self.timeout_s:g} s")
                return None
            if message["type"] == "http.disconnect":
                return None  # nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await refuse(send, 413, f"request body of more than {self.max_bytes} bytes; at most {self.max_bytes}")
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
