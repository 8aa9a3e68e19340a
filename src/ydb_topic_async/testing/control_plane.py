"""Unary topic methods of the local server: create, describe, alter, drop, commit offset.

Validation and defaults follow YDB's schema actors (``ydb/core/persqueue/public/schema``:
``create_topic``, ``common``, ``validation``) and its scheme shard:

- CreateTopic at the database root, inside a topic or where a directory is: SCHEME_ERROR.
  Creating a topic that already exists succeeds and changes nothing (the scheme shard answers
  "path exist, request accepts it", which the topic service reports as SUCCESS).
- BAD_REQUEST for: unknown attributes, retention <= 0 or over 31 days, codec ids that are
  neither known codecs nor custom ones (>= 10000), consumer names with ``/`` or ``|``, consumer
  codecs not covering the topic's, utilization percents outside 0..100, a negative
  stabilization window, a storage limit together with auto-partitioning, write speed above
  50 MiB/s, a burst above both twice the speed and 1 MB, Durations and Timestamps out of the
  protobuf range, more than 20,000 partitions. A metering mode outside a serverless database:
  PRECONDITION_FAILED.
- Defaults: retention 24 h, write speed and burst 1 MiB/s. CreateTopic stores a partition
  strategy only for auto-partitioning settings with a strategy other than DISABLED, then with
  max active partitions = min unless set, up 90 %, down 30 %, stabilization window 300 s;
  AlterTopic sets only the strategy fields it names. A field nothing set describes as the
  tablet config's default: strategy DISABLED, max 1, up 80 %, down 20 %, window 300 s.
- AlterTopic dropping or altering a consumer that does not exist: NOT_FOUND.
- Key ranges (the scheme shard, ``schemeshard__operation_create_pq.cpp`` and
  ``schemeshard__operation_alter_pq.cpp``): a topic created with more than one partition gets
  even ranges, auto-partitioned or not (YDB's EnableTopicSplitMerge flag, on by default);
  partitions added later by AlterTopic get none, and turning auto-partitioning on lays even
  ranges over all partitions again.
- DescribeConsumer with stats always sets write/read times and lags (zero when nothing was
  written or read) and the bytes read per minute, hour and day, names itself
  ``<topic>/<consumer>``, and folds the partitions' times and lags into the consumer's stats
  (the earliest last read, the largest lags; ``describe_consumer.cpp``); DescribeTopic with
  stats gives each consumer the same and the bytes read summed. Consumers carry
  ``_service_type``.
- ``metrics_level`` is kept as given (CreateTopic, AlterTopic ``set_``/``reset_metrics_level``)
  and described only when set.
- The settings' checks and defaults are ``topic_settings``'s.
- CommitOffset: an unknown consumer is BAD_REQUEST ("no read rule provided for consumer ...", as
  a read session's), a partition that does not exist SCHEME_ERROR; the read session rules are
  ``commit_offset``'s. DescribeConsumer of an unknown consumer: SCHEME_ERROR.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .._key_ranges import KEY_SPACE, as_bound
from .._proto import ydb_scheme_pb2
from .._proto import ydb_topic_pb2 as pb
from ._replies import duration, timestamp
from .storage import Consumer, Partition, Topic, TopicStorage
from .stored import StorageError, TopicSettings
from .topic_settings import (
    STRATEGY_DISABLED,
    bad_request,
    check_autopartitioning,
    check_consumer_codecs,
    check_metering,
    checked_attributes,
    checked_codecs,
    checked_retention,
    consumer_attributes,
    consumer_from_proto,
    described_strategy,
    partition_count,
    seconds_of,
    settings_from_request,
    timestamp_ns,
    write_speed,
)

if TYPE_CHECKING:
    from .read_balancer import ReaderInfo


class ReadSessionHolder(Protocol):
    """The read session that holds a partition for a consumer, as CommitOffset sees it."""

    @property
    def id(self) -> str: ...

    def expire(self, reason: str) -> None:
        """End the session's stream with SESSION_EXPIRED and ``reason``."""


class LiveReadSessions(Protocol):
    """Where CommitOffset finds the read session holding a partition."""

    def holder(self, topic: Topic, consumer: str, partition_id: int) -> ReadSessionHolder | None: ...


_DAY_NS = 86_400_000_000_000

def _consumer_to_proto(c: Consumer) -> pb.Consumer:
    msg = pb.Consumer(name=c.name, important=c.important, attributes=c.attributes)
    if c.read_from_ns:
        msg.read_from.CopyFrom(timestamp(c.read_from_ns))
    msg.supported_codecs.codecs.extend(c.supported_codecs)
    if c.availability_period_s is not None:
        msg.availability_period.CopyFrom(duration(c.availability_period_s))
    return msg


def _bytes_written(stat: Any, p: Partition, now_ns: int) -> None:
    stat.per_minute = p.bytes_written_since(now_ns - 60_000_000_000)
    stat.per_hour = p.bytes_written_since(now_ns - 3_600_000_000_000)
    stat.per_day = p.bytes_written_since(now_ns - _DAY_NS)


def _partition_stats(p: Partition, now_ns: int) -> pb.PartitionStats:
    stats = pb.PartitionStats(store_size_bytes=p.bytes_stored, partition_node_id=p.node_id)
    stats.partition_offsets.start = p.start_offset
    stats.partition_offsets.end = p.end_offset
    stats.last_write_time.CopyFrom(timestamp(p.last_write_ns))
    last = p.message_at(p.end_offset - 1)
    write_lag = (last.written_at_ns - last.created_at_ns) / 1e9 if last and last.created_at_ns else 0.0
    stats.max_write_time_lag.CopyFrom(duration(max(write_lag, 0.0)))
    _bytes_written(stats.bytes_written, p, now_ns)
    return stats


def _consumer_stats(stats: Any, consumer: Consumer, p: Partition, now_ns: int) -> None:
    """Offsets, times and lags of one consumer on one partition (zero when nothing waits or was read)."""
    committed = consumer.committed_offset(p)
    stats.committed_offset = committed
    stats.last_read_offset = max(consumer.read_up_to.get(p.partition_id, 0), committed)
    stats.last_read_time.CopyFrom(timestamp(consumer.last_read_ns.get(p.partition_id, 0)))
    first_uncommitted = p.message_at(committed)
    lag = (now_ns - first_uncommitted.written_at_ns) / 1e9 if first_uncommitted else 0.0
    stats.max_committed_time_lag.CopyFrom(duration(max(lag, 0.0)))
    first_unread = p.message_at(stats.last_read_offset)
    read_lag = (now_ns - first_unread.written_at_ns) / 1e9 if first_unread else 0.0
    stats.max_read_time_lag.CopyFrom(duration(max(read_lag, 0.0)))
    last = p.message_at(stats.last_read_offset - 1)
    write_lag = (last.written_at_ns - last.created_at_ns) / 1e9 if last and last.created_at_ns else 0.0
    stats.max_write_time_lag.CopyFrom(duration(max(write_lag, 0.0)))
    read = stats.bytes_read
    read.per_minute = consumer.bytes_read_since(p, now_ns - 60_000_000_000)
    read.per_hour = consumer.bytes_read_since(p, now_ns - 3_600_000_000_000)
    read.per_day = consumer.bytes_read_since(p, now_ns - _DAY_NS)


def _consumer_summary(target: Any, partitions: list[Any], with_bytes: bool) -> None:
    """A consumer's ConsumerStats from its PartitionConsumerStats: the earliest last read time
    and the largest lags over the partitions (and, in DescribeTopic, the bytes read summed), as
    YDB's describe actors fold them (``UpdateProtoTime`` keeping the minimum or the maximum,
    ``AddWindowsStat``)."""
    if not partitions:
        return
    target.min_partitions_last_read_time.CopyFrom(
        min((s.last_read_time for s in partitions), key=lambda t: t.ToNanoseconds())
    )
    for name in ("max_read_time_lag", "max_write_time_lag", "max_committed_time_lag"):
        getattr(target, name).CopyFrom(max((getattr(s, name) for s in partitions), key=lambda d: d.ToNanoseconds()))
    if with_bytes:
        total = target.bytes_read
        for s in partitions:
            total.per_minute += s.bytes_read.per_minute
            total.per_hour += s.bytes_read.per_hour
            total.per_day += s.bytes_read.per_day


def _key_range(info: Any, p: Partition) -> None:
    """The partition's key range, as DescribeTopic shows it whenever the partition has one: every
    partition of a topic created with more than one (split/merge is on in YDB by default), the
    children of a split; not a single partition, nor one added later by AlterTopic (its range is
    the whole key space here, none in YDB)."""
    if p.key_from:
        info.key_range.from_bound = as_bound(p.key_from)
    if p.key_to < KEY_SPACE:
        info.key_range.to_bound = as_bound(p.key_to)


def _partition_info(p: Partition, include_stats: bool, include_location: bool, now_ns: int) -> Any:
    info = pb.DescribeTopicResult.PartitionInfo(
        partition_id=p.partition_id,
        active=p.active,
        child_partition_ids=p.child_ids,
        parent_partition_ids=p.parent_ids,
    )
    _key_range(info, p)
    if include_stats:
        info.partition_stats.CopyFrom(_partition_stats(p, now_ns))
    if include_location:
        info.partition_location.node_id = p.node_id
        info.partition_location.generation = p.generation
    return info


class ControlPlane:
    """Implements the unary TopicService methods on a ``TopicStorage``."""

    def __init__(self, storage: TopicStorage) -> None:
        self.storage = storage

    # --- create -------------------------------------------------------------------------------

    def create_topic(self, req: Any) -> pb.CreateTopicResult:
        storage = self.storage
        full = storage.normalize(req.path)
        if full == storage.database:
            raise StorageError("SCHEME_ERROR", f"cannot create a topic at the database root {full}")
        settings = settings_from_request(req)
        consumers: dict[str, Consumer] = {}
        for msg in req.consumers:
            consumer = consumer_from_proto(msg)
            if consumer.name in consumers:
                raise bad_request(f"Duplicate consumer name {consumer.name}")
            consumers[consumer.name] = consumer
        check_consumer_codecs(settings.supported_codecs, consumers)
        if full in storage.topics:
            return pb.CreateTopicResult()  # already there: YDB accepts it and changes nothing
        storage.create(full, settings, consumers.values())
        return pb.CreateTopicResult()

    # --- describe -----------------------------------------------------------------------------

    def describe_topic(self, req: Any) -> pb.DescribeTopicResult:
        topic = self.storage.topic(req.path)
        s = topic.settings
        now = self.storage.clock.now_ns()
        result = pb.DescribeTopicResult(
            partitions=[_partition_info(p, req.include_stats, req.include_location, now) for p in topic.partitions],
            retention_storage_mb=s.retention_storage_mb,
            partition_write_speed_bytes_per_second=s.partition_write_speed_bytes_per_second,
            partition_write_burst_bytes=s.partition_write_burst_bytes,
            attributes=s.attributes,
            consumers=[_consumer_to_proto(c) for c in topic.consumers.values()],
            metering_mode=s.metering_mode,  # type: ignore[arg-type]
        )
        if s.metrics_level is not None:
            result.metrics_level = s.metrics_level
        result.self.CopyFrom(self._entry(topic))
        rps = result.partitioning_settings
        rps.min_active_partitions = s.min_active_partitions
        max_partitions, up, down, window = described_strategy(s)
        rps.max_active_partitions = max_partitions
        rps.partition_count_limit = s.partition_count_limit
        strategy = s.auto_partitioning_strategy or STRATEGY_DISABLED
        rps.auto_partitioning_settings.strategy = strategy  # type: ignore[assignment]
        speed = rps.auto_partitioning_settings.partition_write_speed
        speed.stabilization_window.CopyFrom(duration(window))
        speed.up_utilization_percent = up
        speed.down_utilization_percent = down
        result.retention_period.CopyFrom(duration(s.retention.total_seconds()))
        result.supported_codecs.codecs.extend(s.supported_codecs)
        if req.include_stats:
            result.topic_stats.store_size_bytes = sum(p.bytes_stored for p in topic.partitions)
            last = max((p.last_write_ns for p in topic.partitions), default=0)
            result.topic_stats.min_last_write_time.CopyFrom(timestamp(last))
            result.topic_stats.max_write_time_lag.CopyFrom(duration(0))
            stat = result.topic_stats.bytes_written
            for p in topic.partitions:
                stat.per_minute += p.bytes_written_since(now - 60_000_000_000)
                stat.per_hour += p.bytes_written_since(now - 3_600_000_000_000)
                stat.per_day += p.bytes_written_since(now - _DAY_NS)
            for consumer, msg in zip(topic.consumers.values(), result.consumers, strict=True):
                per_partition = []
                for p in topic.partitions:
                    part = pb.DescribeConsumerResult.PartitionConsumerStats()
                    _consumer_stats(part, consumer, p, now)
                    per_partition.append(part)
                _consumer_summary(msg.consumer_stats, per_partition, with_bytes=True)
        return result

    def describe_partition(self, req: Any) -> pb.DescribePartitionResult:
        topic = self.storage.topic(req.path)
        partition = topic.partition(req.partition_id)
        info = _partition_info(partition, req.include_stats, req.include_location, self.storage.clock.now_ns())
        return pb.DescribePartitionResult(partition=info)

    def describe_consumer(self, req: Any, read_sessions: Mapping[tuple[str, str, int], ReaderInfo]) -> Any:
        topic = self.storage.topic(req.path)
        consumer = topic.consumers.get(req.consumer)
        if consumer is None:
            # YDB's describe-consumer actor: SCHEME_ERROR, whatever include_stats/include_location say.
            raise StorageError("SCHEME_ERROR", f"no consumer '{req.consumer}' in topic")
        result = pb.DescribeConsumerResult(consumer=_consumer_to_proto(consumer))
        result.self.CopyFrom(self._entry(topic, name=f"{topic.path.rsplit('/', 1)[-1]}/{consumer.name}"))
        now = self.storage.clock.now_ns()
        for p in topic.partitions:
            info = result.partitions.add(
                partition_id=p.partition_id,
                active=p.active,
                child_partition_ids=p.child_ids,
                parent_partition_ids=p.parent_ids,
            )
            if req.include_stats:
                info.partition_stats.CopyFrom(_partition_stats(p, now))
                stats = info.partition_consumer_stats
                _consumer_stats(stats, consumer, p, now)
                owner = read_sessions.get((topic.path, consumer.name, p.partition_id))
                if owner is not None:
                    stats.read_session_id = owner.read_session_id
                    stats.reader_name = owner.reader_name
                    stats.connection_node_id = owner.node_id
                    stats.partition_read_session_create_time.CopyFrom(timestamp(owner.assigned_at_ns))
            if req.include_location:
                info.partition_location.node_id = p.node_id
                info.partition_location.generation = p.generation
        if req.include_stats:
            # YDB's DescribeConsumer folds times and lags into the consumer's stats, not bytes read.
            partition_stats = [info.partition_consumer_stats for info in result.partitions]
            _consumer_summary(result.consumer.consumer_stats, partition_stats, with_bytes=False)
        return result

    # --- alter --------------------------------------------------------------------------------

    def alter_topic(self, req: Any) -> pb.AlterTopicResult:
        topic = self.storage.topic(req.path)
        current = topic.settings
        new = TopicSettings(**{name: getattr(current, name) for name in TopicSettings.__dataclass_fields__})
        new.supported_codecs = list(current.supported_codecs)
        new.attributes = dict(current.attributes)
        aps = req.alter_partitioning_settings
        new_min = None
        if aps.HasField("set_min_active_partitions"):
            new_min = max(1, partition_count(aps.set_min_active_partitions))
            if new_min < len(topic.active_partitions):
                raise bad_request(
                    f"cannot decrease the partition count from {len(topic.active_partitions)} to {new_min}"
                )
            new.min_active_partitions = new_min
        if aps.HasField("set_max_active_partitions"):
            if aps.set_max_active_partitions < 0:
                raise bad_request(f"Partitions count must be non-negative, provided {aps.set_max_active_partitions}")
            new.max_active_partitions = aps.set_max_active_partitions
        if aps.HasField("set_partition_count_limit"):
            new.partition_count_limit = aps.set_partition_count_limit
        if aps.HasField("alter_auto_partitioning_settings"):
            alter = aps.alter_auto_partitioning_settings
            # Only the fields given are set (pq_schema_actor.cpp, FillProposeRequestImpl for
            # AlterTopicRequest: per-field ``has_set_*``); the others keep what is stored, or
            # describe as the tablet config's defaults (300 s, 80 %, 20 %, max 1).
            if alter.HasField("set_strategy"):
                new.auto_partitioning_strategy = alter.set_strategy or STRATEGY_DISABLED
            speed = alter.set_partition_write_speed
            if speed.HasField("set_stabilization_window"):
                new.stabilization_window_s = seconds_of(speed.set_stabilization_window, "stabilization_window")
            if speed.HasField("set_up_utilization_percent"):
                new.up_utilization_percent = speed.set_up_utilization_percent
            if speed.HasField("set_down_utilization_percent"):
                new.down_utilization_percent = speed.set_down_utilization_percent
        if req.HasField("set_retention_period"):
            new.retention = checked_retention(req.set_retention_period)
        if req.HasField("set_retention_storage_mb"):
            if req.set_retention_storage_mb < 0:
                raise bad_request(f"retention_storage_mb must not be negative, provided {req.set_retention_storage_mb}")
            new.retention_storage_mb = req.set_retention_storage_mb
        if req.HasField("set_supported_codecs"):
            new.supported_codecs = checked_codecs(req.set_supported_codecs.codecs)
        if req.HasField("set_partition_write_speed_bytes_per_second") or req.HasField(
            "set_partition_write_burst_bytes"
        ):
            speed_value = (
                req.set_partition_write_speed_bytes_per_second
                if req.HasField("set_partition_write_speed_bytes_per_second")
                else new.partition_write_speed_bytes_per_second
            )
            burst_value = (
                req.set_partition_write_burst_bytes
                if req.HasField("set_partition_write_burst_bytes")
                else new.partition_write_burst_bytes
            )
            new.partition_write_speed_bytes_per_second, new.partition_write_burst_bytes = write_speed(
                speed_value, burst_value
            )
        check_metering(req.set_metering_mode)
        which = req.WhichOneof("metrics_level")
        if which == "set_metrics_level":
            new.metrics_level = req.set_metrics_level
        elif which == "reset_metrics_level":
            new.metrics_level = None
        for key, value in checked_attributes(req.alter_attributes).items():
            if value:
                new.attributes[key] = value
            else:
                new.attributes.pop(key, None)
        check_autopartitioning(new)

        consumers = dict(topic.consumers)
        for name in req.drop_consumers:
            if name not in consumers:
                raise StorageError(
                    "NOT_FOUND", f"cannot drop consumer {name!r}: topic {topic.path} has no such consumer"
                )
            del consumers[name]
        for msg in req.add_consumers:
            consumer = consumer_from_proto(msg)
            if consumer.name in consumers:
                raise StorageError("ALREADY_EXISTS", f"Duplicate consumer name {consumer.name}")
            consumers[consumer.name] = consumer
        altered: dict[str, Consumer] = {}
        for c in req.alter_consumers:
            if c.name not in consumers:
                raise StorageError(
                    "NOT_FOUND", f"cannot alter consumer {c.name!r}: topic {topic.path} has no such consumer"
                )
            altered[c.name] = self._altered_consumer(consumers[c.name], c)
        consumers.update(altered)
        check_consumer_codecs(new.supported_codecs, consumers)

        # Everything is validated: apply.
        if new_min is not None and new_min > len(topic.active_partitions):
            topic.add_partitions(new_min - len(topic.active_partitions))
        if new.autopartitioned and not current.autopartitioned:
            topic.lay_even_ranges()
        topic.settings = new
        topic.consumers = consumers
        self.storage.changed(topic)
        return pb.AlterTopicResult()

    @staticmethod
    def _altered_consumer(consumer: Consumer, c: Any) -> Consumer:
        """A copy of ``consumer`` with an AlterConsumer applied (the original stays as it is until commit)."""
        changed = Consumer(
            name=consumer.name,
            important=consumer.important,
            read_from_ns=consumer.read_from_ns,
            supported_codecs=list(consumer.supported_codecs),
            attributes=dict(consumer.attributes),
            availability_period_s=consumer.availability_period_s,
            committed=consumer.committed,
            read_up_to=consumer.read_up_to,
            last_read_ns=consumer.last_read_ns,
            reads=consumer.reads,
        )
        if c.HasField("set_important"):
            changed.important = c.set_important
        if c.HasField("set_read_from"):
            changed.read_from_ns = timestamp_ns(c.set_read_from, f"read_from of consumer '{c.name}'")
        if c.HasField("set_supported_codecs"):
            changed.supported_codecs = checked_codecs(c.set_supported_codecs.codecs, f" for consumer '{c.name}'")
        if c.HasField("set_availability_period"):
            seconds = seconds_of(c.set_availability_period, f"availability_period of consumer '{c.name}'")
            if seconds < 0:
                raise bad_request(
                    f"Invalid availability_period for consumer '{c.name}': duration seconds cannot be negative"
                )
            changed.availability_period_s = seconds or None
        if c.HasField("reset_availability_period"):
            changed.availability_period_s = None
        if changed.important and changed.availability_period_s is not None:
            raise bad_request(
                f"Consumer '{c.name}' has both an important flag and a limited availability_period, which are "
                "mutually exclusive"
            )
        attributes = dict(changed.attributes)
        for key, value in c.alter_attributes.items():
            attributes[key] = value
        changed.attributes = consumer_attributes(c.name, attributes)
        return changed

    # --- drop, commit -------------------------------------------------------------------------

    def drop_topic(self, req: Any) -> pb.DropTopicResult:
        self.storage.drop(req.path)
        return pb.DropTopicResult()

    def commit_offset(self, req: Any, read_sessions: LiveReadSessions) -> pb.CommitOffsetResult:
        """CommitOffset, as YDB's commit offset actor and partition apply it to a plain partition.

        With the ``read_session_id`` of the read session that holds the partition for the
        consumer, the commit is applied (an offset at or below the committed one changes
        nothing) and that session goes on. With another id, or when no session holds it:
        SESSION_EXPIRED, nothing changes. Without an id, the commit is applied (going back too)
        and the partition forgets the read session that held it: that session's stream ends
        with SESSION_EXPIRED, and its reader reconnects from the new committed offset.
        """
        topic = self.storage.topic(req.path)
        consumer = topic.reading_consumer(req.consumer)
        partition = topic.partition(req.partition_id, "SCHEME_ERROR")
        holder = read_sessions.holder(topic, consumer.name, partition.partition_id)
        if req.read_session_id:
            current = holder.id if holder is not None else ""
            if req.read_session_id != current:
                raise StorageError(
                    "SESSION_EXPIRED", f"set offset in already dead session {req.read_session_id} actual is {current}"
                )
        if req.offset < 0 or req.offset > partition.end_offset:
            raise bad_request(
                f"offset {req.offset} is outside [0, {partition.end_offset}] of partition {req.partition_id}"
            )
        if req.read_session_id:
            if req.offset > consumer.stored_offset(partition):  # a lower one is a stale request: OK, no change
                consumer.commit(partition, req.offset)
        else:
            consumer.commit(partition, req.offset)
            if holder is not None:
                holder.expire(f"status is not ok: no such session '{holder.id}'")
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
