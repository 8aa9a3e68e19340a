"""Typed results and settings of topic administration (never raw protobuf objects)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from .._errors import InvalidArgumentError
from .._proto import ydb_topic_pb2 as pb


class MeteringMode(IntEnum):
    """How a serverless database bills the topic."""

    UNSPECIFIED = 0
    RESERVED_CAPACITY = 1
    REQUEST_UNITS = 2


class AutoPartitioningStrategy(IntEnum):
    """Whether and how the topic splits (and merges) partitions under load."""

    UNSPECIFIED = 0
    DISABLED = 1
    SCALE_UP = 2
    SCALE_UP_AND_DOWN = 3
    PAUSED = 4


class MetricsLevel(IntEnum):
    """How much a topic reports to YDB's monitoring (``metrics_level``); YDB leaves it unset by
    default, which means the database's setting."""

    DISABLED = 0
    DATABASE = 1
    OBJECT = 2
    DETAILED = 3


@dataclass(frozen=True)
class AutoPartitioningSettings:
    """Auto-partitioning strategy and the write-speed thresholds that trigger it."""

    strategy: AutoPartitioningStrategy = AutoPartitioningStrategy.UNSPECIFIED
    stabilization_window: dt.timedelta | None = None
    up_utilization_percent: int | None = None
    down_utilization_percent: int | None = None


@dataclass(frozen=True)
class ConsumerStats:
    """A consumer's progress over all partitions (``describe_consumer`` or ``describe_topic``
    with ``include_stats``).

    Attributes:
        min_partitions_last_read_time: The earliest of the partitions' last read times (None when
            a partition was never read).
        max_read_time_lag: The largest read lag of a partition: how long its oldest message not
            yet sent to a reader has waited.
        max_write_time_lag: The largest delay between a message's creation and its write, over
            the messages read lately.
        max_committed_time_lag: The largest commit lag of a partition: how long its oldest
            message not yet committed has waited.
        bytes_read_per_minute: Bytes of message data read in the last minute (hour, day). YDB's
            ``describe_consumer`` leaves these at 0 (its partitions carry them); ``describe_topic``
            sums them.
    """

    min_partitions_last_read_time: dt.datetime | None = None
    max_read_time_lag: dt.timedelta | None = None
    max_write_time_lag: dt.timedelta | None = None
    max_committed_time_lag: dt.timedelta | None = None
    bytes_read_per_minute: int = 0
    bytes_read_per_hour: int = 0
    bytes_read_per_day: int = 0


@dataclass(frozen=True)
class ConsumerSettings:
    """A consumer of a topic: its name and options (as created, or as described).

    ``stats`` is filled by ``describe_topic(include_stats=True)`` and ``describe_consumer``
    with stats; it is not a setting and does not take part in comparisons.
    """

    name: str
    important: bool = False
    read_from: dt.datetime | None = None
    supported_codecs: Sequence[int] = ()
    attributes: Mapping[str, str] = field(default_factory=dict)
    availability_period: dt.timedelta | None = None
    stats: ConsumerStats | None = field(default=None, compare=False)


@dataclass(frozen=True)
class AlterConsumerSettings:
    """Changes to one consumer; ``None`` (``False`` for the resets) leaves a setting as it is.

    ``availability_period`` sets how long the consumer's uncommitted messages are kept past
    the topic's retention; ``reset_availability_period=True`` removes it (not both at once).
    """

    name: str
    important: bool | None = None
    read_from: dt.datetime | None = None
    supported_codecs: Sequence[int] | None = None
    attributes: Mapping[str, str] | None = None
    availability_period: dt.timedelta | None = None
    reset_availability_period: bool = False


@dataclass(frozen=True)
class PartitionStats:
    """Offsets and sizes of one partition."""

    start_offset: int
    end_offset: int
    store_size_bytes: int = 0
    last_write_time: dt.datetime | None = None
    max_write_time_lag: dt.timedelta | None = None
    bytes_written_per_minute: int = 0
    bytes_written_per_hour: int = 0
    bytes_written_per_day: int = 0


@dataclass(frozen=True)
class PartitionLocation:
    """Where a partition lives: its node and the generation of its tablet."""

    node_id: int
    generation: int


@dataclass(frozen=True)
class PartitionInfo:
    """One partition of a topic. Inactive partitions were split; their children take the writes.

    ``from_bound``/``to_bound``: the partition's key range ``[from_bound, to_bound)``, which YDB
    gives every partition of a topic created with more than one and the partitions a split
    creates (``None``: an open end, or no range: a topic of one partition, a partition added
    later by ``alter_topic``).
    """

    partition_id: int
    active: bool
    child_partition_ids: tuple[int, ...] = ()
    parent_partition_ids: tuple[int, ...] = ()
    stats: PartitionStats | None = None
    location: PartitionLocation | None = None
    from_bound: bytes | None = None
    to_bound: bytes | None = None


@dataclass(frozen=True)
class TopicDescription:
    """Settings and partitions of a topic, from ``describe_topic``."""

    path: str
    partitions: tuple[PartitionInfo, ...]
    min_active_partitions: int
    max_active_partitions: int
    partition_count_limit: int
    auto_partitioning: AutoPartitioningSettings
    retention_period: dt.timedelta | None
    retention_storage_mb: int
    supported_codecs: tuple[int, ...]
    partition_write_speed_bytes_per_second: int
    partition_write_burst_bytes: int
    attributes: Mapping[str, str]
    consumers: tuple[ConsumerSettings, ...]
    metering_mode: MeteringMode
    store_size_bytes: int = 0
    created_at: dt.datetime | None = None
    """When the topic was created (its schema entry's plan step, in milliseconds); a topic that is
    dropped and created again under the same path gets a new one. None when the server omits it."""
    metrics_level: int | None = None
    """The topic's metrics level (see ``MetricsLevel``), or None when it is not set."""

    def consumer(self, name: str) -> ConsumerSettings | None:
        """The consumer called ``name``, if the topic has one."""
        return next((c for c in self.consumers if c.name == name), None)

    @property
    def active_partition_ids(self) -> list[int]:
        return [p.partition_id for p in self.partitions if p.active]


@dataclass(frozen=True)
class ConsumerPartitionInfo:
    """One partition as seen by one consumer: how far it has read and committed.

    The offsets, names and statistics are those of ``describe_consumer(include_stats=True)``
    (zero, empty or None without stats).

    Attributes:
        start_offset: The partition's first stored offset; ``end_offset`` the next one to be written.
        committed_offset: The consumer's committed offset: the next offset it resumes from.
        last_read_offset: The offset after the last message sent to a reader of the consumer.
        read_session_id: The read session that holds the partition now ("" when none does).
        reader_name: That session's reader name.
        partition_read_session_create_time: When that session took the partition.
        connection_node_id: The node the reading session is connected to (0: none).
        last_read_time: When a reader was last sent messages of the partition.
        max_read_time_lag: How long the oldest message not yet sent to a reader has waited.
        max_write_time_lag: The largest delay between a message's creation and its write, over
            the messages read lately.
        max_committed_time_lag: How long the oldest message not yet committed has waited: the
            consumer's time lag.
        bytes_read_per_minute: Bytes of message data read in the last minute (hour, day).
        partition_stats: The partition's own statistics (size, write times, bytes written).
        location: The partition's node and generation (with ``include_location``).
    """

    partition_id: int
    active: bool
    child_partition_ids: tuple[int, ...]
    parent_partition_ids: tuple[int, ...]
    start_offset: int
    end_offset: int
    committed_offset: int
    last_read_offset: int
    read_session_id: str
    reader_name: str
    partition_read_session_create_time: dt.datetime | None = None
    connection_node_id: int = 0
    last_read_time: dt.datetime | None = None
    max_read_time_lag: dt.timedelta | None = None
    max_write_time_lag: dt.timedelta | None = None
    max_committed_time_lag: dt.timedelta | None = None
    bytes_read_per_minute: int = 0
    bytes_read_per_hour: int = 0
    bytes_read_per_day: int = 0
    partition_stats: PartitionStats | None = None
    location: PartitionLocation | None = None

    @property
    def lag(self) -> int:
        """Messages written but not yet committed by this consumer."""
        return max(0, self.end_offset - max(self.committed_offset, self.start_offset))

    @property
    def time_lag(self) -> dt.timedelta | None:
        """How long the oldest message not yet committed has waited (``max_committed_time_lag``)."""
        return self.max_committed_time_lag


@dataclass(frozen=True)
class ConsumerDescription:
    """A consumer and its per-partition progress, from ``describe_consumer``."""

    path: str
    consumer: ConsumerSettings
    partitions: tuple[ConsumerPartitionInfo, ...]

    @property
    def stats(self) -> ConsumerStats | None:
        """The consumer's statistics over all partitions (with ``include_stats``), else None."""
        return self.consumer.stats

    @property
    def total_lag(self) -> int:
        """Messages not yet committed, over all partitions."""
        return sum(p.lag for p in self.partitions)


# --- protobuf conversion ------------------------------------------------------------------


def to_duration(value: dt.timedelta | float, what: str) -> duration_pb2.Duration:
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
    if seconds < 0:
        raise InvalidArgumentError(f"{what} must not be negative, got {value!r}")
    d = duration_pb2.Duration()
    d.FromTimedelta(dt.timedelta(seconds=seconds))
    return d


def to_timestamp(value: dt.datetime, what: str) -> timestamp_pb2.Timestamp:
    if not isinstance(value, dt.datetime):
        raise InvalidArgumentError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value.astimezone(dt.UTC))
    return ts


def from_duration(msg: Any, present: bool = True) -> dt.timedelta | None:
    if not present:
        return None
    result: dt.timedelta = msg.ToTimedelta()
    return result


def from_timestamp(msg: Any, present: bool = True) -> dt.datetime | None:
    if not present or (msg.seconds == 0 and msg.nanos == 0):
        return None
    result: dt.datetime = msg.ToDatetime(tzinfo=dt.UTC)
    return result


def check_codecs(codecs: Sequence[int], what: str) -> list[int]:
    out = []
    for c in codecs:
        if not isinstance(c, int) or isinstance(c, bool) or c <= 0:
            raise InvalidArgumentError(f"{what}: codec ids must be positive ints, got {c!r}")
        out.append(int(c))
    return out


def check_attributes(attributes: Mapping[str, str] | None, what: str) -> dict[str, str]:
    attrs = dict(attributes or {})
    for k, v in attrs.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidArgumentError(f"{what}: attribute keys and values must be str")
    return attrs


def consumer_to_proto(consumer: ConsumerSettings | str) -> pb.Consumer:
    if isinstance(consumer, str):
        consumer = ConsumerSettings(consumer)
    if not isinstance(consumer, ConsumerSettings):
        raise InvalidArgumentError(f"a consumer must be a name or ConsumerSettings, got {consumer!r}")
    if not consumer.name or not isinstance(consumer.name, str):
        raise InvalidArgumentError("a consumer needs a non-empty name")
    msg = pb.Consumer(
        name=consumer.name,
        important=consumer.important,
        attributes=check_attributes(consumer.attributes, f"consumer {consumer.name!r}"),
    )
    if consumer.read_from is not None:
        msg.read_from.CopyFrom(to_timestamp(consumer.read_from, "read_from"))
    if consumer.supported_codecs:
        msg.supported_codecs.codecs.extend(check_codecs(consumer.supported_codecs, f"consumer {consumer.name!r}"))
    if consumer.availability_period is not None:
        msg.availability_period.CopyFrom(to_duration(consumer.availability_period, "availability_period"))
    return msg


def consumer_from_proto(msg: Any) -> ConsumerSettings:
    return ConsumerSettings(
        name=msg.name,
        important=msg.important,
        read_from=from_timestamp(msg.read_from, msg.HasField("read_from")),
        supported_codecs=tuple(msg.supported_codecs.codecs),
        attributes=dict(msg.attributes),
        availability_period=from_duration(msg.availability_period, msg.HasField("availability_period")),
        stats=consumer_stats_from_proto(msg.consumer_stats) if msg.HasField("consumer_stats") else None,
    )


def consumer_stats_from_proto(msg: Any) -> ConsumerStats:
    return ConsumerStats(
        min_partitions_last_read_time=from_timestamp(
            msg.min_partitions_last_read_time, msg.HasField("min_partitions_last_read_time")
        ),
        max_read_time_lag=from_duration(msg.max_read_time_lag, msg.HasField("max_read_time_lag")),
        max_write_time_lag=from_duration(msg.max_write_time_lag, msg.HasField("max_write_time_lag")),
        max_committed_time_lag=from_duration(msg.max_committed_time_lag, msg.HasField("max_committed_time_lag")),
        bytes_read_per_minute=msg.bytes_read.per_minute,
        bytes_read_per_hour=msg.bytes_read.per_hour,
        bytes_read_per_day=msg.bytes_read.per_day,
    )


def partition_stats_from_proto(msg: Any) -> PartitionStats:
    return PartitionStats(
        start_offset=msg.partition_offsets.start,
        end_offset=msg.partition_offsets.end,
        store_size_bytes=msg.store_size_bytes,
        last_write_time=from_timestamp(msg.last_write_time, msg.HasField("last_write_time")),
        max_write_time_lag=from_duration(msg.max_write_time_lag, msg.HasField("max_write_time_lag")),
        bytes_written_per_minute=msg.bytes_written.per_minute,
        bytes_written_per_hour=msg.bytes_written.per_hour,
        bytes_written_per_day=msg.bytes_written.per_day,
    )


def partition_from_proto(msg: Any) -> PartitionInfo:
    return PartitionInfo(
        partition_id=msg.partition_id,
        active=msg.active,
        child_partition_ids=tuple(msg.child_partition_ids),
        parent_partition_ids=tuple(msg.parent_partition_ids),
        stats=partition_stats_from_proto(msg.partition_stats) if msg.HasField("partition_stats") else None,
        location=(
            PartitionLocation(msg.partition_location.node_id, msg.partition_location.generation)
            if msg.HasField("partition_location")
            else None
        ),
        from_bound=_bound(msg.key_range, "from_bound"),
        to_bound=_bound(msg.key_range, "to_bound"),
    )


def _bound(key_range: Any, which: str) -> bytes | None:
    if not key_range.HasField(which):
        return None
    value: bytes = getattr(key_range, which)
    return value or None


def topic_from_proto(msg: Any, path: str) -> TopicDescription:
    ps = msg.partitioning_settings
    aps = ps.auto_partitioning_settings
    speed = aps.partition_write_speed
    return TopicDescription(
        path=path,
        partitions=tuple(partition_from_proto(p) for p in msg.partitions),
        min_active_partitions=ps.min_active_partitions,
        max_active_partitions=ps.max_active_partitions,
        partition_count_limit=ps.partition_count_limit,
        auto_partitioning=AutoPartitioningSettings(
            strategy=AutoPartitioningStrategy(aps.strategy),
            stabilization_window=from_duration(speed.stabilization_window, speed.HasField("stabilization_window")),
            up_utilization_percent=speed.up_utilization_percent or None,
            down_utilization_percent=speed.down_utilization_percent or None,
        ),
        retention_period=from_duration(msg.retention_period, msg.HasField("retention_period")),
        retention_storage_mb=msg.retention_storage_mb,
        supported_codecs=tuple(msg.supported_codecs.codecs),
        partition_write_speed_bytes_per_second=msg.partition_write_speed_bytes_per_second,
        partition_write_burst_bytes=msg.partition_write_burst_bytes,
        attributes=dict(msg.attributes),
        consumers=tuple(consumer_from_proto(c) for c in msg.consumers),
        metering_mode=MeteringMode(msg.metering_mode),
        store_size_bytes=msg.topic_stats.store_size_bytes,
        created_at=_plan_step_time(msg.self.created_at.plan_step),
        metrics_level=msg.metrics_level if msg.HasField("metrics_level") else None,
    )


def _plan_step_time(plan_step: int) -> dt.datetime | None:
    """A schema entry's plan step (milliseconds since the epoch) as a UTC datetime; 0 means unknown."""
    if plan_step <= 0:
        return None
    return dt.datetime.fromtimestamp(plan_step / 1000, tz=dt.UTC)


def consumer_description_from_proto(msg: Any, path: str) -> ConsumerDescription:
    parts = []
    for p in msg.partitions:
        stats = p.partition_consumer_stats
        has = stats.HasField
        parts.append(
            ConsumerPartitionInfo(
                partition_id=p.partition_id,
                active=p.active,
                child_partition_ids=tuple(p.child_partition_ids),
                parent_partition_ids=tuple(p.parent_partition_ids),
                start_offset=p.partition_stats.partition_offsets.start,
                end_offset=p.partition_stats.partition_offsets.end,
                committed_offset=stats.committed_offset,
                last_read_offset=stats.last_read_offset,
                read_session_id=stats.read_session_id,
                reader_name=stats.reader_name,
                partition_read_session_create_time=from_timestamp(
                    stats.partition_read_session_create_time, has("partition_read_session_create_time")
                ),
                connection_node_id=stats.connection_node_id,
                last_read_time=from_timestamp(stats.last_read_time, has("last_read_time")),
                max_read_time_lag=from_duration(stats.max_read_time_lag, has("max_read_time_lag")),
                max_write_time_lag=from_duration(stats.max_write_time_lag, has("max_write_time_lag")),
                max_committed_time_lag=from_duration(stats.max_committed_time_lag, has("max_committed_time_lag")),
                bytes_read_per_minute=stats.bytes_read.per_minute,
                bytes_read_per_hour=stats.bytes_read.per_hour,
                bytes_read_per_day=stats.bytes_read.per_day,
                partition_stats=(
                    partition_stats_from_proto(p.partition_stats) if p.HasField("partition_stats") else None
                ),
                location=(
                    PartitionLocation(p.partition_location.node_id, p.partition_location.generation)
                    if p.HasField("partition_location")
                    else None
                ),
            )
        )
    return ConsumerDescription(path=path, consumer=consumer_from_proto(msg.consumer), partitions=tuple(parts))
