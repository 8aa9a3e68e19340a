"""Responses of large messages: their payloads are decoded from where they arrived, not copied out
first (``reader.parsing``), and what the reader hands out is exactly what was written."""

from __future__ import annotations

import datetime as dt
import gzip
import os
import random
import sys
from collections.abc import Iterator
from typing import Any

import lz4.frame
import pytest
import zstandard

import ydb_topic_async as yta
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.reader import parsing
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.storage import NewMessage

from .._helpers import stored_data
from .._polling import eventually

pytestmark = pytest.mark.timeout(60)

LARGE = 600 * 1024  # above parsing.LARGE_PAYLOAD, also compressed; four make a response above LARGE_RESPONSE
ENCODERS: dict[int, Any] = {
    yta.Codec.RAW: lambda data: data,
    yta.Codec.GZIP: gzip.compress,
    yta.Codec.ZSTD: zstandard.ZstdCompressor().compress,
    yta.LZ4_CODEC: lz4.frame.compress,
}


def _payload(size: int, seed: int) -> bytes:
    """Half random bytes, half text: large on the wire under every codec."""
    rng = random.Random(seed)
    return (rng.randbytes(size // 2) + b"lorem ipsum " * (size // 24))[:size]


def _store(
    server: LocalTopicServer, topic: str, codec: int, sizes: list[int], declared: int | None = None
) -> list[tuple[NewMessage, bytes]]:
    """Append messages of these payload sizes straight to partition 0 (every field set), so that
    the server sends them in as few responses as its size limit allows. ``declared``: the
    decoded size their writer declares (default: the true one)."""
    log = server.storage.topic(topic).partition(0)
    stored = []
    for i, size in enumerate(sizes):
        data = _payload(size, i)
        message = NewMessage(
            seq_no=i + 1,
            created_at_ns=1_700_000_000_123_456_000 + i * 1000,
            codec=codec,
            data=ENCODERS[codec](data),
            uncompressed_size=len(data) if declared is None else declared,
            producer_id="large-producer",
            message_group_id=f"group-{i}",
            metadata=(("index", b"%d" % i),),
            write_session_meta=(("origin", "test"),),
        )
        log.append(message)
        stored.append((message, data))
    server.storage.notify()
    return stored


@pytest.fixture
def external_payloads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many payloads each read response left in the received bytes (a spy on the parser: the
    split is invisible from the public API, which is the point)."""
    counts: list[int] = []
    taken = parsing.ReadResponseParser.payloads_of

    def spy(self: parsing.ReadResponseParser, message: object) -> parsing.ExternalPayloads | None:
        found = taken(self, message)
        counts.append(len(found or ()))
        return found

    monkeypatch.setattr(parsing.ReadResponseParser, "payloads_of", spy)
    yield counts


def _expected(stored: list[tuple[NewMessage, bytes]], first: int = 0) -> list[tuple[Any, ...]]:
    return [
        (i, m.seq_no, data, m.message_group_id, dict(m.metadata), m.producer_id)
        for i, (m, data) in enumerate(stored, first)
    ]


def _seen(messages: list[yta.TopicMessage]) -> list[tuple[Any, ...]]:
    return [(m.offset, m.seq_no, m.data, m.message_group_id, m.metadata_items, m.producer_id) for m in messages]


@pytest.mark.parametrize("codec", list(ENCODERS), ids=["raw", "gzip", "zstd", "lz4"])
async def test_large_payloads_of_every_codec_are_handed_out_exactly_as_written(
    server: LocalTopicServer, driver: yta.Driver, topic: str, codec: int, external_payloads: list[int]
) -> None:
    """Large and small messages mixed in one batch: every field of every message, in order."""
    sizes = [LARGE, 100, LARGE, LARGE, 2000, LARGE, LARGE, 10, LARGE]
    stored = _store(server, topic, codec, sizes)
    decoders = {yta.LZ4_CODEC: yta.lz4_decode}
    got: list[yta.TopicMessage] = []
    async with driver.topic.reader(topic, consumer="consumer", decoders=decoders) as reader:
        while len(got) < len(stored):
            batch = await reader.receive_batch(timeout=10)
            got.extend(batch)
            reader.commit(batch)
    assert _seen(got) == _expected(stored)
    assert all(type(m.data) is bytes for m in got)
    assert all(m.codec == codec for m in got)
    assert got[3].created_at == dt.datetime(2023, 11, 14, 22, 13, 20, 123459, tzinfo=dt.UTC)
    assert got[3].session_metadata == {"origin": "test"}
    if codec != yta.Codec.GZIP or len(gzip.compress(_payload(LARGE, 0))) >= parsing.LARGE_PAYLOAD:
        assert sum(external_payloads) == sizes.count(LARGE)


async def test_large_payloads_read_directly_are_left_where_they_arrived_too(
    server: LocalTopicServer, driver: yta.Driver, topic: str, external_payloads: list[int]
) -> None:
    """A direct read stream's responses (DirectReadResponse: one PartitionData) are walked as a read
    stream's are: their large payloads are decoded from the received bytes, every field intact."""
    sizes = [LARGE, 100, LARGE, LARGE, 2000, LARGE]
    stored = _store(server, topic, yta.Codec.ZSTD, sizes)
    got: list[yta.TopicMessage] = []
    async with driver.topic.reader(topic, consumer="consumer", direct_read=True) as reader:
        while len(got) < len(stored):
            batch = await reader.receive_batch(timeout=10)
            got.extend(batch)
            reader.commit(batch)
    assert _seen(got) == _expected(stored)
    assert server.stats.read_responses == 0 and server.stats.direct_read_responses > 0
    assert sum(external_payloads) == sizes.count(LARGE)


def test_the_direct_parser_leaves_out_large_payloads_and_nothing_else() -> None:
    rng = random.Random(3)
    read = _random_response(rng, large_every=2, messages=30).read_response
    expected = pb.StreamDirectReadMessage.FromServer(status=StatusIds.SUCCESS)
    direct = expected.direct_read_response
    direct.partition_session_id, direct.direct_read_id, direct.bytes_size = 7, 12, read.bytes_size
    for part in read.partition_data:
        direct.partition_data.batches.extend(part.batches)
    parser = parsing.ReadResponseParser(direct=True)
    message = parser(expected.SerializeToString())
    payloads = parser.payloads_of(message)
    assert payloads and {key[0] for key in payloads} == {0}
    for (_, batch, index), view in payloads.items():
        record = message.direct_read_response.partition_data.batches[batch].message_data[index]
        assert record.data == b""
        record.data = bytes(view)
    assert message == expected


async def test_single_message_receives_and_columns_see_the_same_large_messages(
    server: LocalTopicServer, driver: yta.Driver, topic: str, external_payloads: list[int]
) -> None:
    stored = _store(server, topic, yta.Codec.ZSTD, [LARGE, 50, LARGE, LARGE, LARGE, LARGE, 70])
    got: list[yta.TopicMessage] = []
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        for _ in range(3):
            got.append(await reader.receive_message(timeout=10))
        batch = await reader.receive_batch(timeout=10)
        columns = batch.columns()
        got.extend(batch)
        while len(got) < len(stored):
            got.extend(await reader.receive_batch(timeout=10))
    assert _seen(got) == _expected(stored)
    assert columns.data == [m.data for m in batch]
    assert sum(external_payloads) == 5


async def test_a_users_decoder_is_given_bytes_for_a_payload_left_in_the_response(
    server: LocalTopicServer, driver: yta.Driver, topic: str, external_payloads: list[int]
) -> None:
    """The decoder contract is ``bytes -> bytes``: a view into the response is copied for it."""
    stored = _store(server, topic, yta.Codec.ZSTD, [LARGE] * 5)
    given: list[type] = []

    def decode(data: bytes) -> bytes:
        given.append(type(data))
        return zstandard.ZstdDecompressor().decompress(data)

    got: list[yta.TopicMessage] = []
    async with driver.topic.reader(topic, consumer="consumer", decoders={yta.Codec.ZSTD: decode}) as reader:
        while len(got) < len(stored):
            got.extend(await reader.receive_batch(timeout=10))
    assert _seen(got) == _expected(stored)
    assert given == [bytes] * 5
    assert sum(external_payloads) == 5


async def test_a_large_payload_its_decoder_rejects_fails_alone_with_the_payload_as_received(
    server: LocalTopicServer, driver: yta.Driver, topic: str, external_payloads: list[int]
) -> None:
    stored = _store(server, topic, yta.Codec.ZSTD, [LARGE] * 5)
    log = server.storage.topic(topic).partition(0)
    garbage = os.urandom(LARGE)
    log.append(NewMessage(seq_no=6, created_at_ns=1, codec=yta.Codec.ZSTD, data=garbage, uncompressed_size=LARGE))
    last = _store(server, topic, yta.Codec.ZSTD, [LARGE])  # offset 6
    got: list[yta.TopicMessage] = []
    errors: list[yta.MessageDecodeError] = []
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        while len(got) + len(errors) < 7:
            try:
                got.extend(await reader.receive_batch(timeout=10))
            except yta.MessageDecodeError as error:
                errors.append(error)
    assert [e.offset for e in errors] == [5]
    assert errors[0].message.data == garbage
    assert _seen(got) == _expected(stored) + _expected(last, first=6)
    assert sum(external_payloads) >= 6


async def test_large_messages_by_bytes_and_in_a_transaction(
    server: LocalTopicServer, driver: yta.Driver, topic: str, external_payloads: list[int]
) -> None:
    """``receive_batch(max_bytes=...)`` (messages built one by one) and a consume-transform-produce
    transaction over large messages: every payload arrives whole, the offsets move with the commit."""
    stored = _store(server, topic, yta.Codec.ZSTD, [LARGE] * 6)
    target = f"{topic}-copy"
    await driver.topic.create_topic(target, consumers=["consumer"])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await reader.receive_batch(max_bytes=1, timeout=10)  # one message: the first is always taken
        assert _seen(list(first)) == _expected(stored)[:1]
        reader.commit(first)
        async with driver.query.transaction() as tx:
            batch = await reader.receive_batch_with_tx(tx, timeout=10)
            await driver.topic.tx_writer(tx, target).write([m.data for m in batch])
    assert _seen(list(batch)) == _expected(stored)[1 : 1 + len(batch)]
    assert server.storage.committed_offsets(topic, "consumer") == {0: 1 + len(batch)}
    assert stored_data(server, target) == [data for _, data in stored[1 : 1 + len(batch)]]
    assert sum(external_payloads) >= 2


async def test_large_raw_messages_taken_a_few_bytes_at_a_time(
    server: LocalTopicServer, driver: yta.Driver, topic: str, external_payloads: list[int]
) -> None:
    """``receive_batch(max_bytes=...)`` stops before a payload over its budget: the payload it
    already took out for that check is the next receive's, for raw payloads left in the response
    as for decoded ones. (Their writer declared them smaller than they are, so the receive plans
    to take them all and finds out as it goes.)"""
    stored = _store(server, topic, yta.Codec.RAW, [LARGE] * 5, declared=1)
    got: list[yta.TopicMessage] = []
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        while len(got) < len(stored):
            got.extend(await reader.receive_batch(max_bytes=LARGE, timeout=10))
    assert _seen(got) == _expected(stored)
    assert sum(external_payloads) == 5


async def test_large_raw_payloads_are_charged_once_against_the_buffer(
    server: LocalTopicServer, driver: yta.Driver, topic: str, external_payloads: list[int]
) -> None:
    """A raw payload left in the response counts its size once, as it did when protobuf held it
    (the view and the copy taken from it are not two payloads' worth of buffer)."""
    stored = _store(server, topic, yta.Codec.RAW, [LARGE] * 4)
    async with driver.topic.reader(topic, consumer="consumer", buffer_size_bytes=64 << 20) as reader:
        await eventually(lambda: reader.buffered_bytes >= 4 * LARGE, "the four messages buffered")
        assert reader.buffered_bytes < 4 * LARGE + 4096  # their wire size
        got: list[yta.TopicMessage] = []
        while len(got) < len(stored):
            got.extend(await reader.receive_batch(timeout=10))
    assert _seen(got) == _expected(stored)
    assert sum(external_payloads) == 4


@pytest.mark.parametrize("codec", [yta.Codec.RAW, yta.Codec.ZSTD], ids=["raw", "zstd"])
async def test_batches_the_caller_holds_do_not_keep_their_response(
    server: LocalTopicServer, driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch, codec: int
) -> None:
    """Once a payload left in the received bytes was decoded or copied out, nothing handed out
    refers to those bytes: a caller holding the batches holds their payloads, not the whole
    response beside them. (Checked by the received ``bytes``' reference count.)"""
    responses: list[object] = []
    taken = parsing.ReadResponseParser.payloads_of

    def spy(self: parsing.ReadResponseParser, message: object) -> parsing.ExternalPayloads | None:
        found = taken(self, message)
        if found:
            responses.append(next(iter(found.values())).obj)  # the received bytes
        return found

    monkeypatch.setattr(parsing.ReadResponseParser, "payloads_of", spy)
    stored = _store(server, topic, codec, [LARGE] * 4)
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await reader.receive_batch(max_messages=2, timeout=10)
        assert len(responses) == 1  # the four messages came in one response
        unreferenced = sys.getrefcount(object())  # the count of an object only the call holds
        assert sys.getrefcount(responses[0]) > unreferenced + 1  # two payloads are still in it
        second = await reader.receive_batch(timeout=10)
        held = [*first, *second]
        # Only the list above holds it (once the codec thread let go of what it was given).
        await eventually(
            lambda: sys.getrefcount(responses[0]) == unreferenced + 1, "the response freed", timeout=5
        )
    assert _seen(held) == _expected(stored)


# --- the parser alone, against protobuf's own parse ----------------------------------------------


def _random_response(rng: random.Random, large_every: int, messages: int) -> pb.StreamReadMessage.FromServer:
    response = pb.StreamReadMessage.FromServer(status=StatusIds.SUCCESS)
    read = response.read_response
    read.bytes_size = rng.randrange(1 << 30)
    index = 0
    while index < messages:
        part = read.partition_data.add(partition_session_id=rng.randrange(100))
        for _ in range(rng.randint(0, 3)):
            batch = part.batches.add(producer_id=f"p{rng.randrange(5)}", codec=rng.choice([1, 4]))
            batch.write_session_meta["k"] = "v"
            batch.written_at.seconds = rng.randrange(1 << 31)
            for _ in range(rng.randint(0, 4)):
                large = index % large_every == large_every - 1
                size = parsing.LARGE_PAYLOAD + rng.randrange(parsing.LARGE_PAYLOAD) if large else rng.randrange(300)
                record = batch.message_data.add(offset=index, seq_no=rng.randrange(1 << 40), data=rng.randbytes(size))
                record.uncompressed_size = size
                record.message_group_id = "g" * rng.randrange(3)
                record.created_at.seconds = rng.randrange(1 << 31)
                record.metadata_items.add(key="k", value=rng.randbytes(rng.randrange(20)))
                index += 1
    return response


def _put_back(message: Any, payloads: parsing.ExternalPayloads) -> None:
    parts = message.read_response.partition_data
    for (part, batch, index), view in payloads.items():
        record = parts[part].batches[batch].message_data[index]
        assert record.data == b""
        record.data = bytes(view)


@pytest.mark.parametrize("seed", range(20))
def test_the_parser_leaves_out_large_payloads_and_nothing_else(seed: int) -> None:
    rng = random.Random(seed)
    expected = _random_response(rng, large_every=rng.randint(1, 3), messages=rng.randint(24, 50))
    raw = expected.SerializeToString()
    parser = parsing.ReadResponseParser()
    message = parser(raw)
    payloads = parser.payloads_of(message)
    assert payloads, "every response here is large enough to walk"
    assert message.ByteSize() < parsing.LARGE_RESPONSE
    _put_back(message, payloads)
    assert message == expected
    assert parser.payloads_of(message) is None  # given once


def test_the_parser_leaves_responses_it_should_not_walk_to_protobuf() -> None:
    rng = random.Random(7)
    parser = parsing.ReadResponseParser()
    many_small_then_large = _random_response(rng, large_every=1000, messages=200)
    extra = many_small_then_large.read_response.partition_data.add().batches.add().message_data.add()
    extra.data = os.urandom(parsing.LARGE_RESPONSE)
    small = pb.StreamReadMessage.FromServer()
    one = small.read_response.partition_data.add().batches.add().message_data.add()
    one.data = os.urandom(parsing.LARGE_RESPONSE // 2)
    for response in (many_small_then_large, small):
        raw = response.SerializeToString()
        message = parser(raw)
        assert parser.payloads_of(message) is None
        assert message == response

    # read_response twice: protobuf merges the two, so the walk must not count their parts apart
    first = _random_response(rng, large_every=1, messages=8)
    second = _random_response(rng, large_every=1, messages=8)
    raw = first.SerializeToString() + second.SerializeToString()
    message = parser(raw)
    assert parser.payloads_of(message) is None
    assert message == pb.StreamReadMessage.FromServer.FromString(raw)


def test_payloads_of_a_batch_whose_offsets_repeat_are_put_back_into_their_records() -> None:
    """Payloads are found again by offset; a malformed batch repeating one gets them back in its
    records instead, as protobuf parsed them, rather than one message's payload for another's."""
    expected = pb.StreamReadMessage.FromServer()
    batch = expected.read_response.partition_data.add().batches.add()
    payloads = [os.urandom(parsing.LARGE_PAYLOAD * 3) for _ in range(4)] + [b"small"]
    for offset, data in zip([5, 6, 7, 8, 5], payloads, strict=True):
        batch.message_data.add(offset=offset, data=data)
    parser = parsing.ReadResponseParser()
    message = parser(expected.SerializeToString())
    found = parser.payloads_of(message)
    assert found is not None and len(found) == 4
    records = message.read_response.partition_data[0].batches[0].message_data
    assert parsing.external_of(found, 0, 0, records) is None
    assert message == expected
    # distinct offsets: found by offset
    records[4].offset = 9
    assert parsing.external_of(found, 0, 0, records) == {5: found[0, 0, 0], 6: found[0, 0, 1], 7: found[0, 0, 2],
                                                         8: found[0, 0, 3]}


def test_a_response_mostly_of_small_payloads_is_left_to_protobuf() -> None:
    """One large payload among many medium ones: copying what is kept would cost more than the
    copies the split saves."""
    response = pb.StreamReadMessage.FromServer()
    batch = response.read_response.partition_data.add().batches.add()
    batch.message_data.add(offset=0, data=os.urandom(parsing.LARGE_PAYLOAD))
    for offset in range(1, 40):
        batch.message_data.add(offset=offset, data=os.urandom(parsing.LARGE_PAYLOAD - 1))
    parser = parsing.ReadResponseParser()
    message = parser(response.SerializeToString())
    assert parser.payloads_of(message) is None
    assert message == response


def test_another_server_message_beside_a_read_response_is_left_to_protobuf() -> None:
    """protobuf keeps the last member of the oneof: such a response is not split (nor kept)."""
    response = _random_response(random.Random(9), large_every=1, messages=10)
    after = pb.StreamReadMessage.FromServer()
    after.commit_offset_response.partitions_committed_offsets.add(partition_session_id=1, committed_offset=2)
    raw = response.SerializeToString() + after.SerializeToString()
    parser = parsing.ReadResponseParser()
    message = parser(raw)
    assert message.WhichOneof("server_message") == "commit_offset_response"
    assert parser.payloads_of(message) is None
    assert message == pb.StreamReadMessage.FromServer.FromString(raw)


def test_a_truncated_large_response_fails_as_protobuf_fails_it() -> None:
    raw = _random_response(random.Random(3), large_every=1, messages=12).SerializeToString()
    with pytest.raises(Exception) as parsed:
        pb.StreamReadMessage.FromServer.FromString(raw[:-10])
    with pytest.raises(type(parsed.value)):
        parsing.ReadResponseParser()(raw[:-10])


def test_a_payload_left_out_of_a_failed_read_is_not_given_to_the_next_one() -> None:
    parser = parsing.ReadResponseParser()
    raw = _random_response(random.Random(5), large_every=1, messages=10).SerializeToString()
    probe = parsing.ReadResponseParser()
    assert probe.payloads_of(probe(raw)), "a response the parser splits"
    first = parser(raw)  # say its read failed: nobody asked for its payloads
    second = parser(pb.StreamReadMessage.FromServer(status=StatusIds.SUCCESS).SerializeToString())
    assert parser.payloads_of(second) is None
    assert parser.payloads_of(first) is None
