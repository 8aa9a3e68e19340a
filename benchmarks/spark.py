"""Spark throughput of the ``ydb_topic`` data source: rows/s for a batch read and a batch write.

    python benchmarks/spark.py --rows 200000 --size 100 --partitions 4 --rounds 5 [--cpu]

The local topic server runs in a separate process; Spark runs ``local[2]``. The read fills a
topic with the async writer, then times ``spark.read.format("ydb_topic")...`` computing
``count(*)`` and ``sum(length(data))`` over every row (so each message is read and converted);
the write times ``df.write.format("ydb_topic")`` of the same number of rows (every task waits for
all acknowledgements). Each is run ``--rounds`` times after a warm-up, taking turns with the
others, and the best round is reported, with the ratios of the rounds (each Spark run against
its reference in the same round).

The reference, in the same run: the async SDK alone doing the same work in this process (a
reader without a consumer over every partition, taking each message's payload; one writer per
partition, concurrently), i.e. what the server and the client library allow before Spark's tasks
and row handling are added. The floors are Spark alone: "read floor" runs the same query over a
Python data source that yields ready-made Arrow batches of the same schema and size from memory,
"write floor" writes the same rows to a Python data source that drops them.

``--cpu`` (Linux) adds the CPU seconds each operation used, on average: the server process, this
process (the SDK reference), Spark's JVM and its Python workers, and per row.

``--cpus 0`` (Linux) runs everything (this process, the server, Spark's JVM and Python workers) on
those CPUs only (``sched_setaffinity``, inherited by every process started): run it with one CPU
and with two to see whether the ratio is bound by the machine's cores, and ``--cpus 0,1`` against
``--cpus 0`` tells how each side scales with a second core.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def floor_source(rows: int, partitions: int, size: int) -> type:
    """A Python data source that yields ready-made Arrow batches in the ``ydb_topic`` schema, and
    whose writer takes Arrow batches and drops them."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    from ydb_topic_async.spark.source import SCHEMA, _arrow_schema

    class FloorReader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition: InputPartition) -> object:
            import pyarrow as pa

            arrow = _arrow_schema(SCHEMA)
            n = 8192
            ts = arrow.field("created_at").type
            columns = {
                "topic": pa.array(["bench/read"] * n), "partition": pa.array([partition.value] * n, pa.int32()),
                "offset": pa.array(range(n), pa.int64()), "seq_no": pa.array(range(1, n + 1), pa.int64()),
                "producer_id": pa.array(["p0"] * n), "message_group_id": pa.array(["p0"] * n),
                "created_at": pa.array([0] * n, ts), "written_at": pa.array([0] * n, ts),
                "metadata": pa.array([{}] * n, arrow.field("metadata").type),
                "data": pa.array([b"x" * size] * n, pa.binary()),
            }
            batch = pa.RecordBatch.from_arrays([columns[f.name] for f in arrow], schema=arrow)
            left = rows // partitions
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class FloorWriter(DataSourceArrowWriter):  # type: ignore[misc]
        def write(self, iterator: object) -> WriterCommitMessage:
            rows = sum(batch.num_rows for batch in iterator)  # type: ignore[attr-defined]
            assert rows > 0
            return WriterCommitMessage()

    class Floor(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "ydb_topic_floor"

        def schema(self) -> object:
            return SCHEMA

        def reader(self, schema: object) -> FloorReader:
            return FloorReader()

        def writer(self, schema: object, overwrite: bool) -> FloorWriter:
            return FloorWriter()

    return Floor


def cpu_seconds(server_pid: int) -> dict[str, float]:
    """CPU seconds used so far by the server, this process, and the JVM and Python workers below it."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    java: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # the process ended meanwhile
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        pid = int(stat.parent.name)
        parent[pid], used[pid] = int(fields[1]), (int(fields[11]) + int(fields[12])) / tick
        if name == "java":
            java.add(pid)
    me = os.getpid()

    def below_me(pid: int) -> bool:
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == me:
                return True
        return False

    spark = [pid for pid in used if below_me(pid) and pid != server_pid]
    return {
        "server": used.get(server_pid, 0.0),
        "SDK": used.get(me, 0.0),
        "JVM": sum(used[pid] for pid in spark if pid in java),
        "Python workers": sum(used[pid] for pid in spark if pid not in java),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes per row")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (= Spark read tasks)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="also report CPU seconds per process kind (Linux)")
    parser.add_argument("--cpus", help="run on these CPUs only, e.g. 0 or 0,1 (Linux)")
    args = parser.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in args.cpus.split(",")})

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ydb_topic_async import Driver, TopicSelector
    from ydb_topic_async.spark import register

    server = subprocess.Popen(
        [sys.executable, "-m", "ydb_topic_async.testing", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    match = re.search(r"(grpcs?://[^/\s]+)/\?database=(\S+)", server.stdout.readline())
    assert match is not None
    endpoint, database = match.group(1), match.group(2)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # keep Spark on loopback
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(floor_source(args.rows, args.partitions, args.size))
    payload = b"x" * args.size

    async def fill() -> None:
        async with Driver(endpoint, database) as driver:
            await driver.topic.create_topic("bench/read", min_active_partitions=args.partitions)
            for pid in range(args.partitions):
                async with driver.topic.writer("bench/read", producer_id=f"p{pid}", partition_id=pid) as writer:
                    for _ in range(args.rows // args.partitions):
                        await writer.write(payload)
            for r in range(args.rounds + 1):
                await driver.topic.create_topic(f"bench/write-{r}", min_active_partitions=args.partitions)
                await driver.topic.create_topic(f"bench/sdk-write-{r}", min_active_partitions=args.partitions)

    try:
        asyncio.run(fill())
        rows = args.rows // args.partitions * args.partitions
        options = {"endpoint": endpoint, "database": database}

        def read(source: str = "ydb_topic") -> None:
            reader = spark.read.format(source)
            if source == "ydb_topic":
                reader = reader.options(**options, topic="bench/read")
            df = reader.load()
            total = df.select(F.count("*"), F.sum(F.length("data"))).collect()[0]
            assert total[0] == rows, total

        source = spark.range(rows, numPartitions=args.partitions).select(
            F.lit(payload).alias("data")
        ).cache()
        source.count()

        def write(r: int, sink: str = "ydb_topic") -> None:
            writer = source.write.format(sink).mode("append")
            if sink == "ydb_topic":
                writer = writer.options(**options, topic=f"bench/write-{r}")
            writer.save()

        async def sdk_read() -> None:
            selector = TopicSelector("bench/read", start_offsets=dict.fromkeys(range(args.partitions), 0))
            seen = size = 0
            async with Driver(endpoint, database) as driver, driver.topic.reader(selector, consumer=None) as reader:
                while seen < rows:
                    batch = await reader.receive_batch(timeout=30)
                    seen += len(batch)
                    size += sum(len(m.data) for m in batch)  # as the query does: each row's payload
            assert size == rows * args.size

        async def sdk_write(r: int) -> None:
            async def one_partition(driver: Driver, pid: int) -> None:
                topic = f"bench/sdk-write-{r}"
                async with driver.topic.writer(topic, producer_id=f"p{pid}", partition_id=pid) as writer:
                    for _ in range(rows // args.partitions):
                        await writer.write(payload)

            async with Driver(endpoint, database) as driver:
                await asyncio.gather(*(one_partition(driver, pid) for pid in range(args.partitions)))

        operations = {
            "batch read": lambda r: read(),
            "read floor": lambda r: read("ydb_topic_floor"),
            "SDK read": lambda r: asyncio.run(sdk_read()),
            "batch write": write,
            "write floor": lambda r: write(r, "ydb_topic_floor"),
            "SDK write": lambda r: asyncio.run(sdk_write(r)),
        }
        times: dict[str, list[float]] = {name: [] for name in operations}
        cpu: dict[str, list[dict[str, float]]] = {name: [] for name in operations}
        # Round 0 warms up Python workers and gRPC. The operations take turns within each round,
        # so Spark and its reference share whatever else the machine is doing at the time.
        for r in range(args.rounds + 1):
            for name, run in operations.items():
                before = cpu_seconds(server.pid) if args.cpu else {}
                started = time.perf_counter()
                run(r)
                if r:
                    times[name].append(time.perf_counter() - started)
                    if args.cpu:
                        after = cpu_seconds(server.pid)
                        cpu[name].append({kind: after[kind] - before[kind] for kind in after})
        cpus = sorted(os.sched_getaffinity(0))
        print(f"\n{rows} rows x {args.size} B, {args.partitions} partitions, local[2], best of {args.rounds}, "
              f"on CPUs {cpus}")
        print(f"{'operation':<12}{'seconds':>9}{'rows/s':>10}" + ("   CPU seconds (µs per row)" if args.cpu else ""))
        for name, seconds in times.items():
            line = f"{name:<12}{min(seconds):>9.2f}{rows / min(seconds):>10.0f}"
            if args.cpu:
                used = {kind: statistics.mean(c[kind] for c in cpu[name]) for kind in cpu[name][0]}
                line += "   " + ", ".join(f"{kind} {value:.2f}" for kind, value in used.items() if value >= 0.005)
                line += f" (all {sum(used.values()) / rows * 1e6:.1f} µs/row)"
            print(line)

        def ratios(spark_op: str, reference: str) -> str:
            """Rate of ``spark_op`` over ``reference``: of the best rounds, and each round's (median, range)."""
            each = sorted(t / s for s, t in zip(times[spark_op], times[reference], strict=True))
            best = min(times[reference]) / min(times[spark_op])
            return f"{best:.0%} (rounds: median {statistics.median(each):.0%}, {each[0]:.0%}..{each[-1]:.0%})"

        print(f"Spark read / SDK read:   {ratios('batch read', 'SDK read')}")
        print(f"Spark write / SDK write: {ratios('batch write', 'SDK write')}")
        print(f"read floor / SDK read:   {ratios('read floor', 'SDK read')}")
        print(f"Spark read / read floor: {ratios('batch read', 'read floor')}")
    finally:
        spark.stop()
        server.terminate()
        server.wait(timeout=10)
        server.stdout.close()


if __name__ == "__main__":
    main()
