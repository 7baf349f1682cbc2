"""An OAuth 2.1 resource server: access tokens are JWTs from one configured OIDC issuer.

``ks serve --oidc ISSUER`` checks every bearer token that is not in the token file
as a JWT access token (RFC 9068 style) issued by ``ISSUER`` for this server:

- **keys**: the issuer's discovery document (``/.well-known/openid-configuration``,
  whose ``issuer`` must be ``ISSUER`` exactly) names its ``jwks_uri``; the key set
  is fetched and cached for its ``Cache-Control: max-age`` (:data:`KEYS_MIN_AGE_S`
  to :data:`KEYS_MAX_AGE_S`; :data:`KEYS_DEFAULT_AGE_S` without one). A token
  signed with a key id the cache doesn't hold refetches the set (a rotation) — at
  most once per :data:`REFETCH_INTERVAL_S`, so unknown key ids can't make the
  server hammer the issuer. When the issuer can't be reached, the cached keys
  serve until their age runs out; then every JWT is refused (fail closed) with
  a sentence naming the issuer and what went wrong.
- **the signature** is checked by PyJWT with the key the token's ``kid`` names,
  with an algorithm from the allow-list (:data:`ALGORITHMS`: asymmetric only —
  never ``none``, never HMAC, so a token "signed" with the public key as an HMAC
  secret is refused) that is also the key's own (``alg`` of the JWK, else one that
  fits its type).
- **the claims**: ``iss`` is the issuer; ``aud`` names this server (the resource
  URL of RFC 8707 and RFC 9728, ``--oidc-audience``, default the server's URL);
  ``exp`` is required and ``nbf``/``iat`` honoured, with a bounded leeway
  (:data:`MAX_LEEWAY_S`).
- **who it is** (:class:`ClaimsMapping`, ``--oidc-claims FILE``): a claim (``sub``
  by default, or ``email``, ``preferred_username`` …) names ``user:<value>``; a
  groups claim (a list, or a dotted path such as ``realm_access.roles``) names
  ``group:<value>`` for each value, held for as long as the token is valid;
  scopes (``scope``, a space-separated string, or ``scp``, a list) map to reading
  (``read_scope``; none required by default) and to the admin scope
  (``admin_scope``, or membership of one of ``admin_groups``). A token without
  the read scope is refused with 403 ``insufficient_scope``.

Write no crypto here: PyJWT verifies; this module decides which key and which claims.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

import httpx
import jwt
from jwt.exceptions import InvalidTokenError, PyJWKError

from knowledge_store.errors import InvalidRequest
from knowledge_store.model import Identity
from knowledge_store.surfaces.auth import AuthError, Caller

__all__ = [
    "ALGORITHMS",
    "MAX_LEEWAY_S",
    "ClaimsMapping",
    "IssuerKeys",
    "OidcSettings",
    "OidcValidator",
    "looks_like_jwt",
]

log = logging.getLogger("uvicorn.error")

#: Signature algorithms a token may use: asymmetric ones only.
ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "EdDSA",
)
#: Clock skew allowed on ``exp``/``nbf``/``iat``, at most.
MAX_LEEWAY_S: Final = 300.0
DEFAULT_LEEWAY_S: Final = 30.0
KEYS_MIN_AGE_S: Final = 60.0
KEYS_MAX_AGE_S: Final = 86_400.0
KEYS_DEFAULT_AGE_S: Final = 3_600.0
#: A key id the cache lacks refetches the key set at most this often.
REFETCH_INTERVAL_S: Final = 30.0
FETCH_TIMEOUT_S: Final = 5.0
#: Bytes of a discovery document or key set, at most.
MAX_DOCUMENT_BYTES: Final = 512 * 1024

_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
#: Algorithms that fit a key type (a JWK without ``alg``).
_FITS: Mapping[str, tuple[str, ...]] = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC": ("ES256", "ES384"),
    "OKP": ("EdDSA",),
}


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts: a JWS compact serialization (tokens of the token file aren't)."""
    return len(token) < 16_384 and _JWT.match(token) is not None


# -- the claims mapping ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ClaimsMapping:
    """How a token's claims become an identity and scopes (``--oidc-claims FILE``, JSON)."""

    #: The claim naming the user (``sub``, ``email``, ``preferred_username`` …).
    user: str = "sub"
    #: The claim listing the groups (a dotted path reaches into objects); None: no groups.
    groups: str | None = "groups"
    #: Prepended to each group value (``"idp-"`` turns ``sre`` into ``group:idp-sre``).
    group_prefix: str = ""
    #: The scope a token needs to read at all (None: any token issued for this server reads).
    read_scope: str | None = None
    #: The scope that grants the admin scope.
    admin_scope: str | None = "knowledge:admin"
    #: Groups (values of the groups claim, before the prefix) whose members are admins.
    admin_groups: tuple[str, ...] = ()

    @classmethod
    def load(cls, path: str | Path) -> ClaimsMapping:
        """Read a JSON object of these fields; an unknown key or a wrong type is an error."""
        where = Path(path)
        try:
            data = json.loads(where.read_text(encoding="utf-8"), object_pairs_hook=_no_twice)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InvalidRequest(
                f"cannot read the claims mapping {where}: {exc}", file=str(where)
            ) from None
        return cls.of(data, str(where))

    @classmethod
    def of(cls, data: Any, where: str = "the claims mapping") -> ClaimsMapping:
        known = {f.name: f for f in fields(cls)}
        if not isinstance(data, Mapping):
            raise InvalidRequest(f"{where}: expected a JSON object with {', '.join(known)}")
        for key, value in data.items():
            if key not in known:
                raise InvalidRequest(
                    f"{where}: unknown key {key!r}; the keys are: {', '.join(known)}", field=key
                )
            if key == "admin_groups":
                ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
            elif key in ("groups", "read_scope", "admin_scope"):
                ok = value is None or (isinstance(value, str) and bool(value))
            else:
                ok = isinstance(value, str) and (bool(value) or key == "group_prefix")
            if not ok:
                raise InvalidRequest(f"{where}: {key!r} has the wrong type or is empty", field=key)
        values = dict(data)
        if "admin_groups" in values:
            values["admin_groups"] = tuple(values["admin_groups"])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "admin_groups": list(self.admin_groups)
        }


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} appears twice")
        out[key] = value
    return out


def _claim(claims: Mapping[str, Any], path: str) -> Any:
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _scopes(claims: Mapping[str, Any]) -> set[str]:
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return found


# -- settings -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OidcSettings:
    """What ``ks serve --oidc …`` configures."""

    issuer: str
    #: This server's resource URL: tokens must name it in ``aud`` (RFC 8707).
    audience: str
    claims: ClaimsMapping = field(default_factory=ClaimsMapping)
    algorithms: tuple[str, ...] = ALGORITHMS
    leeway_s: float = DEFAULT_LEEWAY_S
    #: The search page's client at the issuer (a public client: authorization code + PKCE,
    #: redirect URI ``<audience>/login/callback``); None: the page signs in with tokens only.
    page_client: str | None = None
    #: The scopes the page asks for.
    page_scopes: tuple[str, ...] = ("openid", "profile", "email", "groups")

    def __post_init__(self) -> None:
        for name, url in (("--oidc", self.issuer), ("--oidc-audience", self.audience)):
            if not re.match(r"^https?://[^/\s]+", url):
                raise InvalidRequest(f"{name} {url!r} is not an http(s) URL", field=name)
        if not 0 <= self.leeway_s <= MAX_LEEWAY_S:
            raise InvalidRequest(
                f"the clock leeway {self.leeway_s:g} s is outside 0–{MAX_LEEWAY_S:g} s",
                field="leeway_s",
            )
        wrong = [a for a in self.algorithms if a not in ALGORITHMS]
        if wrong or not self.algorithms:
            raise InvalidRequest(
                f"algorithms {wrong or '[]'} are not allowed; use some of {', '.join(ALGORITHMS)}",
                field="algorithms",
            )

    @property
    def metadata_url(self) -> str:
        """Where this server's protected resource metadata is (RFC 9728)."""
        return f"{self.audience.rstrip('/')}/.well-known/oauth-protected-resource"

    def metadata(self) -> dict[str, Any]:
        """The protected resource metadata document (RFC 9728 §2)."""
        scopes = [s for s in (self.claims.read_scope, self.claims.admin_scope) if s]
        return {
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported": list(self.algorithms),
            "scopes_supported": scopes,
            "resource_name": "knowledge-store",
        }


# -- keys -----------------------------------------------------------------------------------------
class KeysUnavailable(Exception):
    """The issuer's keys can't be had now (and the cache has none valid)."""


@dataclass(frozen=True)
class SigningKey:
    """A public key of the issuer, and the algorithm its JWK names (None: any that fits)."""

    jwk: jwt.PyJWK
    alg: str | None

    def fits(self, alg: str) -> bool:
        return alg == self.alg if self.alg else alg in _FITS.get(str(self.jwk.key_type), ())


@dataclass
class _Cached:
    keys: dict[str, SigningKey]
    fetched: float
    max_age: float


def _max_age(headers: httpx.Headers) -> float:
    match = re.search(r"max-age=(\d+)", headers.get("cache-control", ""))
    age = float(match.group(1)) if match else KEYS_DEFAULT_AGE_S
    return min(max(age, KEYS_MIN_AGE_S), KEYS_MAX_AGE_S)


class IssuerKeys:
    """The issuer's signing keys: discovery, then the key set, cached and refetched on rotation.

    Thread-safe; :meth:`cached` never touches the network, :meth:`fetch` does (blocking:
    call it from a worker thread).
    """

    def __init__(
        self, issuer: str, *, clock: Callable[[], float] = time.monotonic, verify: bool = True
    ) -> None:
        self.issuer = issuer
        self.clock = clock
        self.verify = verify
        self._lock = threading.Lock()
        self._cache: _Cached | None = None
        self._jwks_uri: str | None = None
        self._last_try = -REFETCH_INTERVAL_S
        self._last_error: str | None = None
        self.fetches = 0
        #: The discovery document's authorization and token endpoints (the page's sign-in).
        self.endpoints: dict[str, str] = {}

    def cached(self, kid: str | None) -> SigningKey | None:
        """The key ``kid`` names if the cache holds it within its age (no network)."""
        cache = self._cache
        if cache is None or self.clock() - cache.fetched > cache.max_age:
            return None
        return _pick(cache.keys, kid)

    def fetch(self, kid: str | None) -> SigningKey:
        """The key ``kid`` names, refetching the key set when the cache lacks it or is old.

        Raises :class:`KeysUnavailable` with a sentence when the issuer can't say."""
        with self._lock:  # one fetch at a time; the others then find the fresh cache
            found = self.cached(kid)
            if found is not None:
                return found
            now = self.clock()
            fresh = self._cache is not None and now - self._cache.fetched <= self._cache.max_age
            if now - self._last_try < REFETCH_INTERVAL_S:
                if fresh:  # a rotation was looked for a moment ago: the key isn't there
                    raise KeyError(kid)
                raise KeysUnavailable(self._last_error or "the key set was fetched just now")
            self._last_try = now
            try:
                self._cache = self._download()
                self._last_error = None
            except KeysUnavailable as exc:
                self._last_error = str(exc)
                log.warning("OIDC: %s", exc)
                raise  # the cache lacks this key, and the issuer can't say whether it is new
            found = self.cached(kid)
            if found is None:
                raise KeyError(kid)
            return found

    def prefetch(self) -> str | None:
        """Fetch the keys now (at start); the reason they can't be had, or None."""
        with self._lock:
            self._last_try = self.clock()
            try:
                self._cache = self._download()
            except KeysUnavailable as exc:
                self._last_error = str(exc)
                return str(exc)
        return None

    def _get(self, url: str) -> httpx.Response:
        try:
            with httpx.Client(timeout=FETCH_TIMEOUT_S, verify=self.verify) as http:
                response = http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise KeysUnavailable(
                f"the identity provider {self.issuer} did not answer at {url}"
                f" ({type(exc).__name__}: {str(exc)[:200]})"
            ) from None
        if response.status_code != 200 or len(response.content) > MAX_DOCUMENT_BYTES:
            raise KeysUnavailable(
                f"the identity provider {self.issuer} answered {url} with HTTP"
                f" {response.status_code} ({len(response.content)} bytes)"
            )
        return response

    def _download(self) -> _Cached:
        if self._jwks_uri is None:
            url = f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
            try:
                found = self._get(url).json()
            except ValueError:
                raise KeysUnavailable(f"{url} is not JSON") from None
            if not isinstance(found, dict) or found.get("issuer") != self.issuer:
                named = found.get("issuer") if isinstance(found, dict) else None
                raise KeysUnavailable(
                    f"{url} names the issuer {named!r}, not {self.issuer!r}: check --oidc"
                )
            uri = found.get("jwks_uri")
            if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
                raise KeysUnavailable(f"{url} names no jwks_uri")
            self._jwks_uri = uri
            self.endpoints = {
                k: v
                for k in ("authorization_endpoint", "token_endpoint")
                if isinstance(v := found.get(k), str) and v.startswith(("https://", "http://"))
            }
        response = self._get(self._jwks_uri)
        try:
            keys = _keys_of(response.json())
        except ValueError as exc:
            raise KeysUnavailable(f"{self._jwks_uri}: {exc}") from None
        self.fetches += 1
        log.info("OIDC: %d signing key(s) of %s cached", len(keys), self.issuer)
        return _Cached(keys, self.clock(), _max_age(response.headers))


def _keys_of(document: Any) -> dict[str, SigningKey]:
    """The signing keys of a JWKS document, by ``kid`` (a key without one: ``""``)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JSON Web Key Set (no 'keys' list)")
    out: dict[str, SigningKey] = {}
    for entry in document["keys"]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if entry.get("kty") not in _FITS or "d" in entry:  # no symmetric or private keys
            continue
        try:
            alg = entry.get("alg")
            out[str(entry.get("kid", ""))] = SigningKey(
                jwt.PyJWK(entry), alg if isinstance(alg, str) else None
            )
        except PyJWKError:
            continue  # a key of a kind we can't use: not ours to choose
    if not out:
        raise ValueError("the key set holds no public signing key")
    return out


def _pick(keys: Mapping[str, SigningKey], kid: str | None) -> SigningKey | None:
    if kid is not None:
        return keys.get(kid)
    return next(iter(keys.values())) if len(keys) == 1 else None


# -- the validator ----------------------------------------------------------------------------------
class NeedsKeys(Exception):
    """The cache can't check this token: fetch the keys (off the event loop), then retry."""


class OidcValidator:
    """A JWT access token → a :class:`Caller`, or an :class:`AuthError` saying why not.

    ``allowed(principal)``: a veto after the token checks out (SCIM: a deprovisioned
    user), the reason or None; None allows everyone the token names.
    ``groups_from_token``: False when groups come from the store's memberships alone
    (a SCIM directory): then removing a member takes effect on the next request,
    not when the token expires.
    """

    def __init__(
        self,
        settings: OidcSettings,
        *,
        keys: IssuerKeys | None = None,
        allowed: Callable[[str], str | None] | None = None,
        groups_from_token: bool = True,
    ) -> None:
        self.settings = settings
        self.keys = keys or IssuerKeys(settings.issuer)
        self.allowed = allowed
        self.groups_from_token = groups_from_token

    def validate(self, token: str, *, fetch: bool) -> Caller:
        """Check ``token``; without ``fetch`` raise :class:`NeedsKeys` rather than go online."""
        try:
            header = jwt.get_unverified_header(token)
        except InvalidTokenError:
            raise _invalid("the token is not a well-formed JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in self.settings.algorithms:
            raise _invalid(
                f"the token's algorithm {str(alg)[:20]!r} is not accepted; the server takes"
                f" {', '.join(self.settings.algorithms)}"
            )
        if kid is not None and not isinstance(kid, str):
            raise _invalid("the token's key id (kid) is not a string")
        key = self.keys.cached(kid)
        if key is None:
            if not fetch:
                raise NeedsKeys
            try:
                key = self.keys.fetch(kid)
            except KeysUnavailable as exc:
                raise AuthError(
                    401,
                    f"the token can't be checked now: {exc}; no cached key is valid, so it is"
                    " refused (try again once the identity provider answers)",
                    error="invalid_token",
                ) from None
            except KeyError:
                raise _invalid(
                    f"the token is signed with a key the issuer {self.settings.issuer} does not"
                    f" publish (kid {str(kid)[:64]!r})"
                ) from None
        if not key.fits(alg):
            raise _invalid(f"the token's algorithm {alg} does not fit its key {kid!r}")
        try:
            claims = jwt.decode(
                token,
                key=key.jwk.key,  # the public key: the algorithm is the one checked above
                algorithms=[alg],
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                leeway=self.settings.leeway_s,
                options={"require": ["exp", "iss", "aud"], "verify_iat": True},
            )
        except jwt.ExpiredSignatureError:
            raise _invalid("the token has expired; get a new one") from None
        except jwt.ImmatureSignatureError:
            raise _invalid("the token is not valid yet (nbf/iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise _invalid(
                f"the token is not for this server: its audience (aud) does not name"
                f" {self.settings.audience}"
            ) from None
        except jwt.InvalidIssuerError:
            raise _invalid(f"the token was not issued by {self.settings.issuer}") from None
        except jwt.InvalidSignatureError:
            raise _invalid("the token's signature does not verify") from None
        except InvalidTokenError as exc:
            raise _invalid(f"the token is not valid: {str(exc)[:200]}") from None
        return self._caller(claims)

    def _caller(self, claims: Mapping[str, Any]) -> Caller:
        mapping = self.settings.claims
        name = _claim(claims, mapping.user)
        if not isinstance(name, str) or not name:
            raise _invalid(f"the token has no {mapping.user!r} claim to name its user")
        raw = _claim(claims, mapping.groups) if mapping.groups else None
        values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        named = [v for v in values if isinstance(v, str) and v]
        held = named if self.groups_from_token else []
        try:
            identity = Identity(
                f"user:{name}", tuple(f"group:{mapping.group_prefix}{v}" for v in held)
            )
        except InvalidRequest as exc:
            raise _invalid(f"the token's claims don't name a valid identity: {exc}") from None
        scopes = _scopes(claims)
        if mapping.read_scope and mapping.read_scope not in scopes:
            raise AuthError(
                403,
                f"the token lacks the scope {mapping.read_scope!r} this server needs to read",
                error="insufficient_scope",
                scope=mapping.read_scope,
            )
        if self.allowed is not None:
            why = self.allowed(identity.principal)
            if why is not None:
                raise _invalid(why)
        admin = bool(mapping.admin_scope and mapping.admin_scope in scopes) or bool(
            set(mapping.admin_groups) & set(named)
        )
        subject = claims.get("sub")
        who = subject if isinstance(subject, str) and subject else name
        return Caller(identity, admin=admin, subject=f"oidc:{self.settings.issuer}#{who}")


def _invalid(message: str) -> AuthError:
    return AuthError(401, message, error="invalid_token")
