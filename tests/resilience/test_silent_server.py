"""A server that accepts TCP connections and never answers: every wait stays bounded.

Nothing in the SDK may hang on such a server: calls with a timeout raise
``OperationTimeoutError`` within it, writers and readers keep retrying in the background
(their handshakes time out and are tried again), and closing returns.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing.proxy import proxy_to, silent_endpoint

from .._helpers import proxied_driver, stored_data
from .._polling import eventually

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

_SLACK = 0.5
"""How much later than its timeout a call may return on this shared, busy machine."""


class _Clock:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


async def test_opening_a_driver_does_not_wait_for_discovery() -> None:
    async with silent_endpoint() as endpoint:
        clock = _Clock()
        async with yta.Driver(endpoint, "/local") as driver:
            assert clock.elapsed < 0.5  # discovery runs in the background
            assert driver.endpoints == [endpoint]


async def test_wait_ready_raises_operation_timeout_error_in_time() -> None:
    async with silent_endpoint() as endpoint, yta.Driver(endpoint, "/local", discovery=False) as driver:
        clock = _Clock()
        with pytest.raises(yta.OperationTimeoutError, match="no YDB endpoint answered"):
            await driver.wait_ready(timeout=1.0)
        assert 1.0 <= clock.elapsed < 1.0 + _SLACK


async def test_a_unary_call_timeout_bounds_the_whole_call() -> None:
    """The timeout is for the call, not per attempt: no retries past it."""
    async with silent_endpoint() as endpoint, yta.Driver(endpoint, "/local", discovery=False) as driver:
        clock = _Clock()
        with pytest.raises(yta.OperationTimeoutError, match="DescribeTopic did not complete within 2"):
            await driver.topic.describe_topic("events", timeout=2)
        assert clock.elapsed < 2.5


async def test_a_unary_call_against_refused_connections_retries_until_its_timeout(server: Any) -> None:
    async with proxy_to(server) as proxy:
        await proxy.refuse()
        async with proxied_driver(server, proxy) as driver:
            clock = _Clock()
            with pytest.raises(yta.OperationTimeoutError, match="last error") as raised:
                await driver.topic.describe_topic("events", timeout=1.5)
            # It gives up early only when the next backoff (at most 1 s) would pass the deadline.
            assert 0.5 < clock.elapsed < 1.5 + _SLACK
            assert isinstance(raised.value.__cause__, yta.ConnectionLostError)
            with pytest.raises(yta.OperationTimeoutError):  # wait_ready too, unless told to fail fast
                await driver.wait_ready(timeout=0.5)
            clock = _Clock()
            with pytest.raises(yta.ConnectionLostError):
                await driver.wait_ready(timeout=10, retry=yta.RetryPolicy.no_retries())
            assert clock.elapsed < 2


async def test_a_writer_against_a_silent_server_times_out_its_calls_and_keeps_trying() -> None:
    async with silent_endpoint() as endpoint, yta.Driver(endpoint, "/local", discovery=False) as driver:
        writer = driver.topic.writer("events", producer_id="p", init_timeout=0.3)
        clock = _Clock()
        with pytest.raises(yta.OperationTimeoutError, match="did not connect within 1"):
            await writer.wait_init(timeout=1)
        assert clock.elapsed < 1 + _SLACK
        # The handshake (the InitRequest written, the InitResponse read) timed out, more than once.
        assert writer.reconnects >= 2
        assert isinstance(writer.last_error, yta.DeadlineExceededError)
        assert "handshake" in str(writer.last_error)
        state_while_trying = writer.connection_state
        assert state_while_trying is yta.ConnectionState.RECONNECTING
        assert writer.failure is None  # and, RECONNECTING, its background task keeps trying

        await writer.write(b"accepted")  # buffered while the writer keeps trying
        clock = _Clock()
        with pytest.raises(yta.OperationTimeoutError, match="flush timed out"):
            await writer.flush(timeout=0.5)
        assert clock.elapsed < 0.5 + _SLACK
        clock = _Clock()
        with pytest.raises(yta.OperationTimeoutError, match="1 unacknowledged"):
            await writer.close(timeout=0.5)
        assert clock.elapsed < 0.5 + _SLACK
        assert writer.connection_state is yta.ConnectionState.CLOSED

        idle = driver.topic.writer("events", init_timeout=0.3)
        await idle.open()
        await asyncio.sleep(0.5)
        clock = _Clock()
        await idle.close()  # nothing to wait for: returns at once
        assert clock.elapsed < _SLACK


async def test_a_reader_against_a_silent_server_times_out_receives_and_closes() -> None:
    async with silent_endpoint() as endpoint, yta.Driver(endpoint, "/local", discovery=False) as driver:
        reader = driver.topic.reader("events", consumer="c", init_timeout=0.3)
        clock = _Clock()
        with pytest.raises(yta.OperationTimeoutError, match="no message arrived within 1") as raised:
            await reader.receive_batch(timeout=1)
        assert clock.elapsed < 1 + _SLACK
        assert "handshake" in str(raised.value)  # says why: not connected, and the last error
        assert reader.reconnects >= 2
        state_while_trying = reader.connection_state
        assert state_while_trying is yta.ConnectionState.RECONNECTING
        clock = _Clock()
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_message(timeout=0.2)
        assert clock.elapsed < 0.2 + _SLACK
        clock = _Clock()
        await reader.close()
        assert clock.elapsed < _SLACK
        assert reader.connection_state is yta.ConnectionState.CLOSED


async def test_writer_and_reader_connect_once_a_hanging_server_answers_again(server: Any, topic: str) -> None:
    async with proxy_to(server) as proxy, proxied_driver(server, proxy) as driver:
        proxy.silence()
        writer = driver.topic.writer(topic, producer_id="p", init_timeout=0.3)
        reader = driver.topic.reader(topic, consumer="consumer", init_timeout=0.3)
        async with writer, reader:
            await writer.write(b"held while the server hangs")
            with pytest.raises(yta.OperationTimeoutError):
                await reader.receive_batch(timeout=0.8)
            assert writer.reconnects >= 1 and reader.reconnects >= 1
            proxy.unsilence()
            await writer.flush(timeout=10)
            batch = await reader.receive_batch(timeout=10)
            assert [m.data for m in batch] == [b"held while the server hangs"]
            assert writer.connection_state is reader.connection_state is yta.ConnectionState.CONNECTED


async def test_a_silent_server_mid_stream_is_noticed_and_left(server: Any, topic: str) -> None:
    """A server that stops answering after the handshake (keepalive pings go unanswered) makes
    the stream fail with a retriable error; the writer reconnects once it answers again."""
    async with (
        proxy_to(server) as proxy,
        proxied_driver(server, proxy, keepalive_interval=0.3, keepalive_timeout=0.3) as driver,
        driver.topic.writer(topic, producer_id="p", init_timeout=0.5) as writer,
    ):
        await writer.write_with_ack(b"before")
        proxy.silence()  # the open connection carries nothing more, new ones are never answered
        await writer.write(b"during")
        await eventually(lambda: writer.connection_state is yta.ConnectionState.RECONNECTING, "the writer reconnecting")
        proxy.unsilence()
        await writer.flush(timeout=15)
    assert stored_data(server, driver.topic.full_path(topic)) == [b"before", b"during"]
