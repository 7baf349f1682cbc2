"""``ks serve``: the HTTP app on a socket (uvicorn), or the MCP server on stdin/stdout.

::

    ks serve [--host H] [--port P] [--tokens FILE] [--anonymous] [--workers N]   # HTTP
    ks serve --mcp-stdio [--as P]                                                # MCP over stdio

HTTP needs a token file, ``--anonymous``, or both. Over stdio the caller is
``--as`` (default ``$KS_AS``, else ``everyone``); stdout is the protocol, so
nothing else is printed there (the SDK diverts stray writes to stderr).

Worker processes: a store call holds the GIL for most of its Python work, so one
process uses about one core however many threads it runs. ``--workers N``
(default 1; ``--workers $(nproc)`` for one per core) serves the one socket from N processes
(uvicorn's supervisor, spawned — never forked: ONNX Runtime and faiss are not
fork-safe), each with its own store handle on the same store; a publish made
through one is seen by the others on their next query, like a publish by any
other process. The parent opens the store once first (creating or repairing it,
and failing there with the store's own error), then holds no store: it only
supervises. A worker that dies is replaced; one that cannot start (it cannot
open the store, say) stops the server with exit status 1. SIGTERM or Ctrl-C
stops every worker. With more than one worker, MCP keeps no sessions (a
session's next request may reach another process; :func:`.mcp.mcp_http_app`).
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import re
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledge_store import graphquery
from knowledge_store.errors import InvalidRequest, NotFound, StoreError
from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces import environment
from knowledge_store.surfaces.environment import EMBEDDER_ENV
from knowledge_store.surfaces.oidc import ClaimsMapping, OidcSettings, OidcValidator

if TYPE_CHECKING:
    from knowledge_store.surfaces.auth import TokenTable

log = logging.getLogger("uvicorn.error")  # the server's log: its lines go where uvicorn's go

__all__ = [
    "DEFAULT_WORKERS",
    "EMBEDDER_ENV",
    "LOOPBACK",
    "MAX_WORKERS",
    "RedactTokens",
    "WorkerApp",
    "banner",
    "cores",
    "listen",
    "open_store",
    "serve",
    "uvicorn_config",
]


def open_store(location: str | Path | None, *, create: bool = True) -> KnowledgeStore:
    """The store at ``location`` with the settings the environment names (``$KS_EMBEDDER``,
    ``$KS_PG_*``, ``$KS_ONNX_*``: the library reads no environment; :mod:`.environment`).
    ``create=False``: only a store that exists (``NotFound`` else)."""
    return environment.open_store(location, create=create)


LOOPBACK = ("127.0.0.1", "localhost", "::1")
GRACEFUL_SHUTDOWN_S = 3
KEEP_ALIVE_S = 30
MAX_WORKERS = 64
#: How long a worker may take to answer the supervisor's ping before it counts as hung
#: (uvicorn's default, 5 s, is short for a busy machine: a hung worker is killed and replaced).
WORKER_HEALTHCHECK_S = 30


#: One process by default: MCP keeps its sessions (tool-list notices) and the server its
#: memory (one model, one mapped index); more workers buy throughput (docs/serving.md).
DEFAULT_WORKERS = 1


def cores() -> int:
    """The cores this process may use (what ``--workers`` is measured against)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _warm(store: KnowledgeStore) -> None:
    """Load the embedding model and build query_graph's parser now, not on the first
    request (the parser's tables take 0.1–0.3 s to build, once per process)."""
    store.embedder.embed_query("warm up")
    graphquery.parse("MATCH (n) RETURN n.uid")


def banner(
    host: str,
    port: int,
    *,
    anonymous: bool,
    tokens: int,
    workers: int = 1,
    oidc: OidcSettings | None = None,
) -> str:
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown if host not in ('0.0.0.0', '::') else '127.0.0.1'}:{port}"
    who = (
        "anonymous callers read as everyone"
        if anonymous
        else "a bearer token from the token file is required"
    )
    return (
        f"knowledge-store serving on {base}\n"
        f"  search page  {base}/\n"
        f"  REST         {base}/v1/   (OpenAPI: {base}/openapi.json)\n"
        f"  GraphQL      {base}/graphql\n"
        f"  MCP          {base}/mcp   (streamable HTTP)\n"
        f"  identity     {who}; {tokens} token(s) loaded\n"
        + (
            f"  OAuth        access tokens of {oidc.issuer} for {oidc.audience}"
            f" (metadata: {oidc.metadata_url})\n"
            if oidc is not None
            else ""
        )
        + f"  workers      {workers} process{'es' if workers > 1 else ''}\n"
        "  Ctrl-C stops the server."
    )


def serve(
    location: str | Path | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    tokens: Path | None = None,
    anonymous: bool = False,
    mcp_stdio: bool = False,
    identity: str | None = None,
    workers: int | None = None,
    oidc: str | None = None,
    oidc_audience: str | None = None,
    oidc_claims: Path | None = None,
    oidc_page_client: str | None = None,
    scim: Path | None = None,
    create: bool = False,
) -> None:
    """Run until interrupted (HTTP) or until the client closes the pipe (stdio).

    ``workers``: HTTP worker processes (default :data:`DEFAULT_WORKERS`). ``oidc``: the
    issuer whose access tokens (JWTs) are accepted beside the token file, for the
    audience ``oidc_audience`` (default: this server's URL), mapped by ``oidc_claims``
    (a JSON file, :class:`~.oidc.ClaimsMapping`); ``oidc_page_client``: the search page's
    client id at the issuer (sign-in with the IdP). ``scim``: serve SCIM 2.0 at
    ``/scim/v2``, keeping the directory in this SQLite file. A ``location`` that holds no
    store is ``NotFound`` — a typo must not serve an empty store that says nothing —
    unless ``create`` asks for an empty one (to be filled over HTTP or MCP)."""
    from knowledge_store.surfaces.auth import TokenTable

    if mcp_stdio:
        if tokens is not None or anonymous or workers is not None or oidc or scim:
            raise InvalidRequest(
                "--tokens, --anonymous, --oidc, --scim and --workers are for HTTP; over stdio"
                " use --as"
            )
        _serve_stdio(location, environment.identity(identity).principal, create)
        return
    if identity is not None:
        raise InvalidRequest(
            "--as is the identity of an MCP stdio session (--mcp-stdio); over HTTP each"
            " caller's token decides it"
        )
    if not 0 <= port <= 65535:
        raise InvalidRequest(f"--port {port} is not a TCP port (0–65535)", field="port")
    processes = DEFAULT_WORKERS if workers is None else workers
    if not 1 <= processes <= MAX_WORKERS:
        raise InvalidRequest(
            f"--workers {processes} is not a number of processes from 1 to {MAX_WORKERS}"
            f" (default {DEFAULT_WORKERS}; this machine has {cores()} cores)",
            field="workers",
        )
    environment.embed_window_s()  # a bad $KS_EMBED_WINDOW_MS is refused here, not by each worker
    if oidc is None and (oidc_audience or oidc_claims or oidc_page_client):
        raise InvalidRequest(
            "--oidc-audience, --oidc-claims and --oidc-page-client go with --oidc ISSUER"
        )
    table = TokenTable.load(tokens, anonymous=anonymous)
    if not len(table) and not anonymous and oidc is None:
        raise InvalidRequest(
            "ks serve needs --tokens FILE (bearer tokens → identities; see docs/serving.md),"
            " --oidc ISSUER (OAuth access tokens) or --anonymous (callers without a token"
            " read as everyone)"
        )
    if scim is not None and processes > 1:
        raise InvalidRequest(
            "--scim keeps its directory in one process: serve it with --workers 1",
            field="workers",
        )
    claims = ClaimsMapping.load(oidc_claims) if oidc_claims is not None else ClaimsMapping()
    sock = listen(host, port)
    try:
        settings = None
        if oidc is not None:
            audience = oidc_audience or _own_url(host, int(sock.getsockname()[1]))
            settings = OidcSettings(oidc, audience, claims, page_client=oidc_page_client)
        if processes == 1:
            _serve_http(location, host, sock, table, create, settings, scim)
        else:
            _serve_workers(location, host, sock, table, processes, create, settings)
    finally:
        sock.close()


def _own_url(host: str, port: int) -> str:
    """The server's URL as a client on this machine names it (the default OAuth audience)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown if host not in ('0.0.0.0', '::') else '127.0.0.1'}:{port}"


def _validator(settings: OidcSettings | None) -> OidcValidator | None:
    """The access-token checker of ``settings``, its keys fetched now (a warning if it can't)."""
    if settings is None:
        return None
    validator = OidcValidator(settings)
    problem = validator.keys.prefetch()
    if problem is not None:
        log.warning("OIDC: %s; access tokens are refused until it answers", problem)
    return validator


def _served(location: str | Path | None, *, create: bool) -> KnowledgeStore:
    """The store to serve; where there is none (and ``create`` is not asked), ``NotFound``
    naming the path and the two ways to have one."""
    try:
        return open_store(location, create=create)
    except NotFound as exc:
        where = exc.details.get("store", location)
        raise NotFound(
            f"no store at {where} (nothing was created there): make one with"
            f" `ks --store {where} ingest FILE…`, or serve an empty one to fill over HTTP or MCP"
            f" with `ks --store {where} serve --create …`",
            **exc.details,
        ) from None


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` — before anything says "serving on" — or an
    ``InvalidRequest`` (exit status 2) saying why not and what to do instead.

    The server then runs on this very socket, so no other program can take the port
    between the check and the start.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InvalidRequest(
            f"--host {host!r} is not an address of this machine ({exc.strerror});"
            " use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)",
            field="host",
        ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            why = "is already in use (another ks serve, or another program)"
        elif exc.errno == errno.EACCES:
            why = "needs privileges this user lacks (ports below 1024 usually do)"
        else:
            why = f"can't be listened on ({exc.strerror})"
        other = port + 1 if 0 < port < 65535 else 8001
        raise InvalidRequest(
            f"port {port} on {host} {why}; pick another with --port, e.g."
            f" `ks serve --port {other}` (with make: `make run PORT={other}`)",
            field="port",
            host=host,
            port=port,
            address=shown,
        ) from None
    sock.set_inheritable(True)
    return sock


def _serve_http(
    location: str | Path | None,
    host: str,
    sock: socket.socket,
    table: object,
    create: bool,
    oidc: OidcSettings | None = None,
    scim: Path | None = None,
) -> None:
    import uvicorn

    from knowledge_store.surfaces.auth import TokenTable
    from knowledge_store.surfaces.http import create_app

    assert isinstance(table, TokenTable)
    from knowledge_store.surfaces.workers import with_embedding_slots

    opened = _served(location, create=create)
    try:
        store = with_embedding_slots(opened, window_s=environment.embed_window_s())
        _warm(store)
        allowed = list(LOOPBACK) if host in LOOPBACK else None
        app = create_app(
            store, tokens=table, allowed_hosts=allowed, oidc=_validator(oidc), scim=scim
        )
    except BaseException:
        opened.close()
        raise
    _close_at_shutdown(app, opened)  # a SIGTERM ends the process before a `with` could
    port = int(sock.getsockname()[1])  # the one chosen, for --port 0
    print(banner(host, port, anonymous=table.anonymous, tokens=len(table), oidc=oidc), flush=True)
    uvicorn.Server(uvicorn_config(app, host=host, port=port)).run(sockets=[sock])


def _serve_workers(
    location: str | Path | None,
    host: str,
    sock: socket.socket,
    table: TokenTable,
    n: int,
    create: bool,
    oidc: OidcSettings | None = None,
) -> None:
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    with _served(location, create=create):  # made, repaired, checked once, before the workers
        pass
    app = WorkerApp(
        location=None if location is None else str(location),
        tokens=table,
        allowed_hosts=tuple(LOOPBACK) if host in LOOPBACK else None,
        workers=n,
        oidc=oidc,
    )
    port = int(sock.getsockname()[1])
    config = uvicorn_config(app, host=host, port=port, workers=n)
    print(
        banner(host, port, anonymous=table.anonymous, tokens=len(table), workers=n, oidc=oidc),
        flush=True,
    )
    supervisor = Multiprocess(config, sockets=[sock])
    supervisor.run()
    if any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes):
        raise StoreError(
            "a worker process could not start (its error is logged above), so the server"
            " stopped; fix that, or try `ks serve --workers 1` to see the error directly",
            workers=n,
        )


@dataclass(frozen=True)
class WorkerApp:
    """What a worker process builds its app from: pickled to each worker, called there.

    uvicorn's supervisor spawns each worker and calls this (``factory=True``) once
    the worker's logging is set up: it opens its own handle on the store, sizes
    its lanes as one of ``workers`` (:func:`~.workers.share_cpus`), loads the model
    and builds the app (MCP without sessions). A worker that cannot start says
    why and exits with uvicorn's startup-failure status, which stops the server
    instead of restarting the worker in a loop.
    """

    location: str | None
    tokens: TokenTable
    allowed_hosts: tuple[str, ...] | None
    workers: int
    oidc: OidcSettings | None = None

    def __call__(self) -> Any:
        from uvicorn.config import STARTUP_FAILURE

        _redact_access_log()
        try:
            return self._build()
        except Exception as exc:
            log.error("worker %d could not start: %s: %s", os.getpid(), type(exc).__name__, exc)
            sys.exit(STARTUP_FAILURE)

    def _build(self) -> Any:
        from knowledge_store.surfaces.http import create_app
        from knowledge_store.surfaces.workers import share_cpus, with_embedding_slots

        slots = share_cpus(self.workers)
        env = dict(os.environ)
        # the micro-batches' ONNX threads: this worker's share of the cores
        env.setdefault("KS_ONNX_THREADS", str(max(1, cores() // self.workers)))
        opened = environment.open_store(self.location, env)
        try:
            store = with_embedding_slots(opened, slots, window_s=environment.embed_window_s())
            _warm(store)
            app = create_app(
                store,
                tokens=self.tokens,
                allowed_hosts=self.allowed_hosts,
                stateless_mcp=True,
                oidc=_validator(self.oidc),
            )
        except BaseException:
            opened.close()
            raise
        _close_at_shutdown(app, opened)
        return app


def _close_at_shutdown(app: Any, store: KnowledgeStore) -> None:
    """Close ``store`` when ``app``'s lifespan ends (after the last request), and run the
    process's exit handlers.

    uvicorn re-raises the SIGTERM it handled once its server has stopped, and the
    default handler ends the process (a worker, or ``--workers 1``'s only one)
    before the interpreter's exit handlers run — among them pgserver's, which
    stops a ``pg:DIR`` server when its last user exits (skipped, the server would
    outlive ``ks serve``). So they run here, once.
    """
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(started: Any) -> AsyncIterator[Any]:
        try:
            async with inner(started) as state:
                yield state
        finally:
            store.close()
            atexit._run_exitfuncs()

    app.router.lifespan_context = lifespan


def uvicorn_config(app: Any, *, host: str, port: int, workers: int = 1) -> Any:
    """The server's uvicorn configuration; its access log never shows a token, and a request
    that does not arrive in time is cut (:mod:`.connections`).

    ``workers`` > 1: ``app`` is a :class:`WorkerApp`, called in each worker process."""
    import uvicorn

    from knowledge_store.surfaces.connections import GuardedH11Protocol

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        # a request's headers and body must arrive (surfaces/connections.py): no slowloris
        http=GuardedH11Protocol,
        log_level="info",
        # longer than clients' usual keep-alive (httpx: 5 s), so a client never reuses a
        # connection the server is closing at that very moment
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        workers=workers,
        factory=workers > 1,
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
    )
    _redact_access_log()  # configured by uvicorn.Config just above
    return config


def _redact_access_log() -> None:
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactTokens) for f in access.filters):
        access.addFilter(RedactTokens())


class RedactTokens(logging.Filter):
    """Log lines never carry a token: ``token=…`` in a logged URL becomes ``token=[redacted]``.

    The server takes tokens only from the ``Authorization`` header and the
    sign-in cookie, which no log shows; this guards against a caller who puts
    one in a URL anyway (an old bookmark, a script).
    """

    _PARAM = re.compile(r"((?:^|[?&;])(?:access_)?token=)[^&;#\s]*", re.IGNORECASE)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                self._PARAM.sub(r"\1[redacted]", arg) if isinstance(arg, str) else arg
                for arg in record.args
            )
        if isinstance(record.msg, str):
            record.msg = self._PARAM.sub(r"\1[redacted]", record.msg)
        return True


def _serve_stdio(location: str | Path | None, who: str, create: bool) -> None:
    import anyio

    from knowledge_store.model import Identity
    from knowledge_store.surfaces.mcp import create_mcp_server, run_stdio

    identity = Identity(who)
    with _served(location, create=create) as store:
        _warm(store)
        server = create_mcp_server(store, identity=identity)
        print(f"knowledge-store MCP over stdio as {who}", file=sys.stderr, flush=True)
        anyio.run(run_stdio, server)
