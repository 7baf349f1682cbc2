"""The search page signs in with the IdP, and every form that changes state carries a CSRF token.

**Sign-in with the IdP** (``ks serve --oidc ISSUER --oidc-page-client ID``): the
authorization code flow with PKCE (S256), the page a public client of the
issuer with the redirect URI ``<audience>/login/callback``.

- ``GET /login?next=/…`` makes a ``state`` and a PKCE verifier, keeps both in the
  ``ks_login`` cookie (HttpOnly, SameSite=Lax — it must come back on the IdP's
  redirect, a cross-site navigation — path ``/login``, ten minutes) and
  redirects to the issuer's authorization endpoint;
- ``GET /login/callback?code&state`` checks ``state`` against the cookie (a
  callback this browser did not start is refused: no login CSRF), trades the
  code and the verifier for tokens at the token endpoint, checks the access
  token exactly as every request's (:class:`~.access.Access`) and keeps it in
  the page's ``ks_token`` cookie (HttpOnly, SameSite=Strict, Secure over HTTPS),
  then sends the browser on with a same-site navigation (a Strict cookie set on
  the answer to a cross-site navigation is not sent with its redirect).

**CSRF**: a random token in the ``ks_csrf`` cookie (HttpOnly, SameSite=Strict)
is written into every form that changes state — the token sign-in form and the
sign-out form — and a POST without the same value (compared in constant
time) is refused with 403, on top of the Origin check and SameSite. Signing
out is a POST; ``GET /signout`` only shows the form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
from typing import Any
from urllib.parse import urlencode

import anyio.to_thread
import httpx
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from knowledge_store.surfaces.auth import AuthError
from knowledge_store.surfaces.web import service

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "LOGIN_COOKIE",
    "check_csrf",
    "csrf_token",
    "router",
    "set_csrf",
]

CSRF_COOKIE = "ks_csrf"
CSRF_FIELD = "csrf"
LOGIN_COOKIE = "ks_login"
LOGIN_S = 600
router = APIRouter(include_in_schema=False)
e = html.escape


# -- CSRF --------------------------------------------------------------------------------------------
def csrf_token(request: Request) -> str:
    """This browser's CSRF token: the cookie's, or a new one (set it with :func:`set_csrf`)."""
    found = request.cookies.get(CSRF_COOKIE, "")
    return found if len(found) == 43 else secrets.token_urlsafe(32)


def set_csrf(response: Response, request: Request, token: str) -> Response:
    if request.cookies.get(CSRF_COOKIE) != token:
        response.set_cookie(
            CSRF_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
    return response


def check_csrf(request: Request, form: dict[str, list[str]]) -> bool:
    """The form carries this browser's CSRF token."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = (form.get(CSRF_FIELD) or [""])[0]
    return bool(cookie) and hmac.compare_digest(cookie.encode(), given.encode())


def csrf_field(token: str) -> str:
    return f'<input type="hidden" name="{CSRF_FIELD}" value="{e(token)}">'


# -- sign-out ----------------------------------------------------------------------------------------
def _small(title: str, body: str, status: int = 200) -> HTMLResponse:
    from knowledge_store.surfaces.page import _page

    return _page(title, f'<section class="card narrow">{body}</section>', status=status)


@router.get("/signout")
async def sign_out_form(request: Request) -> Response:
    token = csrf_token(request)
    body = f"""<h1>Sign out</h1><form method="post" action="/signout">{csrf_field(token)}
<button type="submit">Sign out</button></form>"""
    return set_csrf(_small("Sign out", body), request, token)


@router.post("/signout")
async def sign_out(request: Request) -> Response:
    from knowledge_store.surfaces.page import COOKIE, read_form

    form = await read_form(request)
    if not check_csrf(request, form):
        return _small("Sign out", "<p>Sign out from this server's own page.</p>", 403)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


# -- sign-in with the IdP ----------------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@router.get("/login")
async def login(request: Request) -> Response:
    from knowledge_store.surfaces.page import _local_target

    access = service(request).access
    oidc = access.oidc
    if oidc is None or oidc.settings.page_client is None:
        return _small("Sign in", "<p>This server signs in with tokens only.</p>", 404)
    if "authorization_endpoint" not in oidc.keys.endpoints:
        problem = await anyio.to_thread.run_sync(oidc.keys.prefetch)
        if problem is not None or "authorization_endpoint" not in oidc.keys.endpoints:
            return _small("Sign in", f"<p>{e(problem or 'The IdP names no endpoint.')}</p>", 503)
    state, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(48)
    path, _, query = (request.query_params.get("next") or "/").partition("?")
    target = _local_target(path, query)
    settings = oidc.settings
    params = {
        "response_type": "code",
        "client_id": settings.page_client,
        "redirect_uri": f"{settings.audience.rstrip('/')}/login/callback",
        "scope": " ".join(settings.page_scopes),
        "state": state,
        "code_challenge": _b64(hashlib.sha256(verifier.encode()).digest()),
        "code_challenge_method": "S256",
        "nonce": secrets.token_urlsafe(16),  # OpenID providers may require one
        "resource": settings.audience,  # RFC 8707
    }
    response = RedirectResponse(
        f"{oidc.keys.endpoints['authorization_endpoint']}?{urlencode(params)}", status_code=303
    )
    flow = json.dumps({"state": state, "verifier": verifier, "next": target})
    response.set_cookie(
        LOGIN_COOKIE,
        _b64(flow.encode()),
        max_age=LOGIN_S,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        path="/login",
    )
    return response


def _flow(request: Request) -> dict[str, Any] | None:
    raw = request.cookies.get(LOGIN_COOKIE, "")
    try:
        found = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


@router.get("/login/callback")
async def login_callback(request: Request) -> Response:
    from knowledge_store.surfaces.page import COOKIE, _sign_in

    access = service(request).access
    oidc = access.oidc
    flow = _flow(request)
    state = request.query_params.get("state", "")
    if oidc is None or oidc.settings.page_client is None:
        return _small("Sign in", "<p>This server signs in with tokens only.</p>", 404)
    if flow is None or not hmac.compare_digest(str(flow.get("state", "")), state):
        return _sign_in(request, "This sign-in was not started here; start again.", 400)
    if "error" in request.query_params or "code" not in request.query_params:
        why = request.query_params.get("error_description") or request.query_params.get("error")
        why = str(why).rstrip(".")
        return _sign_in(request, f"The identity provider did not sign you in: {why}.", 401)
    settings = oidc.settings
    data = {
        "grant_type": "authorization_code",
        "code": request.query_params["code"],
        "redirect_uri": f"{settings.audience.rstrip('/')}/login/callback",
        "client_id": settings.page_client,
        "code_verifier": str(flow.get("verifier", "")),
        "resource": settings.audience,
    }
    endpoint = oidc.keys.endpoints.get("token_endpoint")
    try:
        if endpoint is None:
            raise httpx.HTTPError("the IdP names no token endpoint")
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.post(endpoint, data=data)
        token = answer.json().get("access_token") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        return _sign_in(request, f"The identity provider did not answer: {exc}", 503)
    if not isinstance(token, str):
        return _sign_in(request, "The identity provider gave no access token.", 401)
    try:
        await access.resolve(token)
    except AuthError as exc:
        return _sign_in(request, exc.message, exc.status)
    target = str(flow.get("next") or "/")
    go = e(target)
    body = (
        f'<meta http-equiv="refresh" content="0;url={go}">'
        f'<p>Signed in. <a href="{go}">Continue</a></p>'
    )
    response = _small("Signed in", body)
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response
