"""Write throughput: this SDK's TopicWriter against the official ``ydb`` SDK's async writer.

    python benchmarks/write.py --messages 100000 --size 100

The local topic server runs in a separate process, so the CPU time measured here
(``time.process_time`` of this process) is the client's alone. Each writer writes N messages of
S bytes with one ``await writer.write(msg)`` per message and then closes (which waits for every
acknowledgement). Both use the raw codec, so no compression work is compared. Each SDK runs
``--rounds`` times (3 by default) on a fresh topic; the best round is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import time

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no gRPC info lines (GOAWAY at shutdown) in the table

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection


def _serve(conn: Connection) -> None:
    """Child process: run the local topic server until the parent closes the pipe."""
    from ydb_topic_async.testing import LocalTopicServer

    async def main() -> None:
        async with LocalTopicServer() as server:
            conn.send((server.endpoint, server.database))
            loop = asyncio.get_running_loop()
            done = asyncio.Event()
            loop.add_reader(conn.fileno(), done.set)  # EOF when the parent exits or closes
            await done.wait()

    asyncio.run(main())


@dataclass
class Result:
    name: str
    seconds: float
    cpu_seconds: float
    messages: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_us_per_message(self) -> float:
        return self.cpu_seconds / self.messages * 1e6


async def _measure(name: str, messages: int, run: Callable[[], Awaitable[None]]) -> Result:
    started, cpu_started = time.perf_counter(), time.process_time()
    await run()
    return Result(name, time.perf_counter() - started, time.process_time() - cpu_started, messages)


async def bench_ours(endpoint: str, database: str, topic: str, n: int, payload: bytes) -> Result:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(topic)

        async def run() -> None:
            async with driver.topic.writer(topic, producer_id="bench-ours") as writer:
                write = writer.write
                for _ in range(n):
                    await write(payload)

        return await _measure("ydb-topic-async", n, run)


async def bench_official(endpoint: str, database: str, topic: str, n: int, payload: bytes) -> Result:
    import ydb
    import ydb.aio

    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as admin:
        await admin.topic.create_topic(topic)
    driver = ydb.aio.Driver(endpoint=endpoint, database=database)
    try:
        await driver.wait(timeout=10)

        async def run() -> None:
            async with driver.topic_client.writer(
                f"{database}/{topic}", producer_id="bench-official", codec=ydb.TopicCodec.RAW
            ) as writer:
                write = writer.write
                for _ in range(n):
                    await write(payload)

        return await _measure(f"ydb {ydb.__version__} (official)", n, run)
    finally:
        await driver.stop()


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()} {platform.release()}"


async def main_async(args: argparse.Namespace, endpoint: str, database: str) -> None:
    payload = os.urandom(args.size)
    runs = {"ours": bench_ours, "official": bench_official}
    best: dict[str, Result] = {}
    for round_no in range(args.rounds):
        # Alternate the order so neither SDK always runs on a warmer server.
        order = ["ours", "official"] if round_no % 2 == 0 else ["official", "ours"]
        for key in order:
            result = await runs[key](endpoint, database, f"bench-{key}-{round_no}", args.messages, payload)
            if key not in best or result.rate > best[key].rate:
                best[key] = result
    print(f"machine: {_machine()}")
    print(f"{args.messages} messages x {args.size} bytes, raw codec, best of {args.rounds} rounds")
    print(f"{'writer':<28} {'messages/s':>12} {'client CPU us/msg':>18} {'wall s':>8}")
    for result in best.values():
        print(f"{result.name:<28} {result.rate:>12,.0f} {result.cpu_us_per_message:>18.2f} {result.seconds:>8.2f}")
    ours, official = best["ours"], best["official"]
    print(
        f"ours/official: {ours.rate / official.rate:.2f}x messages/s,"
        f" {ours.cpu_us_per_message / official.cpu_us_per_message:.2f}x CPU per message"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="messages per writer (default 100000)")
    parser.add_argument("--size", type=int, default=100, help="payload bytes per message (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per SDK; the best is reported (default 3)")
    parser.add_argument("--endpoint", help="use this server instead of starting the local one")
    parser.add_argument("--database", default="/local")
    args = parser.parse_args()
    if args.endpoint:
        asyncio.run(main_async(args, args.endpoint, args.database))
        return
    parent, child = multiprocessing.get_context("spawn").Pipe()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    server.start()
    try:
        endpoint, database = parent.recv()
        asyncio.run(main_async(args, endpoint, database))
    finally:
        parent.close()
        server.join(timeout=5)
        if server.is_alive():
            server.terminate()


if __name__ == "__main__":
    main()
