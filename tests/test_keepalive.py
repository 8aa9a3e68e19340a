"""HTTP/2 keepalive: streams notice a server that vanished without closing the connection.

A proxy between the driver and the local server black-holes the connection it carries (no bytes
in either direction, sockets left open). Only a keepalive ping that never gets its answer can
tell such a connection from a quiet one: the stream then fails with a retriable transport error
and the writer or reader reconnects through a fresh connection.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import FlakyProxy

from ._helpers import QUICK_RETRY, proxied_driver, stored

pytestmark = pytest.mark.timeout(60)

class ReconnectLog(yta.NoopMetrics):
    """Records the error behind every writer and reader reconnect."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []

    def writer_reconnect(self, topic: str, error: BaseException) -> None:
        self.errors.append(error)

    def reader_reconnect(self, consumer: str, error: BaseException) -> None:
        self.errors.append(error)


def _assert_retriable_transport_failures(log: ReconnectLog) -> None:
    assert log.errors, "the stream never failed"
    for error in log.errors:
        assert isinstance(error, yta.ConnectionLostError), repr(error)
        assert error.is_retriable(idempotent=True)


async def test_writer_survives_a_silently_dead_connection(
    server: LocalTopicServer, proxy: FlakyProxy, driver: yta.Driver, topic: str
) -> None:
    log = ReconnectLog()
    async with (
        proxied_driver(
            server, proxy, retry=QUICK_RETRY, metrics=log, keepalive_interval=0.2, keepalive_timeout=0.5
        ) as proxied,
        proxied.topic.writer(topic, producer_id="keepalive") as writer,
    ):
        before = [await writer.write_with_ack(b"before-%d" % i) for i in range(3)]
        assert [r.seq_no for r in before] == [1, 2, 3]
        proxy.blackhole()
        futures = [await writer.write_with_ack_future(b"after-%d" % i) for i in range(100)]
        # Without keepalive this waits forever for acks from a connection nobody answers on.
        await writer.flush(timeout=15)
        results = [f.result() for f in futures]
    assert proxy.dropped_bytes > 0  # the black hole did swallow the first attempt
    assert proxy.connections >= 2
    _assert_retriable_transport_failures(log)
    assert [r.seq_no for r in results] == list(range(4, 104))
    assert all(isinstance(r, yta.Written) for r in results)
    messages = stored(server, topic)
    assert [m.data for m in messages] == [b"before-%d" % i for i in range(3)] + [b"after-%d" % i for i in range(100)]
    assert [m.seq_no for m in messages] == list(range(1, 104))


async def test_reader_survives_a_silently_dead_connection(
    server: LocalTopicServer, proxy: FlakyProxy, driver: yta.Driver, topic: str
) -> None:
    async with driver.topic.writer(topic, producer_id="fill") as filler:
        await filler.write([b"first-%d" % i for i in range(20)])
        await filler.flush()
        log = ReconnectLog()
        async with (
            proxied_driver(
                server, proxy, retry=QUICK_RETRY, metrics=log, keepalive_interval=0.2, keepalive_timeout=0.5
            ) as proxied,
            proxied.topic.reader(topic, consumer="consumer") as reader,
        ):
            seen: set[bytes] = set()
            while len(seen) < 20:
                batch = await reader.receive_batch(timeout=10)
                seen.update(m.data for m in batch)
                await reader.commit_with_ack(batch)
            proxy.blackhole()
            await filler.write([b"second-%d" % i for i in range(30)])
            await filler.flush()
            # Without keepalive no data and no error ever arrive on the dead connection.
            while len(seen) < 50:
                batch = await reader.receive_batch(timeout=15)
                seen.update(m.data for m in batch)
                if batch.partition_session.closed:
                    continue
                await reader.commit_with_ack(batch)
    assert seen == {b"first-%d" % i for i in range(20)} | {b"second-%d" % i for i in range(30)}
    assert proxy.dropped_bytes > 0
    assert proxy.connections >= 2
    _assert_retriable_transport_failures(log)
    description = await driver.topic.describe_consumer(topic, "consumer")
    assert [p.committed_offset for p in description.partitions] == [50]


@pytest.mark.slow
async def test_the_local_server_accepts_frequent_pings(
    server: LocalTopicServer, proxy: FlakyProxy, topic: str
) -> None:
    # gRPC servers answer pings arriving faster than they allow with GOAWAY "too_many_pings",
    # which would break every idle stream of a client with a short keepalive.
    log = ReconnectLog()
    async with (
        proxied_driver(
            server, proxy, retry=QUICK_RETRY, metrics=log, keepalive_interval=0.02, keepalive_timeout=5
        ) as proxied,
        proxied.topic.writer(topic, producer_id="pinger") as writer,
    ):
        await writer.write_with_ack(b"one")
        # An idle stream: only pings cross the connection (gRPC sends at most one a second, and
        # a server with default settings answers the third early one with GOAWAY).
        await asyncio.sleep(4.0)
        assert await writer.write_with_ack(b"two") == yta.Written(0, 1, 2)
        assert writer.reconnects == 0
    assert log.errors == []
    assert proxy.connections == 1


async def test_keepalive_is_on_by_default_and_can_be_switched_off(server: LocalTopicServer) -> None:
    default = dict(yta.Driver(server.endpoint, server.database).transport.channel_options)
    assert default["grpc.keepalive_time_ms"] == 10_000
    assert default["grpc.keepalive_timeout_ms"] == 10_000
    off = dict(yta.Driver(server.endpoint, server.database, keepalive_interval=None).transport.channel_options)
    assert "grpc.keepalive_time_ms" not in off
    custom = yta.Driver(
        server.endpoint, server.database, keepalive_interval=30, channel_options=[("grpc.keepalive_time_ms", 5)]
    )
    assert dict(custom.transport.channel_options)["grpc.keepalive_time_ms"] == 5  # explicit channel options win
    with pytest.raises(yta.InvalidArgumentError, match="keepalive_interval"):
        yta.Driver(server.endpoint, server.database, keepalive_interval=0)
    with pytest.raises(yta.InvalidArgumentError, match="keepalive_timeout"):
        yta.Driver(server.endpoint, server.database, keepalive_timeout=-1)


def test_an_interval_below_what_servers_allow_is_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="ydb_topic_async.driver")
    yta.Driver("grpc://127.0.0.1:2136", "/local", keepalive_interval=0.5)
    warnings = [r for r in caplog.records if r.name == "ydb_topic_async.driver" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "too_many_pings" in warnings[0].getMessage() and "0.5" in warnings[0].getMessage()
    caplog.clear()
    yta.Driver("grpc://127.0.0.1:2136", "/local")  # the default, 10 s
    yta.Driver("grpc://127.0.0.1:2136", "/local", keepalive_interval=30)
    yta.Driver("grpc://127.0.0.1:2136", "/local", keepalive_interval=None)
    assert [r for r in caplog.records if r.name == "ydb_topic_async.driver"] == []
