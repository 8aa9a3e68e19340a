"""The reader's per-message path: what it keeps per buffered message, when it builds messages and
decodes payloads, what a large message holds on to, and in-order commits."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import threading
from typing import Any

import pytest
import zstandard

import ydb_topic_async as yta
from ydb_topic_async import _codecs
from ydb_topic_async._credentials import AccessTokenCredentials, AnonymousCredentials, StaticCredentials
from ydb_topic_async._stream import tokens_may_change
from ydb_topic_async.reader.wire import DETACH_SIZE

from .._helpers import fill
from .._polling import eventually

pytestmark = pytest.mark.timeout(60)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _live_messages() -> int:
    gc.collect()
    return sum(isinstance(o, yta.TopicMessage) for o in gc.get_objects())


async def test_buffered_messages_are_built_only_as_they_are_handed_out(driver: yta.Driver, topic: str) -> None:
    """Received messages stay as the server sent them: no ``TopicMessage`` exists before a receive
    takes it, and a batch iterated message by message holds one at a time (nothing for the garbage
    collector to walk). Iterating again builds equal messages; ``messages`` builds them once."""
    await fill(driver, topic, [b"m%d" % i for i in range(3000)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        await reader.open()
        await eventually(lambda: reader.buffered_bytes >= 3000 * 5, "every message buffered")
        assert _live_messages() == 0
        batch = await reader.receive_batch(max_messages=2000, timeout=10)
        assert len(batch) == 2000 and batch.commit_range == (0, 2000)
        assert _live_messages() == 0
        alive_during: list[int] = []
        for index, message in enumerate(batch):
            assert (message.offset, message.data) == (index, b"m%d" % index)
            if index == 1000:
                alive_during.append(_live_messages())
        assert alive_during == [1]
        assert [m.offset for m in batch] == list(range(2000))  # again, built anew
        listed = batch.messages
        assert list(batch) == listed and batch[5] is listed[5]  # from now on, the same objects
        assert repr(batch).endswith("offsets=0..1999, messages=2000)")
        rest = await reader.receive_batch(timeout=10)
        assert [m.data for m in rest] == [b"m%d" % i for i in range(2000, 3000)]
        reader.commit(rest)


async def test_compressed_payloads_are_decoded_as_they_are_taken(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    """A compressed payload is decoded only when a receive is about to hand it out (a
    single-message receive decodes a few more along with it, under 16 KiB), so a reader never
    holds a whole response decoded ahead of its user."""
    produced: list[int] = []
    zstd = _codecs.BUILTIN_DECODERS[yta.Codec.ZSTD]
    lock = threading.Lock()

    def counting(data: bytes) -> bytes:
        out = zstd(data)
        with lock:
            produced.append(len(out))
        return out

    payloads = [bytes([i % 256]) * 4096 for i in range(200)]  # compress to a few bytes each
    async with driver.topic.writer(topic, producer_id="p", codec=yta.Codec.ZSTD) as writer:
        await writer.write(payloads)
    decoders: dict[int, yta.ThreadSafe] = {yta.Codec.ZSTD: yta.ThreadSafe(counting)}
    async with driver.topic.reader(topic, consumer="consumer", decoders=decoders) as reader:
        await reader.open()
        await eventually(lambda: reader.buffered_bytes > 0, "a response buffered")
        await asyncio.sleep(0.05)
        assert produced == []  # received, not decoded
        handed_out = 0
        for _ in range(50):
            message = await reader.receive_message(timeout=10)
            handed_out += len(message.data)
            assert 0 <= sum(produced) - handed_out < _codecs.OFF_LOOP_THRESHOLD
        batch = await reader.receive_batch(max_messages=30, timeout=10)
        handed_out += sum(len(m.data) for m in batch)
        assert 0 <= sum(produced) - handed_out < _codecs.OFF_LOOP_THRESHOLD
        rest = await reader.receive_batch(timeout=10)
        got = [*range(80), *(m.offset for m in rest)]
        assert got == list(range(200)) and [m.data for m in rest] == payloads[80:]
        assert len(produced) == 200  # each payload decoded once
        # Charged as decoded: the bytes held never exceeded what the payloads decode to.
        assert reader.peak_buffered_bytes >= 4096 * 50


async def test_a_large_message_holds_its_own_fields_not_its_response(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    """A message of ``DETACH_SIZE`` bytes or more copies its few rarely read fields instead of
    reading them from the response it came in, so holding it does not hold that response (its
    payload a second time); a small message reads them from the response."""
    big = b"B" * DETACH_SIZE
    async with driver.topic.writer(topic, producer_id="p", session_metadata={"k": "v"}) as writer:
        await writer.write_with_ack(
            [yta.Message(big, metadata={"a": b"1"}), yta.Message(b"small", metadata={"b": b"2"}), big]
        )
    stored = server.storage.read(topic, 0)
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        taken = [await reader.receive_message(timeout=10) for _ in range(2)]
        taken += (await reader.receive_batch(timeout=10)).messages
    for message, record in zip(taken, stored, strict=True):
        assert message.data == record.data
        assert message.seq_no == record.seq_no
        assert message.created_at == _EPOCH + dt.timedelta(microseconds=record.created_at_ns // 1000)
        assert message.written_at == _EPOCH + dt.timedelta(microseconds=record.written_at_ns // 1000)
        assert message.producer_id == "p" and message.session_metadata == {"k": "v"}
        assert message.message_group_id == record.message_group_id
    assert [m.metadata_items for m in taken] == [{"a": b"1"}, {"b": b"2"}, {}]
    # Where each reads its fields from: a payload-less copy for the large ones (a memory layout
    # with no outward sign: only the message's own record shows it).
    assert [m._info.record(m._index).data for m in taken] == [b"", b"small", b""]


async def test_in_order_commits_extend_one_range_and_stay_with_their_reader(driver: yta.Driver) -> None:
    """Committing every message in order costs one range per request sent, extended in place;
    a message still cannot be committed through a reader that did not receive it, even while
    its own reader's range is being extended."""
    await driver.topic.create_topic("hot-a", consumers=["consumer"])
    await driver.topic.create_topic("hot-b", consumers=["consumer"])
    await fill(driver, "hot-a", [b"a%d" % i for i in range(500)])
    await fill(driver, "hot-b", [b"b"])
    async with (
        driver.topic.reader("hot-a", consumer="consumer") as first,
        driver.topic.reader("hot-b", consumer="consumer") as second,
    ):
        messages = [await first.receive_message(timeout=10) for _ in range(500)]
        for message in messages[:-1]:
            first.commit(message)
        with pytest.raises(yta.InvalidArgumentError, match="not received by this reader"):
            second.commit(messages[-1])
        await first.commit_with_ack(messages[-1], timeout=10)
    described = await driver.topic.describe_consumer("hot-a", "consumer")
    assert [p.committed_offset for p in described.partitions] == [500]


def test_zstd_frames_without_a_declared_size_decode_too() -> None:
    """Frames that declare their size (the default) are decoded in one call; those that do not
    go through the streaming decoder."""
    decode = _codecs.BUILTIN_DECODERS[yta.Codec.ZSTD]
    data = b"payload " * 5000
    assert decode(zstandard.ZstdCompressor().compress(data)) == data
    assert decode(zstandard.ZstdCompressor(write_content_size=False).compress(data)) == data
    with pytest.raises(zstandard.ZstdError):
        decode(b"not zstd at all")


def test_only_credentials_that_can_change_get_a_refresh_task() -> None:
    """Anonymous credentials and a fixed token never produce a new token: streams run no
    refresh task for them. Any other credentials are refreshed."""

    class Transport:
        def __init__(self, credentials: Any) -> None:
            self.credentials = credentials

    assert not tokens_may_change(Transport(AnonymousCredentials()))  # type: ignore[arg-type]
    assert not tokens_may_change(Transport(AccessTokenCredentials("t")))  # type: ignore[arg-type]
    assert tokens_may_change(Transport(StaticCredentials("user", "password")))  # type: ignore[arg-type]


async def test_single_and_batch_receives_mixed_hand_out_every_message_once(driver: yta.Driver, topic: str) -> None:
    """``receive_message`` hands out messages from a cursor over the front response; a batch
    receive, a credit grant or a commit in between takes up exactly where it stopped."""
    await fill(driver, topic, [b"%d" % i for i in range(3000)])
    got: list[int] = []
    async with driver.topic.reader(topic, consumer="consumer", buffer_size_bytes=64 * 1024) as reader:
        step = 0
        while len(got) < 3000:
            step += 1
            if step % 5 == 0:
                batch = await reader.receive_batch(max_messages=7, timeout=10)
                got += [m.offset for m in batch]
                reader.commit(batch)
            else:
                message = await reader.receive_message(timeout=10)
                got.append(message.offset)
                reader.commit(message)
        await reader.commit_with_ack(message, timeout=10)
        assert reader.buffered_bytes == 0 and reader.peak_buffered_bytes < 2 * 64 * 1024
    assert got == list(range(3000))


async def test_a_reader_without_consumer_resumes_after_the_last_message_it_handed_out(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    """Messages handed out one by one from the middle of a response count as read when the
    stream breaks: the new stream starts right after the last of them."""
    await fill(driver, topic, [b"%d" % i for i in range(100)])
    selector = yta.TopicSelector(topic, start_offsets={0: 0})
    async with driver.topic.reader(selector, consumer=None) as reader:
        first = [(await reader.receive_message(timeout=10)).offset for _ in range(5)]
        assert server.faults.drop_read_streams() == 1
        await eventually(lambda: reader.reconnects == 1, "the reader noticed")  # its buffer is gone
        rest: list[int] = []
        while len(rest) < 95:
            rest += [m.offset for m in await reader.receive_batch(timeout=10)]
    assert first + rest == list(range(100))
