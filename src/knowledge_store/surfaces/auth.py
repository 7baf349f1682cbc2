"""Who is calling: an operator's token file → identities (and the admin scope).

Every HTTP surface (REST, GraphQL, MCP over streamable HTTP, the search page)
resolves its caller here, so the rules are written once:

- ``Authorization: Bearer <token>`` names a token of the token file; the caller
  is that token's identity, with the admin scope when the file says so;
- no token, or an unknown one, is refused (401) — unless the operator serves
  with ``--anonymous``, when a caller *without* a token is ``everyone``; an
  unknown token is refused either way (a typo must not silently downgrade);
- reads always run as the identity, admin tokens too: the admin scope only
  unlocks the administration endpoints.

The token file (``docs/serving.md``) is JSON Lines — one
``{"token": "…", "identity": "user:ann", "admin": false}`` per line — or one
JSON document: a list of such objects, or an object mapping each token to an
identity string or to ``{"identity": …, "admin": …}``. Tokens are kept only as
SHA-256 digests, so a lookup takes the same time whatever prefix matches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from knowledge_store.errors import InvalidRequest
from knowledge_store.ingest.records import JsonProblem, loads_strict, strict_problem_line
from knowledge_store.model import EVERYONE, Identity, check_principal

__all__ = ["ANONYMOUS", "AuthError", "Caller", "TokenTable", "bearer_token"]


@dataclass(frozen=True)
class Caller:
    """An authenticated (or anonymous) caller: the identity reads run as, and the admin scope."""

    identity: Identity
    admin: bool = False
    anonymous: bool = False
    #: Who authenticated, for the audit log: ``token:<12 hex of the token's SHA-256>``,
    #: ``oidc:<issuer>#<sub>``, ``os:<user>`` (a local CLI or stdio server); None: nobody.
    subject: str | None = None

    @property
    def principal(self) -> str:
        return self.identity.principal


ANONYMOUS = Caller(Identity(EVERYONE), admin=False, anonymous=True)


class AuthError(Exception):
    """A request the surface refuses before it reaches the store: 401 or 403.

    Rendered in the one error shape with the codes ``unauthorized`` (401) and
    ``forbidden`` (403) — surface-level codes next to DESIGN §6's store codes.
    """

    def __init__(
        self, status: int, message: str, *, error: str | None = None, scope: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: The OAuth error of the ``WWW-Authenticate`` challenge (RFC 6750 §3.1):
        #: ``invalid_token`` or ``insufficient_scope``; None for a request without a token.
        self.error = error
        #: The scope an ``insufficient_scope`` answer asks for.
        self.scope = scope

    @property
    def code(self) -> str:
        return "unauthorized" if self.status == 401 else "forbidden"

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": {}}}


#: The keys of a token entry: a duplicate one is named; any other duplicate key is a token.
_ENTRY_KEYS = ("token", "identity", "admin")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class TokenTable:
    """Tokens → callers, and the anonymous rule. Build with :meth:`load` or :meth:`of`."""

    def __init__(self, entries: Mapping[str, Caller] | None = None, *, anonymous: bool = False):
        self._by_digest = {
            digest: c if c.subject is not None else replace(c, subject=f"token:{digest[:12]}")
            for digest, c in ((_digest(t), c) for t, c in (entries or {}).items())
        }
        self.anonymous = anonymous

    def __len__(self) -> int:
        return len(self._by_digest)

    def allowing_anonymous(self, anonymous: bool = True) -> TokenTable:
        """The same tokens, with callers without a token let in as ``everyone`` (or not)."""
        table = TokenTable({}, anonymous=anonymous)
        table._by_digest = dict(self._by_digest)
        return table

    @classmethod
    def of(
        cls, tokens: Mapping[str, str | tuple[str, bool]] | None = None, *, anonymous: bool = False
    ) -> TokenTable:
        """From ``{token: identity}`` or ``{token: (identity, admin)}`` (tests, embedding)."""
        entries: dict[str, Caller] = {}
        for token, value in (tokens or {}).items():
            who, admin = (value, False) if isinstance(value, str) else value
            entries[token] = Caller(Identity(check_principal(who)), admin=bool(admin))
        return cls(entries, anonymous=anonymous)

    @classmethod
    def load(cls, path: str | Path | None, *, anonymous: bool = False) -> TokenTable:
        """Read a token file (JSON Lines, or one JSON list/object); None → no tokens."""
        if path is None:
            return cls({}, anonymous=anonymous)
        where = Path(path)
        try:
            text = where.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRequest(
                f"cannot read the token file {where}: {exc}", file=str(where)
            ) from None
        return cls(dict(_parse(text, str(where))), anonymous=anonymous)

    def resolve(self, token: str | None) -> Caller:
        """The caller a request's bearer token (or its absence) stands for; raises AuthError."""
        if token is None:
            if self.anonymous:
                return ANONYMOUS
            raise AuthError(
                401,
                "authentication required: send 'Authorization: Bearer <token>' with a token from"
                " the server's token file",
            )
        caller = self._by_digest.get(_digest(token))
        if caller is None:
            raise AuthError(401, "unknown token: send a token listed in the server's token file")
        return caller


def _json_problem(file: str, line: int | None, exc: JsonProblem) -> InvalidRequest:
    """A strict-JSON problem of the token file, naming file, line and key — but never a token:
    in the object form a duplicate key *is* a token."""
    where = f"{file}:{line}" if line is not None else file
    details: dict[str, Any] = {"file": file, "line": line}
    message = exc.msg
    if exc.key is not None and exc.key not in _ENTRY_KEYS:
        message = "a token appears twice in one object (the last one would silently win)"
    elif exc.key is not None:
        details["key"] = exc.key
    return InvalidRequest(f"{where}: {message}; nothing was loaded", **details)


def _parse(text: str, file: str) -> Iterable[tuple[str, Caller]]:
    stripped = text.strip()
    if not stripped:
        return []
    items: list[tuple[int | None, Any]]
    try:
        # strict, as ingest reads JSON: a duplicate key (`"admin": false, "admin": true`) would
        # silently take its last value
        document = loads_strict(stripped)
    except JsonProblem as exc:
        line = strict_problem_line(text)
        raise _json_problem(file, line, exc) from None
    except ValueError:
        document = None
        items = []
        for number, line_text in enumerate(text.splitlines(), start=1):
            if not line_text.strip() or line_text.lstrip().startswith("#"):
                continue
            try:
                items.append((number, loads_strict(line_text)))
            except JsonProblem as exc:
                raise _json_problem(file, number, exc) from None
            except ValueError:
                raise InvalidRequest(
                    f"{file}:{number}: not JSON; write one"
                    ' {"token": "…", "identity": "user:<id>", "admin": false} per line',
                    file=file,
                    line=number,
                ) from None
    else:
        if isinstance(document, list):
            items = [(None, entry) for entry in document]
        elif isinstance(document, Mapping) and "token" in document:
            items = [(None, document)]  # a JSON Lines file with a single line
        elif isinstance(document, Mapping):
            items = [
                (None, {"token": k, **(v if isinstance(v, Mapping) else {"identity": v})})
                for k, v in document.items()
            ]
        else:
            raise InvalidRequest(
                f"{file}: expected JSON Lines, a JSON list or a JSON object of tokens", file=file
            )
    seen: set[str] = set()
    out: list[tuple[str, Caller]] = []
    for index, (line_no, entry) in enumerate(items, start=1):
        where = f"{file}:{line_no}" if line_no is not None else f"{file} entry {index}"
        if not isinstance(entry, Mapping):
            raise InvalidRequest(f"{where}: expected an object with token and identity", file=file)
        token, who, admin = entry.get("token"), entry.get("identity"), entry.get("admin", False)
        if not isinstance(token, str) or len(token.strip()) < 8 or token != token.strip():
            raise InvalidRequest(
                f"{where}: 'token' must be a string of at least 8 characters without surrounding"
                " spaces",
                file=file,
                line=line_no,
            )
        if not isinstance(who, str):
            raise InvalidRequest(
                f"{where}: 'identity' must be 'everyone', 'user:<id>' or 'group:<id>'",
                file=file,
                line=line_no,
            )
        try:
            check_principal(who)
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}: {exc.message}", file=file, line=line_no) from None
        if not isinstance(admin, bool):
            raise InvalidRequest(f"{where}: 'admin' must be true or false", file=file, line=line_no)
        if token in seen:
            raise InvalidRequest(f"{where}: the token appears twice", file=file, line=line_no)
        seen.add(token)
        out.append((token, Caller(Identity(who), admin=admin)))
    return out
