"""Starting the local server from a command line: one clear line, not a traceback, when it cannot
listen (``python -m ydb_topic_async.testing`` and ``ydb-topic-async serve``)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import sys
from typing import Any, TextIO

from .cluster import LocalTopicCluster
from .journal import JournalLockedError
from .server import LocalTopicServer


class CannotServeError(Exception):
    """The server cannot listen where it was asked, or its data directory is in use; the message
    says why in one line."""


def check_port_free(host: str, port: int) -> None:
    """Raise ``CannotServeError`` when ``host:port`` cannot be listened on (busy, or not ours)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise CannotServeError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            reason = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
            raise CannotServeError(f"cannot serve on {host}:{port}: {reason}") from None


async def start_serving(host: str, port: int, nodes: int = 1, **options: Any) -> LocalTopicServer:
    """A started ``LocalTopicServer(host, port, **options)``, or with ``nodes`` > 1 a
    ``LocalTopicCluster`` whose nodes listen on ``port``, ``port + 1``, ... (all on free ports
    when ``port`` is 0); ``CannotServeError`` when a port is busy (or not ours) or the data
    directory is used by another server."""
    ports = [port + index if port else 0 for index in range(nodes)]
    for each in ports:
        check_port_free(host, each)
    if nodes > 1:
        server: LocalTopicServer = LocalTopicCluster(nodes, host, ports=ports, **options)
    else:
        server = LocalTopicServer(host, port, **options)
    try:
        await server.start()
    except JournalLockedError as exc:
        raise CannotServeError(" ".join(str(exc).split())) from None
    except RuntimeError as exc:  # gRPC reports a failed bind this way
        raise CannotServeError(f"cannot serve on {host}:{port}: {str(exc).split(';')[0]}") from None
    return server


def serving_banner(server: LocalTopicServer) -> str:
    """What a command line prints once the server listens: its connection string, and for a
    cluster one line per node (node id, location, endpoint)."""
    banner = f"local YDB topic server: {server.connection_string}"
    if isinstance(server, LocalTopicCluster):
        banner += "".join(
            f"\n  node {node.node_id} ({node.location}): {node.endpoint}" for node in server.nodes
        )
    return banner


async def serve_until_signalled(server: LocalTopicServer, banner: str, out: TextIO | None = None) -> int:
    """Print ``banner`` (to ``out``, standard output by default), serve until SIGINT or SIGTERM,
    stop the server; the number of the signal that stopped it.

    The handlers are the event loop's own, so a stop signal shuts the server down cleanly
    even where SIGINT was inherited as ignored (a command started in the background by a
    non-interactive shell), and SIGTERM (``kill``, a container stop) is as graceful as Ctrl-C.
    """
    received: list[int] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def on_signal(signum: int) -> None:
        received.append(signum)
        stop.set()

    installed = []
    for signum in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on this platform/thread
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
    try:
        async with server:
            print(banner, file=out or sys.stdout, flush=True)
            await stop.wait()
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
    return received[0]
