"""Writers and readers ride out outages: refused connections, stalls, a server that is gone.

The network is a real TCP proxy in front of the local server (``ydb_topic_async.testing.proxy``): ``refuse``
takes the port down (open connections reset, new ones refused), ``stall`` holds every byte back.
By default writers and readers reconnect for as long as they are open; a retry budget makes
them give up instead. What they accepted is delivered exactly once (the writer's producer id
deduplicates resends; the reader's committed offsets say where to resume).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing.proxy import proxy_to

from .._helpers import proxied_driver, stored
from .._polling import eventually

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

OUTAGE = 30.0
"""The long test's refused-connection outage and stall, in seconds."""


class _Consumer:
    """Reads and commits; a message counts as processed once its commit is acknowledged (a
    batch whose commit fails with its partition session is delivered again, so it is not)."""

    def __init__(self, reader: yta.TopicReader) -> None:
        self.reader = reader
        self.processed: list[bytes] = []

    async def process_until(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.processed) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"processed {len(self.processed)} of {count} messages within {timeout}s")
            try:
                batch = await self.reader.receive_batch(timeout=left)
                await self.reader.commit_with_ack(batch, timeout=max(0.1, deadline - time.monotonic()))
            except yta.PartitionSessionClosedError:
                continue  # the stream broke before the commit landed: the batch comes again
            self.processed.extend(m.data for m in batch)


@pytest.mark.timeout(240)
async def test_a_writer_and_a_reader_ride_out_a_30s_outage_and_a_30s_stall(server: Any, topic: str) -> None:
    """Default retry settings. The outage refuses every connection for 30 s; the stall then
    holds every byte for 30 s with messages in flight (keepalive finds the connection dead,
    handshakes through the stalled network time out, and both keep trying)."""
    expected = [b"m%03d" % i for i in range(400)]
    async with (
        proxy_to(server) as proxy,
        proxied_driver(server, proxy, keepalive_interval=2, keepalive_timeout=2) as driver,
    ):
        writer = driver.topic.writer(topic, producer_id="survivor", init_timeout=5)
        reader = driver.topic.reader(topic, consumer="consumer", init_timeout=5)
        consumer = _Consumer(reader)
        async with writer, reader:
            await writer.write(expected[:100])
            await writer.flush(timeout=10)
            await consumer.process_until(100, timeout=10)

            await proxy.refuse()
            started = time.monotonic()
            await writer.write(expected[100:150])  # accepted during the outage
            await eventually(lambda: writer.connection_state is yta.ConnectionState.RECONNECTING, "writer lost")
            await eventually(lambda: reader.connection_state is yta.ConnectionState.RECONNECTING, "reader lost")
            with pytest.raises(yta.OperationTimeoutError):
                await reader.receive_batch(timeout=1)
            await writer.write(expected[150:200])
            await asyncio.sleep(OUTAGE - (time.monotonic() - started))
            assert writer.failure is None and reader.failure is None
            reconnects = writer.reconnects, reader.reconnects
            assert min(reconnects) >= 10, reconnects  # kept trying, with a backoff of at most a second or so
            await proxy.restore()
            await writer.flush(timeout=30)
            await consumer.process_until(200, timeout=30)

            await writer.write(expected[200:300])
            proxy.stall()  # mid-stream: requests and acks of those messages are held back
            started = time.monotonic()
            await writer.write(expected[300:400])
            await asyncio.sleep(OUTAGE - (time.monotonic() - started))
            assert writer.failure is None and reader.failure is None
            state_while_stalled = writer.connection_state
            assert state_while_stalled is yta.ConnectionState.RECONNECTING
            proxy.resume()
            await writer.flush(timeout=60)
            await consumer.process_until(400, timeout=60)
            assert writer.connection_state is reader.connection_state is yta.ConnectionState.CONNECTED

    messages = stored(server, topic)
    assert [m.data for m in messages] == expected  # nothing lost, nothing written twice
    assert [m.seq_no for m in messages] == list(range(1, 401))
    assert consumer.processed == expected  # nothing lost, nothing processed twice


async def test_default_settings_survive_a_short_server_restart(server: Any, topic: str) -> None:
    """A two-second outage used to end writers and readers (ten attempts, backoff up to a
    second): by default they now reconnect for as long as they are open."""
    async with (
        proxy_to(server) as proxy,
        proxied_driver(server, proxy) as driver,
        driver.topic.writer(topic, producer_id="p") as writer,
        driver.topic.reader(topic, consumer="consumer") as reader,
    ):
        consumer = _Consumer(reader)
        await writer.write_with_ack(b"before")
        await consumer.process_until(1, timeout=10)
        await proxy.refuse()
        await writer.write(b"during")
        await asyncio.sleep(3)
        assert writer.failure is None and reader.failure is None
        await proxy.restore()
        await writer.flush(timeout=15)
        await consumer.process_until(2, timeout=15)
    assert consumer.processed == [b"before", b"during"]


async def test_a_retry_budget_makes_writers_and_readers_give_up(server: Any, topic: str, caplog: Any) -> None:
    budget = yta.RetryPolicy(max_elapsed=1.0)
    with caplog.at_level(logging.INFO, logger="ydb_topic_async"):
        async with proxy_to(server) as proxy:
            with pytest.raises(yta.ConnectionLostError):  # closing the driver raises the writer's failure
                async with proxied_driver(server, proxy) as driver:
                    writer = driver.topic.writer(topic, producer_id="p", retry=budget)
                    async with driver.topic.reader(topic, consumer="consumer", retry=budget) as reader:
                        await writer.wait_init(timeout=10)
                        await eventually(
                            lambda: reader.connection_state is yta.ConnectionState.CONNECTED, "reader connected"
                        )
                        await proxy.refuse()
                        future = await writer.write_with_ack_future(b"lost")
                        with pytest.raises(yta.ConnectionLostError):
                            await asyncio.wait_for(future, 10)
                        with pytest.raises(yta.ConnectionLostError):
                            await reader.receive_batch(timeout=10)
                        assert writer.connection_state is reader.connection_state is yta.ConnectionState.FAILED
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2, [r.getMessage() for r in errors]  # one per final failure
    writer_error = next(r for r in errors if r.name.endswith("writer")).getMessage()
    # A refused connection is the ConnectionLostError that says nothing was sent: ConnectFailedError.
    assert "with 1 unacknowledged messages" in writer_error and "ConnectFailedError" in writer_error
    # Nothing repeats them: neither leaving the reader's block nor the driver closing the writer.
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("connection lost" in w for w in warnings), warnings


async def test_a_reconnect_streak_is_logged_once_when_it_starts_and_once_when_it_ends(
    server: Any, topic: str, caplog: Any
) -> None:
    async with (
        proxy_to(server) as proxy,
        proxied_driver(server, proxy) as driver,
        driver.topic.writer(topic, producer_id="p") as writer,
    ):
        await writer.write_with_ack(b"first")
        with caplog.at_level(logging.DEBUG, logger="ydb_topic_async.writer"):
            await proxy.refuse()
            await eventually(lambda: writer.reconnects >= 5, "several failed attempts")
            await proxy.restore()
            await writer.write_with_ack(b"second")
    loud = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r.levelno for r in loud] == [logging.WARNING, logging.INFO], [r.getMessage() for r in loud]
    assert "connection lost" in loud[0].getMessage() and "reconnecting" in loud[0].getMessage()
    assert "connected after" in loud[1].getMessage()
    attempts = [r for r in caplog.records if r.levelno == logging.DEBUG and "attempt" in r.getMessage()]
    assert len(attempts) >= 4  # the attempts in between are there for whoever asks for DEBUG
    assert all(r.ydb_topic == writer.path for r in loud)


async def test_reconnects_are_counted_and_reported_to_metrics(server: Any, topic: str) -> None:
    reported: list[tuple[str, BaseException]] = []

    class Reconnects(yta.NoopMetrics):
        def writer_reconnect(self, topic: str, error: BaseException) -> None:
            reported.append(("writer", error))

        def reader_reconnect(self, consumer: str, error: BaseException) -> None:
            reported.append(("reader", error))

    async with (
        proxy_to(server) as proxy,
        proxied_driver(server, proxy, metrics=Reconnects()) as driver,
        driver.topic.writer(topic, producer_id="p") as writer,
        driver.topic.reader(topic, consumer="consumer") as reader,
    ):
        await writer.write_with_ack(b"x")
        await reader.receive_batch(timeout=10)
        proxy.cut()
        await writer.write_with_ack(b"y")
        await eventually(lambda: reader.connection_state is yta.ConnectionState.CONNECTED, "reader back")
        assert writer.reconnects >= 1 and reader.reconnects >= 1
    # The connection broke under them (UNAVAILABLE, or INTERNAL for a write into a reset socket).
    assert {kind for kind, _ in reported} == {"writer", "reader"}
    assert all(isinstance(error, yta.TransportError) for _, error in reported)
    assert len([kind for kind, _ in reported if kind == "writer"]) == writer.reconnects
