"""The local server's per-request shapes: what makes it cheap must not change what it answers.

Writes are checked, deduplicated and stored per request, messages are kept as plain tuples (which
the garbage collector stops tracking), reads are cut by a running total of message sizes and
serialized by hand with ``bytes_size`` appended. These tests pin what a client sees through each.
"""

from __future__ import annotations

import gc
from typing import Any

import grpc

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async.testing import LocalTopicServer, StoredMessage
from ydb_topic_async.testing.storage import NewMessage, TopicStorage
from ydb_topic_async.testing.stored import TopicSettings

from .conftest import RawReader, RawWriter, acks, create_topic, offsets


def _storage_partition() -> Any:
    storage = TopicStorage("/local")
    return storage.create("t", TopicSettings()).partitions[0]


def test_stored_messages_are_plain_tuples_the_garbage_collector_stops_tracking() -> None:
    """A server holding millions of messages must not have every full collection walk them all:
    a NamedTuple or dataclass per message stays tracked forever, a plain tuple of immutable
    values is untracked by its first collection."""
    partition = _storage_partition()
    for seq_no in range(1, 101):
        partition.append(NewMessage(seq_no=seq_no, created_at_ns=1, codec=1, data=b"x", uncompressed_size=1,
                                    producer_id="p", message_group_id="p"))
    gc.collect()
    assert not any(gc.is_tracked(row) for row in partition.rows)
    first = partition.messages[0]
    assert isinstance(first, StoredMessage)
    assert (first.offset, first.seq_no, first.producer_id, first.data) == (0, 1, "p", b"x")
    assert [m.offset for m in partition.messages[98:]] == [98, 99]
    assert [m.seq_no for m in reversed(partition.messages)][:2] == [100, 99]


def test_a_read_is_cut_where_the_running_size_reaches_the_budget() -> None:
    """``read_rows`` finds the cut by bisection over running sizes: the message that makes the
    total reach the budget is the last one served (the rule a message-by-message sum applied)."""
    partition = _storage_partition()
    for seq_no in range(1, 11):
        partition.append(NewMessage(seq_no=seq_no, created_at_ns=1, codec=1, data=b"x" * 100,
                                    uncompressed_size=100, producer_id="p", message_group_id="p"))
    each = 100 + 1 + 32  # data, message group, framing
    assert [row[0] for row in partition.read_rows(0, 1, 100)] == [0]
    assert [row[0] for row in partition.read_rows(0, each, 100)] == [0]
    assert [row[0] for row in partition.read_rows(0, each + 1, 100)] == [0, 1]
    assert [row[0] for row in partition.read_rows(3, 3 * each, 100)] == [3, 4, 5]
    assert [row[0] for row in partition.read_rows(8, 10**9, 100)] == [8, 9]
    assert [row[0] for row in partition.read_rows(0, 10**9, 4)] == [0, 1, 2, 3]
    assert partition.read_rows(10, 10**9, 100) == []
    partition.truncate(5)  # retention: the running totals move with the log
    assert [row[0] for row in partition.read_rows(0, 2 * each, 100)] == [5, 6]
    assert [row[0] for row in partition.read_rows(7, each + 1, 100)] == [7, 8]


async def test_stats_count_requests_and_messages(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "t", consumers=("c",))
    writer = RawWriter(channel)
    await writer.init("t", producer_id="p")
    for first in (1, 11, 21):
        await writer.write(list(range(first, first + 10)))
    assert acks(await writer.write([5, 31]))[0][1] == "skipped"  # a resend counts too
    await writer.close()
    assert (server.stats.write_requests, server.stats.messages_received) == (4, 32)
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    await reader.start_all(1)
    await reader.credit(10**6)
    got = offsets(await reader.expect("read_response"))
    await reader.close()
    assert len(got) == 31
    assert (server.stats.read_responses, server.stats.messages_sent) == (1, 31)


async def test_a_read_response_keeps_every_message_field_and_groups_batches_by_write(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """Each message carries its own created_at (several share a millisecond, some do not), group
    and metadata; messages sharing producer, codec and write time form one batch, as in YDB."""
    await create_topic(channel, "t", consumers=("c",))
    writer = RawWriter(channel)
    await writer.init("t", producer_id="p")
    request = pb.StreamWriteMessage.WriteRequest(codec=1)
    created_ms = [1_700_000_000_000, 1_700_000_000_000, 1_700_000_000_001, 1_600_000_000_123]
    for seq_no, ms in enumerate(created_ms, start=1):
        message = request.messages.add(seq_no=seq_no, data=b"d%d" % seq_no, uncompressed_size=7)
        message.created_at.FromMilliseconds(ms)
        if seq_no == 3:
            message.metadata_items.add(key="k", value=b"v")
            message.message_group_id = "p"
    await writer.call.write(pb.StreamWriteMessage.FromClient(write_request=request))
    assert [kind for _, kind, _ in acks(await writer.read())] == ["written"] * 4
    server.advance_time(1)  # a later write time: a batch of its own
    assert [kind for _, kind, _ in acks(await writer.write([5]))] == ["written"]
    await writer.close()

    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    await reader.start_all(1)
    await reader.credit(10**6)
    response = await reader.expect("read_response")
    await reader.close()
    [data] = response.read_response.partition_data
    first, second = data.batches
    assert (first.producer_id, first.codec, second.producer_id) == ("p", 1, "p")
    assert [(m.offset, m.seq_no, m.data, m.uncompressed_size, m.message_group_id) for m in first.message_data] == [
        (0, 1, b"d1", 7, "p"), (1, 2, b"d2", 7, "p"), (2, 3, b"d3", 7, "p"), (3, 4, b"d4", 7, "p"),
    ]
    assert [m.created_at.ToMilliseconds() for m in first.message_data] == created_ms
    assert [(i.key, i.value) for i in first.message_data[2].metadata_items] == [("k", b"v")]
    assert not first.message_data[1].metadata_items
    assert [m.seq_no for m in second.message_data] == [5]
    stored = server.storage.read("t", 0)
    assert [m.created_at_ns // 1_000_000 for m in stored[:4]] == created_ms
