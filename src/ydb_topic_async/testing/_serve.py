"""Starting the local server from a command line (``python -m ydb_topic_async.testing``, the
``ydb-topic-local-server`` script and ``ydb-topic-async serve``): its options, defined here once
for all of them, and one clear line, not a traceback, when it cannot listen."""

from __future__ import annotations

import argparse
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


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the local server's options to ``parser``: every command line that starts the server
    takes the same ones (``start_serving_from`` reads them back)."""
    parser.add_argument("--host", default="127.0.0.1", dest="serve_host", metavar="HOST",
                        help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=2136, dest="serve_port", metavar="PORT",
                        help="port to listen on (0: any free port; default: 2136)")
    parser.add_argument("--database", default="/local", dest="serve_database", type=_database, metavar="PATH",
                        help="the database path the server serves (default: /local)")
    parser.add_argument("--nodes", type=_node_count, default=1, dest="serve_nodes", metavar="N",
                        help="run a local cluster of this many nodes on consecutive ports (default: 1)")
    parser.add_argument("--user", action="append", type=_user, metavar="NAME:PASSWORD", dest="serve_users",
                        help="require authentication and let this user log in; may be repeated")
    parser.add_argument("--token", action="append", type=_token, metavar="TOKEN:USER", dest="serve_tokens",
                        help="require authentication and accept this pre-shared token for USER; may be repeated")
    parser.add_argument("--token-ttl", type=_seconds, default=None, metavar="SECONDS", dest="serve_token_ttl",
                        help="expire login tokens after this many seconds (default: never)")
    parser.add_argument("--data-dir", default=None, metavar="DIR", dest="serve_data_dir",
                        help="keep acknowledged topics, messages and offsets in DIR across restarts and crashes")
    parser.add_argument("--write-quotas", action="store_true", dest="serve_write_quotas",
                        help="throttle writes to each partition's write speed (1 MiB/s by default), as YDB does")


async def start_serving_from(args: argparse.Namespace) -> LocalTopicServer:
    """``start_serving`` with the options ``add_serve_arguments`` added, as parsed into ``args``."""
    return await start_serving(
        args.serve_host,
        args.serve_port,
        args.serve_nodes,
        database=args.serve_database,
        users=dict(args.serve_users) if args.serve_users else None,
        tokens=dict(args.serve_tokens) if args.serve_tokens else None,
        token_ttl=args.serve_token_ttl,
        data_dir=args.serve_data_dir,
        write_quotas=args.serve_write_quotas,
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {text!r}")
    return value


def _database(text: str) -> str:
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"expected an absolute path like /local, got {text!r}")
    return text


def _node_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of nodes, got {text!r}")
    return count


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _user(text: str) -> tuple[str, str]:
    name, sep, password = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError("expected NAME:PASSWORD")
    return name, password


def _token(text: str) -> tuple[str, str]:
    token, sep, user = text.rpartition(":")
    if not sep or not token or not user:
        raise argparse.ArgumentTypeError("expected TOKEN:USER")
    return token, user


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
