"""Request headers under a time limit: uvicorn's h11 protocol with a header timeout.

A client that opens a connection and sends its request line and headers slowly (a header line
every few seconds, or nothing at all) holds a connection and a file descriptor for as long as
it likes: uvicorn times out idle keep-alive connections and :mod:`spectrag.serve.body` bounds
the body, but nothing bounds the headers. :func:`header_timeout_protocol` gives uvicorn a
protocol class that starts a timer when a connection opens (and when the first bytes of each
further request on it arrive) and, if the headers are not complete within ``timeout_s``,
answers 408 ``{"error": ...}`` and closes the connection (what nginx's ``client_header_timeout``
does). Broken HTTP (uvicorn's plain-text 400) is answered in the API's error shape too.

Our own because uvicorn has no header timeout (its ``h11_max_incomplete_event_size`` bounds
the headers' size, not their time).
"""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def _raw_error(status: str, message: str) -> bytes:
    """A raw ``{"error": message}`` answer that closes the connection: h11 cannot send a
    response before it has read a request, nor after the client broke the protocol."""
    body = json.dumps({"error": message}).encode()
    head = (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode()
    return head + body


class _HeaderTimeoutH11(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose request headers take longer than
    ``header_timeout_s`` (a class attribute, set by :func:`header_timeout_protocol`)."""

    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # a request has begun (or not) but its headers are incomplete
            self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None and not self.transport.is_closing():
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is still being written on this connection: not an idle client
        self.transport.write(_raw_error("408 Request Timeout",
                                        f"request headers not received in full within {self.header_timeout_s:g} s"))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to broken HTTP (bad framing, bad headers), in the API's error shape."""
        self._disarm()
        self.transport.write(_raw_error("400 Bad Request", f"{msg.rstrip('.')}: not a valid HTTP/1.1 request"))
        self.transport.close()


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's ``http`` protocol class with a ``timeout_s`` header timeout."""
    return type("HeaderTimeoutH11", (_HeaderTimeoutH11,), {"header_timeout_s": float(timeout_s)})
