"""Read cost: this SDK's TopicReader, the official ``ydb`` SDK's async reader, and the floor.

    python benchmarks/read.py --messages 100000 --sizes 100
    python benchmarks/read.py --messages 20000 --sizes 100 1024 16384 --json results/read.json

The local topic server runs in its own process, so ``time.process_time`` here is the client's
CPU alone. A topic is filled once per size; each reader then reads all of it under a consumer of
its own and commits: ``batch`` mode is one ``receive_batch`` and one ``commit`` per batch,
taking every message of the batch and touching its ``.data`` and ``.offset`` (as the floor does),
``message`` mode one ``receive_message`` and one ``commit`` per message (YDB commits contiguous
ranges, so every message is committed; both SDKs merge them). Closing the reader (waiting for the
commit acknowledgements) is inside the measurement. Both SDKs get the same 50 MiB buffer. The
floor (``floor.py``) parses the ReadResponses, touches each message's ``.data`` and ``.offset``,
returns the credit and commits each response. Every round runs each client and mode once, in an
order that rotates between rounds; the round with the least client CPU is reported, with the
server's CPU seconds per wall second beside it (near 1.0, the server was the ceiling).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    Figure,
    ServerProcess,
    best,
    measure,
    measure_sizes,
    table,
)
from floor import floor_read, floor_write
from write import _drop, messages_for

BUFFER = 50 * 1024 * 1024  # the official reader's default buffer; ours gets the same
JOBS = (("ours", "batch"), ("ours", "message"), ("official", "batch"), ("official", "message"), ("floor", "batch"))


async def read_ours(endpoint: str, database: str, topic: str, consumer: str, n: int, mode: str) -> None:
    import ydb_topic_async as yta

    async with (
        yta.Driver(endpoint, database, discovery=False) as driver,
        driver.topic.reader(topic, consumer=consumer, buffer_size_bytes=BUFFER) as reader,
    ):
        got = 0
        if mode == "batch":
            while got < n:
                batch = await reader.receive_batch()
                # A batch builds its messages as it is iterated: take what a consumer would.
                for message in batch:
                    message.data, message.offset  # noqa: B018
                    got += 1
                reader.commit(batch)
        else:
            receive, commit = reader.receive_message, reader.commit
            while got < n:
                message = await receive()
                message.data, message.offset  # noqa: B018
                commit(message)
                got += 1


async def read_official(endpoint: str, database: str, topic: str, consumer: str, n: int, mode: str) -> None:
    import ydb
    import ydb.aio

    driver = ydb.aio.Driver(endpoint=endpoint, database=database)
    await driver.wait(timeout=10)
    try:
        reader = driver.topic_client.reader(topic, consumer=consumer, buffer_size_bytes=BUFFER)
        try:
            got = 0
            if mode == "batch":
                while got < n:
                    batch = await reader.receive_batch()
                    for message in batch.messages:
                        message.data, message.offset  # noqa: B018
                        got += 1
                    reader.commit(batch)
            else:
                while got < n:
                    message = await reader.receive_message()
                    message.data, message.offset  # noqa: B018
                    reader.commit(message)
                    got += 1
        finally:
            await reader.close()
    finally:
        await driver.stop()


async def fill(endpoint: str, database: str, topic: str, consumers: list[str], n: int, size: int) -> None:
    """Create ``topic`` with ``consumers`` and write ``n`` messages of ``size`` bytes (bare client: fast)."""
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(topic, consumers=consumers)
    await floor_write(endpoint, database, topic, b"r" * size, n, max(1, min(1000, 4_000_000 // (size + 64))))


def _official_label() -> str:
    import ydb

    return f"ydb {ydb.__version__} (official)"


async def run_size(
    server: ServerProcess | None, endpoint: str, database: str, args: argparse.Namespace, size: int
) -> list[Figure]:
    jobs = [job for job in JOBS if job[0] in args.clients and (job[1] in args.modes or job[0] == "floor")]
    consumers = [f"bench-{i}" for i in range(len(jobs) * args.rounds)]
    topic = f"{args.topic}-{size}"
    n = messages_for(size, args)
    await fill(endpoint, database, topic, consumers, n, size)
    labels = {"ours": "ydb-topic-async", "official": _official_label(), "floor": "floor (bare grpc.aio)"}
    rounds: dict[tuple[str, str], list[Figure]] = {job: [] for job in jobs}
    names = iter(consumers)
    for round_no in range(args.rounds):
        shift = round_no % len(jobs)
        for client, mode in jobs[shift:] + jobs[:shift]:
            consumer = next(names)
            run: Callable[[], Awaitable[object]]
            if client == "ours":
                run = lambda c=consumer, m=mode: read_ours(endpoint, database, topic, c, n, m)  # noqa: E731
            elif client == "official":
                run = lambda c=consumer, m=mode: read_official(endpoint, database, topic, c, n, m)  # noqa: E731
            else:
                run = lambda c=consumer: floor_read(endpoint, database, topic, c, n, BUFFER)  # noqa: E731
            rounds[(client, mode)].append(await measure(
                server, run, benchmark="read", client=client, label=labels[client], messages=n, size=size, mode=mode,
            ))
    if server is not None:
        await _drop(endpoint, database, topic)
    return [best(figures) for figures in rounds.values()]


def report(figures: list[Figure]) -> None:
    floor = next((f for f in figures if f.client == "floor"), None)
    # Both modes are compared with the batch-mode floor: the least a client can do per message.
    print(table(figures, {"batch": floor, "message": floor} if floor else None))
    by = {(f.client, f.mode): f for f in figures}
    for mode in ("batch", "message"):
        ours, official = by.get(("ours", mode)), by.get(("official", mode))
        if ours and official:
            print(
                f"{mode}: ours/official {ours.rate / official.rate:.2f}x messages/s, "
                f"{ours.client_us_per_message / official.client_us_per_message:.2f}x CPU per message"
            )
    if ("ours", "batch") in by and ("ours", "message") in by:
        ratio = by[("ours", "message")].client_us_per_message / by[("ours", "batch")].client_us_per_message
        print(f"ours: message mode with a commit per message costs {ratio:.2f}x batch mode")


async def main_async(args: argparse.Namespace) -> None:
    def heading(size: int) -> str:
        return f"{messages_for(size, args)} messages x {size} B, best of {args.rounds}"

    await measure_sizes("read", args, heading, run_size, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="messages in the topic (default 100000)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100], help="payload sizes in bytes (default 100)")
    parser.add_argument("--max-mib", type=int, default=200, help="fewer messages for large sizes: MiB per topic")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the least client CPU is reported (default 3)")
    parser.add_argument("--modes", nargs="+", choices=["batch", "message"], default=["batch", "message"])
    parser.add_argument("--clients", nargs="+", choices=["ours", "official", "floor"],
                        default=["ours", "official", "floor"])
    parser.add_argument("--endpoint", help="use this server instead of starting the local one")
    parser.add_argument("--database", default="/local")
    parser.add_argument("--topic", default="bench-read")
    parser.add_argument("--json", help="write the figures to this JSON file (for charts.py)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
