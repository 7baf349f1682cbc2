"""An httpx transport whose every request ends by a deadline, whatever the server sends.

httpx's timeouts bound each network operation — a connect, one read, one write
— so a server that sends a byte every few seconds never trips them and holds a
request as long as it likes (a *slow drip*). :class:`DeadlineTransport` clamps
the timeout of every operation to the time left before the deadline of the
request running in the calling thread (set with :func:`deadline`): connecting,
the TLS handshake, sending, the status line and headers and the whole body all
end by it. Past it, the next operation raises :class:`DeadlinePassed` (an
``httpx.TimeoutException``).

The deadline is per thread because a synchronous httpx client does a request's
I/O in the thread that asked for it; a pooled connection serves one request at
a time, so the deadline it obeys is always that request's. Name resolution is
the system resolver's and is not bounded here. The transport connects directly:
proxies from the environment (``HTTP_PROXY`` …) are not used.
"""

from __future__ import annotations

import ssl
import threading
import time
import typing
from collections.abc import Iterator
from contextlib import contextmanager

import httpcore
import httpx

__all__ = ["DeadlinePassed", "DeadlineTransport", "deadline"]

_local = threading.local()

#: httpcore's errors → httpx's, most specific first (what httpx's own transport raises).
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


class DeadlinePassed(httpx.TimeoutException):
    """A request was still running when its deadline passed."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Requests made by this thread inside the block end within ``seconds`` from now."""
    previous = getattr(_local, "at", None)
    _local.at = time.monotonic() + seconds
    _local.seconds = seconds
    try:
        yield
    finally:
        _local.at = previous


def _passed() -> str | None:
    """What to say when this thread's deadline has passed (a clamped socket timeout fires at
    it, give or take the clock's grain), else None."""
    at = getattr(_local, "at", None)
    if at is None or time.monotonic() < at - 0.005:
        return None
    return f"the request's deadline of {float(_local.seconds):g} s passed"


def _left(timeout: float | None, error: type[httpcore.TimeoutException]) -> float | None:
    """``timeout`` clamped to the time left before this thread's deadline (raises past it)."""
    at: float | None = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error(f"the request's deadline of {float(_local.seconds):g} s passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        limit = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, limit))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        limit = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_tcp(host, port, limit, local_address, socket_options))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        limit = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_unix_socket(path, limit, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except httpcore.TimeoutException as exc:
        if (passed := _passed()) is not None:
            raise DeadlinePassed(passed) from exc
        raise _mapped(exc) from exc
    except Exception as exc:
        if any(isinstance(exc, core) for core, _ in _ERRORS):
            raise _mapped(exc) from exc
        raise


def _mapped(exc: Exception) -> httpx.TransportError:
    kind = next(ours for core, ours in _ERRORS if isinstance(exc, core))
    return kind(str(exc))


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: typing.Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _translated():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class DeadlineTransport(httpx.BaseTransport):
    """HTTP/1.1 over a connection pool of ``max_connections``, every operation under the
    calling thread's :func:`deadline` (see the module docstring)."""

    def __init__(self, *, max_connections: int) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            network_backend=_Backend(),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _translated():
            response = self._pool.handle_request(core)
        assert isinstance(response.stream, typing.Iterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()
