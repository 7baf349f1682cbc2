"""Tokens never reach a log (issue 11 §6): the access log of a real ``ks serve`` configuration.

``GET /?token=…`` used to write the token, in clear, to uvicorn's access log.
The server now takes tokens only from the Authorization header and the
sign-in cookie, refuses them in URLs, and its access log redacts any
``token=`` a caller puts in a URL anyway.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from knowledge_store.store import KnowledgeStore
from knowledge_store.surfaces.http import create_app
from knowledge_store.surfaces.serve import RedactTokens, uvicorn_config
from tests.surfaces.serve_estate import CSRF, TOKENS

SECRET = "tok-ann-0001"


class _Lines(logging.Handler):
    """The lines a logger emitted; a test waits for them (an event per line, no polling)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._changed:
            self.lines.append(record.getMessage())
            self._changed.notify_all()

    def wait_for(self, ready: Callable[[list[str]], bool], timeout: float = 30) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: ready(self.lines), timeout=timeout)


@pytest.fixture
def access_log(served: KnowledgeStore) -> Iterator[tuple[str, _Lines]]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(create_app(served, tokens=TOKENS), host="127.0.0.1", port=0)
    lines = _Lines()
    logger = logging.getLogger("uvicorn.access")
    logger.addHandler(lines)
    # listening before the server runs: a request made before uvicorn accepts waits in the
    # backlog, so nothing need wait for the server to start
    sock.listen(64)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", lines
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        logger.removeHandler(lines)
        sock.close()


def test_the_access_log_never_shows_a_token(access_log: tuple[str, _Lines]) -> None:
    url, lines = access_log
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/", params={"token": SECRET, "q": "lag"}).status_code == 400
        client.get("/v1/stats", params={"access_token": SECRET})
        client.get(f"/entity/unit:vacuum?x=1&token={SECRET}&y=2")
        client.cookies.set("ks_csrf", CSRF)
        signed = client.post("/signin", data={"token": SECRET, "next": "/", "csrf": CSRF})
        assert signed.status_code == 303
        assert client.get("/v1/stats", headers={"Authorization": f"Bearer {SECRET}"}).is_success
    # uvicorn writes a request's access line after its response: wait for the five
    assert lines.wait_for(lambda got: len(got) >= 5), lines.lines
    assert not [line for line in lines.lines if SECRET in line]
    assert sum("[redacted]" in line for line in lines.lines) == 3


def test_the_filter_redacts_every_token_parameter() -> None:
    record: Any = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "GET", "/a?TOKEN=x1&b=2&access_token=x2;token=x3#f", "1.1", 200),
        None,
    )
    assert RedactTokens().filter(record)
    assert "x1" not in record.getMessage() and "x2" not in record.getMessage()
    assert "x3" not in record.getMessage() and "b=2" in record.getMessage()


def test_no_error_body_quotes_a_token(app: Any) -> None:
    from tests.surfaces.serve_estate import call

    wrong = "tok-WRONG-but-secret-42"
    bearer = {"Authorization": f"Bearer {wrong}"}
    for method, path, kwargs in (
        ("POST", "/v1/search", {"json": {"query": "x"}, "headers": bearer}),
        ("POST", "/graphql", {"json": {"query": "{ stats }"}, "headers": bearer}),
        (
            "POST",
            "/mcp",
            {"json": {"jsonrpc": "2.0", "id": 1, "method": "ping"}, "headers": bearer},
        ),
        ("GET", "/", {"headers": bearer}),
        ("POST", "/signin", {"data": {"token": wrong, "next": "/"}}),
        ("GET", "/", {"params": {"token": wrong}}),
        (
            "POST",
            "/v1/search",
            {
                "json": {"query": "x", "token": wrong},
                "headers": {"Authorization": f"Bearer {SECRET}"},
            },
        ),
    ):
        answer = call(app, method, path, **kwargs)
        assert answer.status_code >= 400, (path, answer.status_code)
        assert wrong not in answer.text and SECRET not in answer.text, (path, answer.text[:300])
