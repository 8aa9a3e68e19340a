"""A minimal HTTP/1.1 server on asyncio streams, for the testing token services (token exchange,
metadata): one request per connection, answered and closed. The standard library only, so the
token services need no web framework."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024
READ_TIMEOUT = 10.0
"""A client that sends nothing for this long is disconnected."""


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: bytes


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, value: Any) -> HttpResponse:
        return cls(status, json.dumps(value).encode())


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class HttpServer:
    """Serves ``handler`` on ``host:port`` (0: a free port, kept across ``stop``/``start``)."""

    def __init__(self, host: str, port: int, handler: Handler) -> None:
        self.host = host
        self.port = port
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening (new connections are refused) and drop the connections being served."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections))
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            try:
                request = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT)
            except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as exc:
                response = HttpResponse(400, f"bad request: {exc}".encode(), "text/plain")
            else:
                response = await self._handler(request)
            writer.write(_encode(response))
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()
            self._connections.discard(task)


async def _read_request(reader: asyncio.StreamReader) -> HttpRequest:
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > MAX_HEADER_BYTES:
        raise ValueError("headers too large")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or "0")
    if length > MAX_BODY_BYTES:
        raise ValueError("body too large")
    body = await reader.readexactly(length) if length else b""
    return HttpRequest(method, path, headers, body)


def _encode(response: HttpResponse) -> bytes:
    reason = HTTPStatus(response.status).phrase if response.status in HTTPStatus._value2member_map_ else ""
    head = [f"HTTP/1.1 {response.status} {reason}", f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}", "Connection: close"]
    head += [f"{name}: {value}" for name, value in response.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body
