"""Unary topic methods of the local server over raw gRPC: create, describe, alter, drop, commit."""

from __future__ import annotations

import grpc.aio

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .conftest import call, create_topic, unpack, write_messages


async def describe(channel: grpc.aio.Channel, path: str, **flags: bool) -> pb.DescribeTopicResult:
    op = await call(channel, "DescribeTopic", pb.DescribeTopicRequest(path=path, **flags), pb.DescribeTopicResponse)
    result: pb.DescribeTopicResult = unpack(op, pb.DescribeTopicResult)
    return result


async def failed(channel: grpc.aio.Channel, method: str, request: object, response_cls: object) -> tuple[str, str]:
    op = await call(channel, method, request, response_cls)
    return StatusIds.StatusCode.Name(op.status), op.issues[0].message


async def test_create_defaults_and_path_forms(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "plain")
    result = await describe(channel, "/local/plain")
    assert result.self.name == "plain"
    assert [(p.partition_id, p.active) for p in result.partitions] == [(0, True)]
    assert result.partitioning_settings.min_active_partitions == 1
    assert result.retention_period.seconds == 24 * 3600
    assert list(result.supported_codecs.codecs) == []
    assert list(result.consumers) == []
    # Relative and absolute paths name the same topic.
    assert (await describe(channel, "plain")).self.name == "plain"
    assert list(server.storage.topics) == ["/local/plain"]


async def test_create_validation(channel: grpc.aio.Channel) -> None:
    negative = pb.CreateTopicRequest(path="neg")
    negative.partitioning_settings.min_active_partitions = -1
    status, message = await failed(channel, "CreateTopic", negative, pb.CreateTopicResponse)
    assert (status, message) == ("BAD_REQUEST", "Partitions count must be non-negative, provided -1")
    retention = pb.CreateTopicRequest(path="ret")
    retention.retention_period.FromSeconds(-5)
    assert await failed(channel, "CreateTopic", retention, pb.CreateTopicResponse) == (
        "BAD_REQUEST",
        "retention_period must be positive, provided -5.0 seconds",
    )
    duplicate = pb.CreateTopicRequest(path="dup")
    duplicate.consumers.add(name="c")
    duplicate.consumers.add(name="c")
    assert await failed(channel, "CreateTopic", duplicate, pb.CreateTopicResponse) == (
        "BAD_REQUEST", "Duplicate consumer name c"
    )
    outside = pb.CreateTopicRequest(path="/other/t")
    assert (await failed(channel, "CreateTopic", outside, pb.CreateTopicResponse))[0] == "SCHEME_ERROR"
    # Nothing was created by the refused requests.
    missing = await call(channel, "DescribeTopic", pb.DescribeTopicRequest(path="dup"), pb.DescribeTopicResponse)
    assert missing.status == StatusIds.SCHEME_ERROR
    assert missing.issues[0].message == "path /local/dup does not exist"


async def test_describe_with_stats_and_location(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "stats", partitions=2)
    await write_messages(channel, "stats", 3, partition_id=1, size=10)
    plain = await describe(channel, "stats")
    assert not plain.partitions[1].HasField("partition_stats")
    assert not plain.partitions[1].HasField("partition_location")
    full = await describe(channel, "stats", include_stats=True, include_location=True)
    p0, p1 = full.partitions
    assert (p0.partition_stats.partition_offsets.start, p0.partition_stats.partition_offsets.end) == (0, 0)
    assert (p1.partition_stats.partition_offsets.start, p1.partition_stats.partition_offsets.end) == (0, 3)
    assert p1.partition_stats.store_size_bytes == 30
    assert p1.partition_stats.last_write_time.seconds > 0
    assert (p1.partition_location.node_id, p1.partition_location.generation) == (1, 1)
    assert full.topic_stats.store_size_bytes == 30

    children = server.storage.split_partition("stats", 1)
    assert children == (2, 3)
    split = await describe(channel, "stats", include_location=True)
    assert [(p.partition_id, p.active, list(p.parent_partition_ids), list(p.child_partition_ids))
            for p in split.partitions] == [(0, True, [], []), (1, False, [], [2, 3]), (2, True, [1], []),
                                           (3, True, [1], [])]
    assert split.partitions[1].partition_location.generation == 2

    op = await call(
        channel, "DescribePartition", pb.DescribePartitionRequest(path="stats", partition_id=1, include_stats=True),
        pb.DescribePartitionResponse,
    )
    partition = unpack(op, pb.DescribePartitionResult).partition
    assert (partition.partition_id, partition.active, partition.partition_stats.partition_offsets.end) == (1, False, 3)
    op = await call(
        channel, "DescribePartition", pb.DescribePartitionRequest(path="stats", partition_id=9),
        pb.DescribePartitionResponse,
    )
    assert (op.status, op.issues[0].message) == (StatusIds.BAD_REQUEST, "topic /local/stats has no partition 9")


async def test_alter_topic(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "alter", consumers=("a", "b"))
    request = pb.AlterTopicRequest(path="alter", drop_consumers=["a"])
    request.add_consumers.add(name="c", important=True)
    request.alter_partitioning_settings.set_min_active_partitions = 3
    request.set_retention_period.FromSeconds(3600)
    request.set_supported_codecs.codecs.extend([1, 4])
    request.alter_attributes["_abc_slug"] = "x"
    unpack(await call(channel, "AlterTopic", request, pb.AlterTopicResponse), pb.AlterTopicResult)
    result = await describe(channel, "alter")
    assert [(c.name, c.important) for c in result.consumers] == [("b", False), ("c", True)]
    assert [p.partition_id for p in result.partitions] == [0, 1, 2]
    assert result.retention_period.seconds == 3600
    assert list(result.supported_codecs.codecs) == [1, 4]
    assert dict(result.attributes) == {"_abc_slug": "x"}

    unknown = pb.AlterTopicRequest(path="alter", drop_consumers=["zzz"])
    op = await call(channel, "AlterTopic", unknown, pb.AlterTopicResponse)
    assert op.status == StatusIds.NOT_FOUND
    assert op.issues[0].message == "cannot drop consumer 'zzz': topic /local/alter has no such consumer"
    existing = pb.AlterTopicRequest(path="alter")
    existing.add_consumers.add(name="b")
    assert (await call(channel, "AlterTopic", existing, pb.AlterTopicResponse)).status == StatusIds.ALREADY_EXISTS
    shrink = pb.AlterTopicRequest(path="alter")
    shrink.alter_partitioning_settings.set_min_active_partitions = 1
    op = await call(channel, "AlterTopic", shrink, pb.AlterTopicResponse)
    assert op.status == StatusIds.BAD_REQUEST
    # A refused request changes nothing, even its valid parts.
    mixed = pb.AlterTopicRequest(path="alter", drop_consumers=["b", "zzz"])
    assert (await call(channel, "AlterTopic", mixed, pb.AlterTopicResponse)).status == StatusIds.NOT_FOUND
    assert [c.name for c in (await describe(channel, "alter")).consumers] == ["b", "c"]
    missing = pb.AlterTopicRequest(path="nope")
    assert (await call(channel, "AlterTopic", missing, pb.AlterTopicResponse)).status == StatusIds.SCHEME_ERROR


async def test_drop_topic(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "gone")
    unpack(await call(channel, "DropTopic", pb.DropTopicRequest(path="/local/gone"), pb.DropTopicResponse),
           pb.DropTopicResult)
    assert server.storage.topics == {}
    op = await call(channel, "DropTopic", pb.DropTopicRequest(path="gone"), pb.DropTopicResponse)
    assert (op.status, op.issues[0].message) == (StatusIds.SCHEME_ERROR, "path /local/gone does not exist")
    await create_topic(channel, "gone")  # the name is free again


async def test_commit_offset_and_describe_consumer(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "commits", partitions=2, consumers=("c",))
    await write_messages(channel, "commits", 5, partition_id=0)
    commit = pb.CommitOffsetRequest(path="commits", partition_id=0, consumer="c", offset=3)
    unpack(await call(channel, "CommitOffset", commit, pb.CommitOffsetResponse), pb.CommitOffsetResult)
    op = await call(channel, "DescribeConsumer",
                    pb.DescribeConsumerRequest(path="commits", consumer="c", include_stats=True),
                    pb.DescribeConsumerResponse)
    result = unpack(op, pb.DescribeConsumerResult)
    assert result.consumer.name == "c"
    stats = [(p.partition_id, p.partition_consumer_stats.committed_offset, p.partition_stats.partition_offsets.end)
             for p in result.partitions]
    assert stats == [(0, 3, 5), (1, 0, 0)]
    assert result.partitions[0].partition_consumer_stats.max_committed_time_lag.ToNanoseconds() > 0
    assert result.partitions[1].partition_consumer_stats.max_committed_time_lag.ToNanoseconds() == 0

    beyond = pb.CommitOffsetRequest(path="commits", partition_id=0, consumer="c", offset=6)
    op = await call(channel, "CommitOffset", beyond, pb.CommitOffsetResponse)
    assert (op.status, op.issues[0].message) == (StatusIds.BAD_REQUEST,
                                                 "offset 6 is outside [0, 5] of partition 0")
    unknown = pb.CommitOffsetRequest(path="commits", partition_id=0, consumer="nobody", offset=1)
    assert (await call(channel, "CommitOffset", unknown, pb.CommitOffsetResponse)).status == StatusIds.BAD_REQUEST
    op = await call(channel, "DescribeConsumer", pb.DescribeConsumerRequest(path="commits", consumer="x"),
                    pb.DescribeConsumerResponse)
    # YDB's describe-consumer actor (TDescribeConsumerActor, schema_actors.cpp): SCHEME_ERROR.
    assert (op.status, op.issues[0].message) == (StatusIds.SCHEME_ERROR, "no consumer 'x' in topic")


async def test_offsets_in_an_unknown_session_are_refused(channel: grpc.aio.Channel) -> None:
    request = pb.UpdateOffsetsInTransactionRequest(consumer="c", tx=pb.TransactionIdentity(id="tx-1", session="s"))
    op = await call(channel, "UpdateOffsetsInTransaction", request, pb.UpdateOffsetsInTransactionResponse)
    assert op.status == StatusIds.BAD_SESSION
