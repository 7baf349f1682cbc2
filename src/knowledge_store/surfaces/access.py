"""Who a request is: the token file, then OAuth access tokens, then anonymity — for every surface.

REST, GraphQL, MCP over HTTP and the search page resolve their caller with
:meth:`Access.resolve`, so the rules are written once:

1. no bearer token: ``everyone`` with ``--anonymous``, else 401;
2. a token of the operator's token file (:class:`~.auth.TokenTable`): its identity;
3. with ``--oidc``, a JWT: an access token checked by :class:`~.oidc.OidcValidator`
   (the issuer's keys, its claims, this server as audience) and mapped to an
   identity; its keys are fetched off the event loop, and only when the cache
   lacks them;
4. anything else: 401.

Both kinds of token can be on at once. A refusal carries its ``WWW-Authenticate``
challenge (:meth:`Access.challenge`): ``Bearer realm="knowledge-store"``, with
OAuth on also ``resource_metadata`` (RFC 9728: where a client finds the
authorization server) and the OAuth ``error`` (``invalid_token``, or
``insufficient_scope`` with the ``scope`` needed — RFC 6750 §3.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio.to_thread

from knowledge_store.surfaces.auth import AuthError, Caller, TokenTable
from knowledge_store.surfaces.oidc import NeedsKeys, OidcValidator, looks_like_jwt

__all__ = ["Access"]


@dataclass
class Access:
    """The token file, OAuth (optional) and the anonymous rule."""

    tokens: TokenTable
    oidc: OidcValidator | None = None

    @property
    def anonymous(self) -> bool:
        return self.tokens.anonymous

    async def resolve(self, token: str | None) -> Caller:
        """The caller ``token`` stands for (None: no token); raises :class:`AuthError`."""
        if token is None:
            if self.anonymous or self.oidc is None:
                return self.tokens.resolve(None)
            raise AuthError(
                401,
                "authentication required: send 'Authorization: Bearer <token>' with an access"
                f" token from {self.oidc.settings.issuer} (how to get one:"
                f" {self.oidc.settings.metadata_url}) or a token from the server's token file",
            )
        try:
            return self.tokens.resolve(token)
        except AuthError:
            if self.oidc is None:
                raise
        if not looks_like_jwt(token):
            raise AuthError(
                401,
                "unknown token: send an access token (a JWT) from"
                f" {self.oidc.settings.issuer} or a token listed in the server's token file",
                error="invalid_token",
            )
        try:
            return self.oidc.validate(token, fetch=False)
        except NeedsKeys:
            return await anyio.to_thread.run_sync(partial(self.oidc.validate, token, fetch=True))

    def challenge(self, exc: AuthError) -> str:
        """The ``WWW-Authenticate`` value of a refusal."""
        parts = ['realm="knowledge-store"']
        if self.oidc is not None:
            parts.append(f'resource_metadata="{self.oidc.settings.metadata_url}"')
        if exc.error:
            parts.append(f'error="{exc.error}"')
        if exc.scope:
            parts.append(f'scope="{exc.scope}"')
        return "Bearer " + ", ".join(parts)

    def admin_refusal(self, message: str) -> AuthError:
        """403 for a caller without the admin scope (``insufficient_scope`` with OAuth on)."""
        scope = self.oidc.settings.claims.admin_scope if self.oidc is not None else None
        return AuthError(403, message, error="insufficient_scope" if scope else None, scope=scope)

    def metadata(self) -> dict[str, Any] | None:
        """The protected resource metadata (RFC 9728), with OAuth on."""
        return self.oidc.settings.metadata() if self.oidc is not None else None
