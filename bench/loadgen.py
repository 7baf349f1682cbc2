"""The REST load generators of bench_serve.py: each sends one client's requests, in order.

``RawHttp`` speaks HTTP/1.1 itself over asyncio streams, one keep-alive
connection per client: it costs about 0.4-0.7 CPU-ms a request where httpx's
async client costs several, and on a small machine the load generator shares
the CPUs with the server it measures. ``HttpxClient`` is the httpx one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


class RawHttp:
    """Minimal HTTP/1.1 over asyncio streams: one keep-alive connection per client."""

    def __init__(self, url: str, token: str) -> None:
        from urllib.parse import urlsplit

        self.token = token
        where = urlsplit(url)
        self.host, self.port = where.hostname or "127.0.0.1", where.port or 80
        self.conns: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def request(self, n: int, method: str, path: str, body: Any) -> tuple[str | int, str]:
        for attempt in (0, 1):  # a connection the server closed: reconnect once
            if n not in self.conns:
                self.conns[n] = await asyncio.open_connection(self.host, self.port)
            reader, writer = self.conns[n]
            payload = b"" if body is None else json.dumps(body).encode()
            head = (
                f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n"
            )
            try:
                writer.write(head.encode() + payload)
                status, headers = await self._head(reader)
            except (ConnectionError, asyncio.IncompleteReadError):
                await self._drop(n)
                if attempt:
                    raise
                continue
            data = await self._body(reader, headers)
            if headers.get("connection") == "close":
                await self._drop(n)
            return status, data.decode("utf-8", "replace") if status >= 400 else ""
        raise ConnectionError("unreachable")

    @staticmethod
    async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        return status, headers

    @staticmethod
    async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if "content-length" in headers:
            return await reader.readexactly(int(headers["content-length"]))
        if headers.get("transfer-encoding") == "chunked":
            parts = []
            while size := int((await reader.readline()).split(b";")[0], 16):
                parts.append(await reader.readexactly(size))
                await reader.readline()
            await reader.readline()
            return b"".join(parts)
        return b""

    async def _drop(self, n: int) -> None:
        _, writer = self.conns.pop(n)
        writer.close()

    async def close(self) -> None:
        for n in list(self.conns):
            await self._drop(n)


class HttpxClient:
    def __init__(self, url: str, clients: int, token: str) -> None:
        import httpx

        limits = httpx.Limits(
            max_connections=clients, max_keepalive_connections=clients, keepalive_expiry=4.0
        )
        self.http = httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60, limits=limits
        )

    async def request(self, n: int, method: str, path: str, body: Any) -> tuple[int, str]:
        response = await self.http.request(method, path, json=body)
        return response.status_code, response.text

    async def close(self) -> None:
        await self.http.aclose()
