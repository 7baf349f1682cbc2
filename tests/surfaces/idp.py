"""A real OpenID Connect provider for the tests: Canaille (via ``pytest-iam``) on 127.0.0.1.

:class:`Idp` starts Canaille's Flask app in a WSGI server thread on a free port
and stops it (``shutdown`` + ``join``) on exit, even when the test fails. Its
signing key is one the test made, so the attack tests can also sign tokens the
IdP never issued (expired, another audience …) with the IdP's own key, and
rotate it. Users, groups and clients are made through Canaille's own models;
real tokens come from its token endpoint.
"""

from __future__ import annotations

import datetime
import os
import threading
import time
import uuid
import wsgiref.simple_server
from typing import Any

import httpx
import jwt
import portpicker
from canaille import create_app
from canaille.backends import Backend
from joserfc.jwk import JWKRegistry, RSAKey
from pytest_iam import Server

CLIENT_ID = "knowledge-store-tests"
CLIENT_SECRET = "tests-client-secret-0001"
PASSWORD = "correct horse battery staple"
REDIRECT = "http://127.0.0.1:1/callback"


def new_key() -> RSAKey:
    key = JWKRegistry.generate_key("RSA", 2048)
    key.ensure_kid()
    assert isinstance(key, RSAKey)
    return key


class Idp:
    """Canaille on ``http://localhost:PORT``; ``resource`` is the audience its client's tokens name."""

    def __init__(self, resource: str) -> None:
        os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"  # plain http on loopback
        self.port = portpicker.pick_unused_port()
        self.key = new_key()
        self.resource = resource
        config = {
            "TESTING": True,
            "ENV_FILE": None,
            "SECRET_KEY": str(uuid.uuid4()),
            "WTF_CSRF_ENABLED": False,
            "PREFERRED_URL_SCHEME": "http",
            "SERVER_NAME": f"localhost:{self.port}",
            "CANAILLE": {
                "DATABASE": "memory",
                "JAVASCRIPT": False,
                "ACL": {"DEFAULT": {"PERMISSIONS": ["use_oidc"], "READ": ["user_name", "groups"]}},
            },
            "CANAILLE_OIDC": {
                "DYNAMIC_CLIENT_REGISTRATION_OPEN": True,
                "ACTIVE_JWKS": [self.key.as_dict(private=True)],
                "INACTIVE_JWKS": [],
            },
        }
        self.app = create_app(config=config, env_file=None, env_prefix="KS_TEST_IAM_")
        self.server: Server | None = None
        self.thread: threading.Thread | None = None
        self._groups: dict[str, Any] = {}

    @property
    def issuer(self) -> str:
        return f"http://localhost:{self.port}"

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> Idp:
        if self.server is None:
            self.server = Server(self.app, self.port, Backend.instance)
        else:  # started again after stop(): a new socket, the same app
            self.server.httpd = wsgiref.simple_server.make_server(
                "localhost", self.port, self.app, handler_class=self.server._make_request_handler()
            )
        self.thread = threading.Thread(target=self.server.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.thread is not None and self.server is not None:
            self.server.httpd.shutdown()
            self.server.httpd.server_close()
            self.thread.join(timeout=30)
        self.thread = None

    def __enter__(self) -> Idp:
        self.start()
        with self.app.app_context():
            self._client()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- directory --------------------------------------------------------------------------------
    @property
    def models(self) -> Any:
        from canaille.app import models

        return models

    def _client(self) -> None:
        now = datetime.datetime.now(datetime.UTC)
        resource = self.models.Client(
            client_id=self.resource,
            client_name="knowledge-store",
            client_id_issued_at=now,
            redirect_uris=[],
            grant_types=[],
            response_types=[],
            scope=[],
            token_endpoint_auth_method="none",
        )
        Backend.instance.save(resource)
        client = self.models.Client(
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            client_name="the tests",
            client_id_issued_at=now,
            redirect_uris=[REDIRECT],
            grant_types=["password", "authorization_code", "refresh_token"],
            response_types=["code"],
            scope=["openid", "profile", "email", "groups"],
            token_endpoint_auth_method="client_secret_basic",
        )
        Backend.instance.save(client)
        client.audience = [client, resource]  # the IdP admin's "audience" setting
        Backend.instance.save(client)

    def public_client(self, client_id: str, redirect: str) -> None:
        """A public client (no secret: PKCE), whose tokens also name the resource."""
        with self.app.app_context():
            resource = Backend.instance.get(self.models.Client, client_id=self.resource)
            client = self.models.Client(
                client_id=client_id,
                client_name=client_id,
                client_id_issued_at=datetime.datetime.now(datetime.UTC),
                redirect_uris=[redirect],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=["openid", "profile", "email", "groups"],
                token_endpoint_auth_method="none",
            )
            Backend.instance.save(client)
            client.audience = [client, resource]
            Backend.instance.save(client)

    def find_user(self, name: str) -> Any:
        with self.app.app_context():
            return Backend.instance.get(self.models.User, user_name=name)

    def consent(self, user: Any, client_id: str) -> None:
        """The user has consented to ``client_id`` (no consent screen in the flow)."""
        assert self.server is not None
        with self.app.app_context():
            client = Backend.instance.get(self.models.Client, client_id=client_id)
            self.server.consent(user, client)

    def group(self, name: str) -> Any:
        with self.app.app_context():
            if name not in self._groups:
                found = self.models.Group(display_name=name)
                Backend.instance.save(found)
                self._groups[name] = found
            return self._groups[name]

    def user(self, name: str, *groups: str) -> Any:
        held = [self.group(g) for g in groups]
        with self.app.app_context():
            user = self.models.User(
                user_name=name,
                family_name=name.title(),
                emails=[f"{name}@example.org"],
                password=PASSWORD,
                groups=held,
            )
            Backend.instance.save(user)
            return user

    # -- tokens -----------------------------------------------------------------------------------
    def token(self, user: str) -> str:
        """A real access token from the IdP's token endpoint (the password grant)."""
        answer = httpx.post(
            f"{self.issuer}/oauth/token",
            data={
                "grant_type": "password",
                "username": user,
                "password": PASSWORD,
                "scope": "openid profile groups",
            },
            auth=(CLIENT_ID, CLIENT_SECRET),
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])

    def claims(self, user: str, **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": [CLIENT_ID, self.resource],
            "sub": user,
            "iat": now,
            "exp": now + 600,
            "groups": [],
        }
        claims.update(changes)
        return {k: v for k, v in claims.items() if v is not None}

    def sign(
        self,
        claims: dict[str, Any],
        *,
        key: RSAKey | None = None,
        alg: str = "RS256",
        kid: str | None = None,
    ) -> str:
        """A JWT with ``claims`` signed by the IdP's key (or ``key``), as the IdP would."""
        signer = key or self.key
        pem = signer.as_pem(private=True)
        return jwt.encode(claims, pem, algorithm=alg, headers={"kid": kid or signer.kid})

    def rotate(self) -> RSAKey:
        """A new signing key; the old one stays published (inactive), as a rotation does."""
        old, self.key = self.key, new_key()
        oidc = self.app.config["CANAILLE_OIDC"]
        oidc["ACTIVE_JWKS"] = [self.key.as_dict(private=True)]
        oidc["INACTIVE_JWKS"] = [old.as_dict(private=True)]
        return old
