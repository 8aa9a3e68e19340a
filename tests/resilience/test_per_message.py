"""A message that cannot be sent fails alone; a request the server cannot take fails fast.

Compression can make a message larger than a request may be (random data grows under gzip): such
a message is only found out when it is encoded, after ``write`` accepted it. It fails its own
future with ``MessageTooLargeError`` (or is logged, if written with ``write``) and every other
message is delivered. A request over gRPC's own size limit (the server's, when it is below the
driver's) is not something a retry can fix: the writer fails at once instead of retrying for
half a minute.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import time

import pytest

import ydb_topic_async as yta
from ydb_topic_async._limits import DEFAULT_MAX_MESSAGE_SIZE, MESSAGE_OVERHEAD, REQUEST_OVERHEAD, REQUEST_SIZE_MARGIN
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored, stored_data

pytestmark = pytest.mark.timeout(60)

LIMIT = 4096
"""The writers' ``max_request_size`` here: 4032 bytes of message, 3984 of bare payload."""


async def test_a_message_too_large_once_compressed_fails_alone(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    incompressible = os.urandom(3980)  # fits raw; gzip's framing takes it past the limit
    async with driver.topic.writer(
        topic, producer_id="p", codec=yta.Codec.GZIP, max_request_size=LIMIT
    ) as writer:
        futures = await writer.write_with_ack_future([b"a" * 3000, incompressible, b"c" * 3000])
        first, big, last = await asyncio.gather(*futures, return_exceptions=True)
        assert isinstance(big, yta.MessageTooLargeError)
        assert "seq_no=2" in str(big) and "after gzip encoding" in str(big)
        assert first == yta.Written(0, 0, 1) and last == yta.Written(0, 1, 3)
        assert writer.failure is None and writer.buffered_messages == 0
    assert [m.seq_no for m in stored(server, topic)] == [1, 3]


async def test_a_message_written_without_a_future_is_logged_when_dropped(
    server: LocalTopicServer, driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with driver.topic.writer(
        topic, producer_id="p", codec=yta.Codec.GZIP, max_request_size=LIMIT
    ) as writer:
        with caplog.at_level(logging.ERROR, logger="ydb_topic_async.writer"):
            await writer.write([b"before", os.urandom(3980), b"after"])
            await writer.flush(timeout=10)  # settles: the dropped message does not hold it up
    assert stored_data(server, topic, decode=gzip.decompress) == [b"before", b"after"]
    [record] = caplog.records
    assert "seq_no=2" in record.getMessage() and "was not sent" in record.getMessage()


async def test_dropped_messages_after_a_reconnect_do_not_hold_back_the_others(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """Dropped messages keep their place in sequence, unsent, through a resend after a reconnect."""
    async with driver.topic.writer(
        topic, producer_id="p", codec=yta.Codec.GZIP, max_request_size=LIMIT
    ) as writer:
        await writer.wait_init(timeout=10)
        server.faults.drop_write_stream_after(2)
        futures = []
        for i in range(20):
            payload = os.urandom(3980) if i % 5 == 2 else b"m%d" % i
            futures.append(await writer.write_with_ack_future(payload))
        results = await asyncio.gather(*futures, return_exceptions=True)
        await writer.flush(timeout=10)
    dropped = [i for i, r in enumerate(results) if isinstance(r, yta.MessageTooLargeError)]
    assert dropped == [2, 7, 12, 17]
    assert all(isinstance(r, (yta.Written, yta.Skipped)) for i, r in enumerate(results) if i not in dropped)
    assert stored_data(server, topic, decode=gzip.decompress) == [b"m%d" % i for i in range(20) if i not in dropped]
    assert server.faults.dropped_streams == 1


async def test_a_request_over_the_servers_size_limit_fails_fast(server: LocalTopicServer, topic: str) -> None:
    """The local server takes gRPC messages of up to 64,000,000 bytes (YDB's default); this
    driver allows 128 MiB, so its writer sends a request the server refuses with
    RESOURCE_EXHAUSTED."""
    async with yta.Driver(
        server.endpoint, server.database, discovery=False, max_message_size=128 * 1024 * 1024
    ) as driver:
        writer = driver.topic.writer(topic, producer_id="p")
        await writer.write_with_ack(b"small")
        started = time.monotonic()
        with pytest.raises(yta.RequestTooLargeError, match="larger than max") as raised:
            await writer.write_with_ack(b"x" * (65 * 1024 * 1024))
        assert time.monotonic() - started < 10  # failed at once, not retried for half a minute
        assert isinstance(raised.value, yta.ResourceExhaustedError)
        assert not raised.value.is_retriable(idempotent=True)
        assert writer.reconnects == 0 and writer.connection_state is yta.ConnectionState.FAILED
        with pytest.raises(yta.RequestTooLargeError):
            await writer.close()
    assert stored_data(server, topic) == [b"small"]


async def test_the_default_limits_are_ydbs_64_000_000_bytes(server: LocalTopicServer, topic: str) -> None:
    """YDB's gRPC servers take messages of up to 64,000,000 bytes (``DEFAULT_GRPC_MESSAGE_SIZE_LIMIT``
    in ydb/library/grpc/common/constants.h, as the local server), not 64 MiB: with the default
    limits, a message that cannot fit in a request under it fails at the call that gave it
    (``MessageTooLargeError``, nothing accepted), not as ``RequestTooLargeError`` from the
    server; the largest message that fits is stored."""
    largest = (
        DEFAULT_MAX_MESSAGE_SIZE - REQUEST_SIZE_MARGIN - REQUEST_OVERHEAD - MESSAGE_OVERHEAD
    )  # payload bytes of the largest message one request takes
    assert DEFAULT_MAX_MESSAGE_SIZE == 64_000_000
    async with yta.Driver(server.endpoint, server.database, discovery=False) as driver, driver.topic.writer(
        topic, producer_id="p"
    ) as writer:
        for size in (64_000_001, 64 * 1024 * 1024, 67_000_000, largest + 1):
            with pytest.raises(yta.MessageTooLargeError):
                await writer.write(b"x" * size)
        await writer.write_with_ack(b"y" * largest)
        assert writer.reconnects == 0 and writer.failure is None
    assert [len(data) for data in stored_data(server, topic)] == [largest]
