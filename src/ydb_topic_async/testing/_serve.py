"""Starting the local server from a command line: one clear line, not a traceback, when it cannot
listen (``python -m ydb_topic_async.testing`` and ``ydb-topic-async serve``)."""

from __future__ import annotations

import errno
import socket
from typing import Any

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


async def start_serving(host: str, port: int, **options: Any) -> LocalTopicServer:
    """A started ``LocalTopicServer(host, port, **options)``; ``CannotServeError`` when the port
    is busy (or not ours) or the data directory is used by another server."""
    check_port_free(host, port)
    server = LocalTopicServer(host, port, **options)
    try:
        await server.start()
    except JournalLockedError as exc:
        raise CannotServeError(" ".join(str(exc).split())) from None
    except RuntimeError as exc:  # gRPC reports a failed bind this way
        raise CannotServeError(f"cannot serve on {host}:{port}: {str(exc).split(';')[0]}") from None
    return server
