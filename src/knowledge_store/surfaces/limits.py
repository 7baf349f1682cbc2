"""The request body bound of every HTTP surface: 413 before anything parses or authenticates.

:class:`BodyLimit` is a pure ASGI middleware, the outermost layer of the app
(:func:`~knowledge_store.surfaces.http.create_app`). It refuses a request
whose ``Content-Length`` is over the bound before the app sees it, and counts
the bytes of every other body as they stream in — also when the length is
absent (chunked) or lies — so no route, GraphQL or MCP ever holds more than
the bound in memory. Over the bound the caller gets ``413`` with the one error
shape (``bound_exceeded``); nothing of the body is echoed.

Bounds (:mod:`knowledge_store.model`): :data:`~knowledge_store.model.MAX_INGEST_BYTES`
for ``POST /v1/admin/ingest``, :data:`~knowledge_store.model.MAX_REQUEST_BYTES`
for everything else.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from knowledge_store.errors import BoundExceeded
from knowledge_store.model import MAX_INGEST_BYTES, MAX_REQUEST_BYTES

__all__ = ["BODY_LIMITS", "BodyLimit", "body_limit"]

#: Routes with a bound of their own; every other route has MAX_REQUEST_BYTES.
BODY_LIMITS: Mapping[str, int] = {"/v1/admin/ingest": MAX_INGEST_BYTES}


def body_limit(path: str) -> int:
    """The largest body, in bytes, a request to ``path`` may send."""
    return BODY_LIMITS.get(path.rstrip("/") or "/", MAX_REQUEST_BYTES)


def _too_large(limit: int) -> JSONResponse:
    shown = f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
    error = BoundExceeded(
        f"the request body is over {shown}; send a smaller request (split a batch, or use"
        " variables and shorter lists)",
        field="body",
        maximum=limit,
    )
    return JSONResponse(error.to_dict(), status_code=413, headers={"Connection": "close"})


class _Exceeded(Exception):
    """The body went over the bound while the app was reading it."""


class BodyLimit:
    """Refuse request bodies over their bound with 413 (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope.get("path", ""))
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(limit)(scope, receive, send)
            return
        received = 0
        exceeded = False
        started = False

        async def counted() -> Message:
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise _Exceeded
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if exceeded:
                return  # the app's own answer (often "could not parse the body") is replaced
            started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not exceeded:
                raise  # whatever the app made of the refused read, the caller gets the 413
        if exceeded and not started:
            await _too_large(limit)(scope, receive, send)
