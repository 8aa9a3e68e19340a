"""A TCP proxy on loopback that stands in for the network between a driver and the local server.

It can stall every connection (bytes are held back, then delivered on ``resume``), cut them all
(both sockets reset, so gRPC sees the connection break at once), or black-hole the current ones:
they stop carrying bytes in both directions while their sockets stay open, as when a server
host vanishes without a FIN or RST (half-open TCP). Connections made after ``blackhole`` flow.
``refuse`` takes the port down (open connections are reset, new ones refused, as when the
server process is gone) until ``restore``; ``silence`` makes it accept new connections and
never answer them (a server that hangs), until ``unsilence``.

``silent_endpoint`` is a bare socket that accepts connections and never answers at all.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit


class _Link:
    """The two sockets of one proxied connection."""

    def __init__(self) -> None:
        self.dead = False
        self.forwarded = 0
        self.dropped = 0


class FlakyProxy:
    """Forwards TCP connections to ``target``; can stall, cut or black-hole them."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._links: list[_Link] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._port = 0
        self._silent = False
        self._held: set[asyncio.StreamWriter] = set()
        self.connections = 0
        """Connections accepted so far (silenced ones included)."""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._port, reuse_address=True)
        self._port = self._server.sockets[0].getsockname()[1]
        return self.endpoint

    @property
    def endpoint(self) -> str:
        assert self._port
        return f"grpc://127.0.0.1:{self._port}"

    async def refuse(self) -> None:
        """Stop listening and reset every connection: new connections are refused until ``restore``."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        self.cut()
        self._release_held()

    async def restore(self) -> None:
        """Listen again on the same port."""
        if self._server is None:
            await self.start()

    def silence(self) -> None:
        """Accept new connections but never forward or answer a byte of them (until ``unsilence``,
        which resets them); the connections open now are black-holed."""
        self._silent = True
        self.blackhole()

    def unsilence(self) -> None:
        self._silent = False
        self._release_held()

    def _release_held(self) -> None:
        for writer in list(self._held):
            writer.transport.abort()
        self._held.clear()

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        """Abort every open connection (both directions)."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def blackhole(self) -> None:
        """Silently drop every byte of the connections open now, in both directions, keeping their
        sockets open. When a side finally closes its socket, the other side is reset."""
        for link in self._links:
            link.dead = True

    @property
    def dropped_bytes(self) -> int:
        return sum(link.dropped for link in self._links)

    @property
    def forwarded_bytes(self) -> int:
        return sum(link.forwarded for link in self._links)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.resume()
        self.cut()
        self._release_held()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._silent:
            self._held.add(client_writer)  # never read, never answered
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.transport.abort()
            return
        link = _Link()
        self._links.append(link)
        self._writers.update((client_writer, upstream_writer))
        for reader, writer in ((client_reader, upstream_writer), (upstream_reader, client_writer)):
            task = asyncio.get_running_loop().create_task(self._pump(link, reader, writer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                if link.dead:
                    link.dropped += len(data)
                    continue
                link.forwarded += len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()
            self._writers.discard(writer)


@asynccontextmanager
async def proxy_to(server: Any) -> AsyncIterator[FlakyProxy]:
    """A started proxy in front of a ``LocalTopicServer``; closed on exit."""
    parts = urlsplit(server.endpoint if "://" in server.endpoint else "grpc://" + server.endpoint)
    assert parts.hostname is not None and parts.port is not None
    proxy = FlakyProxy(parts.hostname, parts.port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


@asynccontextmanager
async def silent_endpoint() -> AsyncIterator[str]:
    """``grpc://127.0.0.1:port`` of a socket that accepts connections and never answers (nothing
    is read or sent: no HTTP/2 settings, no handshake)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.setblocking(False)
    accepted: list[socket.socket] = []
    loop = asyncio.get_running_loop()

    def accept() -> None:
        try:
            while True:
                conn, _ = listener.accept()
                accepted.append(conn)
        except BlockingIOError:
            pass

    loop.add_reader(listener.fileno(), accept)
    try:
        yield f"grpc://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        loop.remove_reader(listener.fileno())
        for conn in accepted:
            conn.close()
        listener.close()
