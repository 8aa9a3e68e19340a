"""``python -m ydb_topic_async.testing`` (also ``ydb-topic-local-server``): run the local topic
server until interrupted."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from ._serve import CannotServeError, add_serve_arguments, serve_until_signalled, serving_banner, start_serving_from


async def serve(args: argparse.Namespace) -> None:
    server = await start_serving_from(args)
    await serve_until_signalled(server, serving_banner(server))


def main(argv: list[str] | None = None) -> None:
    script = os.path.basename(sys.argv[0])
    prog = "python -m ydb_topic_async.testing" if script in ("__main__.py", "-c", "") else script
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    add_serve_arguments(parser)
    try:
        asyncio.run(serve(parser.parse_args(argv)))
    except CannotServeError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
