"""Connections of the ``ydb_topic`` source and sink: reused across triggers, riding out an outage,
refreshing tokens, trusting given root certificates."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ydb_topic_async.extras import install_hint

if not os.environ.get("CI"):  # in CI the Spark tests must run (see conftest.require_spark)
    pytest.importorskip("pyspark", reason=f"pyspark is not installed ({install_hint('spark')})")

from ydb_topic_async import Driver, StaticCredentials, YdbTopicError
from ydb_topic_async.spark._offsets import OffsetRange
from ydb_topic_async.spark._options import parse_options
from ydb_topic_async.spark._write import Chunk, write_batch_task
from ydb_topic_async.spark.source import SCHEMA, _arrow_schema, read_range
from ydb_topic_async.testing.proxy import FlakyProxy

from .._helpers import fill
from .conftest import Server, ServerThread, payload_counts, start_server, wait_for, write_messages


@pytest.fixture
def proxied() -> Iterator[tuple[Server, FlakyProxy]]:
    """A server of its own whose discovery names a proxy in front of it as the only node."""
    thread, server = start_server()
    try:
        proxy = thread.proxy()
        thread.route_discovery_through(proxy)
        yield server, proxy
    finally:
        thread.close()


def copy_query(
    spark: Any, endpoint: str, server: Server, checkpoint: Path, *, source: dict[str, str] | None = None, **both: str
) -> Any:
    """``in`` -> ``out`` through ``endpoint``, a trigger every 200 ms."""
    connection = {"endpoint": endpoint, "database": server.database, **both}
    return (
        spark.readStream.format("ydb_topic")
        .options(**connection, topic="in", **(source or {}))
        .load()
        .select("data")
        .writeStream.format("ydb_topic")
        .options(**connection, topic="out")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def batches_done(query: Any) -> int:
    return sum(1 for p in query.recentProgress if p.numInputRows)


def test_a_streaming_query_opens_no_connections_per_trigger(
    spark: Any, proxied: tuple[Server, FlakyProxy], tmp_path: Path
) -> None:
    """Each process keeps one driver per connection options: after the first micro-batches have
    started Spark's Python workers, further triggers (planning, read and write tasks) open no new
    connection. (Before this, every planning call and task opened its own: about 3 per trigger.)"""
    server, proxy = proxied
    write_messages(server, "in", partitions=2, per_partition=300)
    server.run(lambda d: d.topic.create_topic("out", min_active_partitions=2))
    query = copy_query(spark, proxy.endpoint, server, tmp_path / "cp", source={"maxOffsetsPerTrigger": "40"})
    try:
        wait_for(lambda: batches_done(query) >= 3, 90, "3 micro-batches", query)
        opened, batches = proxy.connections, batches_done(query)
        wait_for(lambda: batches_done(query) >= batches + 5, 90, "5 more micro-batches", query)
        assert proxy.connections - opened <= 2  # at most a late Python worker's first connection
    finally:
        query.stop()


def test_a_streaming_query_rides_out_a_network_outage(
    spark: Any, proxied: tuple[Server, FlakyProxy], tmp_path: Path
) -> None:
    """For 3 seconds nothing gets through the proxy and every connection is reset within 20 ms of
    being made (planning calls, read and write streams all break, and so does every retry); the
    query keeps retrying, then runs on and stores every message once."""
    server, proxy = proxied
    write_messages(server, "in", partitions=2, per_partition=250)
    server.run(lambda d: d.topic.create_topic("out", min_active_partitions=2))
    query = copy_query(spark, proxy.endpoint, server, tmp_path / "cp", source={"maxOffsetsPerTrigger": "40"})
    try:
        wait_for(lambda: batches_done(query) >= 2, 90, "2 micro-batches", query)
        server.thread.do(proxy.stall)
        outage_end = time.monotonic() + 3.0
        while time.monotonic() < outage_end:
            server.thread.do(proxy.cut)
            time.sleep(0.02)
        server.thread.do(proxy.resume)
        assert server.stored_count("out") < 500  # the outage hit the query mid-way
        wait_for(lambda: server.stored_count("out") >= 500, 120, "every message in 'out'", query)
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    assert payload_counts(spark, server, "out") == Counter(
        f"p{pid}-{i}".encode() for pid in range(2) for i in range(250)
    )


def test_a_task_gives_up_reconnecting_once_retry_timeout_passes(proxied: tuple[Server, FlakyProxy]) -> None:
    """The SDK's own readers and writers reconnect for as long as they are open; a Spark task's
    retry for ``retryTimeout`` seconds, so that a task whose database stays unreachable fails (and
    Spark runs it again) instead of waiting. Here the server goes away in the middle of a read and
    of a write, with retryTimeout=1 and pollTimeout=60: both tasks fail within seconds."""
    server, proxy = proxied
    write_messages(server, "in", partitions=1, per_partition=50)
    server.run(lambda d: d.topic.create_topic("out", min_active_partitions=1))
    connection = {"endpoint": proxy.endpoint, "database": server.database, "retryTimeout": "1"}
    rows = read_range(parse_options({**connection, "topic": "in", "pollTimeout": "60"}), OffsetRange(0, 0, 100),
                      _arrow_schema(SCHEMA))
    assert next(rows).num_rows == 50  # connected; the other 50 offsets are not written yet

    def chunks() -> Iterator[Chunk]:
        yield Chunk([b"first"])
        server.thread.call(proxy.refuse())  # the server is gone: connections reset, new ones refused
        yield Chunk([b"second"])

    with pytest.raises(YdbTopicError):
        within(15, lambda: write_batch_task(parse_options({**connection, "topic": "out"}), "gone", chunks()))
    with pytest.raises(YdbTopicError):
        within(15, lambda: next(rows))


def within(seconds: float, fn: Callable[[], object]) -> object:
    """``fn()``'s result (or error), failing the test if it takes longer than ``seconds`` (it then
    goes on in a daemon thread)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((fn(), None))
        except BaseException as exc:
            outcome.append((None, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still running after {seconds}s"
    result, error = outcome[0]
    if error is not None:
        raise error
    return result


def test_token_file_is_read_again_when_it_changes(spark: Any, tmp_path: Path) -> None:
    """Tokens expire after 2 s on this server; the query's token file is rewritten every second
    (as a mounted, rotated secret is), and the query keeps planning and reading with fresh tokens."""
    thread = ServerThread(users={"spark": "secret"}, token_ttl=2.0)
    try:
        endpoint, database = thread.server.endpoint, thread.server.database
        token_file = tmp_path / "token"

        async def login() -> str:
            async with Driver(endpoint, database, _static("spark", "secret")) as driver:
                token = await driver.credentials.auth_token()
                assert token
                return token

        token_file.write_text(asyncio.run(login()))
        stop = threading.Event()

        def rotate() -> None:
            while not stop.wait(1.0):
                (tmp_path / "token.new").write_text(asyncio.run(login()))
                os.replace(tmp_path / "token.new", token_file)

        rotator = threading.Thread(target=rotate, daemon=True)
        rotator.start()
        server = Server(endpoint, database, thread, credentials=_static("spark", "secret"))

        async def setup(driver: Driver) -> None:
            await driver.topic.create_topic("in", min_active_partitions=1)
            await driver.topic.create_topic("out", min_active_partitions=1)

        server.run(setup)
        query = copy_query(spark, endpoint, server, tmp_path / "cp", tokenFile=str(token_file))
        try:
            # Messages arrive over 6 s: three times the token lifetime.
            for i in range(6):
                server.run(functools.partial(fill, topic="in", payloads=[f"m{i}-{j}".encode() for j in range(10)]))
                time.sleep(1.0)
            wait_for(lambda: server.stored_count("out") >= 60, 60, "60 messages", query)
            assert query.exception() is None
        finally:
            query.stop()
            stop.set()
            rotator.join(10)
    finally:
        thread.close()


def _static(user: str, password: str) -> StaticCredentials:
    return StaticCredentials(user, password)


def test_tls_with_root_certificates_from_a_file(spark: Any, tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    thread = ServerThread(tls=(key.read_bytes(), cert.read_bytes()))
    try:
        endpoint, database = thread.server.endpoint, thread.server.database
        assert endpoint.startswith("grpcs://")

        async def create_and_write() -> None:
            async with Driver(endpoint, database, root_certificates=cert.read_bytes()) as driver:
                await _write_created(driver)

        asyncio.run(create_and_write())
        options = {"endpoint": endpoint, "database": database, "topic": "secure", "rootCertificatesFile": str(cert)}
        rows = spark.read.format("ydb_topic").options(**options).load().collect()
        assert sorted(r.data for r in rows) == [b"a", b"b"]
        with pytest.raises(Exception, match="rootCertificatesFile' cannot be read"):
            spark.read.format("ydb_topic").options(**{**options, "rootCertificatesFile": str(tmp_path / "nope")}).load()
    finally:
        thread.close()


async def _write_created(driver: Driver) -> None:
    await driver.topic.create_topic("secure")
    await fill(driver, "secure", [b"a", b"b"])
