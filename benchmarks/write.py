"""Write cost: this SDK's TopicWriter, the official ``ydb`` SDK's async writer, and the floor.

    python benchmarks/write.py --messages 100000 --sizes 100
    python benchmarks/write.py --messages 20000 --sizes 100 1024 16384 --json results/write.json

The local topic server runs in its own process, so ``time.process_time`` here is the client's
CPU alone (gRPC's threads included). Each writer writes N messages of S bytes, one
``await writer.write(payload)`` per message, then closes (which waits for every acknowledgement);
both SDKs use the raw codec. The floor (``floor.py``) is a bare ``grpc.aio`` client building and
serializing the same WriteRequests, with the batching this SDK's writer used in the same run (the
mean messages per WriteRequest the server received from it, over its rounds so far). Every round
runs each client once on a fresh topic, in an order that rotates between rounds; the round with
the least client CPU is reported. Beside each figure: the server's CPU seconds per wall second during it (near 1.0, the
server was the ceiling of the message rate) and its CPU per message.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    Figure,
    ServerProcess,
    best,
    measure,
    measure_sizes,
    messages_per_write_request,
    table,
)
from floor import floor_write

CLIENTS = ("ours", "official", "floor")


async def write_ours(endpoint: str, database: str, topic: str, n: int, payload: bytes) -> None:
    import ydb_topic_async as yta

    async with (
        yta.Driver(endpoint, database, discovery=False) as driver,
        driver.topic.writer(topic, producer_id="bench-ours") as writer,
    ):
        write = writer.write
        for _ in range(n):
            await write(payload)


async def write_official(endpoint: str, database: str, topic: str, n: int, payload: bytes) -> None:
    import ydb
    import ydb.aio

    driver = ydb.aio.Driver(endpoint=endpoint, database=database)
    try:
        await driver.wait(timeout=10)
        async with driver.topic_client.writer(
            f"{database}/{topic}", producer_id="bench-official", codec=ydb.TopicCodec.RAW
        ) as writer:
            write = writer.write
            for _ in range(n):
                await write(payload)
    finally:
        await driver.stop()


async def _create(endpoint: str, database: str, topic: str) -> None:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as admin:
        await admin.topic.create_topic(topic)


async def _drop(endpoint: str, database: str, topic: str) -> None:
    """Free what the measurement stored (the local server keeps everything in memory)."""
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as admin:
        await admin.topic.drop_topic(topic)


def messages_for(size: int, args: argparse.Namespace) -> int:
    """``--messages``, fewer for large payloads: at most ``--max-mib`` MiB per measurement."""
    return max(100, min(args.messages, args.max_mib * 1024 * 1024 // size))


def _official_label() -> str:
    import ydb

    return f"ydb {ydb.__version__} (official)"


async def run_size(
    server: ServerProcess | None, endpoint: str, database: str, args: argparse.Namespace, size: int
) -> list[Figure]:
    payload = os.urandom(size)
    n = messages_for(size, args)
    labels = {"ours": "ydb-topic-async", "official": _official_label(), "floor": "floor (bare grpc.aio)"}
    rounds: dict[str, list[Figure]] = {c: [] for c in args.clients}
    batch = args.floor_batch
    for round_no in range(args.rounds):
        order = [c for c in CLIENTS if c in args.clients]
        order = order[round_no % len(order) :] + order[: round_no % len(order)]
        if round_no == 0 and "floor" in order and "ours" in order and not batch:
            order.remove("ours")
            order.insert(0, "ours")  # the floor copies the batching ours used: measure ours first
        for client in order:
            topic = f"bench-write-{client}-{size}-{round_no}"
            await _create(endpoint, database, topic)
            run: Any
            if client == "ours":
                run = lambda topic=topic: write_ours(endpoint, database, topic, n, payload)  # noqa: E731
            elif client == "official":
                run = lambda topic=topic: write_official(endpoint, database, topic, n, payload)  # noqa: E731
            else:
                use = batch or 1000
                run = lambda topic=topic, use=use: floor_write(endpoint, database, topic, payload, n, use)  # noqa: E731
            figure = await measure(
                server, run, benchmark="write", client=client, label=labels[client], messages=n, size=size,
                mode="write",
            )
            if server is not None:
                await _drop(endpoint, database, topic)
            if client == "ours" and not args.floor_batch:
                means = [m for f in [*rounds["ours"], figure] if (m := messages_per_write_request(f))]
                if means:
                    batch = max(1, round(sum(means) / len(means)))
            rounds[client].append(figure)
    return [best(rounds[c]) for c in CLIENTS if c in rounds]


def report(figures: list[Figure]) -> None:
    floor = next((f for f in figures if f.client == "floor"), None)
    print(table(figures, {"write": floor} if floor else None))
    ours = next((f for f in figures if f.client == "ours"), None)
    official = next((f for f in figures if f.client == "official"), None)
    if ours and official:
        print(
            f"ours/official: {ours.rate / official.rate:.2f}x messages/s, "
            f"{ours.client_us_per_message / official.client_us_per_message:.2f}x CPU per message"
        )
    for f in figures:
        per_request = messages_per_write_request(f)
        if per_request:
            print(f"  {f.label}: {per_request:.0f} messages per WriteRequest")


async def main_async(args: argparse.Namespace) -> None:
    def heading(size: int) -> str:
        return f"{messages_for(size, args)} messages x {size} B, raw codec, best of {args.rounds} rounds"

    await measure_sizes("write", args, heading, run_size, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="messages per writer (default 100000)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100], help="payload sizes in bytes (default 100)")
    parser.add_argument("--max-mib", type=int, default=200, help="fewer messages for large sizes: MiB per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the least client CPU is reported (default 3)")
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    parser.add_argument("--floor-batch", type=int, default=0,
                        help="messages per WriteRequest for the floor (default: as this SDK's writer batched)")
    parser.add_argument("--endpoint", help="use this server instead of starting the local one")
    parser.add_argument("--database", default="/local")
    parser.add_argument("--json", help="write the figures to this JSON file (for charts.py)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
