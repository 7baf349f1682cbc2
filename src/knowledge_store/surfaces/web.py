"""Plumbing the HTTP surfaces share: the service they wrap, who is calling, the one error shape.

REST (:mod:`.rest`), GraphQL (:mod:`.graphql`) and the search page
(:mod:`.page`) all read the :class:`Service` from the app and resolve their
caller with :func:`caller` — the rules of :mod:`.auth`, written once. Errors
leave every route as ``{"error": {"code", "message", "details"}}`` with the
error's HTTP status (:func:`error_response`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from knowledge_store.errors import KnowledgeStoreError
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.access import Access
from knowledge_store.surfaces.auth import AuthError, Caller
from knowledge_store.surfaces.mcp import KnowledgeMCPServer, ToolsWatcher
from knowledge_store.surfaces.workers import run_store

__all__ = [
    "AdminCaller",
    "AnyCaller",
    "Service",
    "caller",
    "error_response",
    "require_admin",
    "service",
    "the_service",
]

T = TypeVar("T")

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token from the server's token file, or an OAuth access token from the"
    " server's OIDC issuer (see docs/serving.md).",
)


@dataclass
class Service:
    """What the HTTP app serves: the store, who may call (:class:`Access`), the MCP server."""

    store: KnowledgeStore
    access: Access
    mcp: KnowledgeMCPServer

    @property
    def watcher(self) -> ToolsWatcher:
        return self.mcp.watcher

    async def run(
        self, fn: Callable[..., T], /, *args: Any, heavy: bool = False, **kwargs: Any
    ) -> T:
        """Run a blocking store call in its lane of the store's thread pools (``workers``)."""
        return await run_store(fn, *args, heavy=heavy, **kwargs)


def service(request: Request) -> Service:
    found: Service = request.app.state.knowledge_store
    return found


# The dependencies are ``async def``: they only look things up, and FastAPI runs a plain
# ``def`` dependency on a thread of its pool — two thread hops per request for nothing.
async def the_service(request: Request) -> Service:
    """:func:`service`, as a dependency."""
    return service(request)


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The caller of a request: its bearer token's identity, or ``everyone`` with --anonymous."""
    return await service(request).access.resolve(credentials.credentials if credentials else None)


async def require_admin(request: Request, who: Annotated[Caller, Depends(caller)]) -> Caller:
    """The caller, if it holds the admin scope; else 403."""
    if not who.admin:
        raise service(request).access.admin_refusal(
            "this endpoint administers the store; it needs a token with the admin scope"
        )
    return who


AnyCaller = Annotated[Caller, Depends(caller)]
AdminCaller = Annotated[Caller, Depends(require_admin)]


def error_response(
    exc: KnowledgeStoreError | AuthError, access: Access | None = None
) -> JSONResponse:
    """The one error shape, with the error's HTTP status (and a challenge on 401, and on a
    403 for a missing scope: ``access`` writes it)."""
    if isinstance(exc, AuthError):
        headers = {}
        if exc.status == 401 or exc.error:
            headers["WWW-Authenticate"] = (
                access.challenge(exc) if access is not None else 'Bearer realm="knowledge-store"'
            )
        return JSONResponse(exc.to_dict(), status_code=exc.status, headers=headers)
    return JSONResponse(exc.to_dict(), status_code=exc.http_status)
