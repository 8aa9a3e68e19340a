"""Unary topic methods of the local server: create, describe, alter, drop, commit offset."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._proto import ydb_scheme_pb2
from .._proto import ydb_topic_pb2 as pb
from ._replies import duration, timestamp
from .partition_log import Consumer, Partition, StorageError, Topic, TopicSettings, TopicStorage

if TYPE_CHECKING:
    from .read_stream import ReaderInfo

MAX_PARTITIONS = 1000


def _bad(message: str) -> StorageError:
    return StorageError("BAD_REQUEST", message)


def _codecs(codecs: Any) -> list[int]:
    out = list(codecs)
    for c in out:
        if c <= 0:
            raise _bad(f"invalid codec id {c}")
    return out


def _consumer_from_proto(msg: Any) -> Consumer:
    if not msg.name:
        raise _bad("consumer name must not be empty")
    return Consumer(
        name=msg.name,
        important=msg.important,
        read_from_ns=msg.read_from.ToNanoseconds() if msg.HasField("read_from") else 0,
        supported_codecs=_codecs(msg.supported_codecs.codecs),
        attributes=dict(msg.attributes),
        availability_period_s=(
            msg.availability_period.ToTimedelta().total_seconds() if msg.HasField("availability_period") else None
        ),
    )


def _consumer_to_proto(c: Consumer) -> pb.Consumer:
    msg = pb.Consumer(name=c.name, important=c.important, attributes=c.attributes)
    if c.read_from_ns:
        msg.read_from.CopyFrom(timestamp(c.read_from_ns))
    msg.supported_codecs.codecs.extend(c.supported_codecs)
    if c.availability_period_s is not None:
        msg.availability_period.CopyFrom(duration(c.availability_period_s))
    return msg


def _partition_stats(p: Partition) -> pb.PartitionStats:
    stats = pb.PartitionStats(store_size_bytes=p.bytes_stored, partition_node_id=p.node_id)
    stats.partition_offsets.start = p.start_offset
    stats.partition_offsets.end = p.end_offset
    if p.last_write_ns:
        stats.last_write_time.CopyFrom(timestamp(p.last_write_ns))
    return stats


def _consumer_stats(stats: Any, consumer: Consumer, p: Partition, now_ns: int) -> None:
    """Offsets and lags of one consumer on one partition (lags are zero when nothing waits)."""
    committed = consumer.committed_offset(p)
    stats.committed_offset = committed
    stats.last_read_offset = max(consumer.read_up_to.get(p.partition_id, 0), committed)
    last_read = consumer.last_read_ns.get(p.partition_id)
    if last_read:
        stats.last_read_time.CopyFrom(timestamp(last_read))
    first_uncommitted = p.message_at(committed)
    lag = (now_ns - first_uncommitted.written_at_ns) / 1e9 if first_uncommitted else 0.0
    stats.max_committed_time_lag.CopyFrom(duration(lag))
    first_unread = p.message_at(stats.last_read_offset)
    stats.max_read_time_lag.CopyFrom(duration((now_ns - first_unread.written_at_ns) / 1e9 if first_unread else 0.0))
    last = p.message_at(stats.last_read_offset - 1)
    write_lag = (last.written_at_ns - last.created_at_ns) / 1e9 if last and last.created_at_ns else 0.0
    stats.max_write_time_lag.CopyFrom(duration(max(write_lag, 0.0)))


def _partition_info(p: Partition, include_stats: bool, include_location: bool) -> Any:
    info = pb.DescribeTopicResult.PartitionInfo(
        partition_id=p.partition_id,
        active=p.active,
        child_partition_ids=p.child_ids,
        parent_partition_ids=p.parent_ids,
    )
    if include_stats:
        info.partition_stats.CopyFrom(_partition_stats(p))
    if include_location:
        info.partition_location.node_id = p.node_id
        info.partition_location.generation = p.generation
    if p.key_range:
        info.key_range.SetInParent()
        if p.from_bound is not None:
            info.key_range.from_bound = p.from_bound
        if p.to_bound is not None:
            info.key_range.to_bound = p.to_bound
    return info


class ControlPlane:
    """Implements the unary TopicService methods on a ``TopicStorage``."""

    def __init__(self, storage: TopicStorage) -> None:
        self.storage = storage

    def create_topic(self, req: Any) -> pb.CreateTopicResult:
        ps = req.partitioning_settings
        if ps.min_active_partitions < 0 or ps.max_active_partitions < 0 or ps.partition_count_limit < 0:
            raise _bad("partition counts must not be negative")
        if ps.min_active_partitions > MAX_PARTITIONS:
            raise _bad(f"at most {MAX_PARTITIONS} partitions are supported")
        if ps.max_active_partitions and ps.max_active_partitions < ps.min_active_partitions:
            raise _bad("max_active_partitions must not be below min_active_partitions")
        if req.retention_storage_mb < 0 or req.partition_write_speed_bytes_per_second < 0:
            raise _bad("retention_storage_mb and write speed must not be negative")
        retention = req.retention_period.ToTimedelta() if req.HasField("retention_period") else None
        if retention is not None and retention < dt.timedelta(0):
            raise _bad("retention_period must not be negative")
        names = [c.name for c in req.consumers]
        if len(set(names)) != len(names):
            raise _bad(f"duplicate consumer names: {names}")
        aps = ps.auto_partitioning_settings
        settings = TopicSettings(
            min_active_partitions=max(1, ps.min_active_partitions),
            max_active_partitions=ps.max_active_partitions,
            partition_count_limit=ps.partition_count_limit,
            auto_partitioning_strategy=aps.strategy,
            stabilization_window_s=(
                aps.partition_write_speed.stabilization_window.ToTimedelta().total_seconds()
                if aps.partition_write_speed.HasField("stabilization_window")
                else None
            ),
            up_utilization_percent=aps.partition_write_speed.up_utilization_percent,
            down_utilization_percent=aps.partition_write_speed.down_utilization_percent,
            retention=retention or TopicSettings().retention,
            retention_storage_mb=req.retention_storage_mb,
            supported_codecs=_codecs(req.supported_codecs.codecs),
            partition_write_speed_bytes_per_second=req.partition_write_speed_bytes_per_second,
            partition_write_burst_bytes=req.partition_write_burst_bytes,
            attributes=dict(req.attributes),
            metering_mode=req.metering_mode,
        )
        consumers = [_consumer_from_proto(c) for c in req.consumers]
        topic = self.storage.create(req.path, settings)
        topic.consumers = {c.name: c for c in consumers}
        return pb.CreateTopicResult()

    def describe_topic(self, req: Any) -> pb.DescribeTopicResult:
        topic = self.storage.topic(req.path)
        s = topic.settings
        result = pb.DescribeTopicResult(
            partitions=[_partition_info(p, req.include_stats, req.include_location) for p in topic.partitions],
            retention_storage_mb=s.retention_storage_mb,
            partition_write_speed_bytes_per_second=s.partition_write_speed_bytes_per_second,
            partition_write_burst_bytes=s.partition_write_burst_bytes,
            attributes=s.attributes,
            consumers=[_consumer_to_proto(c) for c in topic.consumers.values()],
            metering_mode=s.metering_mode,  # type: ignore[arg-type]
        )
        result.self.CopyFrom(self._entry(topic))
        rps = result.partitioning_settings
        rps.min_active_partitions = s.min_active_partitions
        rps.max_active_partitions = s.max_active_partitions
        rps.partition_count_limit = s.partition_count_limit
        rps.auto_partitioning_settings.strategy = s.auto_partitioning_strategy  # type: ignore[assignment]
        speed = rps.auto_partitioning_settings.partition_write_speed
        if s.stabilization_window_s is not None:
            speed.stabilization_window.CopyFrom(duration(s.stabilization_window_s))
        speed.up_utilization_percent = s.up_utilization_percent
        speed.down_utilization_percent = s.down_utilization_percent
        result.retention_period.CopyFrom(duration(s.retention.total_seconds()))
        result.supported_codecs.codecs.extend(s.supported_codecs)
        if req.include_stats:
            result.topic_stats.store_size_bytes = sum(p.bytes_stored for p in topic.partitions)
            last = max((p.last_write_ns for p in topic.partitions), default=0)
            if last:
                result.topic_stats.min_last_write_time.CopyFrom(timestamp(last))
        return result

    def describe_partition(self, req: Any) -> pb.DescribePartitionResult:
        topic = self.storage.topic(req.path)
        partition = topic.partition(req.partition_id)
        return pb.DescribePartitionResult(
            partition=_partition_info(partition, req.include_stats, req.include_location)
        )

    def describe_consumer(self, req: Any, read_sessions: Mapping[tuple[str, str, int], ReaderInfo]) -> Any:
        topic = self.storage.topic(req.path)
        consumer = topic.consumer(req.consumer)
        result = pb.DescribeConsumerResult(consumer=_consumer_to_proto(consumer))
        result.self.CopyFrom(self._entry(topic, name=req.consumer))
        now = time.time_ns()
        for p in topic.partitions:
            info = result.partitions.add(
                partition_id=p.partition_id,
                active=p.active,
                child_partition_ids=p.child_ids,
                parent_partition_ids=p.parent_ids,
            )
            info.partition_stats.CopyFrom(_partition_stats(p))
            _consumer_stats(info.partition_consumer_stats, consumer, p, now)
            owner = read_sessions.get((topic.path, consumer.name, p.partition_id))
            if owner is not None:
                stats = info.partition_consumer_stats
                stats.read_session_id = owner.read_session_id
                stats.reader_name = owner.reader_name
                stats.connection_node_id = 1
                stats.partition_read_session_create_time.CopyFrom(timestamp(owner.assigned_at_ns))
            if req.include_location:
                info.partition_location.node_id = p.node_id
                info.partition_location.generation = p.generation
        return result

    def alter_topic(self, req: Any) -> pb.AlterTopicResult:
        topic = self.storage.topic(req.path)
        s = topic.settings
        aps = req.alter_partitioning_settings
        new_min = aps.set_min_active_partitions if aps.HasField("set_min_active_partitions") else None
        if new_min is not None:
            if new_min < len(topic.active_partitions):
                raise _bad(
                    f"cannot decrease the partition count from {len(topic.active_partitions)} to {new_min}"
                )
            if new_min > MAX_PARTITIONS:
                raise _bad(f"at most {MAX_PARTITIONS} partitions are supported")
        if aps.HasField("set_max_active_partitions") and aps.set_max_active_partitions < 0:
            raise _bad("max_active_partitions must not be negative")
        if req.HasField("set_retention_period") and req.set_retention_period.ToTimedelta() < dt.timedelta(0):
            raise _bad("retention_period must not be negative")
        for name in req.drop_consumers:
            if name not in topic.consumers:
                raise _bad(f"cannot drop consumer {name!r}: topic {topic.path} has no such consumer")
        for c in req.add_consumers:
            if c.name in topic.consumers and c.name not in req.drop_consumers:
                raise StorageError("ALREADY_EXISTS", f"consumer {c.name!r} already exists")
        for c in req.alter_consumers:
            if c.name not in topic.consumers:
                raise _bad(f"cannot alter consumer {c.name!r}: topic {topic.path} has no such consumer")
        added = [_consumer_from_proto(c) for c in req.add_consumers]
        new_codecs = _codecs(req.set_supported_codecs.codecs) if req.HasField("set_supported_codecs") else None

        # Everything is validated: apply.
        if new_min is not None:
            topic.add_partitions(new_min - len(topic.active_partitions))
            s.min_active_partitions = new_min
        if aps.HasField("set_max_active_partitions"):
            s.max_active_partitions = aps.set_max_active_partitions
        if aps.HasField("set_partition_count_limit"):
            s.partition_count_limit = aps.set_partition_count_limit
        if aps.HasField("alter_auto_partitioning_settings"):
            alter = aps.alter_auto_partitioning_settings
            if alter.HasField("set_strategy"):
                s.auto_partitioning_strategy = alter.set_strategy
            speed = alter.set_partition_write_speed
            if speed.HasField("set_stabilization_window"):
                s.stabilization_window_s = speed.set_stabilization_window.ToTimedelta().total_seconds()
            if speed.HasField("set_up_utilization_percent"):
                s.up_utilization_percent = speed.set_up_utilization_percent
            if speed.HasField("set_down_utilization_percent"):
                s.down_utilization_percent = speed.set_down_utilization_percent
        if req.HasField("set_retention_period"):
            s.retention = req.set_retention_period.ToTimedelta()
        if req.HasField("set_retention_storage_mb"):
            s.retention_storage_mb = req.set_retention_storage_mb
        if new_codecs is not None:
            s.supported_codecs = new_codecs
        if req.HasField("set_partition_write_speed_bytes_per_second"):
            s.partition_write_speed_bytes_per_second = req.set_partition_write_speed_bytes_per_second
        if req.HasField("set_partition_write_burst_bytes"):
            s.partition_write_burst_bytes = req.set_partition_write_burst_bytes
        if req.set_metering_mode:
            s.metering_mode = req.set_metering_mode
        for key, value in req.alter_attributes.items():
            if value:
                s.attributes[key] = value
            else:
                s.attributes.pop(key, None)
        for name in req.drop_consumers:
            del topic.consumers[name]
        for consumer in added:
            topic.consumers[consumer.name] = consumer
        for c in req.alter_consumers:
            consumer = topic.consumers[c.name]
            if c.HasField("set_important"):
                consumer.important = c.set_important
            if c.HasField("set_read_from"):
                consumer.read_from_ns = c.set_read_from.ToNanoseconds()
            if c.HasField("set_supported_codecs"):
                consumer.supported_codecs = _codecs(c.set_supported_codecs.codecs)
            for key, value in c.alter_attributes.items():
                if value:
                    consumer.attributes[key] = value
                else:
                    consumer.attributes.pop(key, None)
        self.storage.notify()
        return pb.AlterTopicResult()

    def drop_topic(self, req: Any) -> pb.DropTopicResult:
        self.storage.drop(req.path)
        return pb.DropTopicResult()

    def commit_offset(self, req: Any) -> pb.CommitOffsetResult:
        topic = self.storage.topic(req.path)
        consumer = topic.consumer(req.consumer)
        partition = topic.partition(req.partition_id)
        if req.offset < 0 or req.offset > partition.end_offset:
            raise _bad(f"offset {req.offset} is outside [0, {partition.end_offset}] of partition {req.partition_id}")
        consumer.commit(partition, req.offset)
        self.storage.notify()
        return pb.CommitOffsetResult()

    @staticmethod
    def _entry(topic: Topic, name: str | None = None) -> Any:
        entry = ydb_scheme_pb2.Entry(
            name=name or topic.path.rsplit("/", 1)[-1],
            owner="root",
            type=ydb_scheme_pb2.Entry.TOPIC,
        )
        entry.created_at.plan_step = topic.created_ns // 1_000_000
        return entry
