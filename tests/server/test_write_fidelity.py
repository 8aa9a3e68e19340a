"""StreamWrite is as strict as YDB's write session: one test per rule, over raw gRPC.

Sources are files of github.com/ydb-platform/ydb unless said otherwise; "write session actor" is
ydb/services/persqueue_v1/actors/write_session_actor.ipp.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .conftest import DB, RawReader, RawWriter, WriteFromClient, acks, call, create_topic

pytestmark = pytest.mark.timeout(30)

WriteRequest = pb.StreamWriteMessage.WriteRequest


def request(*seq_nos: int, codec: int = 1, data: bytes = b"x") -> Any:
    message = WriteRequest(codec=codec)
    for seq_no in seq_nos:
        m = message.messages.add(seq_no=seq_no, data=data, uncompressed_size=len(data))
        m.created_at.FromMilliseconds(1_700_000_000_123)
    return message


async def refused(writer: RawWriter, write: Any) -> tuple[int, str]:
    """Send ``write`` and return the failure it gets; the stream must end right after it."""
    await writer.call.write(WriteFromClient(write_request=write))
    reply = await writer.read()
    assert await writer.call.read() == grpc.aio.EOF, "the session must end after a refused request"
    return reply.status, reply.issues[0].message


async def opened(channel: grpc.aio.Channel, path: str, **init: Any) -> RawWriter:
    writer = RawWriter(channel)
    reply = await writer.init(path, **init)
    assert reply.status == StatusIds.SUCCESS, reply
    return writer


async def test_write_request_with_unspecified_codec_is_refused(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """codec 0 (CODEC_UNSPECIFIED) is BAD_REQUEST and closes the session: write session actor,
    Handle(TEvWrite): ``codecID == 0 || !ValidateWriteWithCodec(...)`` -> "codec is invalid"."""
    await create_topic(channel, "t")
    writer = await opened(channel, "t", producer_id="p")
    status, message = await refused(writer, request(1, codec=0))
    assert (status, message) == (StatusIds.BAD_REQUEST, "bad write request - codec is invalid: unspecified (id 0)")
    assert server.storage.read("t", 0) == []


async def test_seq_nos_must_be_positive_and_increasing_and_requests_must_carry_messages(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """write session actor, Handle(TEvWrite): an empty WriteRequest, a seq_no <= 0 (with or
    without a producer id) and seq_nos not strictly increasing inside one request are all
    BAD_REQUEST, and nothing of the request is stored."""
    await create_topic(channel, "t")
    cases = [
        ({"producer_id": "p"}, request(), "messages meta repeated fields are empty"),
        ({"producer_id": "p"}, request(0), "sequence number must be greater than 0"),
        ({}, request(1, -5), "sequence number must be greater than 0. Value at position 1 has seq_no -5"),
        ({"producer_id": "p"}, request(1, 3, 3), "sequence numbers are unsorted. Value 3 at position 2"),
        ({}, request(5, 4), "sequence numbers are unsorted"),
    ]
    for init, write, expected in cases:
        writer = await opened(channel, "t", **init)
        status, message = await refused(writer, write)
        assert status == StatusIds.BAD_REQUEST
        assert expected in message
    assert server.storage.read("t", 0) == []
    writer = await opened(channel, "t", producer_id="p")
    assert acks(await writer.write([1, 2, 7])) == [(1, "written", 0), (2, "written", 1), (7, "written", 2)]
    await writer.close()


async def test_metadata_over_4096_bytes_is_refused(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """write session actor: MAX_METADATA_SIZE_PER_MESSAGE = 4096, keys plus values of one message,
    in bytes; more is BAD_REQUEST "Message level metadata size is limited to 4096 per message"."""
    await create_topic(channel, "t")
    fits = request(1)
    fits.messages[0].metadata_items.add(key="k", value=b"v" * 4095)  # exactly 4096 bytes
    writer = await opened(channel, "t", producer_id="p")
    await writer.call.write(WriteFromClient(write_request=fits))
    assert acks(await writer.read()) == [(1, "written", 0)]
    too_big = request(2)
    too_big.messages[0].metadata_items.add(key="ключ", value=b"v" * 4089)  # 8 bytes of key: 4097
    status, message = await refused(writer, too_big)
    assert (status, message) == (StatusIds.BAD_REQUEST, "Message level metadata size is limited to 4096 per message")
    assert [m.seq_no for m in server.storage.read("t", 0)] == [1]


async def test_message_group_id_without_producer_id_deduplicates_by_the_group(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """With message_group_id and no producer_id the source id is the group and deduplication is
    on (write session actor: SourceId = message_group_id when set; only an empty source id
    disables deduplication). With neither, there is no deduplication."""
    await create_topic(channel, "t")
    writer = await opened(channel, "t", message_group_id="g")
    assert acks(await writer.write([1, 2])) == [(1, "written", 0), (2, "written", 1)]
    await writer.close()
    again = RawWriter(channel)
    init = await again.init("t", message_group_id="g")
    assert init.init_response.last_seq_no == 2
    assert acks(await again.write([2, 3])) == [(2, "skipped", -1), (3, "written", 2)]
    await again.close()
    anonymous = await opened(channel, "t")
    assert acks(await anonymous.write([1])) == [(1, "written", 3)]
    assert acks(await anonymous.write([1])) == [(1, "written", 4)]
    await anonymous.close()
    assert [(m.producer_id, m.seq_no) for m in server.storage.read("t", 0)][:3] == [("g", 1), ("g", 2), ("g", 3)]


async def test_a_producer_id_goes_with_no_message_group_the_same_one_or_a_partition(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """YDB's write session accepts a producer id with no (or an empty) message_group_id, with an
    equal one, or with a partition; a different message group is refused with BAD_REQUEST
    "unsupported producer_id / message_group_id / partition_id settings in init request"
    (ydb/services/persqueue_v1/actors/write_session_actor.cpp, TWriteSessionTopicApiActor::HandleInit:
    ``isScenarioSupported``; the JS SDK's writer test asserts the same status and text). The
    source id is the message group when it is not empty, else the producer id."""
    await create_topic(channel, "t")
    different = RawWriter(channel)
    reply = await different.init("t", producer_id="p", message_group_id="other")
    assert (reply.status, reply.issues[0].message) == (
        StatusIds.BAD_REQUEST, "unsupported producer_id / message_group_id / partition_id settings in init request"
    )
    for partitioning in ({"message_group_id": "p"}, {"message_group_id": ""}, {}, {"partition_id": 0}):
        writer = RawWriter(channel)
        reply = await writer.init("t", producer_id="p", **partitioning)
        assert reply.status == StatusIds.SUCCESS, partitioning
        await writer.close()
    empty_group = await opened(channel, "t", producer_id="p", message_group_id="")
    assert acks(await empty_group.write([1])) == [(1, "written", 0)]
    await empty_group.close()
    same = await opened(channel, "t", producer_id="p", message_group_id="p")
    assert acks(await same.write([1, 2])) == [(1, "skipped", -1), (2, "written", 1)]
    await same.close()
    assert [(m.producer_id, m.seq_no) for m in server.storage.read("t", 0)] == [("p", 1), ("p", 2)]


async def test_a_producer_cannot_switch_to_another_explicit_partition(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """A producer id is bound to its partition; asking for another explicit partition is
    BAD_REQUEST (YDB's partition chooser, ydb/services/persqueue_v1/actors/partition_chooser*).
    After a split, the bound partition's children are allowed and inherit the seq_nos
    (ydb/core/persqueue/ut/ut_with_sdk/autoscaling_ut.cpp: PartitionMerge_PreferedPartition)."""
    await create_topic(channel, "t", partitions=2)
    writer = await opened(channel, "t", producer_id="p", partition_id=0)
    assert acks(await writer.write([1, 2])) == [(1, "written", 0), (2, "written", 1)]
    await writer.close()
    other = RawWriter(channel)
    reply = await other.init("t", producer_id="p", partition_id=1)
    assert reply.status == StatusIds.BAD_REQUEST
    assert reply.issues[0].message == "producer 'p' writes to partition 0 of /local/t; it cannot write to partition 1"
    _, right = server.storage.split_partition("t", 0)
    child = RawWriter(channel)
    reply = await child.init("t", producer_id="p", partition_id=right)
    assert (reply.status, reply.init_response.last_seq_no) == (StatusIds.SUCCESS, 2)
    assert acks(await child.write([2, 3])) == [(2, "skipped", -1), (3, "written", 0)]
    await child.close()


async def test_a_missing_explicit_partition_is_overloaded_only_on_autopartitioned_topics(
    channel: grpc.aio.Channel,
) -> None:
    """On an auto-partitioned topic a partition that is not there (yet) answers OVERLOADED, as an
    inactive one does; on a plain topic it is BAD_REQUEST (YDB's partition chooser: "partition
    is not active" is retried by the SDKs, a wrong partition id is a client error)."""
    await create_topic(channel, "plain")
    reply = await RawWriter(channel).init("plain", producer_id="p", partition_id=3)
    assert (reply.status, reply.issues[0].message) == (StatusIds.BAD_REQUEST, "topic /local/plain has no partition 3")
    auto = pb.CreateTopicRequest(path="auto")
    auto.partitioning_settings.auto_partitioning_settings.strategy = pb.AUTO_PARTITIONING_STRATEGY_SCALE_UP
    assert (await call(channel, "CreateTopic", auto, pb.CreateTopicResponse)).status == StatusIds.SUCCESS
    reply = await RawWriter(channel).init("auto", producer_id="p", partition_id=3)
    assert reply.status == StatusIds.OVERLOADED


async def test_a_path_that_is_no_topic_is_refused_at_the_handshake_in_ydbs_words(channel: grpc.aio.Channel) -> None:
    """A write session naming a path that does not exist, or a directory, is SCHEME_ERROR with
    issue code UNKNOWN_TOPIC (500017) in the describer's words: "You do not have access
    permissions or the '<path>' does not exist", "The '<path>' path is not a topic" (write session
    actor: ``ErrorCodeFromDescriberStatus``; ydb/core/persqueue/public/describer:
    ``Description``). DescribeTopic of a directory says the same words (describe_operation.cpp).
    The SDK tells the first apart to wait for a topic being created."""
    await create_topic(channel, "dir/t")
    missing = await RawWriter(channel).init("nothing-here", producer_id="p")
    assert (missing.status, missing.issues[0].issue_code, missing.issues[0].message) == (
        StatusIds.SCHEME_ERROR, 500017, "You do not have access permissions or the '/local/nothing-here' does not exist"
    )
    directory = await RawWriter(channel).init("dir", producer_id="p")
    assert (directory.status, directory.issues[0].issue_code, directory.issues[0].message) == (
        StatusIds.SCHEME_ERROR, 500017, "The '/local/dir' path is not a topic"
    )
    described = await call(channel, "DescribeTopic", pb.DescribeTopicRequest(path="dir"), pb.DescribeTopicResponse)
    assert (described.status, described.issues[0].message) == (
        StatusIds.SCHEME_ERROR, "The '/local/dir' path is not a topic"
    )


async def test_times_have_millisecond_precision_and_a_bad_created_at_is_never_stored(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """YDB keeps created_at and written_at in milliseconds (write session actor: SetCreateTimeMS(
    TimestampToMilliseconds(created_at))); a created_at outside the protobuf Timestamp range is
    refused instead of being stored (which would make the partition unreadable)."""
    await create_topic(channel, "t", consumers=("c",))
    writer = await opened(channel, "t", producer_id="p")
    precise = request(1)
    precise.messages[0].created_at.FromNanoseconds(1_700_000_000_123_456_789)
    await writer.call.write(WriteFromClient(write_request=precise))
    assert acks(await writer.read()) == [(1, "written", 0)]
    [stored] = server.storage.read("t", 0)
    assert stored.created_at_ns == 1_700_000_000_123_000_000
    assert stored.written_at_ns % 1_000_000 == 0
    bad = request(2)
    bad.messages[0].created_at.seconds = 253_402_300_800  # year 10000
    status, _ = await refused(writer, bad)
    assert status == StatusIds.BAD_REQUEST
    assert len(server.storage.read("t", 0)) == 1
    # The partition stays readable.
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    await reader.start_all(1)
    await reader.credit(10_000)
    data = (await reader.expect("read_response")).read_response.partition_data[0]
    assert data.batches[0].message_data[0].created_at.ToNanoseconds() == 1_700_000_000_123_000_000
    await reader.close()


async def test_dropping_a_topic_ends_its_open_sessions_and_nothing_is_acked_into_it(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """A session opened before its topic was dropped (and recreated) must not get ``written``
    acks for messages going into the dropped topic: YDB rechecks the topic's schema and closes
    the session with SCHEME_ERROR (write session actor: InitCheckSchema / ProcessMetaCacheTopicResponse;
    read session actor: the partition's pipe dies and the session is closed)."""
    await create_topic(channel, "t", consumers=("c",))
    writer = await opened(channel, "t", producer_id="p")
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    await reader.start_all(1)
    op = await call(channel, "DropTopic", pb.DropTopicRequest(path="t"), pb.DropTopicResponse)
    assert op.status == StatusIds.SUCCESS
    await create_topic(channel, "t", consumers=("c",))
    ended = await writer.read()
    assert (ended.status, ended.issues[0].message) == (StatusIds.SCHEME_ERROR, "topic /local/t was dropped")
    read_end = await reader.read()
    assert read_end.status == StatusIds.SCHEME_ERROR
    await reader.close()
    assert server.storage.read("t", 0) == []


async def test_a_write_racing_a_drop_is_refused_not_acked(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """The other half of the rule above: a request that arrives after the drop is answered with
    SCHEME_ERROR, even when a topic of the same name exists again."""
    await create_topic(channel, "t")
    writer = await opened(channel, "t", producer_id="p")
    topic = server.storage.topic("t")
    topic.watchers.clear()  # the session has not noticed the drop yet
    server.storage.drop("t")
    await create_topic(channel, "t")
    status, message = await refused(writer, request(1))
    assert (status, message) == (StatusIds.SCHEME_ERROR, "topic /local/t was dropped")
    assert server.storage.read("t", 0) == []


async def test_an_unparsable_client_message_ends_the_stream_with_an_error_status(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """A client message that is not a valid protobuf ends the stream with a gRPC error status
    (gRPC's own servers answer INTERNAL for a request they cannot deserialize), never with OK."""
    await create_topic(channel, "t", consumers=("c",))
    for method, first in (
        ("StreamWrite", WriteFromClient(init_request=pb.StreamWriteMessage.InitRequest(path="t"))),
        ("StreamRead", None),
    ):
        rpc = channel.stream_stream(
            f"/Ydb.Topic.V1.TopicService/{method}", request_serializer=bytes, response_deserializer=bytes
        )
        call_ = rpc(metadata=DB)
        if first is not None:
            await call_.write(first.SerializeToString())
            await asyncio.wait_for(call_.read(), 10)
        await call_.write(b"\xff\xff\xff\xff")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            while await asyncio.wait_for(call_.read(), 10) != grpc.aio.EOF:
                pass
        assert info.value.code() == grpc.StatusCode.INTERNAL
        assert "cannot parse a client message" in (info.value.details() or "")


async def test_the_receive_limit_is_64_000_000_bytes(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """YDB's gRPC servers accept messages up to 64,000,000 bytes, not 64 MiB (the server's
    ``MaxMessageSize`` defaults to ``DEFAULT_GRPC_MESSAGE_SIZE_LIMIT = 64000000``,
    ydb/library/grpc/common/constants.h, applied in ydb/core/driver_lib/run/run.cpp): a request of
    exactly that size is served, one byte more is refused by gRPC itself with RESOURCE_EXHAUSTED
    "Received message larger than max", a stream and a unary call alike."""
    await create_topic(channel, "t")
    writer = await opened(channel, "t", producer_id="p")

    def sized(seq_no: int, size: int) -> Any:
        message = WriteFromClient(write_request=request(seq_no))
        data = message.write_request.messages[0]
        while (current := message.ByteSize()) != size:
            data.data = b"x" * (len(data.data) + size - current)
        return message

    await writer.call.write(sized(1, 64_000_000))
    assert acks(await writer.read()) == [(1, "written", 0)]
    await writer.call.write(sized(2, 64_000_001))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await writer.read()
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Received message larger than max (64000001 vs. 64000000)" in (info.value.details() or "")
    assert [m.seq_no for m in server.storage.read("t", 0)] == [1]

    huge = pb.CreateTopicRequest(path="huge")
    huge.attributes["_abc_slug"] = "x" * 64_000_000
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await call(channel, "CreateTopic", huge, pb.CreateTopicResponse)
    assert unary.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "/local/huge" not in server.storage.topics


async def test_write_statistics_report_milliseconds_and_no_quota_wait_without_quotas(
    channel: grpc.aio.Channel,
) -> None:
    """Every ack carries WriteStatistics (protocol: StreamWriteMessage.WriteResponse.WriteStatistics,
    seed 000); YDB reports them in whole milliseconds, and without write quotas nothing waits."""
    await create_topic(channel, "stats")
    writer = await opened(channel, "stats")
    stats = (await writer.write([1])).write_response.write_statistics
    for name in ("persisting_time", "min_queue_wait_time", "max_queue_wait_time", "partition_quota_wait_time",
                 "topic_quota_wait_time"):
        assert stats.HasField(name), name
        assert getattr(stats, name).nanos % 1_000_000 == 0, name
    assert stats.persisting_time.ToMilliseconds() < 5_000
    assert stats.partition_quota_wait_time.ToNanoseconds() == 0
    await writer.close()
