"""What a transaction holds until it commits: the messages it wrote (``PendingWrites``) and the
consumer offsets it commits (``PendingOffsets``), checked at commit and applied together by
``TopicStorage.apply_transaction``."""

from __future__ import annotations

from collections.abc import Callable

from ..stored import StorageError, StoredMessage
from .consumers import Consumer
from .log import NewMessage
from .topics import Partition, Topic


class PendingWrites:
    """Messages written inside a transaction, held outside the partitions until commit."""

    def __init__(self) -> None:
        self.messages: list[tuple[Partition, NewMessage]] = []

    def add(self, partition: Partition, msg: NewMessage) -> None:
        self.messages.append((partition, msg))

    def is_duplicate(self, partition: Partition, source_id: str, seq_no: int) -> bool:
        """True when ``source_id`` wrote ``seq_no`` (or a later one) to ``partition``, stored or held here."""
        if partition.is_duplicate(source_id, seq_no):
            return True
        return bool(source_id) and any(
            p is partition and m.producer_id == source_id and seq_no <= m.seq_no for p, m in self.messages
        )

    def check(self) -> None:
        """Raise ABORTED when a held message can no longer be appended (topic dropped, partition split)."""
        for partition, _ in self.messages:
            topic = partition.topic
            if not topic.alive:
                raise StorageError("ABORTED", f"topic {topic.path} was dropped while the transaction wrote to it")
            if not partition.active:
                raise StorageError(
                    "ABORTED", f"partition {partition.partition_id} of {topic.path} was split during the transaction"
                )

    def apply(self, written_at_ns: int | None = None) -> list[tuple[Partition, StoredMessage]]:
        """Append every held message, partition by partition at consecutive offsets; returns what was stored.

        Deduplication is checked again here: a producer may have written the same seq_no outside
        the transaction since it was held.
        """
        stored = []
        for partition, msg in self.messages:
            if not partition.is_duplicate(msg.producer_id, msg.seq_no):
                stored.append((partition, partition.append(msg, written_at_ns)))
        self.messages.clear()
        return stored

    def discard(self) -> None:
        self.messages.clear()


class PendingOffsets:
    """Consumer offset ranges a transaction commits, checked and applied only at commit.

    At commit, the ranges of each (topic, consumer, partition) must cover a contiguous span that
    starts exactly at the consumer's committed offset and ends within the partition; otherwise
    the transaction is aborted, as YDB does when another reader committed in between.
    """

    def __init__(self) -> None:
        self.ranges: dict[tuple[str, str, int], list[tuple[int, int]]] = {}

    def overlapping(self, path: str, consumer: str, partition_id: int, start: int, end: int) -> bool:
        """Whether [start, end) overlaps a range already recorded for the same partition."""
        return any(s < end and start < e for s, e in self.ranges.get((path, consumer, partition_id), ()))

    def add(self, path: str, consumer: str, partition_id: int, start: int, end: int) -> None:
        self.ranges.setdefault((path, consumer, partition_id), []).append((start, end))

    def check(self, topic: Callable[[str], Topic]) -> list[tuple[Consumer, Partition, int]]:
        """The commits to make, ``(consumer, partition, new committed offset)``, the topics looked
        up by ``topic`` (``TopicStorage.topic``); raises ABORTED on a conflict."""
        plan = []
        for (path, name, partition_id), ranges in self.ranges.items():
            try:
                found = topic(path)
                consumer = found.consumer(name)
                partition = found.partition(partition_id)
            except StorageError as exc:
                raise StorageError("ABORTED", f"cannot commit offsets: {exc.message}") from None
            committed = consumer.committed_offset(partition)
            position = committed
            for start, end in sorted(ranges):
                if start != position:
                    raise StorageError(
                        "ABORTED",
                        f"offsets of consumer {name!r} in partition {partition_id} of {path} conflict: "
                        f"the transaction commits from offset {start}, expected {position} "
                        f"(committed offset {committed})",
                    )
                position = end
            if position > partition.end_offset:
                raise StorageError(
                    "ABORTED",
                    f"offsets of consumer {name!r} in partition {partition_id} of {path} go up to {position}, "
                    f"beyond the partition's end {partition.end_offset}",
                )
            plan.append((consumer, partition, position))
        return plan

    def discard(self) -> None:
        self.ranges.clear()

