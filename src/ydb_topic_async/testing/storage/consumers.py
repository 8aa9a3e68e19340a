"""A topic's consumers: each one's committed offset per partition, and what its readers were sent
(the read positions and the bytes per minute, hour and day that DescribeConsumer reports)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from .log import PartitionLog

SERVICE_TYPE = "data-streams"
"""The consumer service type a YDB database uses by default."""

_DAY_NS = 86_400_000_000_000


class CommittedPartition(Protocol):
    """A partition as a consumer commits it: ``topics.Partition``, which logs the commit."""

    @property
    def partition_id(self) -> int: ...

    def log_commit(self, consumer: str, offset: int) -> None: ...


@dataclass
class Consumer:
    """A consumer of a topic and its committed offset per partition."""

    name: str
    important: bool = False
    read_from_ns: int = 0
    supported_codecs: list[int] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)
    availability_period_s: float | None = None
    committed: dict[int, int] = field(default_factory=dict)
    read_up_to: dict[int, int] = field(default_factory=dict)
    """Partition id -> the offset after the last message sent to a reader of this consumer."""
    last_read_ns: dict[int, int] = field(default_factory=dict)
    reads: dict[int, deque[tuple[int, int]]] = field(default_factory=dict)
    """Partition id -> ``(time ns, data bytes)`` of each read response of the last day, oldest
    first: the bytes read per minute, hour and day that DescribeConsumer reports."""

    def stored_offset(self, partition: PartitionLog) -> int:
        """The committed offset as recorded, even when retention deleted data above it."""
        return self.committed.get(partition.partition_id, 0)

    def committed_offset(self, partition: PartitionLog) -> int:
        """Where this consumer resumes: the recorded offset, or the partition's start when retention passed it."""
        return max(self.committed.get(partition.partition_id, 0), partition.start_offset)

    def commit(self, partition: CommittedPartition, offset: int) -> None:
        """Set (and log) the committed offset of ``partition``, validated by the caller."""
        self.committed[partition.partition_id] = offset
        partition.log_commit(self.name, offset)

    def record_read(self, partition: PartitionLog, next_offset: int, now_ns: int, nbytes: int = 0) -> None:
        """A reader of this consumer was sent ``partition``'s messages up to ``next_offset``,
        ``nbytes`` bytes of their data."""
        pid = partition.partition_id
        self.read_up_to[pid] = max(self.read_up_to.get(pid, 0), next_offset)
        self.last_read_ns[pid] = now_ns
        reads = self.reads.get(pid)
        if reads is None:
            reads = self.reads[pid] = deque()
        reads.append((now_ns, nbytes))
        while reads and reads[0][0] < now_ns - _DAY_NS:
            reads.popleft()

    def bytes_read_since(self, partition: PartitionLog, since_ns: int) -> int:
        """Bytes of ``partition``'s data sent to this consumer's readers at or after ``since_ns``."""
        total = 0
        for at_ns, nbytes in reversed(self.reads.get(partition.partition_id, ())):
            if at_ns < since_ns:
                break
            total += nbytes
        return total

