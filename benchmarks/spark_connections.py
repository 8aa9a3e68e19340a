"""New TCP connections per trigger of a Spark streaming query on the ``ydb_topic`` source and sink.

    python benchmarks/spark_connections.py --seconds 20

A local topic server runs in this process behind a counting TCP proxy, and discovery names the
proxy as the only node, so every connection Spark's processes open goes through it. A streaming
query (``ydb_topic`` source -> ``ydb_topic`` sink, a trigger every second, ``local[2]``) runs
first idle, then while a writer adds messages; the script prints the connections opened per
trigger in each phase. Only the options ``endpoint``, ``database`` and ``topic`` are used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

TRIGGER_SECONDS = 1


class CountingProxy:
    """Forwards TCP connections to a target and counts them."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pump(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.transport.abort()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from ydb_topic_async import Driver
    from ydb_topic_async.spark import register
    from ydb_topic_async.testing import LocalTopicServer

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    async def start() -> tuple[LocalTopicServer, CountingProxy]:
        server = LocalTopicServer()
        await server.start()
        proxy = CountingProxy(server.host, server.port)
        await proxy.start()
        server.discovery.nodes = [("127.0.0.1", proxy.port, 1)]
        async with Driver(server.endpoint, server.database) as driver:
            await driver.topic.create_topic("in", min_active_partitions=2)
            await driver.topic.create_topic("out", min_active_partitions=2)
        return server, proxy

    server, proxy = call(start())
    writing = threading.Event()
    stop = threading.Event()

    async def produce() -> None:
        async with Driver(server.endpoint, server.database) as driver:
            writer = driver.topic.writer("in", producer_id="load")
            async with writer:
                while not stop.is_set():
                    if writing.is_set():
                        await writer.write([b"x" * 100] * 20)
                    await asyncio.sleep(0.1)

    producer = asyncio.run_coroutine_threadsafe(produce(), loop)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    options = {"endpoint": f"grpc://127.0.0.1:{proxy.port}", "database": server.database}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            query = (
                spark.readStream.format("ydb_topic").options(**options, topic="in").load()
                .select("data")
                .writeStream.format("ydb_topic").options(**options, topic="out")
                .option("checkpointLocation", os.path.join(tmp, "cp"))
                .trigger(processingTime=f"{TRIGGER_SECONDS} seconds")
                .start()
            )
            time.sleep(args.seconds / 2)  # warm-up: Python workers start, first connections
            for phase in ("idle", "writing"):
                if phase == "writing":
                    writing.set()
                before = proxy.connections
                started = time.monotonic()
                time.sleep(args.seconds)
                opened = proxy.connections - before
                elapsed = time.monotonic() - started
                triggers = elapsed / TRIGGER_SECONDS
                print(
                    f"{phase:<8} {elapsed:.0f}s (~{triggers:.0f} triggers): {opened} new connections, "
                    f"{opened / triggers:.2f} per trigger"
                )
            query.stop()
    finally:
        spark.stop()
        stop.set()
        producer.result(30)
        call(proxy.close())
        call(server.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


if __name__ == "__main__":
    main()
