"""``create_app(store)``: the HTTP app — REST ``/v1``, GraphQL, MCP, the search page.

::

    /v1/…             REST (OpenAPI at /openapi.json)          surfaces.rest
    /v1/admin/…       administration (admin scope)             surfaces.rest
    /graphql          GraphQL (strawberry), read-only          surfaces.graphql
    /mcp              MCP over streamable HTTP                 surfaces.mcp
    /, /entity/{uid}  the search page                          surfaces.page
    /healthz          liveness (no auth, no data)

Every request body is bounded before anything reads it (:mod:`.limits`: 413);
store calls run in the worker lanes of :mod:`.workers`, never on the event loop.
One service layer (every route calls :class:`~knowledge_store.store.KnowledgeStore`),
one identity rule (:mod:`.auth`), one JSON error shape everywhere —
``{"error": {"code", "message", "details"}}`` with the error's HTTP status,
for the store's errors, request validation (the request model's own error,
naming the field: :func:`.rest.request_error`),
unknown routes (``not_found``, 404), methods (405), 401 and 403.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from knowledge_store.errors import InvalidRequest, KnowledgeStoreError, NotFound, StoreError
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.access import Access
from knowledge_store.surfaces.auth import AuthError, TokenTable
from knowledge_store.surfaces.limits import BodyLimit
from knowledge_store.surfaces.mcp import create_mcp_server, mcp_http_app
from knowledge_store.surfaces.mcp_sessions import SessionBounds
from knowledge_store.surfaces.oidc import OidcValidator
from knowledge_store.surfaces.web import Service, error_response

__all__ = ["create_app"]

TokensLike = TokenTable | Mapping[str, str | tuple[str, bool]] | None
#: Where the protected resource metadata is (RFC 9728 §3).
WELL_KNOWN = "/.well-known/oauth-protected-resource"


def create_app(
    store: KnowledgeStore,
    *,
    tokens: TokensLike = None,
    anonymous: bool = False,
    allowed_hosts: Sequence[str] | None = None,
    stateless_mcp: bool = False,
    mcp_sessions: SessionBounds | None = None,
    oidc: OidcValidator | None = None,
    scim: str | Path | None = None,
) -> FastAPI:
    """The HTTP app over ``store``.

    ``tokens``: a :class:`TokenTable` (``TokenTable.load(file)``) or ``{token:
    identity}`` / ``{token: (identity, admin)}``. With ``anonymous`` a request
    without a token runs as ``everyone``. ``allowed_hosts`` (e.g. the loopback
    names when serving on 127.0.0.1) turns on Host/Origin checks against DNS
    rebinding. Run its lifespan (uvicorn does) so that MCP sessions can start.
    ``stateless_mcp``: MCP keeps no sessions (:func:`~.mcp.mcp_http_app`), for a
    server of several processes on one socket (``ks serve --workers N``).
    ``mcp_sessions``: the bounds on 2025 MCP sessions, per caller, in all and in idle
    time (:class:`~.mcp_sessions.SessionBounds`; default: the server's).
    ``oidc``: accept OAuth access tokens (JWTs) from an OIDC issuer beside the token file
    (:mod:`.oidc`), and publish the protected resource metadata (RFC 9728). ``scim``: serve
    SCIM 2.0 at ``/scim/v2``, keeping the directory in this SQLite file (:mod:`.scim`);
    with OAuth on, an access token's user must then be an active provisioned user, and
    groups come from the directory rather than the token.
    """
    from knowledge_store import __version__
    from knowledge_store.surfaces import page, page_login, rest
    from knowledge_store.surfaces.graphql import graphql_router

    table = tokens if isinstance(tokens, TokenTable) else TokenTable.of(tokens)
    if anonymous and not table.anonymous:
        table = table.allowing_anonymous()
    access = Access(table, oidc)
    directory = None
    if scim is not None:
        from knowledge_store.surfaces.scim import SCIM_PREFIX, scim_app

        scim_asgi, directory = scim_app(store, scim, access)
        if oidc is not None:
            oidc.allowed = directory.refusal
            oidc.groups_from_token = False
    mcp_server = create_mcp_server(store)
    mcp_asgi, mcp_endpoint = mcp_http_app(
        mcp_server,
        access,
        allowed_hosts=allowed_hosts,
        stateless=stateless_mcp,
        sessions=mcp_sessions,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            async with mcp_endpoint.running():
                yield
        finally:
            if directory is not None:
                directory.close()

    app = FastAPI(
        title="knowledge-store",
        version=__version__,
        summary="Permission-aware retrieval: vector, BM25, graph and SQL over one store, fused.",
        description="Every read runs as the caller's identity (Authorization: Bearer <token>);"
        " an entity the caller can't read answers exactly like one that does not exist."
        ' Errors: {"error": {"code", "message", "details"}}. See docs/serving.md.',
        docs_url=None,  # the Swagger/ReDoc pages load their assets from a CDN
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.knowledge_store = Service(store=store, access=access, mcp=mcp_server)
    for router in rest.routers():
        app.include_router(router)
    app.include_router(graphql_router(), include_in_schema=False)
    app.include_router(page.router)
    app.include_router(page_login.router)
    app.router.routes.append(Route("/mcp", endpoint=mcp_asgi))
    if directory is not None:
        app.mount(SCIM_PREFIX, cast(ASGIApp, scim_asgi))

    async def resource_metadata(request: Request) -> JSONResponse:
        """RFC 9728: this server as an OAuth protected resource (404 without --oidc)."""
        found = access.metadata()
        if found is None:
            raise NotFound("this server takes no OAuth access tokens (no --oidc)")
        return JSONResponse(found, headers={"Cache-Control": "max-age=3600"})

    for path in (WELL_KNOWN, f"{WELL_KNOWN}/{{rest:path}}"):
        app.add_api_route(path, resource_metadata, methods=["GET"], include_in_schema=False)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        return {"ok": True}

    _install_error_handlers(app)
    if allowed_hosts:
        app.add_middleware(_HostCheck, allowed=list(allowed_hosts))
    app.add_middleware(BodyLimit)  # the last added runs first: bodies are bounded before all else
    return app


# -- errors ----------------------------------------------------------------------------------------------
def _install_error_handlers(app: FastAPI) -> None:
    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, KnowledgeStoreError)
        return error_response(exc)

    async def auth_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AuthError)
        return error_response(exc, request.app.state.knowledge_store.access)

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        from knowledge_store.surfaces.rest import record_refused, request_error

        error = request_error(request, list(exc.errors()), exc.body)
        await record_refused(request, exc.body, error)
        return error_response(error)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            found: KnowledgeStoreError = NotFound(
                f"no endpoint {request.method} {request.url.path}; the API is described at"
                " /openapi.json",
                path=request.url.path,
            )
            return error_response(found)
        message = (
            f"method {request.method} is not allowed on {request.url.path}"
            if exc.status_code == 405
            else str(exc.detail)
        )
        body = InvalidRequest(message, path=request.url.path).to_dict()
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error_response(StoreError(f"the server failed: {type(exc).__name__}"))

    app.add_exception_handler(KnowledgeStoreError, store_error)
    app.add_exception_handler(AuthError, auth_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


class _HostCheck:
    """Refuse requests whose Host is not one the server answers to (DNS rebinding)."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app = app
        self.allowed = {h.lower() for h in allowed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host", "").lower()
            if host.startswith("["):  # [::1]:8000
                name = host[1 : host.find("]")] if "]" in host else host
            else:
                name = host.rsplit(":", 1)[0]
            if name not in self.allowed:
                body = InvalidRequest(
                    f"this server does not answer to host {host!r}", host=host
                ).to_dict()
                await JSONResponse(body, status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)
