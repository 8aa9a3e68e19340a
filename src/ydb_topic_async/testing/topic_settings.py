"""Topic and consumer settings as CreateTopic and AlterTopic give them, checked and completed as
YDB's schema actors do (``ydb/core/persqueue/public/schema``: ``create_topic``, ``common``,
``validation``): the limits, the defaults and the refusals the control plane's docstring lists."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from .storage import SERVICE_TYPE, Consumer
from .stored import DEFAULT_RETENTION, DEFAULT_WRITE_SPEED, StorageError, TopicSettings

MAX_PARTITIONS = 20_000
MAX_RETENTION = dt.timedelta(days=31)
MAX_WRITE_SPEED = 50 * 1024 * 1024
MIB = 1024 * 1024
_CUSTOM_CODEC = 10_000
_KNOWN_CODECS = frozenset({1, 2, 3, 4})
_DURATION_LIMIT_S = 315_576_000_000
_TIMESTAMP_RANGE_S = (-62_135_596_800, 253_402_300_799)
STRATEGY_DISABLED = 1
_DEFAULT_UP_PERCENT = 90
_DEFAULT_DOWN_PERCENT = 30
_DEFAULT_WINDOW_S = 300.0
"""What CreateTopic stores for a strategy it writes when the request leaves a field out."""
_STORED_DEFAULT_UP_PERCENT = 80
_STORED_DEFAULT_DOWN_PERCENT = 20
_STORED_DEFAULT_WINDOW_S = 300.0
_STORED_DEFAULT_MAX_PARTITIONS = 1
"""What DescribeTopic reports for a strategy field nothing set: the proto2 defaults of the tablet
config's ``TPartitionStrategy`` (ydb/core/protos/pqconfig.proto), which describe reads unchecked."""
_INTEGER_ATTRIBUTES = frozenset({
    "_partitions_per_tablet", "_abc_id", "_max_partition_storage_size", "_message_group_seqno_retention_period_ms",
    "_max_partition_message_groups_seqno_stored",
})
_BOOLEAN_ATTRIBUTES = frozenset({"_allow_unauthenticated_read", "_allow_unauthenticated_write"})
_TEXT_ATTRIBUTES = frozenset({"_abc_slug", "_federation_account", "_cleanup_policy", "_timestamp_type"})


def bad_request(message: str) -> StorageError:
    return StorageError("BAD_REQUEST", message)


def seconds_of(d: Any, what: str) -> float:
    """A google.protobuf.Duration in seconds; BAD_REQUEST when it is outside the protobuf range."""
    if not (-_DURATION_LIMIT_S <= d.seconds <= _DURATION_LIMIT_S and -999_999_999 <= d.nanos <= 999_999_999) or (
        d.seconds * d.nanos < 0
    ):
        raise bad_request(f"{what} is not a valid duration: {d.seconds} seconds and {d.nanos} nanos")
    return float(d.seconds + d.nanos / 1e9)


def timestamp_ns(t: Any, what: str) -> int:
    low, high = _TIMESTAMP_RANGE_S
    if not (low <= t.seconds <= high and 0 <= t.nanos <= 999_999_999):
        raise bad_request(f"{what} is not a valid timestamp: {t.seconds} seconds and {t.nanos} nanos")
    return int(t.ToNanoseconds())


def checked_codecs(codecs: Any, owner: str = "") -> list[int]:
    out = list(codecs)
    for c in out:
        if c not in _KNOWN_CODECS and c < _CUSTOM_CODEC:
            raise bad_request(f"Unknown codec{owner} with value {c}")
    return out


def checked_retention(d: Any) -> dt.timedelta:
    seconds = seconds_of(d, "retention_period")
    if seconds <= 0:
        raise bad_request(f"retention_period must be positive, provided {seconds} seconds")
    retention = dt.timedelta(seconds=seconds)
    if retention > MAX_RETENTION:
        raise bad_request(f"retention_period must be at most {MAX_RETENTION.days} days, provided {seconds} seconds")
    return retention


def write_speed(speed: int, burst: int) -> tuple[int, int]:
    """Resolved (speed, burst): 0 means the default 1 MiB/s, and the burst defaults to the speed."""
    if speed < 0 or burst < 0:
        raise bad_request("partition write speed and burst must not be negative")
    speed = speed or DEFAULT_WRITE_SPEED
    if speed > MAX_WRITE_SPEED:
        raise bad_request(f"partition write speed must be at most {MAX_WRITE_SPEED} bytes/s, provided {speed}")
    burst = burst or speed
    if burst > speed * 2 and burst > 1_000_000:
        raise bad_request(f"Invalid write burst in partition specified: {burst} vs {max(speed * 2, 1_000_000)}")
    return speed, burst


def checked_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    for name, value in attributes.items():
        if name in _INTEGER_ATTRIBUTES:
            if value and not value.isdigit():
                raise bad_request(f"Attribute {name} is {value}, which is not a non-negative integer")
        elif name in _BOOLEAN_ATTRIBUTES:
            if value and value.lower() not in ("true", "false", "1", "0"):
                raise bad_request(f"Attribute {name} is {value}, which is not bool")
        elif name not in _TEXT_ATTRIBUTES:
            raise bad_request(f"Attribute {name} is not supported")
    return dict(attributes)


def consumer_attributes(name: str, attributes: Mapping[str, str]) -> dict[str, str]:
    """What YDB keeps of a consumer's attributes: its service type (other keys are not stored)."""
    service = attributes.get("_service_type") or SERVICE_TYPE
    if service != SERVICE_TYPE:
        raise bad_request(f"Unknown _service_type '{service}' for consumer '{name}'")
    version = attributes.get("_version", "")
    if version and not version.isdigit():
        raise bad_request(f"Attribute for consumer '{name}' _version is {version}, which is not ui32")
    return {"_service_type": service}


def consumer_from_proto(msg: Any) -> Consumer:
    name = msg.name
    if not name:
        raise bad_request("consumer with empty name is forbidden")
    if "/" in name or "|" in name:
        raise bad_request(f"consumer '{name}' has illegal symbols")
    read_from_ns = 0
    if msg.HasField("read_from"):
        if msg.read_from.seconds < 0:
            raise bad_request(f"read_from of consumer '{name}' can't be negative, provided {msg.read_from.seconds}")
        read_from_ns = timestamp_ns(msg.read_from, f"read_from of consumer '{name}'")
    availability = None
    if msg.HasField("availability_period"):
        seconds = seconds_of(msg.availability_period, f"availability_period of consumer '{name}'")
        if seconds < 0:
            raise bad_request(f"Invalid availability_period for consumer '{name}': duration seconds cannot be negative")
        availability = seconds or None
    if msg.important and availability is not None:
        raise bad_request(
            f"Consumer '{name}' has both an important flag and a limited availability_period, which are mutually "
            "exclusive"
        )
    return Consumer(
        name=name,
        important=msg.important,
        read_from_ns=read_from_ns,
        supported_codecs=checked_codecs(msg.supported_codecs.codecs, f" for consumer '{name}'"),
        attributes=consumer_attributes(name, msg.attributes),
        availability_period_s=availability,
    )


def check_consumer_codecs(topic_codecs: list[int], consumers: Mapping[str, Consumer]) -> None:
    for consumer in consumers.values():
        if consumer.supported_codecs and topic_codecs:
            for codec in topic_codecs:
                if codec not in consumer.supported_codecs:
                    raise bad_request(
                        f"for consumer '{consumer.name}' got unsupported codec {codec} which is supported by topic"
                    )


def check_metering(mode: int) -> None:
    if mode:
        raise StorageError("PRECONDITION_FAILED", "Metering mode can only be specified in a serverless database")


def described_strategy(s: TopicSettings) -> tuple[int, int, int, float]:
    """The partition strategy as described: (max active partitions, up %, down %, window seconds),
    each as stored or, when nothing set it, the tablet config's default."""
    return (
        _STORED_DEFAULT_MAX_PARTITIONS if s.max_active_partitions is None else s.max_active_partitions,
        _STORED_DEFAULT_UP_PERCENT if s.up_utilization_percent is None else s.up_utilization_percent,
        _STORED_DEFAULT_DOWN_PERCENT if s.down_utilization_percent is None else s.down_utilization_percent,
        _STORED_DEFAULT_WINDOW_S if s.stabilization_window_s is None else s.stabilization_window_s,
    )


def check_autopartitioning(s: TopicSettings) -> None:
    """YDB's ``ValidatePartitionStrategy``, on the strategy as it would be described."""
    if not s.autopartitioned:
        return
    max_partitions, up, down, _ = described_strategy(s)
    if max_partitions and max_partitions < s.min_active_partitions:
        raise bad_request(
            "Max active partitions must be greater than or equal to partitions count or equals zero (unlimited), "
            f"provided {max_partitions} and {s.min_active_partitions}"
        )
    for what, percent in (("up", up), ("down", down)):
        if not 0 <= percent <= 100:
            raise bad_request(f"Partition scale {what} threshold percent must be between 0 and 100, provided {percent}")
    if s.stabilization_window_s is not None and s.stabilization_window_s <= 0:
        raise bad_request(
            f"Partition scale threshold time must be greater then 1 second, provided {s.stabilization_window_s} seconds"
        )
    if s.retention_storage_mb:
        raise bad_request("Auto partitioning is incompatible with retention storage bytes option")


def partition_count(count: int) -> int:
    if count < 0:
        raise bad_request(f"Partitions count must be non-negative, provided {count}")
    if count > MAX_PARTITIONS:
        raise bad_request(f"Partitions count must be at most {MAX_PARTITIONS}, provided {count}")
    return count


def settings_from_request(req: Any) -> TopicSettings:
    """The settings of a CreateTopic request, checked, with YDB's defaults where it sets none."""
    ps = req.partitioning_settings
    min_active = max(1, partition_count(ps.min_active_partitions))
    if ps.max_active_partitions < 0 or ps.partition_count_limit < 0:
        raise bad_request("partition counts must not be negative")
    if req.retention_storage_mb < 0:
        raise bad_request(f"retention_storage_mb must not be negative, provided {req.retention_storage_mb}")
    check_metering(req.metering_mode)
    speed, burst = write_speed(req.partition_write_speed_bytes_per_second, req.partition_write_burst_bytes)
    aps = ps.auto_partitioning_settings
    write = aps.partition_write_speed
    window = seconds_of(write.stabilization_window, "stabilization_window") if write.HasField(
        "stabilization_window") else 0.0
    settings = TopicSettings(
        min_active_partitions=min_active,
        partition_count_limit=ps.partition_count_limit,
        retention=checked_retention(req.retention_period) if req.HasField("retention_period") else DEFAULT_RETENTION,
        retention_storage_mb=req.retention_storage_mb,
        supported_codecs=checked_codecs(req.supported_codecs.codecs),
        partition_write_speed_bytes_per_second=speed,
        partition_write_burst_bytes=burst,
        attributes=checked_attributes(req.attributes),
        metering_mode=req.metering_mode,
        metrics_level=req.metrics_level if req.HasField("metrics_level") else None,
    )
    if ps.HasField("auto_partitioning_settings") and aps.strategy != STRATEGY_DISABLED:
        # YDB writes a partition strategy only then (pq_schema_actor.cpp, FillProposeRequestImpl
        # for CreateTopicRequest), with these defaults; an explicit UNSPECIFIED strategy stores
        # the DISABLED type with them. Otherwise nothing is stored and describe shows defaults.
        settings.auto_partitioning_strategy = aps.strategy or STRATEGY_DISABLED
        settings.max_active_partitions = ps.max_active_partitions or min_active
        settings.up_utilization_percent = write.up_utilization_percent or _DEFAULT_UP_PERCENT
        settings.down_utilization_percent = write.down_utilization_percent or _DEFAULT_DOWN_PERCENT
        settings.stabilization_window_s = window or _DEFAULT_WINDOW_S  # a negative one is refused
    check_autopartitioning(settings)
    return settings
