"""Spark test fixtures: a local topic server on loopback and one SparkSession per test session.

Python data source tasks run in Spark's Python worker processes, which reach the server over
loopback as they would reach a cluster. The server runs on an event loop in a thread of the test
process, so tests can also reach into it (move its clock, put a proxy in front of it).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import os
import shutil
import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ydb_topic_async import Credentials, Driver, Message, TopicMessage, TopicSelector
from ydb_topic_async.extras import install_hint
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import FlakyProxy

from .._polling import eventually

T = TypeVar("T")
_names = itertools.count()

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.UTC)
"""``write_messages``' first created_at (YDB keeps milliseconds); message i is i seconds later."""


class ServerThread:
    """A ``LocalTopicServer`` (and proxies in front of it) on an event loop in a background thread."""

    def __init__(self, **server_options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="local-topic-server", daemon=True)
        self._thread.start()
        self._proxies: list[FlakyProxy] = []
        self.server: LocalTopicServer = self.call(self._start(server_options))

    @staticmethod
    async def _start(options: dict[str, Any]) -> LocalTopicServer:
        server = LocalTopicServer(**options)
        await server.start()
        return server

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run ``coro`` on the server's loop (bounded wait)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def do(self, fn: Callable[[], T]) -> T:
        """Call ``fn()`` on the server's loop (for sync methods of the server and proxies)."""

        async def call() -> T:
            return fn()

        return self.call(call())

    def proxy(self) -> FlakyProxy:
        """A started proxy in front of the server; discovery names it as the only node, so every
        connection of a client that starts at the proxy goes through it."""
        proxy = FlakyProxy(self.server.host, self.server.port)
        self.call(proxy.start())
        self._proxies.append(proxy)
        return proxy

    def route_discovery_through(self, proxy: FlakyProxy | None) -> None:
        nodes = [] if proxy is None else [("127.0.0.1", int(proxy.endpoint.rsplit(":", 1)[1]), 1)]
        self.do(lambda: setattr(self.server.discovery, "nodes", nodes))

    def close(self) -> None:
        for proxy in self._proxies:
            self.call(proxy.close())
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclass(frozen=True)
class Server:
    """Where a test's Spark queries and SDK clients reach the server; ``credentials`` for a
    server that asks for them."""

    endpoint: str
    database: str
    thread: ServerThread
    credentials: Credentials | None = None

    def options(self, topic: str, **extra: str) -> dict[str, str]:
        return {"endpoint": self.endpoint, "database": self.database, "topic": topic, **extra}

    def run(self, fn: Callable[[Driver], Awaitable[T]]) -> T:
        """Run ``fn(driver)`` with a fresh driver on a private event loop (these tests are synchronous)."""

        async def main() -> T:
            async with Driver(self.endpoint, self.database, self.credentials) as driver:
                return await fn(driver)

        return asyncio.run(main())

    @property
    def local(self) -> LocalTopicServer:
        return self.thread.server

    def stored_count(self, topic: str) -> int:
        """How many messages ``topic`` holds (its partitions' end offsets added up)."""

        async def count(driver: Driver) -> int:
            description = await driver.topic.describe_topic(topic, include_stats=True)
            return sum(p.stats.end_offset for p in description.partitions if p.stats)

        return self.run(count)

    def messages(self, topic: str) -> list[TopicMessage]:
        """Every message ``topic`` holds, read with the SDK's reader (not through Spark)."""

        async def main(driver: Driver) -> list[TopicMessage]:
            description = await driver.topic.describe_topic(topic, include_stats=True)
            bounds = {p.partition_id: (p.stats.start_offset, p.stats.end_offset) for p in description.partitions
                      if p.stats}
            result: list[TopicMessage] = []
            selector = TopicSelector(topic, start_offsets={pid: first for pid, (first, _) in bounds.items()})
            async with driver.topic.reader(selector, consumer=None) as reader:
                while len(result) < sum(end - first for first, end in bounds.values()):
                    result.extend(await reader.receive_batch(timeout=10))
            return sorted(result, key=lambda m: (m.partition_id, m.offset))

        return self.run(main)

    def stored_data(self, topic: str) -> list[bytes]:
        """The payloads ``topic`` holds, by partition, oldest first (read as ``messages`` does)."""
        return [m.data for m in self.messages(topic)]


def create(server: Server, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` with ``partitions`` partitions and the consumer ``spark``."""
    server.run(lambda d: d.topic.create_topic(topic, min_active_partitions=partitions, consumers=["spark"]))


def write_messages(server: Server, topic: str, partitions: int, per_partition: int, *, create: bool = True) -> None:
    """``per_partition`` messages into each partition: data ``p<pid>-<i>``, seq_no 10*(i+1), metadata;
    with ``create``, the topic is created first (with the consumer ``spark``)."""

    async def main(driver: Driver) -> None:
        if create:
            await driver.topic.create_topic(topic, min_active_partitions=partitions, consumers=["spark"])
        for pid in range(partitions):
            async with driver.topic.writer(
                topic, producer_id=f"producer-{pid}", partition_id=pid, auto_seqno=False, auto_created_at=False
            ) as writer:
                start = (await writer.wait_init()).last_seq_no // 10
                for i in range(start, start + per_partition):
                    await writer.write(
                        Message(
                            f"p{pid}-{i}".encode(),
                            seq_no=10 * (i + 1),
                            created_at=T0 + dt.timedelta(seconds=i),
                            metadata={"n": str(i).encode(), "kind": b"test"},
                        )
                    )

    server.run(main)


def read_all(spark: Any, server: Server, topic: str, **options: str) -> list[Any]:
    """Every row of ``topic`` read by a Spark batch query (with the source's ``options``), by
    partition and offset."""
    df = spark.read.format("ydb_topic").options(**server.options(topic, **options)).load()
    return sorted(df.collect(), key=lambda r: (r.partition, r.offset))


def payload_counts(spark: Any, server: Server, topic: str) -> Counter[bytes]:
    """How many times each payload stands in ``topic``, read by a Spark batch query."""
    return Counter(r.data for r in read_all(spark, server, topic))


def copy_stream(
    spark: Any, server: Server, source: str, sink: str, checkpoint: Path, *, columns: Sequence[str] = ("data",),
    **options: str,
) -> Any:
    """Copy ``source`` (read with ``options``) to ``sink`` with Trigger.AvailableNow, each row as the
    SQL expressions ``columns``; returns the query once it ended (failed or not)."""
    query = (
        spark.readStream.format("ydb_topic")
        .options(**server.options(source, **options))
        .load()
        .selectExpr(*columns)
        .writeStream.format("ydb_topic")
        .options(**server.options(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    return ended(query)


def wait_for(condition: Callable[[], object], timeout: float, what: str, query: Any = None) -> None:
    """``eventually`` for these synchronous tests: ``condition`` runs in a worker thread (it may run
    an event loop of its own, as ``Server.run`` does); a ``query`` that fails or ends while waiting
    fails the wait at once."""

    def reached() -> bool:
        if query is not None and not query.isActive:
            raise AssertionError(f"the query ended while waiting for {what}: {query.exception()}")
        return bool(condition())

    asyncio.run(eventually(lambda: asyncio.to_thread(reached), what, timeout=timeout, interval=0.05))


def start_server(**options: Any) -> tuple[ServerThread, Server]:
    thread = ServerThread(**options)
    return thread, Server(thread.server.endpoint, thread.server.database, thread)


@pytest.fixture(scope="session", autouse=True)
def _shared_connections() -> Iterator[None]:
    """Tests call executor-side code in this process too: close its shared connections at the end."""
    yield
    from ydb_topic_async.spark._bridge import shutdown

    shutdown()


@pytest.fixture(scope="session")
def ydb_server() -> Iterator[Server]:
    """One server for the session's tests (each uses topics of its own)."""
    thread, server = start_server()
    try:
        yield server
    finally:
        thread.close()


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A server for one test: for tests that move its clock (``advance_time``), which would age
    every other test's messages on a shared one."""
    thread, server = start_server()
    try:
        yield server
    finally:
        thread.close()


def require_spark() -> None:
    """Skip without pyspark or Java on a developer's machine; in CI (``CI`` set) a missing one fails."""
    problem = None
    try:
        import pyspark  # noqa: F401
    except ImportError:
        problem = f"pyspark is not installed ({install_hint('spark')})"
    if problem is None and shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        problem = "Spark needs Java 17+ (java on PATH or JAVA_HOME)"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the Spark tests must run in CI: {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require_spark()
    from pyspark.sql import SparkSession

    from ydb_topic_async.spark import register

    # Python workers must use this interpreter (the one with the package installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Keep Spark on loopback: otherwise it advertises the first network interface it finds.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ydb-topic-async-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


def ended(query: Any, timeout: float = 120) -> Any:
    """Wait for a streaming query to end (failed or not); the caller looks at ``query.exception()``."""
    with contextlib.suppress(Exception):
        query.awaitTermination(timeout)
    assert not query.isActive, f"the query did not end within {timeout} s"
    return query


@pytest.fixture
def topic_name() -> str:
    return f"spark/topic-{next(_names)}"
