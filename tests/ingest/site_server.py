"""A real HTTP site on 127.0.0.1 for crawler tests: routes that tests change between crawls.

Each route answers with its status, headers and body after its delay; an ETag
(from the body) is sent and ``If-None-Match`` answered with 304, as is
``If-Modified-Since`` for routes with a ``Last-Modified``. A body may be bytes (a gzip'd
sitemap, a bomb); a route with ``drip_s`` sends its body one byte at a time, that many
seconds apart (a slow-drip server) — with ``drip_headers``, its status line and headers too.
Every request is
logged (path, status, whether it was conditional, when it arrived), and the most requests
in flight at once is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Route:
    body: str | bytes = ""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    etag: bool = True
    last_modified: str | None = None
    #: seconds between the body's bytes (each byte sent alone): a slow drip
    drip_s: float = 0.0
    #: drip the status line and headers as well
    drip_headers: bool = False


@dataclass(frozen=True)
class Hit:
    path: str
    status: int
    conditional: bool
    at: float


def page(title: str, body: str, *, links: tuple[str, ...] = (), head: str = "") -> str:
    """An HTML page with navigation (links) around its main content."""
    nav = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return (
        f"<!doctype html><html><head><title>{title}</title>{head}</head><body>"
        f"<nav>{nav}</nav><main><h1>{title}</h1>{body}</main>"
        "<footer>© the site</footer></body></html>"
    )


class Site:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.log: list[Hit] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self.origin = ""

    def url(self, path: str) -> str:
        return self.origin + path

    def requested(self, path: str | None = None) -> list[Hit]:
        return [hit for hit in self.log if path is None or hit.path == path]

    def statuses(self) -> Counter[int]:
        return Counter(hit.status for hit in self.log)

    def reset_log(self) -> None:
        with self._lock:
            self.log.clear()
            self.max_in_flight = 0

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        arrived = time.monotonic()
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            self._respond(handler, arrived)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _respond(self, handler: BaseHTTPRequestHandler, arrived: float) -> None:
        route = self.routes.get(handler.path)
        match = handler.headers.get("If-None-Match")
        since = handler.headers.get("If-Modified-Since")
        if route is None:
            route = Route("not here", status=404, content_type="text/plain", etag=False)
        if route.delay_s:
            time.sleep(route.delay_s)
        body = route.body.encode() if isinstance(route.body, str) else route.body
        headers = dict(route.headers)
        if route.etag and route.status == 200:
            headers["ETag"] = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        if route.last_modified and route.status == 200:
            headers["Last-Modified"] = route.last_modified
        status = route.status
        if (status == 200 and match is not None and match == headers.get("ETag")) or (
            status == 200
            and match is None
            and since
            and route.last_modified
            and parsedate_to_datetime(since) >= parsedate_to_datetime(route.last_modified)
        ):
            status, body = 304, b""
        with self._lock:
            self.log.append(Hit(handler.path, status, bool(match or since), arrived))
        try:
            if route.drip_s and route.drip_headers:
                lines = [f"HTTP/1.1 {status} Dripping", f"Content-Type: {route.content_type}"]
                lines += [f"{name}: {value}" for name, value in headers.items()]
                lines.append(f"Content-Length: {len(body)}")
                _drip(handler, ("\r\n".join(lines) + "\r\n\r\n").encode() + body, route.drip_s)
                return
            handler.send_response(status)
            if status != 304:
                handler.send_header("Content-Type", route.content_type)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            if route.drip_s and status == 200:
                _drip(handler, body, route.drip_s)
            else:
                handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)


def _drip(handler: BaseHTTPRequestHandler, data: bytes, interval: float) -> None:
    for index in range(len(data)):
        handler.wfile.write(data[index : index + 1])
        handler.wfile.flush()
        time.sleep(interval)


@contextmanager
def serve() -> Iterator[Site]:
    site = Site()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            site._answer(self)

        def log_message(self, format: str, *args: object) -> None:
            pass

        def handle(self) -> None:
            # the client may go away mid-answer (a refused body, a deadline)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                super().handle()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    site.origin = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
