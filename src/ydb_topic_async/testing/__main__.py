"""``python -m ydb_topic_async.testing``: run the local topic server until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ._serve import CannotServeError, serve_until_signalled, serving_banner, start_serving


def _user(value: str) -> tuple[str, str]:
    name, sep, password = value.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError("expected NAME:PASSWORD")
    return name, password


def _node_count(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of nodes, got {value!r}")
    return count


async def serve(args: argparse.Namespace) -> None:
    users = dict(args.user) if args.user else None
    server = await start_serving(
        args.host,
        args.port,
        args.nodes,
        database=args.database,
        users=users,
        token_ttl=args.token_ttl,
        data_dir=args.data_dir,
        write_quotas=args.write_quotas,
    )
    await serve_until_signalled(server, serving_banner(server))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ydb_topic_async.testing", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=2136, help="port to listen on (0: any free port)")
    parser.add_argument("--database", default="/local", help="database path (default: /local)")
    parser.add_argument("--nodes", type=_node_count, default=1,
                        help="run a cluster of this many nodes on consecutive ports (default: 1)")
    parser.add_argument("--user", action="append", type=_user, metavar="NAME:PASSWORD",
                        help="require authentication; may be repeated")
    parser.add_argument("--token-ttl", type=float, default=None, metavar="SECONDS",
                        help="expire login tokens after this many seconds (default: never)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="keep acknowledged topics, messages and offsets in DIR across restarts and crashes")
    parser.add_argument("--write-quotas", action="store_true",
                        help="throttle writes to each partition's write speed (1 MiB/s by default), as YDB does")
    try:
        asyncio.run(serve(parser.parse_args(argv)))
    except CannotServeError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
