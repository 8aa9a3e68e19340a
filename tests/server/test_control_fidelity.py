"""The unary topic methods answer as YDB does: one test per rule, over raw gRPC.

Sources are files of github.com/ydb-platform/ydb: the topic schema actors in
ydb/core/persqueue/public/schema/ (create_topic.cpp, common.cpp, validation.cpp,
schema_operation.cpp) and the topic description converter ydb/core/ydb_convert/topic_description.cpp.
"""

from __future__ import annotations

from typing import Any

import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .conftest import RawReader, call, create_topic, unpack, write_messages

pytestmark = pytest.mark.timeout(30)


async def answer(channel: grpc.aio.Channel, method: str, request: Any) -> tuple[str, str]:
    response_cls = getattr(pb, f"{method}Response")
    op = await call(channel, method, request, response_cls)
    return StatusIds.StatusCode.Name(op.status), op.issues[0].message if op.issues else ""


async def describe(channel: grpc.aio.Channel, path: str, **flags: bool) -> Any:
    op = await call(channel, "DescribeTopic", pb.DescribeTopicRequest(path=path, **flags), pb.DescribeTopicResponse)
    return unpack(op, pb.DescribeTopicResult)


async def test_create_topic_where_no_topic_can_be_is_a_scheme_error(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """The database root, a path inside a topic (a topic is not a directory) and a path where a
    directory is are SCHEME_ERROR (create_topic_operation.cpp: "Wrong topic name" for the root;
    the scheme shard's path checks for the rest; create_topic_ut.cpp: CreateTopicWithNameEqDB)."""
    await create_topic(channel, "dir/inner")
    await create_topic(channel, "t")
    for path in ("/local", "/local/", "t/sub", "/local/t/sub/deeper", "dir"):
        status, _ = await answer(channel, "CreateTopic", pb.CreateTopicRequest(path=path))
        assert status == "SCHEME_ERROR", path
    assert sorted(server.storage.topics) == ["/local/dir/inner", "/local/t"]


async def test_creating_an_existing_topic_succeeds_and_changes_nothing(channel: grpc.aio.Channel) -> None:
    """The scheme shard answers a create of an existing path of the same type with
    StatusAlreadyExists ("path exist, request accepts it"), and the topic service turns that into
    SUCCESS (schema_operation.cpp: ``ssStatus == StatusAlreadyExists`` -> ReplyOkAndDie). The
    existing topic keeps its settings."""
    await create_topic(channel, "t", partitions=2, consumers=("c",))
    again = pb.CreateTopicRequest(path="/local/t")
    again.partitioning_settings.min_active_partitions = 5
    assert await answer(channel, "CreateTopic", again) == ("SUCCESS", "")
    result = await describe(channel, "t")
    assert [p.partition_id for p in result.partitions] == [0, 1]
    assert [c.name for c in result.consumers] == ["c"]
    invalid = pb.CreateTopicRequest(path="t")
    invalid.retention_period.FromSeconds(-1)
    assert (await answer(channel, "CreateTopic", invalid))[0] == "BAD_REQUEST"  # validated first


def _topic(**fields: Any) -> pb.CreateTopicRequest:
    return pb.CreateTopicRequest(path="v", **fields)


def _auto(**write_speed: Any) -> pb.CreateTopicRequest:
    request = _topic()
    request.partitioning_settings.auto_partitioning_settings.strategy = pb.AUTO_PARTITIONING_STRATEGY_SCALE_UP
    speed = request.partitioning_settings.auto_partitioning_settings.partition_write_speed
    for name, value in write_speed.items():
        if name == "window":
            speed.stabilization_window.seconds = value
        else:
            setattr(speed, name, value)
    return request


def _consumer(name: str, **fields: Any) -> pb.CreateTopicRequest:
    request = _topic()
    request.consumers.add(name=name, **fields)
    return request


def _invalid_cases() -> list[tuple[str, pb.CreateTopicRequest, str, str]]:
    retention_zero = _topic()
    retention_zero.retention_period.SetInParent()
    retention_long = _topic()
    retention_long.retention_period.FromSeconds(31 * 86400 + 1)
    retention_overflow = _topic()
    retention_overflow.retention_period.seconds = 10**12
    consumer_codecs = _topic()
    consumer_codecs.supported_codecs.codecs.extend([1, 2])
    consumer_codecs.consumers.add(name="c").supported_codecs.codecs.extend([1])
    storage_and_auto = _auto()
    storage_and_auto.retention_storage_mb = 10
    read_from_overflow = _topic()
    read_from_overflow.consumers.add(name="c").read_from.seconds = 253_402_300_800
    return [
        ("unknown attribute", _topic(attributes={"team": "x"}), "BAD_REQUEST", "Attribute team is not supported"),
        ("metering mode", _topic(metering_mode=pb.METERING_MODE_REQUEST_UNITS), "PRECONDITION_FAILED",
         "Metering mode can only be specified in a serverless database"),
        ("zero retention", retention_zero, "BAD_REQUEST", "retention_period must be positive"),
        ("retention over 31 days", retention_long, "BAD_REQUEST", "at most 31 days"),
        ("retention out of range", retention_overflow, "BAD_REQUEST", "not a valid duration"),
        ("codec 0", _topic(supported_codecs=pb.SupportedCodecs(codecs=[0])), "BAD_REQUEST", "codec with value 0"),
        ("codec 5", _topic(supported_codecs=pb.SupportedCodecs(codecs=[5])), "BAD_REQUEST", "codec with value 5"),
        ("consumer name with /", _consumer("a/b"), "BAD_REQUEST", "consumer 'a/b' has illegal symbols"),
        ("consumer name with |", _consumer("a|b"), "BAD_REQUEST", "consumer 'a|b' has illegal symbols"),
        ("consumer codecs", consumer_codecs, "BAD_REQUEST", "for consumer 'c' got unsupported codec 2"),
        ("up percent", _auto(up_utilization_percent=101), "BAD_REQUEST", "between 0 and 100"),
        ("down percent", _auto(down_utilization_percent=-1), "BAD_REQUEST", "between 0 and 100"),
        ("negative window", _auto(window=-5), "BAD_REQUEST", "threshold time must be greater"),
        ("storage limit with autopartitioning", storage_and_auto, "BAD_REQUEST",
         "Auto partitioning is incompatible with retention storage bytes option"),
        ("write speed", _topic(partition_write_speed_bytes_per_second=50 * 1024 * 1024 + 1), "BAD_REQUEST",
         "write speed must be at most"),
        ("consumer read_from out of range", read_from_overflow, "BAD_REQUEST", "not a valid timestamp"),
    ]


async def test_create_topic_validation(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """Every refusal below is YDB's (create_topic.cpp ApplyChangesInt, common.cpp ProcessTopicAttributes /
    AddConsumer / FillMeteringMode, validation.cpp ValidatePartitionStrategy / ValidateConfig /
    ValidateConsumersConfig; the 31-day and 50 MiB/s limits are the scheme shard's); none creates anything."""
    for what, request, status, fragment in _invalid_cases():
        got_status, message = await answer(channel, "CreateTopic", request)
        assert got_status == status, (what, message)
        assert fragment in message, (what, message)
    assert server.storage.topics == {}
    custom = _topic(supported_codecs=pb.SupportedCodecs(codecs=[1, 10_001]))
    assert await answer(channel, "CreateTopic", custom) == ("SUCCESS", "")


async def test_up_to_20000_partitions(channel: grpc.aio.Channel) -> None:
    """YDB allows 20,000 partitions in a topic (not 1,000); more is BAD_REQUEST."""
    many = pb.CreateTopicRequest(path="many")
    many.partitioning_settings.min_active_partitions = 20_000
    assert await answer(channel, "CreateTopic", many) == ("SUCCESS", "")
    many.path, many.partitioning_settings.min_active_partitions = "more", 20_001
    assert (await answer(channel, "CreateTopic", many))[0] == "BAD_REQUEST"


async def test_an_auto_partitioned_topic_starts_with_ydbs_key_ranges(channel: grpc.aio.Channel) -> None:
    """A topic created with n partitions (split/merge on) gets ranges cut where the scheme shard
    cuts them: partition i ends, and partition i + 1 starts, at ``(i + 1) * ((2**128 - 1) // n) - 1``
    (ydb/core/tx/schemeshard/schemeshard__operation_create_pq.cpp: ``ToBound`` is
    ``AsKeyBound(RangeFromShardNumber(i, n).End)``, ydb/services/lib/sharding/sharding.cpp), as
    16 big-endian bytes; the first range has no from_bound and the last no to_bound."""
    for count in (2, 3, 7):
        request = _auto()
        request.path = f"auto-{count}"
        request.partitioning_settings.min_active_partitions = count
        request.partitioning_settings.max_active_partitions = count * 2
        assert await answer(channel, "CreateTopic", request) == ("SUCCESS", "")
        slice_ = (2**128 - 1) // count
        cuts = [((i + 1) * slice_ - 1).to_bytes(16, "big") for i in range(count - 1)]
        ranges = [
            (p.key_range.from_bound if p.key_range.HasField("from_bound") else None,
             p.key_range.to_bound if p.key_range.HasField("to_bound") else None)
            for p in (await describe(channel, request.path)).partitions
        ]
        assert ranges == list(zip([None, *cuts], [*cuts, None], strict=True)), count


async def test_describe_topic_defaults(channel: grpc.aio.Channel) -> None:
    """create_topic.cpp: retention 1 day, write speed and burst DEFAULT_PARTITION_SPEED (1 MiB/s);
    with auto-partitioning max active = min unless set, up 90 %, down 30 %, window 300 s. A plain
    topic reports AUTO_PARTITIONING_STRATEGY_DISABLED (topic_description.cpp)."""
    await create_topic(channel, "plain")
    plain = await describe(channel, "plain")
    assert plain.retention_period.seconds == 86_400
    assert (plain.partition_write_speed_bytes_per_second, plain.partition_write_burst_bytes) == (1_048_576, 1_048_576)
    assert plain.partitioning_settings.auto_partitioning_settings.strategy == pb.AUTO_PARTITIONING_STRATEGY_DISABLED
    auto = _auto()
    auto.path = "auto"
    auto.partitioning_settings.min_active_partitions = 3
    auto.partition_write_speed_bytes_per_second = 2_000_000
    assert await answer(channel, "CreateTopic", auto) == ("SUCCESS", "")
    result = await describe(channel, "auto")
    settings = result.partitioning_settings
    speed = settings.auto_partitioning_settings.partition_write_speed
    assert (settings.min_active_partitions, settings.max_active_partitions) == (3, 3)
    assert (speed.up_utilization_percent, speed.down_utilization_percent, speed.stabilization_window.seconds) == (
        90, 30, 300
    )
    assert (result.partition_write_speed_bytes_per_second, result.partition_write_burst_bytes) == (2_000_000, 2_000_000)


def _strategy(result: Any) -> tuple[int, int, int, int, int]:
    """(strategy, max active partitions, up %, down %, window seconds) as described."""
    settings = result.partitioning_settings
    speed = settings.auto_partitioning_settings.partition_write_speed
    return (
        settings.auto_partitioning_settings.strategy, settings.max_active_partitions,
        speed.up_utilization_percent, speed.down_utilization_percent, speed.stabilization_window.seconds,
    )


async def test_a_topic_without_a_partition_strategy_describes_the_tablet_defaults(channel: grpc.aio.Channel) -> None:
    """CreateTopic stores a partition strategy only for auto-partitioning settings whose strategy
    is not DISABLED (ydb/services/lib/actors/pq_schema_actor.cpp, ``FillProposeRequestImpl`` for
    CreateTopicRequest); DescribeTopic reads the strategy unchecked (topic_description.cpp,
    ``FillTopicDescription``), so a topic without one reports the proto2 defaults of
    ``TPQTabletConfig.TPartitionStrategy`` (ydb/core/protos/pqconfig.proto): DISABLED, max 1,
    up 80 %, down 20 %, window 300 s, whatever its partition count. An explicit UNSPECIFIED
    strategy stores the DISABLED type with CreateTopic's 90/30/300."""
    request = _topic()
    request.path = "plain"
    request.partitioning_settings.min_active_partitions = 3
    request.partitioning_settings.max_active_partitions = 5  # kept only with a strategy
    assert await answer(channel, "CreateTopic", request) == ("SUCCESS", "")
    plain = await describe(channel, "plain")
    assert plain.partitioning_settings.min_active_partitions == 3
    assert _strategy(plain) == (pb.AUTO_PARTITIONING_STRATEGY_DISABLED, 1, 80, 20, 300)

    unspecified = _topic()
    unspecified.path = "unspecified"
    unspecified.partitioning_settings.min_active_partitions = 2
    unspecified.partitioning_settings.auto_partitioning_settings.SetInParent()
    assert await answer(channel, "CreateTopic", unspecified) == ("SUCCESS", "")
    assert _strategy(await describe(channel, "unspecified")) == (pb.AUTO_PARTITIONING_STRATEGY_DISABLED, 2, 90, 30, 300)


async def test_altering_auto_partitioning_sets_only_the_fields_given(channel: grpc.aio.Channel) -> None:
    """AlterTopic writes only the strategy fields the request has (pq_schema_actor.cpp,
    ``FillProposeRequestImpl`` for AlterTopicRequest: per-field ``has_set_*``); the rest keep what
    was stored or, never set, describe as the tablet defaults (the official SDK's
    ``test_alter_auto_partitioning_settings``)."""
    await create_topic(channel, "t")
    before = _strategy(await describe(channel, "t"))
    enable = pb.AlterTopicRequest(path="t")
    enable.alter_partitioning_settings.alter_auto_partitioning_settings.set_strategy = (
        pb.AUTO_PARTITIONING_STRATEGY_SCALE_UP
    )
    assert await answer(channel, "AlterTopic", enable) == ("SUCCESS", "")
    assert _strategy(await describe(channel, "t")) == (pb.AUTO_PARTITIONING_STRATEGY_SCALE_UP, *before[1:])
    up = pb.AlterTopicRequest(path="t")
    up.alter_partitioning_settings.alter_auto_partitioning_settings.set_partition_write_speed.set_up_utilization_percent = 88  # noqa: E501
    assert await answer(channel, "AlterTopic", up) == ("SUCCESS", "")
    assert _strategy(await describe(channel, "t")) == (pb.AUTO_PARTITIONING_STRATEGY_SCALE_UP, 1, 88, 20, 300)
    maximum = pb.AlterTopicRequest(path="t")
    maximum.alter_partitioning_settings.set_max_active_partitions = 4
    assert await answer(channel, "AlterTopic", maximum) == ("SUCCESS", "")
    assert _strategy(await describe(channel, "t")) == (pb.AUTO_PARTITIONING_STRATEGY_SCALE_UP, 4, 88, 20, 300)

    # A topic created with auto-partitioning keeps CreateTopic's defaults through an alter.
    assert await answer(channel, "CreateTopic", _auto()) == ("SUCCESS", "")
    down = pb.AlterTopicRequest(path="v")
    down.alter_partitioning_settings.alter_auto_partitioning_settings.set_partition_write_speed.set_down_utilization_percent = 10  # noqa: E501
    assert await answer(channel, "AlterTopic", down) == ("SUCCESS", "")
    assert _strategy(await describe(channel, "v")) == (pb.AUTO_PARTITIONING_STRATEGY_SCALE_UP, 1, 90, 10, 300)


async def test_describe_consumer_stats_are_always_filled(channel: grpc.aio.Channel) -> None:
    """With include_stats, YDB sets the write and read times and every lag even for a partition
    nothing was written to (common_describe.cpp: SetProtoTime for each field), fills
    bytes_written, names the entry ``<topic>/<consumer>`` and gives consumers ``_service_type``
    (topic_description.cpp: FillConsumerProto)."""
    await create_topic(channel, "t", partitions=2, consumers=("c",))
    await write_messages(channel, "t", 3, partition_id=1, size=10)
    request = pb.DescribeConsumerRequest(path="t", consumer="c", include_stats=True)
    result = unpack(await call(channel, "DescribeConsumer", request, pb.DescribeConsumerResponse),
                    pb.DescribeConsumerResult)
    assert result.self.name == "t/c"
    assert result.consumer.attributes["_service_type"] == "data-streams"
    for partition in result.partitions:
        stats, consumer_stats = partition.partition_stats, partition.partition_consumer_stats
        assert stats.HasField("last_write_time") and stats.HasField("bytes_written")
        for name in ("last_read_time", "max_read_time_lag", "max_write_time_lag", "max_committed_time_lag"):
            assert consumer_stats.HasField(name), (partition.partition_id, name)
    assert result.partitions[1].partition_stats.bytes_written.per_minute == 30
    assert result.partitions[0].partition_stats.bytes_written.per_minute == 0
    topic = await describe(channel, "t")
    assert topic.consumers[0].attributes["_service_type"] == "data-streams"


async def test_altering_a_missing_consumer_is_not_found(channel: grpc.aio.Channel) -> None:
    """AlterTopic that drops or alters a consumer the topic does not have answers NOT_FOUND
    (the alter topic strategy in ydb/core/persqueue/public/schema/alter_topic.cpp)."""
    await create_topic(channel, "t", consumers=("c",))
    assert (await answer(channel, "AlterTopic", pb.AlterTopicRequest(path="t", drop_consumers=["x"])))[0] == "NOT_FOUND"
    alter = pb.AlterTopicRequest(path="t")
    alter.alter_consumers.add(name="x", set_important=True)
    assert (await answer(channel, "AlterTopic", alter))[0] == "NOT_FOUND"
    add = pb.AlterTopicRequest(path="t")
    add.add_consumers.add(name="c")
    assert await answer(channel, "AlterTopic", add) == ("ALREADY_EXISTS", "Duplicate consumer name c")


async def test_unary_commit_offset_errors(channel: grpc.aio.Channel) -> None:
    """CommitOffset (ydb/services/persqueue_v1/actors/commit_offset_actor.cpp): a partition that does
    not exist is SCHEME_ERROR; a consumer the topic does not have is BAD_REQUEST, with the reason
    of the read init actor CommitOffset runs (``TReadInitAndAuthActor``, read_init_auth_actor.cpp),
    as a read session gets it."""
    await create_topic(channel, "t", consumers=("c",))
    missing_partition = pb.CommitOffsetRequest(path="t", partition_id=7, consumer="c", offset=0)
    assert (await answer(channel, "CommitOffset", missing_partition))[0] == "SCHEME_ERROR"
    unknown_consumer = pb.CommitOffsetRequest(path="t", partition_id=0, consumer="x", offset=0)
    assert await answer(channel, "CommitOffset", unknown_consumer) == (
        "BAD_REQUEST", "no read rule provided for consumer 'x' in topic '/local/t' in current cluster ''"
    )
    reader = RawReader(channel)
    assert (await reader.init("t", consumer="x")).status == StatusIds.BAD_REQUEST
