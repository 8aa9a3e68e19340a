"""The local server's own cost: CPU per message written and read, with the bare clients of ``floor.py``.

    python benchmarks/server.py --messages 100000 --size 100

The server runs in its own process; its CPU time (every thread) over a phase, divided by the
messages of that phase, is its cost per message. Phases: ``write`` (one producer, ``--batch``
messages per WriteRequest) and ``read`` (one consumer reading everything and committing). The
clients are the floor clients, so the server, not the client, is what is busy.

For exact before/after comparisons of a server change, count instructions instead of seconds
(unaffected by other work on the machine), with server and client in one process:

    valgrind --tool=callgrind --callgrind-out-file=cg.out python benchmarks/server.py --in-process --messages 20000
    callgrind_annotate cg.out | head -40

and ``--profile FILE`` writes a cProfile of the server process (``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figure, ServerProcess, describe_machine, machine, measure, write_json
from floor import floor_read, floor_write

BUFFER = 50 * 1024 * 1024


async def _phases(server: ServerProcess | None, endpoint: str, database: str, args: argparse.Namespace) -> list[Figure]:
    import ydb_topic_async as yta

    payload = b"s" * args.size
    topic = f"server-{args.size}"
    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(topic, consumers=["server"])
    common: dict[str, Any] = dict(benchmark="server", client="floor", label="local server", messages=args.messages,
                                  size=args.size)
    write = await measure(
        server, lambda: floor_write(endpoint, database, topic, payload, args.messages, args.batch),
        mode="write", **common,
    )
    read = await measure(
        server, lambda: floor_read(endpoint, database, topic, "server", args.messages, BUFFER), mode="read", **common,
    )
    return [write, read]


async def _in_process(args: argparse.Namespace) -> None:
    from ydb_topic_async.testing import LocalTopicServer

    async with LocalTopicServer() as server:
        figures = await _phases(None, server.endpoint, server.database, args)
    for f in figures:
        print(f"{f.mode:<6} {f.messages} messages in {f.seconds:.2f}s (server and client together)")


async def _separate(args: argparse.Namespace) -> None:
    info = machine()
    print(f"machine: {describe_machine(info)}")
    rounds: list[list[Figure]] = []
    with ServerProcess(profile=args.profile) as server:
        for _ in range(args.rounds):
            rounds.append(await _phases(server, server.endpoint, server.database, args))
    figures = []
    for index, mode in enumerate(("write", "read")):
        figure = min((r[index] for r in rounds), key=lambda f: f.server_cpu_seconds or 0.0)
        figures.append(figure)
        print(
            f"{mode:<6} {args.messages} x {args.size} B: server {figure.server_us_per_message:.2f} µs CPU/msg "
            f"(CPU/wall {figure.server_utilisation:.2f}), {figure.rate:,.0f} msg/s, "
            f"client {figure.client_us_per_message:.2f} µs/msg"
        )
    write_json(args.json, "server", args, figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000, help="messages per WriteRequest (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="the round with the least server CPU is reported")
    parser.add_argument("--in-process", action="store_true", help="server and clients in this process (callgrind)")
    parser.add_argument("--profile", help="write a cProfile of the server process to this file")
    parser.add_argument("--json", help="write the figures to this JSON file")
    args = parser.parse_args()
    asyncio.run(_in_process(args) if args.in_process else _separate(args))


if __name__ == "__main__":
    main()
