"""Read throughput: this SDK's TopicReader against the official ``ydb`` SDK's async reader.

    python benchmarks/read.py --messages 100000 --size 100

The local topic server runs in a separate process, so ``time.process_time`` here is the
client's CPU alone. The topic is filled once (with this SDK's writer); each reader then reads
all of it under its own consumer and commits: in ``batch`` mode one ``receive_batch`` +
``commit`` per batch, in ``message`` mode one ``receive_message`` and one ``commit`` per message
(YDB commits are contiguous ranges, so every message is committed; both SDKs merge them).
Closing the reader (waiting for the commit acks) is inside the measurement.
The best of ``--rounds`` is reported; the order alternates between rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import platform
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

BUFFER = 50 * 1024 * 1024  # the official reader's default buffer; ours gets the same


def _serve(conn: Connection) -> None:
    """Child process: the local topic server, until the parent closes the pipe."""
    from ydb_topic_async.testing import LocalTopicServer

    async def main() -> None:
        async with LocalTopicServer() as server:
            conn.send((server.endpoint, server.database))
            done = asyncio.Event()
            asyncio.get_running_loop().add_reader(conn.fileno(), done.set)
            await done.wait()

    asyncio.run(main())


@dataclass
class Result:
    name: str
    mode: str
    seconds: float
    cpu_seconds: float
    messages: int

    def row(self) -> str:
        rate = self.messages / self.seconds
        cpu = self.cpu_seconds / self.messages * 1e6
        return f"| {self.name} | {self.mode} | {rate:,.0f} | {cpu:.1f} |"


async def _measure(name: str, mode: str, n: int, run: Callable[[], Awaitable[None]]) -> Result:
    wall, cpu = time.perf_counter(), time.process_time()
    await run()
    return Result(name, mode, time.perf_counter() - wall, time.process_time() - cpu, n)


async def bench_ours(endpoint: str, database: str, topic: str, consumer: str, n: int, mode: str) -> Result:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:

        async def run() -> None:
            async with driver.topic.reader(topic, consumer=consumer, buffer_size_bytes=BUFFER) as reader:
                got = 0
                if mode == "batch":
                    while got < n:
                        batch = await reader.receive_batch()
                        got += len(batch)
                        reader.commit(batch)
                else:
                    receive = reader.receive_message
                    while got < n:
                        message = await receive()
                        got += 1
                        reader.commit(message)

        return await _measure("ydb-topic-async", mode, n, run)


async def bench_official(endpoint: str, database: str, topic: str, consumer: str, n: int, mode: str) -> Result:
    import ydb
    import ydb.aio

    driver = ydb.aio.Driver(endpoint=endpoint, database=database)
    await driver.wait(timeout=10)
    try:

        async def run() -> None:
            reader = driver.topic_client.reader(topic, consumer=consumer, buffer_size_bytes=BUFFER)
            try:
                got = 0
                if mode == "batch":
                    while got < n:
                        batch = await reader.receive_batch()
                        got += len(batch.messages)
                        reader.commit(batch)
                else:
                    while got < n:
                        message = await reader.receive_message()
                        got += 1
                        reader.commit(message)
            finally:
                await reader.close()

        return await _measure(f"ydb {ydb.__version__} (official)", mode, n, run)
    finally:
        await driver.stop()


async def prefill(endpoint: str, database: str, topic: str, consumers: list[str], n: int, size: int) -> None:
    import ydb_topic_async as yta

    payload = b"r" * size
    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(topic, consumers=consumers)
        async with driver.topic.writer(topic, producer_id="bench-fill") as writer:
            for _ in range(n):
                await writer.write(payload)


async def main_async(args: argparse.Namespace, endpoint: str, database: str) -> None:
    modes = ["batch", "message"] if args.mode == "both" else [args.mode]
    jobs: list[tuple[str, str, Any]] = []
    for rnd in range(args.rounds):
        for mode in modes:
            pair = [("ours", bench_ours), ("official", bench_official)]
            if rnd % 2:
                pair.reverse()
            jobs.extend((name, mode, fn) for name, fn in pair)
    consumers = [f"bench-{i}" for i in range(len(jobs))]
    if args.no_prefill:
        topic = args.topic
    else:
        topic = f"{args.topic}-{int(time.time())}"
        started = time.perf_counter()
        await prefill(endpoint, database, topic, consumers, args.messages, args.size)
        print(f"filled {topic}: {args.messages} x {args.size} B in {time.perf_counter() - started:.1f}s")
    best: dict[tuple[str, str], Result] = {}
    for consumer, (name, mode, fn) in zip(consumers, jobs, strict=True):
        result = await fn(endpoint, database, topic, consumer, args.messages, mode)
        key = (name, mode)
        if key not in best or result.seconds < best[key].seconds:
            best[key] = result
    print(f"\n{args.messages} messages x {args.size} B, best of {args.rounds}; {platform.python_version()}")
    print("| reader | mode | messages/s | client CPU µs/message |\n|---|---|---:|---:|")
    for mode in modes:
        for name in ("ours", "official"):
            print(best[(name, mode)].row())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="messages in the topic (default 100000)")
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message (default 100)")
    parser.add_argument("--rounds", type=int, default=1, help="runs per reader and mode; best is reported")
    parser.add_argument("--mode", choices=["batch", "message", "both"], default="both")
    parser.add_argument("--endpoint", help="use this server instead of starting the local one")
    parser.add_argument("--database", default="/local")
    parser.add_argument("--topic", default="bench-read")
    parser.add_argument(
        "--no-prefill", action="store_true", help="read --topic as it is (consumers bench-0.. must exist)"
    )
    args = parser.parse_args()
    if args.endpoint:
        asyncio.run(main_async(args, args.endpoint, args.database))
        return
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    proc.start()
    try:
        endpoint, database = parent.recv()
        asyncio.run(main_async(args, endpoint, database))
    finally:
        parent.close()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()


if __name__ == "__main__":
    main()
