"""A TCP proxy on loopback that stands in for the network between a client and a server.

Put it between a ``Driver`` and a ``LocalTopicServer`` (or any gRPC endpoint) to test what your
code does when the network misbehaves::

    async with LocalTopicServer() as server, proxy_to(server) as proxy:
        async with Driver(proxy.endpoint, server.database, discovery=False) as driver:
            ...
            await proxy.refuse()      # the server is gone: connections reset, new ones refused
            ...
            await proxy.restore()

``discovery=False`` keeps the driver on the proxy (discovery would hand it the server's own
address). The faults:

- ``cut()``: reset every open connection (both sockets), as a crashed peer or a middlebox would.
- ``stall()`` / ``resume()``: hold every byte back, then deliver it (a congested network).
- ``blackhole()``: the connections open now stop carrying bytes in both directions while their
  sockets stay open (a host that vanished without FIN or RST: half-open TCP); new ones flow.
- ``lose_replies()``: the connections open now still carry the client's bytes but drop the
  server's, so requests are served and their answers (acknowledgements) never arrive.
- ``refuse()`` / ``restore()``: take the port down (open connections reset, new ones refused),
  then listen again on the same port.
- ``silence()`` / ``unsilence()``: accept new connections and never answer them (a hung server).
- ``slow_down(seconds)`` / ``speed_up()``: delay every chunk of bytes by ``seconds`` in each
  direction (a node that answers slowly: an overloaded host or a long network path).

``inject(kind, seconds)`` runs one of them for a while; ``RandomFaults`` injects random faults on
a schedule (for soak tests). ``silent_endpoint()`` is a bare socket that accepts connections and
never answers at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal, Protocol
from urllib.parse import urlsplit

FaultKind = Literal["reset", "stall", "blackhole", "lost_replies", "outage", "silence", "slow"]
"""What ``FlakyProxy.inject`` can do: ``cut``, ``stall``, ``blackhole``, ``lose_replies``,
``refuse``, ``silence`` and ``slow_down``, each for a while."""

PROXY_FAULTS: tuple[FaultKind, ...] = ("reset", "stall", "blackhole", "lost_replies", "outage", "silence", "slow")
SLOW_DELAY = 0.2
"""The delay per chunk of ``inject("slow", ...)``, in seconds."""


class _Link:
    """The byte counts and state of one proxied connection."""

    __slots__ = ("deaf", "dropped", "forwarded", "mute")

    def __init__(self) -> None:
        self.mute = False
        """The client's bytes are dropped."""
        self.deaf = False
        """The server's bytes are dropped."""
        self.forwarded = 0
        self.dropped = 0


class FlakyProxy:
    """Forwards TCP connections from ``127.0.0.1:port`` to ``target_host:target_port``, and breaks
    them on demand. ``start()`` listens (on ``port``; 0 picks a free one) and returns
    ``endpoint``; ``close()`` stops and resets everything."""

    def __init__(self, target_host: str, target_port: int, *, port: int = 0) -> None:
        self._target = (target_host, target_port)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._links: list[_Link] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._port = port
        self._silent = False
        self._delay = 0.0
        self._held: set[asyncio.StreamWriter] = set()
        self.connections = 0
        """Connections accepted so far (silenced ones included)."""

    async def start(self) -> str:
        """Listen; returns ``endpoint``."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._port, reuse_address=True)
        self._port = self._server.sockets[0].getsockname()[1]
        return self.endpoint

    @property
    def port(self) -> int:
        """The port the proxy listens on (0 before ``start``)."""
        return self._port

    @property
    def endpoint(self) -> str:
        """``grpc://127.0.0.1:port``: give it to a ``Driver`` (with ``discovery=False``)."""
        if not self._port:
            raise RuntimeError("the proxy is not started")
        return f"grpc://127.0.0.1:{self._port}"

    async def refuse(self) -> None:
        """Stop listening and reset every connection: new connections are refused until ``restore``."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.cut()
        self._release_held()
        if server is not None:
            # After the cut: from Python 3.12 on, wait_closed also waits for every connection
            # the server accepted to close.
            await server.wait_closed()

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
        """New connections are forwarded again; the silenced ones are reset."""
        self._silent = False
        self._release_held()

    def _release_held(self) -> None:
        for writer in list(self._held):
            writer.transport.abort()
        self._held.clear()

    def slow_down(self, seconds: float) -> None:
        """Delay every chunk of bytes by ``seconds``, in both directions, until ``speed_up``
        (the connections keep working, each exchange takes longer)."""
        if not seconds >= 0:
            raise ValueError("seconds must be >= 0")
        self._delay = float(seconds)

    def speed_up(self) -> None:
        """Forward without delay again."""
        self._delay = 0.0

    def stall(self) -> None:
        """Hold back every byte in both directions (they are delivered on ``resume``)."""
        self._flowing.clear()

    def resume(self) -> None:
        """Deliver what was held back, and flow again."""
        self._flowing.set()

    def cut(self) -> None:
        """Reset every open connection (both directions)."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def blackhole(self) -> None:
        """Silently drop every byte of the connections open now, in both directions, keeping their
        sockets open. When a side finally closes its socket, the other side is reset."""
        for link in self._links:
            link.mute = link.deaf = True

    def lose_replies(self) -> None:
        """Drop every byte the server sends on the connections open now, and keep forwarding the
        client's: requests are served, their answers never arrive (nor the server's pings)."""
        for link in self._links:
            link.deaf = True

    @property
    def dropped_bytes(self) -> int:
        """Bytes dropped so far (black-holed or lost replies)."""
        return sum(link.dropped for link in self._links)

    @property
    def forwarded_bytes(self) -> int:
        """Bytes forwarded so far."""
        return sum(link.forwarded for link in self._links)

    async def inject(self, kind: FaultKind, seconds: float = 0.0) -> None:
        """Inject one fault and undo it after ``seconds`` (when this returns, the network works):
        ``"reset"`` cuts every connection (``seconds`` is not used); ``"stall"`` holds every byte
        back; ``"blackhole"`` drops the bytes of the connections open now, then resets them;
        ``"lost_replies"`` drops what the server sends on them, then resets them; ``"outage"``
        refuses connections; ``"silence"`` accepts and never answers; ``"slow"`` delays every
        chunk by ``SLOW_DELAY``."""
        if kind not in PROXY_FAULTS:
            raise ValueError(f"unknown fault {kind!r}: expected one of {', '.join(PROXY_FAULTS)}")
        if kind == "reset":
            self.cut()
            return
        if kind == "stall":
            self.stall()
        elif kind == "blackhole":
            self.blackhole()
        elif kind == "lost_replies":
            self.lose_replies()
        elif kind == "outage":
            await self.refuse()
        elif kind == "slow":
            self.slow_down(SLOW_DELAY)
        else:
            self.silence()
        try:
            await asyncio.sleep(seconds)
        finally:
            if kind == "stall":
                self.resume()
            elif kind in ("blackhole", "lost_replies"):
                self.cut()
            elif kind == "outage":
                await self.restore()
            elif kind == "slow":
                self.speed_up()
            else:
                self.unsilence()

    async def close(self) -> None:
        """Stop listening, reset every connection and end the proxy's tasks."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.resume()
        self.cut()
        self._release_held()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._silent:
            self._held.add(client_writer)  # never read, never answered
            return
        # Known to cut() from the start: a connection still connecting upstream when the proxy
        # cuts or refuses must not survive (refuse() waits for every accepted connection to end).
        self._writers.add(client_writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.transport.abort()
            self._writers.discard(client_writer)
            return
        if client_writer not in self._writers or client_writer.transport.is_closing():
            upstream_writer.transport.abort()  # cut while connecting
            return
        link = _Link()
        self._links.append(link)
        self._writers.add(upstream_writer)
        directions = ((client_reader, upstream_writer, True), (upstream_reader, client_writer, False))
        for reader, writer, to_server in directions:
            task = asyncio.get_running_loop().create_task(self._pump(link, reader, writer, to_server))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, to_server: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if self._delay:
                    await asyncio.sleep(self._delay)
                await self._flowing.wait()
                if link.mute if to_server else link.deaf:
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


class _HasEndpoint(Protocol):
    @property
    def endpoint(self) -> str: ...


@asynccontextmanager
async def proxy_to(target: _HasEndpoint | str, *, port: int = 0) -> AsyncIterator[FlakyProxy]:
    """A started proxy in front of ``target`` (a ``LocalTopicServer``, or an endpoint such as
    ``grpc://127.0.0.1:2136``), listening on ``port`` (0: a free one); closed on exit."""
    endpoint = target if isinstance(target, str) else target.endpoint
    parts = urlsplit(endpoint if "://" in endpoint else "grpc://" + endpoint)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"expected an endpoint with a host and a port, got {endpoint!r}")
    proxy = FlakyProxy(parts.hostname, parts.port, port=port)
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


Fault = Callable[[float], Awaitable[None]]
"""A fault of your own for ``RandomFaults``: given a duration, it breaks something and repairs
it before returning (say, killing and restarting a server process)."""


@dataclass(frozen=True)
class InjectedFault:
    """One fault ``RandomFaults`` injected: its kind, when it started (``time.monotonic()``) and
    how long it lasted (seconds)."""

    kind: str
    started: float
    seconds: float


class RandomFaults:
    """Injects random faults through a proxy (and faults of your own) one after another.

    ``durations`` maps each fault kind to the (shortest, longest) time it lasts, picked at
    random in between; a kind is a ``FaultKind`` of the proxy or a key of ``custom`` (a
    ``Fault`` that does and undoes it). Between two faults the network works for a random time in
    ``gap`` (seconds). With ``each_first``, every kind is injected once (in random order) before
    the random picks start, so a short run still sees each of them. ``seed`` makes a run
    repeatable. ``injected`` lists what was done, ``counts`` counts it by kind.

        faults = RandomFaults(proxy, {"reset": (0, 0), "outage": (1, 30)}, gap=(5, 20))
        async with faults.running():
            ...  # the workload
    """

    def __init__(
        self,
        proxy: FlakyProxy,
        durations: Mapping[str, tuple[float, float]],
        *,
        gap: tuple[float, float] = (1.0, 5.0),
        custom: Mapping[str, Fault] | None = None,
        each_first: bool = True,
        seed: int | None = None,
    ) -> None:
        custom = dict(custom or {})
        for kind, (low, high) in durations.items():
            if kind not in custom and kind not in PROXY_FAULTS:
                raise ValueError(
                    f"unknown fault {kind!r}: neither a proxy fault ({', '.join(PROXY_FAULTS)}) nor a custom one"
                )
            if not 0 <= low <= high:
                raise ValueError(f"the durations of {kind!r} must be 0 <= shortest <= longest, got {(low, high)}")
        if not durations:
            raise ValueError("give at least one fault kind")
        if not 0 <= gap[0] <= gap[1]:
            raise ValueError(f"gap must be 0 <= shortest <= longest, got {gap}")
        self._proxy = proxy
        self._durations = dict(durations)
        self._gap = gap
        self._custom = custom
        self._each_first = each_first
        self._random = random.Random(seed)
        self.injected: list[InjectedFault] = []
        self.current: str | None = None
        """The fault in progress, or None while the network works."""

    @property
    def counts(self) -> Counter[str]:
        """Faults injected so far, by kind."""
        return Counter(fault.kind for fault in self.injected)

    async def run(self, until: float | None = None) -> None:
        """Inject faults until cancelled (a fault in progress is cut short and undone), or until
        ``time.monotonic()`` passes ``until`` (no fault starts after it; one in progress then
        lasts its time). The network works when this returns."""
        kinds = sorted(self._durations)
        first = self._random.sample(kinds, len(kinds)) if self._each_first else []
        while True:
            await asyncio.sleep(self._random.uniform(*self._gap))
            if until is not None and time.monotonic() >= until:
                return
            kind = first.pop(0) if first else self._random.choice(kinds)
            seconds = self._random.uniform(*self._durations[kind])
            self.current = kind
            started = time.monotonic()
            try:
                await self._inject(kind, seconds)  # cancelled, it is cut short and undone
            finally:
                self.current = None
                self.injected.append(InjectedFault(kind, started, time.monotonic() - started))

    async def _inject(self, kind: str, seconds: float) -> None:
        custom = self._custom.get(kind)
        if custom is not None:
            await custom(seconds)
        else:
            await self._proxy.inject(kind, seconds)  # type: ignore[arg-type]

    @asynccontextmanager
    async def running(self, until: float | None = None) -> AsyncIterator[RandomFaults]:
        """Inject faults in the background while the block runs; on exit the injection stops and
        a fault in progress is cut short and undone (the network works again)."""
        task = asyncio.get_running_loop().create_task(self.run(until), name="random faults")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = [
    "PROXY_FAULTS",
    "Fault",
    "FaultKind",
    "FlakyProxy",
    "InjectedFault",
    "RandomFaults",
    "proxy_to",
    "silent_endpoint",
]
