"""Start-up and scale: time to the first ack, memory per idle writer and per reader partition session.

    python benchmarks/scale.py --writers 1000 --partitions 1000 --json results/scale.json

Each figure is taken in a fresh child process (``large.in_child``), so nothing is warm or
allocated by an earlier measurement; the packages are imported before any clock starts.

- time to first ack: from creating the ``Driver`` to the acknowledgement of one
  ``write_with_ack`` (ours) or ``write_with_ack`` on the official SDK's writer (which waits for
  its driver's discovery first); the median of ``--repeat`` processes;
- memory per idle writer: RSS growth of a process that opens ``--writers`` writers on one topic
  (one producer id each) and waits for every handshake, divided by the writer count;
- memory per reader partition session: RSS growth of a process whose one reader (this SDK) holds
  ``--partitions`` partition sessions, divided by that count.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figure, ServerProcess, describe_machine, machine, rss_bytes, write_json
from large import in_child

KIB = 1024


async def first_ack_ours(endpoint: str, database: str, topic: str) -> dict[str, Any]:
    import ydb_topic_async as yta

    started = time.perf_counter()
    async with (
        yta.Driver(endpoint, database, discovery=False) as driver,
        driver.topic.writer(topic, producer_id=f"first-{time.time_ns()}") as writer,
    ):
        await writer.write_with_ack(b"first")
        elapsed = time.perf_counter() - started
    return {"seconds": elapsed}


async def first_ack_official(endpoint: str, database: str, topic: str) -> dict[str, Any]:
    import ydb
    import ydb.aio

    started = time.perf_counter()
    driver = ydb.aio.Driver(endpoint=endpoint, database=database)
    try:
        await driver.wait(timeout=10)
        async with driver.topic_client.writer(f"{database}/{topic}", producer_id=f"first-{time.time_ns()}") as writer:
            await writer.write_with_ack(ydb.TopicWriterMessage(b"first"))
            elapsed = time.perf_counter() - started
    finally:
        await driver.stop()
    return {"seconds": elapsed}


async def idle_writers_ours(endpoint: str, database: str, topic: str, count: int) -> dict[str, Any]:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        warm = driver.topic.writer(topic, producer_id="warm")
        await warm.wait_init()
        before = rss_bytes()
        writers = [driver.topic.writer(topic, producer_id=f"idle-{i}") for i in range(count)]
        await asyncio.gather(*(w.wait_init() for w in writers))
        grown = rss_bytes() - before
        for w in [*writers, warm]:
            await w.close()
    return {"bytes_per_item": grown / count}


async def idle_writers_official(endpoint: str, database: str, topic: str, count: int) -> dict[str, Any]:
    import ydb
    import ydb.aio

    driver = ydb.aio.Driver(endpoint=endpoint, database=database)
    await driver.wait(timeout=10)
    try:
        path = f"{database}/{topic}"
        warm = driver.topic_client.writer(path, producer_id="warm")
        await warm.wait_init()
        before = rss_bytes()
        writers = [driver.topic_client.writer(path, producer_id=f"idle-{i}") for i in range(count)]
        await asyncio.gather(*(w.wait_init() for w in writers))
        grown = rss_bytes() - before
        for w in [*writers, warm]:
            await w.close()
    finally:
        await driver.stop()
    return {"bytes_per_item": grown / count}


async def partition_sessions_ours(endpoint: str, database: str, topic: str, count: int) -> dict[str, Any]:
    import ydb_topic_async as yta

    started: set[int] = set()
    everything = asyncio.Event()

    def on_start(session: Any) -> None:
        started.add(session.partition_id)
        if len(started) == count:
            everything.set()

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.describe_topic(topic)
        before = rss_bytes()
        async with driver.topic.reader(topic, consumer="c", on_partition_start=on_start):
            await asyncio.wait_for(everything.wait(), 120)
            grown = rss_bytes() - before
    return {"bytes_per_item": grown / count}


async def _create(endpoint: str, database: str, topic: str, partitions: int = 1) -> None:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(topic, min_active_partitions=partitions, consumers=["c"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="processes per time-to-first-ack figure")
    parser.add_argument("--writers", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--json", help="write the figures to this JSON file")
    args = parser.parse_args()
    import ydb

    official = f"ydb {ydb.__version__} (official)"
    print(f"machine: {describe_machine(machine())}")
    figures: list[Figure] = []

    def add(mode: str, client: str, label: str, value: float, unit: str, items: int) -> None:
        figures.append(Figure(benchmark="scale", client=client, label=label, messages=items, size=0, seconds=0.0,
                              client_cpu_seconds=0.0, mode=mode, extra={"value": value, "unit": unit}))

    with ServerProcess() as server:
        endpoint, database = server.endpoint, server.database
        asyncio.run(_create(endpoint, database, "first"))
        for client, label, fn in (("ours", "ydb-topic-async", first_ack_ours),
                                  ("official", official, first_ack_official)):
            times = [in_child(fn, endpoint, database, "first")["seconds"] for _ in range(args.repeat)]
            add("time to first ack", client, label, statistics.median(times) * 1000, "ms", 1)
        asyncio.run(_create(endpoint, database, "idle"))
        for client, label, fn in (("ours", "ydb-topic-async", idle_writers_ours),
                                  ("official", official, idle_writers_official)):
            result = in_child(fn, endpoint, database, "idle", args.writers)
            add("memory per idle writer", client, label, result["bytes_per_item"] / KIB, "KiB", args.writers)
        asyncio.run(_create(endpoint, database, "wide", args.partitions))
        result = in_child(partition_sessions_ours, endpoint, database, "wide", args.partitions)
        add("memory per reader partition session", "ours", "ydb-topic-async", result["bytes_per_item"] / KIB, "KiB",
            args.partitions)
    print("| figure | client | value |\n|---|---|---:|")
    for f in figures:
        print(f"| {f.mode} | {f.label} | {f.extra['value']:.1f} {f.extra['unit']} |")
    write_json(args.json, "scale", args, figures)


if __name__ == "__main__":
    main()
