"""TopicWriter under back-pressure and broken connections.

A TCP proxy between the driver and the local server stands in for the network: it can stall
(no bytes forwarded, so no acks arrive and the buffer fills) or cut every connection (the gRPC
stream breaks with UNAVAILABLE and the writer has to reconnect and resend).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async import _codecs
from ydb_topic_async.testing.proxy import FlakyProxy
from ydb_topic_async.writer.buffer import MESSAGE_MEMORY

from .._helpers import QUICK_RETRY, create_topic_with_consumer, proxied_driver, stored, stored_data
from .._streams import record_requests

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def proxied(server: Any, proxy: FlakyProxy) -> AsyncIterator[yta.Driver]:
    """A driver that reaches the server only through the proxy (no discovery around it)."""
    async with proxied_driver(server, proxy, retry=QUICK_RETRY) as driver:
        yield driver


# --- buffer limits -------------------------------------------------------------------------


async def test_a_full_buffer_blocks_then_times_out_accepting_nothing(
    proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    async with proxied.topic.writer(topic, max_buffer_messages=3, buffer_wait_timeout=0.2) as writer:
        await writer.wait_init()
        proxy.stall()
        await writer.write([b"1", b"2"])
        await writer.write(b"3")
        assert writer.buffered_messages == 3
        started = asyncio.get_running_loop().time()
        with pytest.raises(yta.BufferFullTimeoutError, match="nothing from this call was accepted"):
            await writer.write([b"4", b"5"])
        assert asyncio.get_running_loop().time() - started >= 0.19
        assert writer.buffered_messages == 3
        proxy.resume()
        await writer.write([b"4", b"5"])  # space came back with the acks
        await writer.flush(timeout=5)
        assert writer.buffered_messages == 0


async def test_a_full_buffer_waits_forever_by_default(
    proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    async with proxied.topic.writer(topic, max_buffer_bytes=10) as writer:
        await writer.wait_init()
        proxy.stall()
        await writer.write(b"0123456789")
        blocked = asyncio.ensure_future(writer.write(b"x"))
        await asyncio.sleep(0.3)
        assert not blocked.done()
        proxy.resume()
        await asyncio.wait_for(blocked, 5)


async def test_one_call_may_overflow_an_empty_buffer(
    server: Any, proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    async with proxied.topic.writer(
        topic, producer_id="big", max_buffer_messages=2, max_buffer_bytes=100, buffer_wait_timeout=0.1
    ) as writer:
        await writer.wait_init()
        proxy.stall()
        await writer.write([b"x" * 50] * 10)  # empty buffer: accepted whole, so progress is possible
        assert writer.buffered_messages == 10
        with pytest.raises(yta.BufferFullTimeoutError):
            await writer.write(b"y")
        proxy.resume()
        await writer.flush(timeout=5)
        await writer.write(b"y")
    assert len(stored(server, topic)) == 11


@pytest.mark.parametrize("hot_path", [True, False], ids=["write", "write_with_ack_future"])
async def test_the_byte_limit_counts_what_each_small_message_holds(
    server: Any, proxied: yta.Driver, proxy: FlakyProxy, topic_name: str, hot_path: bool
) -> None:
    """``max_buffer_bytes`` bounds memory: each message is charged its payload and what holding
    it costs beyond that (``MESSAGE_MEMORY``), so 100-byte messages fill a 64 KiB buffer at 184
    messages, not at 655, whichever way they were written."""
    topic = await create_topic_with_consumer(proxied, topic_name)
    limit = 64 * 1024
    async with proxied.topic.writer(
        topic, producer_id="small", max_buffer_messages=None, max_buffer_bytes=limit, buffer_wait_timeout=0.1
    ) as writer:
        await writer.wait_init()
        proxy.stall()
        accepted = 0
        with pytest.raises(yta.BufferFullTimeoutError):
            while accepted <= limit // 100:
                payload = b"%0100d" % accepted
                if hot_path:
                    await writer.write(payload)
                else:
                    await writer.write_with_ack_future(payload)
                accepted += 1
        assert accepted == limit // (100 + MESSAGE_MEMORY) == 184
        assert writer.buffered_bytes == 100 * accepted  # what it reports stays the payload bytes
        proxy.resume()
        await writer.flush(timeout=5)
    assert stored_data(server, topic) == [b"%0100d" % i for i in range(accepted)]


async def test_waiting_calls_are_admitted_in_order(
    server: Any, proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    async with proxied.topic.writer(topic, producer_id="fifo", max_buffer_messages=4) as writer:
        await writer.wait_init()
        proxy.stall()
        await writer.write([b"0", b"1", b"2", b"3"])
        waiting = [asyncio.ensure_future(writer.write(m)) for m in ([b"big-1", b"big-2", b"big-3"], b"small")]
        await asyncio.sleep(0.1)
        assert not any(w.done() for w in waiting)
        proxy.resume()
        await asyncio.wait_for(asyncio.gather(*waiting), 5)
    assert stored_data(server, topic) == [b"0", b"1", b"2", b"3", b"big-1", b"big-2", b"big-3", b"small"]


# --- reconnects ------------------------------------------------------------------------------


async def test_exactly_once_across_dropped_streams(
    server: Any, proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    total = 3000
    results: list[yta.WriteResult] = []
    async with proxied.topic.writer(topic, producer_id="eo", max_buffer_messages=200) as writer:
        futures = []
        for i in range(total):
            futures.append(await writer.write_with_ack_future(b"m%d" % i))
            if i % 400 == 399:
                proxy.cut()  # some messages are in flight, some acked, some not yet sent
                await asyncio.sleep(0.01)
        results = list(await asyncio.gather(*futures))
        assert writer.reconnects >= 5
    messages = stored(server, topic)
    assert [m.data for m in messages] == [b"m%d" % i for i in range(total)]
    assert [m.seq_no for m in messages] == list(range(1, total + 1))
    assert [r.seq_no for r in results] == list(range(1, total + 1))
    assert all(isinstance(r, (yta.Written, yta.Skipped)) for r in results)
    offsets = {r.seq_no: r.offset for r in results if isinstance(r, yta.Written)}
    assert all(offsets[seq] == seq - 1 for seq in offsets)
    assert all(m.created_at_ns <= time.time_ns() for m in messages)


async def test_resends_keep_original_seq_no_and_created_at(
    server: Any, proxied: yta.Driver, proxy: FlakyProxy, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    requests = record_requests(monkeypatch, "write_request")
    async with proxied.topic.writer(topic, producer_id="resend") as writer:
        await writer.wait_init()
        proxy.stall()
        await writer.write([b"a", b"b", b"c"])
        await asyncio.sleep(0.1)  # sent, but the acks are stuck in the proxy
        proxy.cut()
        proxy.resume()
        await writer.flush(timeout=10)
    sent = [
        (m.seq_no, m.created_at.seconds, m.created_at.nanos) for r in requests for m in r.write_request.messages
    ]
    first = sent[:3]
    assert [s[0] for s in first] == [1, 2, 3]
    assert sent[3:6] == first  # the resend repeats seq_no and created_at exactly
    assert [(m.seq_no, m.data) for m in stored(server, topic)] == [(1, b"a"), (2, b"b"), (3, b"c")]


async def test_retries_give_up_with_the_last_error(server: Any, topic_name: str, proxy: FlakyProxy) -> None:
    policy = yta.RetryPolicy(max_attempts=3, max_elapsed=5.0)
    async with yta.Driver(server.endpoint, server.database, discovery=False) as admin:
        await admin.topic.create_topic(topic_name)
    async with proxied_driver(server, proxy) as driver:
        writer = driver.topic.writer(topic_name, retry=policy)
        await writer.wait_init()
        await proxy.close()  # the "network" is gone for good
        future = await writer.write_with_ack_future(b"lost")
        with pytest.raises(yta.ConnectionLostError):
            await asyncio.wait_for(future, 10)
        with pytest.raises(yta.ConnectionLostError):
            await writer.write(b"x")
        with pytest.raises(yta.ConnectionLostError):
            await writer.close()


# --- cancellation and close ----------------------------------------------------------------------


async def test_cancelling_write_with_ack_neither_loses_nor_duplicates(
    server: Any, proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    async with proxied.topic.writer(topic, producer_id="cancel") as writer:
        await writer.wait_init()
        proxy.stall()
        call = asyncio.ensure_future(writer.write_with_ack(b"accepted"))
        await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        proxy.resume()
        assert await writer.write_with_ack(b"next") == yta.Written(0, 1, 2)
    assert [(m.seq_no, m.data) for m in stored(server, topic)] == [(1, b"accepted"), (2, b"next")]


async def test_cancelling_a_write_waiting_for_space_accepts_nothing(
    server: Any, proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    async with proxied.topic.writer(topic, producer_id="c2", max_buffer_messages=1) as writer:
        await writer.wait_init()
        proxy.stall()
        await writer.write(b"first")
        blocked = asyncio.ensure_future(writer.write_with_ack(b"withdrawn"))
        await asyncio.sleep(0.05)
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        proxy.resume()
        await writer.write(b"second")
    assert [(m.seq_no, m.data) for m in stored(server, topic)] == [(1, b"first"), (2, b"second")]


async def test_close_timeout_cancels_background_work_and_fails_pending(
    proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    writer = proxied.topic.writer(topic)
    await writer.wait_init()
    proxy.stall()
    future = await writer.write_with_ack_future(b"stuck")
    with pytest.raises(yta.OperationTimeoutError, match="1 unacknowledged"):
        await writer.close(timeout=0.2)
    assert writer.connection_state is yta.ConnectionState.CLOSED
    with pytest.raises(yta.OperationTimeoutError):
        await future
    with pytest.raises(yta.WriterClosedError):
        await writer.write(b"x")
    await writer.close()


async def test_flush_timeout(proxied: yta.Driver, proxy: FlakyProxy, topic_name: str) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    async with proxied.topic.writer(topic) as writer:
        await writer.wait_init()
        proxy.stall()
        await writer.write(b"slow")
        with pytest.raises(yta.OperationTimeoutError, match="flush"):
            await writer.flush(timeout=0.1)
        proxy.resume()
        await writer.flush(timeout=5)


async def test_cancelling_the_task_inside_async_with_stops_promptly(
    proxied: yta.Driver, proxy: FlakyProxy, topic_name: str
) -> None:
    topic = await create_topic_with_consumer(proxied, topic_name)
    entered = asyncio.Event()
    futures: list[asyncio.Future[yta.WriteResult]] = []

    async def body() -> None:
        async with proxied.topic.writer(topic) as writer:
            await writer.wait_init()
            proxy.stall()
            futures.append(await writer.write_with_ack_future(b"pending"))
            entered.set()
            await asyncio.sleep(60)

    task = asyncio.ensure_future(body())
    await entered.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)
    with pytest.raises(yta.WriterClosedError):
        await futures[0]


# --- the server's own fault hooks ------------------------------------------------------------------

async def test_acks_lost_with_the_stream_come_back_as_skipped(server: Any, driver: yta.Driver, topic: str) -> None:
    total = 600
    async with driver.topic.writer(topic, producer_id="lost-acks", retry=QUICK_RETRY) as writer:
        await writer.wait_init()
        futures = []
        for i in range(total):
            if i % 150 == 0:
                # The server stores the next requests' messages, then the stream breaks before the ack.
                server.faults.drop_write_stream_after(20)
            futures.append(await writer.write_with_ack_future(b"%d" % i))
            if i % 50 == 49:
                await asyncio.sleep(0.005)
        results = await asyncio.gather(*futures)
    messages = stored(server, topic)
    assert [m.data for m in messages] == [b"%d" % i for i in range(total)]
    assert [m.seq_no for m in messages] == list(range(1, total + 1))
    assert [r.seq_no for r in results] == list(range(1, total + 1))
    assert server.faults.dropped_streams >= 2
    assert any(isinstance(r, yta.Skipped) for r in results)  # resent after being stored
    assert all(r.offset == r.seq_no - 1 for r in results if isinstance(r, yta.Written))


async def test_retriable_statuses_at_the_handshake_are_retried(server: Any, driver: yta.Driver, topic: str) -> None:
    server.faults.fail_next("StreamWrite", "OVERLOADED", times=2)
    server.faults.fail_next("StreamWrite", "UNAVAILABLE")
    async with driver.topic.writer(topic, retry=QUICK_RETRY) as writer:
        assert await writer.write_with_ack(b"eventually") == yta.Written(0, 0, 1)
        assert writer.reconnects == 3


async def test_a_non_retriable_status_fails_every_pending_future(server: Any, driver: yta.Driver, topic: str) -> None:
    server.faults.fail_next("StreamWrite", "BAD_REQUEST")
    writer = driver.topic.writer(topic, retry=QUICK_RETRY)
    futures = await writer.write_with_ack_future([b"a", b"b"])
    for future in futures:
        with pytest.raises(yta.BadRequestError):
            await future
    with pytest.raises(yta.BadRequestError):
        await writer.flush()
    with pytest.raises(yta.BadRequestError):
        await writer.close()
    assert stored(server, topic) == []


async def test_direct_write_follows_a_generation_change(server: Any, driver: yta.Driver, topic_name: str) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2)
    async with driver.topic.writer(topic_name, partition_id=1, direct_write=True, producer_id="d") as writer:
        assert await writer.write_with_ack(b"gen-1") == yta.Written(1, 0, 1)
        partition = server.storage.topic(topic_name).partition(1)
        partition.generation += 1  # the partition's tablet moved (restarted elsewhere)
        server.faults.drop_write_streams()
        # The server refuses a stale generation (BAD_REQUEST): this write used the new one.
        assert await writer.write_with_ack(b"gen-2") == yta.Written(1, 1, 2)
        assert writer.reconnects >= 1
    assert stored_data(server, topic_name, 1) == [b"gen-1", b"gen-2"]


async def test_compressed_messages_are_resent_in_their_encoded_form(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    payloads = [b"zstd payload %d " % i * 50 for i in range(40)] + [bytes(range(256)) * 100]
    server.faults.drop_write_stream_after(10)
    async with driver.topic.writer(topic, producer_id="z", codec=yta.Codec.ZSTD, retry=QUICK_RETRY) as writer:
        results = await writer.write_with_ack(payloads)
    assert server.faults.dropped_streams == 1
    assert [r.seq_no for r in results] == list(range(1, 42))
    decode = _codecs.BUILTIN_DECODERS[yta.Codec.ZSTD]
    messages = stored(server, topic)
    assert [decode(m.data) for m in messages] == payloads
    assert [m.uncompressed_size for m in messages] == [len(p) for p in payloads]
