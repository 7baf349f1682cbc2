"""MCP sessions over streamable HTTP, bounded: per caller, in all, and in idle time.

Only handshake-era (2025) clients open sessions: a 2026-07-28 request is one
self-contained POST (the SDK's per-request path), and a server of several
processes runs the 2025 path without sessions too. A session is a server task,
its streams and its transport, held until the client deletes it or it expires,
so an open table is memory anyone with a token could fill: 10,000
``initialize`` calls with one reader token used to take the SDK's whole table
(10,000 sessions, 30 minutes idle each), after which every new session —
anyone's, the admin's too — got 503 for half an hour, and the server's RSS
doubled.

:class:`BoundedSessions` is the SDK's session manager with three bounds:

- **per caller** (:data:`MAX_SESSIONS_PER_CALLER`): a caller is the identity a
  token stands for (every token of one identity together), or, for an
  anonymous caller, its client address. A caller opening one more session
  closes its own session that has been idle longest (its id then answers 404,
  which tells a 2025 client to initialize again), so a flood only ever churns
  the flooder's own sessions; when all of them are in use (a request in
  flight, an open GET stream) the new one is refused (503).
- **in all** (:data:`MAX_SESSIONS`): at the bound, the session idle longest,
  whoever's, is closed to make room; 503 only when every session is in use.
- **idle time** (:data:`SESSION_IDLE_S`): a session with no request in flight
  and no open stream for that long is closed (the SDK's timer).

Closing a session also forgets it in the tools watcher (no reference to a dead
session is kept for ``list_changed``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

__all__ = [
    "MAX_SESSIONS",
    "MAX_SESSIONS_PER_CALLER",
    "SESSION_IDLE_S",
    "BoundedSessions",
    "SessionBounds",
]

log = logging.getLogger(__name__)

#: Open 2025 sessions one caller (an identity; an anonymous client address) may hold.
MAX_SESSIONS_PER_CALLER: Final = 16
#: Open 2025 sessions in all.
MAX_SESSIONS: Final = 1024
#: A session with nothing in flight for this long is closed (the SDK's default: 30 minutes).
SESSION_IDLE_S: Final = 300.0

Owner = tuple[str, str | None, str | None]


@dataclass(frozen=True)
class SessionBounds:
    """The three bounds of :class:`BoundedSessions` (the defaults are the server's)."""

    per_caller: int = MAX_SESSIONS_PER_CALLER
    total: int = MAX_SESSIONS
    idle_s: float = SESSION_IDLE_S

    def __post_init__(self) -> None:
        if not 1 <= self.per_caller <= self.total:
            raise ValueError("need 1 <= per_caller <= total sessions")
        if not (math.isfinite(self.idle_s) and self.idle_s > 0):
            raise ValueError("idle_s must be a positive number of seconds")


def _owner(context: AuthorizationContext | None) -> Owner:
    if context is None:  # the endpoint always authenticates; kept total for safety
        return ("", None, None)
    return (context["client_id"], context["issuer"], context["subject"])


def _idle_since(transport: StreamableHTTPServerTransport) -> float | None:
    """When ``transport`` last went idle (its idle deadline less the timeout), None while in use."""
    scope = transport.idle_scope
    if scope is None or scope.cancel_called or not math.isfinite(scope.deadline):
        return None  # not yet serving, already closing, or a request/stream in flight
    return scope.deadline


class BoundedSessions(StreamableHTTPSessionManager):
    """The SDK's session manager with a bound per caller and in all (module docstring).

    ``on_closed(session_id)`` is called for every session that ends, however it ends.
    """

    def __init__(
        self,
        app: Server[Any],
        *,
        security_settings: TransportSecuritySettings | None,
        bounds: SessionBounds | None = None,
        on_closed: Callable[[str], None] | None = None,
    ) -> None:
        self.bounds = bounds or SessionBounds()
        # The SDK's own bound stays as a backstop: room is made below it.
        super().__init__(
            app,
            security_settings=security_settings,
            session_idle_timeout=self.bounds.idle_s,
            max_sessions=self.bounds.total,
        )
        self.on_closed = on_closed
        self.closed_to_make_room = 0

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        """Make room for one more session of ``requestor`` (closing idle ones), then admit it.

        Runs under the SDK's session-creation lock, with no await: the count and the
        closing are one step."""
        owner = _owner(requestor)
        mine = [sid for sid, who in self._session_owners.items() if _owner(who) == owner]
        if len(mine) >= self.bounds.per_caller and not self._close_idlest(mine):
            log.warning(
                "refusing an MCP session for %s: its %d sessions are all in use",
                owner[0],
                len(mine),
            )
            return None
        if len(self._server_instances) >= self.bounds.total and not self._close_idlest(
            list(self._server_instances)
        ):
            log.warning("refusing an MCP session: all %d sessions are in use", self.bounds.total)
            return None
        return super()._admit_session(requestor)

    def _close_idlest(self, candidates: list[str]) -> bool:
        """Close the session among ``candidates`` idle longest; False when none is idle."""
        idle = [
            (since, sid)
            for sid in candidates
            if (transport := self._server_instances.get(sid)) is not None
            and (since := _idle_since(transport)) is not None
        ]
        if not idle:
            return False
        _, session_id = min(idle)
        transport = self._server_instances.pop(session_id)
        self._session_owners.pop(session_id, None)
        assert transport.idle_scope is not None
        transport.idle_scope.cancel()  # its server task ends and terminates the transport
        self.closed_to_make_room += 1
        if self.on_closed is not None:
            self.on_closed(session_id)
        return True

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        await super()._discard_session(session_id, transport)
        if self.on_closed is not None:
            self.on_closed(session_id)
