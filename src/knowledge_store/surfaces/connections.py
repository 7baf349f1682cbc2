"""Read deadlines on every HTTP connection: a request's headers, then its body, must arrive.

uvicorn (its h11 protocol) times out only the idle wait between two requests
(``timeout_keep_alive``); while a request is arriving it waits for ever. A
client that opens a socket and sends a header line every few seconds — or
nothing at all — held that socket, and a task, as long as it liked: 800 such
*slowloris* sockets were all still open after 45 s. :class:`GuardedH11Protocol`
is uvicorn's h11 protocol with two deadlines (Apache's ``mod_reqtimeout``
rules, its defaults):

- **headers**: the request line and headers within :data:`HEADER_TIMEOUT_S` of
  the connection opening or of the request's first byte (after a keep-alive
  wait); else the caller gets ``408`` with the one error shape (``timeout``) and
  the connection closes — silently, when not one byte of a request came;
- **body**: within :data:`BODY_TIMEOUT_S` of the headers, extended by one
  second for each :data:`BODY_MIN_RATE` bytes received, so a large body at a
  reasonable rate always makes it and a drip never does; else the connection
  closes (the app sees the client disconnect). Time the server itself stops
  reading — the app not yet consuming the body — does not count.

``ks serve`` runs every worker with it (:func:`.serve.uvicorn_config`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["BODY_MIN_RATE", "BODY_TIMEOUT_S", "HEADER_TIMEOUT_S", "GuardedH11Protocol"]

log = logging.getLogger("uvicorn.error")

#: Seconds a request's line and headers may take to arrive.
HEADER_TIMEOUT_S: Final = 10.0
#: Seconds a request body may take, plus one for each BODY_MIN_RATE bytes received.
BODY_TIMEOUT_S: Final = 20.0
#: Bytes per second a body must keep up beyond BODY_TIMEOUT_S.
BODY_MIN_RATE: Final = 500


def _timeout_response(seconds: float) -> bytes:
    body = json.dumps(
        {
            "error": {
                "code": "timeout",
                "message": f"the request's headers did not arrive within {seconds:g} s;"
                " the connection is closed",
                "details": {"limit_s": seconds},
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a body deadline (module docstring)."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    body_min_rate: float = BODY_MIN_RATE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: str | None = None  # "headers", "body" or None (nothing arriving)
        self._started = 0.0  # when the phase began (moved on while reading is paused)
        self._received = 0  # bytes of the request so far
        self._timer: asyncio.TimerHandle | None = None

    # -- the protocol's events -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._begin("headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase is None and (self.cycle is None or self.cycle.response_complete):
            self._begin("headers")  # the first bytes of the next request on this connection
        before = self.cycle
        super().data_received(data)
        self._received += len(data)
        if self.cycle is not before:  # the headers are in: the request is being served
            self._begin("body" if self.conn.their_state is h11.SEND_BODY else None)
        elif self._phase == "body" and self.conn.their_state is not h11.SEND_BODY:
            self._begin(None)

    # -- the deadlines ---------------------------------------------------------------------------
    def _begin(self, phase: str | None) -> None:
        self._stop()
        self._phase = phase
        self._started = self.loop.time()
        self._received = 0
        if phase is not None:
            self._timer = self.loop.call_later(self._limit(), self._check)

    def _limit(self) -> float:
        if self._phase == "headers":
            return self.header_timeout_s
        return self.body_timeout_s + self._received / self.body_min_rate

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._phase is None or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow is not None and self.flow.read_paused:
            self._started += 1.0  # the server is not reading: that second is not the client's
            self._timer = self.loop.call_later(1.0, self._check)
            return
        due = self._started + self._limit()
        if now < due:
            self._timer = self.loop.call_later(due - now, self._check)
            return
        peer = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        if self._phase == "headers":
            log.debug("closing %s: no complete request headers in %g s", peer, self._limit())
            if self._received:
                self.transport.write(_timeout_response(self.header_timeout_s))
        else:
            log.debug("closing %s: the request body stalled", peer)
        self._phase = None
        self.transport.close()
