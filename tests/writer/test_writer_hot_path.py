"""The writer's per-message path: how often ``write`` yields, what the buffer keeps per message,
how requests are sized, and how acknowledgements settle plain and awaited messages alike."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async._limits import MAX_MESSAGES_PER_REQUEST
from ydb_topic_async.writer.writer import YIELD_EVERY

from .._helpers import stored_data
from .._streams import record_requests

pytestmark = pytest.mark.timeout(60)


async def test_a_tight_write_loop_yields_once_per_thousand_messages() -> None:
    """``write`` suspends once per ``YIELD_EVERY`` accepted messages, so that the sender gets to
    run, and not on every call while a backlog waits: a sender held up (by gRPC flow control, or
    here by a server that is not there) leaves a backlog for long stretches, and a loop turn per
    message cost more than the rest of ``write``."""
    loop_turns = 0

    async def count_loop_turns() -> None:
        nonlocal loop_turns
        while True:
            await asyncio.sleep(0)
            loop_turns += 1

    async with yta.Driver("grpc://127.0.0.1:1", "/local", discovery=False) as driver:
        writer = driver.topic.writer("t", producer_id="p")
        counter = asyncio.ensure_future(count_loop_turns())
        await asyncio.sleep(0)
        try:
            before = loop_turns
            for _ in range(10 * YIELD_EVERY):
                await writer.write(b"x" * 100)
            turns = loop_turns - before
            assert writer.buffered_messages == 10 * YIELD_EVERY  # nothing could be sent
        finally:
            counter.cancel()
            with pytest.raises(yta.OperationTimeoutError):
                await writer.close(timeout=0.1)
        assert 5 <= turns <= 20, turns


async def test_buffered_plain_messages_are_not_tracked_by_the_garbage_collector() -> None:
    """A message ``write`` takes through its hot path is buffered as a tuple of bytes and ints,
    which the collector stops tracking at its first pass: a full buffer is not walked by every
    collection. Messages that need more (a future, metadata) keep their object."""
    async with yta.Driver("grpc://127.0.0.1:1", "/local", discovery=False) as driver:
        writer = driver.topic.writer("t", producer_id="p")
        await writer.open()
        try:
            for i in range(2000):
                await writer.write(b"%d" % i)
            future = await writer.write_with_ack_future(b"awaited")
            gc.collect()
            entries = list(writer._buffer.unsent)  # what the buffer holds: its layout has no public view
        finally:
            with pytest.raises(yta.OperationTimeoutError):
                await writer.close(timeout=0.1)
        assert len(entries) == 2001
        assert not any(gc.is_tracked(entry) for entry in entries[:2000])
        assert gc.is_tracked(entries[-1])
        assert isinstance(future.exception(), yta.OperationTimeoutError)


async def test_plain_messages_written_before_the_handshake_follow_the_stored_seq_no(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    """Written before the first handshake, plain messages (numbered from 1 meanwhile) and awaited
    ones alike are numbered after the producer's stored last seq_no once it arrives."""
    async with driver.topic.writer(topic, producer_id="restart") as writer:
        await writer.write([b"1", b"2", b"3"])
    async with driver.topic.writer(topic, producer_id="restart") as writer:
        await writer.write(b"4")
        early = await writer.write_with_ack_future(b"5")
        await writer.write(b"6")
        assert (await writer.wait_init(timeout=5)).last_seq_no == 3
        await writer.write(b"7")
        assert (await early).seq_no == 5
    stored = [(m.seq_no, m.data) for m in server.storage.read(topic, 0)]
    assert stored == [(i, b"%d" % i) for i in range(1, 8)]


async def test_requests_carry_at_most_a_thousand_messages(
    server: Any, driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog of small messages goes out in requests of at most ``MAX_MESSAGES_PER_REQUEST``
    messages: building and serializing a larger one costs more CPU per message."""
    sent = record_requests(monkeypatch, "write_request")
    async with driver.topic.writer(topic, producer_id="p") as writer:
        await writer.write([b"m%d" % i for i in range(2500)])  # one call: one backlog
        await writer.flush(timeout=10)
    sizes = [len(request.write_request.messages) for request in sent]
    assert sum(sizes) == 2500
    assert max(sizes) == MAX_MESSAGES_PER_REQUEST == 1000
    assert len(server.storage.read(topic, 0)) == 2500


async def test_acknowledgements_settle_plain_and_awaited_messages_in_one_response(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    """Plain writes and awaited ones interleaved in one request: each future gets its own
    message's result, and the buffer empties."""
    async with driver.topic.writer(topic, producer_id="p") as writer:
        await writer.wait_init(timeout=5)
        futures = []
        for i in range(300):
            if i % 7 == 3:
                futures.append((i, await writer.write_with_ack_future(b"%d" % i)))
            else:
                await writer.write(b"%d" % i)
        await writer.flush(timeout=10)
        assert writer.buffered_messages == 0 and writer.buffered_bytes == 0
    for i, future in futures:
        assert future.result() == yta.Written(partition_id=0, offset=i, seq_no=i + 1)
    assert stored_data(server, topic) == [b"%d" % i for i in range(300)]


def test_importing_the_sdk_loads_what_the_first_write_needs() -> None:
    """anyio imports its asyncio backend on first use (15 ms of imports): the SDK loads it at
    import time, so the first write's latency does not include it."""
    code = "import sys, ydb_topic_async; print('anyio._backends._asyncio' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "True"
