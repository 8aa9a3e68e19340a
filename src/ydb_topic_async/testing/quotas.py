"""Partition write quotas on the local server (``LocalTopicServer(write_quotas=True)``).

As in YDB, each partition accepts ``partition_write_speed_bytes_per_second`` (1 MiB/s by default)
with bursts up to ``partition_write_burst_bytes``. A write request that finds the bucket empty
waits until its bytes are paid for; the wait is reported in the ack's
``WriteStatistics.partition_quota_wait_time``. When more than ``MAX_WRITE_INFLIGHT_BYTES`` wait
on one partition, further requests are refused with OVERLOADED ("write inflight limit
reached"), which ends the write session; clients retry with backoff.

Off by default: tests and benchmarks write far faster than 1 MiB/s per partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from .clock import ServerClock
from .storage import Partition
from .stored import StorageError

MAX_WRITE_INFLIGHT_BYTES = 30_000_000
"""Bytes that may wait for quota on one partition before writes are refused (YDB's default)."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float
    waiting: int = 0


class WriteQuotas:
    """Token buckets of every partition; a request pays up front and waits off its debt."""

    def __init__(self, clock: ServerClock) -> None:
        self.clock = clock

    def reserve(self, partition: Partition, size: int) -> float:
        """Charge ``size`` bytes to ``partition``; returns the seconds to wait before storing them.

        Raises OVERLOADED when too many bytes already wait on the partition.
        """
        settings = partition.topic.settings
        speed = max(1, settings.partition_write_speed_bytes_per_second)
        burst = max(speed, settings.partition_write_burst_bytes)
        now = self.clock.monotonic()
        bucket = partition.write_quota
        if bucket is None:
            bucket = partition.write_quota = _Bucket(tokens=float(burst), updated=now)
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.updated) * speed)
        bucket.updated = now
        if bucket.tokens >= size:
            bucket.tokens -= size
            return 0.0
        if bucket.waiting + size > MAX_WRITE_INFLIGHT_BYTES:
            raise StorageError(
                "OVERLOADED",
                f"partition {partition.partition_id} of {partition.topic.path}: try later, write inflight limit "
                f"reached ({bucket.waiting} bytes wait for the partition's write quota of {speed} bytes/s)",
            )
        bucket.tokens -= size
        bucket.waiting += size
        return float(-bucket.tokens / speed)

    @staticmethod
    def waited(partition: Partition, size: int) -> None:
        """The ``size`` bytes that waited on ``partition`` are stored (or given up)."""
        bucket = partition.write_quota
        if bucket is not None:
            bucket.waiting = max(0, bucket.waiting - size)
