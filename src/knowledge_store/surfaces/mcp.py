"""The MCP server (official ``mcp`` SDK, low-level ``Server``): stdio and streamable HTTP.

``create_mcp_server(store, identity=…, admin=…)`` builds the server; the tools
are :mod:`~knowledge_store.surfaces.tools`' (generated from the operation
table: input schema from the request model, output schema from the answer
model), computed afresh on every ``tools/list`` (so a stateless request always
sees the current list). Tool calls run the store's methods in worker threads;
the answer is the structured content (and its JSON text); the store's typed
errors and bound violations come back as tool execution errors (``isError:
true`` with the error's message — a sentence the model can act on — and the
error shape as structured content), never as protocol errors.

Who is asking: over stdio, the server's ``identity``; over HTTP, the caller
:func:`mcp_http_app`'s auth wrapper resolved from the bearer token — the
same rules as every HTTP surface (:mod:`~knowledge_store.surfaces.auth`).

``list_changed``: a :class:`ToolsWatcher` polls ``store.is_empty`` (one
``SELECT … LIMIT 1``) every half second and before each request, and when it
flips it tells connected sessions — ``notifications/tools/list_changed`` on the
standalone channel of handshake-era (2025) sessions, and a ``ToolsListChanged``
event on ``subscriptions/listen`` streams of 2026-era sessions.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from knowledge_store.errors import KnowledgeStoreError, StoreError
from knowledge_store.model import Identity
from knowledge_store.store import KnowledgeStore
from knowledge_store.store.audit import operating_system_user
from knowledge_store.surfaces.access import Access
from knowledge_store.surfaces.auth import AuthError, Caller, TokenTable, bearer_token
from knowledge_store.surfaces.mcp_sessions import MAX_SESSIONS, BoundedSessions, SessionBounds
from knowledge_store.surfaces.tools import (
    ADMIN_TOOLS,
    call_tool,
    heavy_call,
    input_schema,
    visible_tools,
)
from knowledge_store.surfaces.workers import run_store

__all__ = [
    "CALLER_SCOPE_KEY",
    "KnowledgeMCPServer",
    "McpHttpEndpoint",
    "ToolsWatcher",
    "create_mcp_server",
    "mcp_http_app",
    "run_stdio",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Where the HTTP auth wrapper leaves the resolved :class:`Caller` in the ASGI scope.
CALLER_SCOPE_KEY = "knowledge_store.caller"
POLL_SECONDS = 0.5
_MAX_TRACKED_SESSIONS = MAX_SESSIONS + 1  # every open HTTP session, and stdio's
_INSTRUCTIONS = (
    "knowledge-store: a permission-aware knowledge base. Start with search_knowledge (chat"
    " answers with citations) or search; narrow with docs_search / code_sample_search; read a"
    " whole entity with fetch_content; explore links with get_related, get_learning_path,"
    " graph or query_graph; count and list by fields with sql. When the store is empty no"
    " knowledge tools are listed; the list changes (notifications/tools/list_changed) as soon"
    " as content arrives."
)


async def _in_thread(fn: Callable[[], T]) -> T:
    return await run_store(fn)


class ToolsWatcher:
    """Notices ``is_empty`` flipping and tells every connected session that the tool list changed."""

    def __init__(self, store: KnowledgeStore, *, interval: float = POLL_SECONDS) -> None:
        self.store = store
        self.interval = interval
        self.bus = InMemorySubscriptionBus()
        self._empty: bool | None = store.is_empty  # the baseline: flips are counted from here
        self._sessions: OrderedDict[str, ServerSession] = OrderedDict()
        self._lock = threading.Lock()  # no await inside: safe from any event loop
        self.flips = 0

    def track(self, key: str, session: ServerSession) -> None:
        """Remember a handshake-era session to notify on its standalone channel (LRU-bounded)."""
        self._sessions[key] = session
        self._sessions.move_to_end(key)
        while len(self._sessions) > _MAX_TRACKED_SESSIONS:
            self._sessions.popitem(last=False)

    def forget(self, key: str) -> None:
        """A session ended: keep no reference to it."""
        self._sessions.pop(key, None)

    async def check(self) -> bool:
        """Read ``is_empty``; on a flip notify everyone. True when it flipped."""
        empty = await anyio.to_thread.run_sync(lambda: self.store.is_empty)  # never queued
        with self._lock:
            if self._empty is None or empty == self._empty:
                self._empty = empty
                return False
            self._empty = empty
            self.flips += 1
        log.info("store is_empty is now %s: tool list changed", empty)
        await self.bus.publish(ToolsListChanged())
        for session in list(self._sessions.values()):
            with anyio.move_on_after(2):
                await session.send_tool_list_changed()
        return True

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            try:
                await self.check()
            except Exception:  # a transient store error must not end the watcher
                log.exception("checking whether the store is empty failed")
            await anyio.sleep(self.interval)


class KnowledgeMCPServer(Server[dict[str, Any]]):
    """The low-level server with the store, its identity rules and the tools watcher."""

    def __init__(
        self, store: KnowledgeStore, *, caller: Caller, watcher: ToolsWatcher | None = None
    ) -> None:
        self.store = store
        self.caller = caller
        self.watcher = watcher or ToolsWatcher(store)
        self.listen_handler = ListenHandler(self.watcher.bus)
        super().__init__(
            "knowledge-store",
            version=_version(),
            title="knowledge-store",
            instructions=_INSTRUCTIONS,
            lifespan=self._lifespan,
            get_tool_input_schema=input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self.listen_handler,
        )
        self.middleware.append(self._observe)

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """Advertise ``tools.listChanged`` to handshake-era clients too."""
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )

    @asynccontextmanager
    async def _lifespan(self, _: Server[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.watcher.run)
            try:
                yield {}
            finally:
                self.listen_handler.close()
                tasks.cancel_scope.cancel()

    # -- who is asking -------------------------------------------------------------------------------
    def caller_of(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        """The HTTP caller the auth wrapper resolved, else the server's own identity (stdio)."""
        request = ctx.request
        scope = getattr(request, "scope", None)
        if isinstance(scope, dict):
            found = scope.get(CALLER_SCOPE_KEY)
            if isinstance(found, Caller):
                return found
        return self.caller

    async def _observe(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Before every request: notice a flip; remember handshake-era sessions to notify."""
        if ctx.request_id is not None and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            key = _session_key(ctx)
            if key is not None:
                self.watcher.track(key, ctx.session)
        if ctx.method == "tools/list":  # calls check is_empty themselves (resolve_tool)
            try:
                await self.watcher.check()
            except Exception:
                log.exception("checking whether the store is empty failed")
        return await call_next(ctx)

    # -- handlers ---------------------------------------------------------------------------------------
    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = self.caller_of(ctx)
        tools = await _in_thread(partial(visible_tools, self.store, admin=caller.admin))
        facets = await _in_thread(self.store.declared_facets)
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name,
                    title=tool.name.replace("_", " "),
                    description=tool.description,
                    input_schema=input_schema(tool.name, facets) or tool.input_schema,
                    output_schema=tool.output_schema,
                    annotations=types.ToolAnnotations(
                        read_only_hint=not tool.admin,
                        destructive_hint=tool.name == "delete_entities",
                        idempotent_hint=not tool.admin,
                        open_world_hint=False,
                    ),
                )
                for tool in tools
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        caller = self.caller_of(ctx)
        try:
            out = await run_store(
                partial(call_tool, self.store, caller, params.name, params.arguments),
                heavy=heavy_call(params.name, params.arguments),
            )
        except (KnowledgeStoreError, AuthError) as exc:
            return tool_error(exc)
        except Exception as exc:  # a bug: still a tool error, with the one error shape
            log.exception("tool %s failed", params.name)
            return tool_error(StoreError(f"the tool failed: {type(exc).__name__}: {exc}"))
        if params.name in ADMIN_TOOLS:
            await self.watcher.check()
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(out, ensure_ascii=False))],
            structured_content=out,
        )


def tool_error(exc: KnowledgeStoreError | AuthError) -> types.CallToolResult:
    """A tool execution error: the message for the model, the error shape as structured content."""
    return types.CallToolResult(
        content=[types.TextContent(text=exc.message)],
        structured_content=exc.to_dict(),
        is_error=True,
    )


def _session_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    request = ctx.request
    if request is None:
        return "stdio"
    headers = getattr(request, "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    return f"http:{session_id}" if session_id else None


def _version() -> str:
    from knowledge_store import __version__

    return __version__


def create_mcp_server(
    store: KnowledgeStore,
    *,
    identity: Identity | str = "everyone",
    admin: bool = False,
    watcher: ToolsWatcher | None = None,
) -> KnowledgeMCPServer:
    """An MCP server over ``store``; ``identity``/``admin`` apply where no HTTP caller is known."""
    who = identity if isinstance(identity, Identity) else Identity(identity)
    # where no HTTP caller is known, the server runs for whoever started it (stdio)
    local = Caller(who, admin=admin, subject=operating_system_user())
    return KnowledgeMCPServer(store, caller=local, watcher=watcher)


async def run_stdio(server: KnowledgeMCPServer) -> None:
    """Serve ``server`` on stdin/stdout until the client closes the pipe."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# -- streamable HTTP ------------------------------------------------------------------------------------
class _Authenticate:
    """ASGI wrapper: resolve the bearer token (or anonymity) before the MCP transport sees a request.

    The caller goes into the scope for the handlers, and becomes the scope's
    ``user`` so that the SDK binds each session to the caller that opened it
    (another caller gets 404 for that session) and :class:`.BoundedSessions`
    counts sessions per caller: its identity, or for an anonymous caller its
    client address.
    """

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = bearer_token(Headers(scope=scope).get("authorization"))
        try:
            caller = await self.access.resolve(token)
        except AuthError as exc:
            response = JSONResponse(
                exc.to_dict(),
                status_code=exc.status,
                headers={"WWW-Authenticate": self.access.challenge(exc)},
            )
            await response(scope, receive, send)
            return
        scope[CALLER_SCOPE_KEY] = caller
        client = scope.get("client")
        scope["user"] = AuthenticatedUser(
            AccessToken(
                token="sha256",  # never the token itself: the scope may be logged
                client_id=caller.principal,
                scopes=["admin"] if caller.admin else [],
                subject=f"anonymous@{client[0] if client else '?'}" if token is None else None,
            )
        )
        await self.app(scope, receive, send)


class McpHttpEndpoint:
    """The streamable HTTP endpoint: auth, then the SDK's session manager.

    An ASGI app; run :meth:`running` in the enclosing app's lifespan. Each
    lifespan gets a fresh session manager (the SDK's runs once), so the app
    can be started more than once (test clients do).
    """

    def __init__(
        self,
        server: KnowledgeMCPServer,
        security: TransportSecuritySettings | None,
        *,
        stateless: bool = False,
        sessions: SessionBounds | None = None,
    ):
        self.server = server
        self.security = security
        self.stateless = stateless
        self.sessions = sessions
        self._transport = StreamableHTTPASGIApp(self._manager())

    def _manager(self) -> StreamableHTTPSessionManager:
        if self.stateless:
            return StreamableHTTPSessionManager(
                app=self.server, security_settings=self.security, stateless=True
            )
        watcher = self.server.watcher
        return BoundedSessions(
            self.server,
            security_settings=self.security,
            bounds=self.sessions,
            on_closed=lambda session_id: watcher.forget(f"http:{session_id}"),
        )

    @property
    def manager(self) -> StreamableHTTPSessionManager:
        """The session manager of the current lifespan."""
        return self._transport.session_manager

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        manager = self._manager()
        self._transport.session_manager = manager
        async with manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._transport(scope, receive, send)


def mcp_http_app(
    server: KnowledgeMCPServer,
    tokens: TokenTable | Access,
    *,
    allowed_hosts: Sequence[str] | None = None,
    stateless: bool = False,
    sessions: SessionBounds | None = None,
) -> tuple[ASGIApp, McpHttpEndpoint]:
    """The authenticated streamable HTTP endpoint (an ASGI app) and the endpoint to run.

    Run ``endpoint.running()`` in the enclosing app's lifespan. With
    ``allowed_hosts`` (e.g. ``["127.0.0.1", "localhost"]``) the SDK's DNS
    rebinding protection checks Host and Origin. ``stateless``: 2025-era
    (handshake) requests keep no session — each POST is answered on its own, and
    there is no standalone stream to push ``tools/list_changed`` on — for a server
    of several processes, where a session's next request may reach another
    process. 2026-era requests keep no session anyway. ``sessions``: the bounds on 2025
    sessions (:class:`~.mcp_sessions.SessionBounds`; the defaults when None).
    """
    security = None
    if allowed_hosts:
        names = [f"[{h}]" if ":" in h and not h.startswith("[") else h for h in allowed_hosts]
        hosts = [h for host in names for h in (host, f"{host}:*")]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=hosts,
            allowed_origins=[f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")],
        )
    endpoint = McpHttpEndpoint(server, security, stateless=stateless, sessions=sessions)
    access = tokens if isinstance(tokens, Access) else Access(tokens)
    return _Authenticate(endpoint, access), endpoint


def run_blocking(fn: Callable[[], Awaitable[None]]) -> None:
    """``anyio.run`` for the CLI."""
    anyio.run(fn)
