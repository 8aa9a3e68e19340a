"""The local server's storage: topics, partitions and their append-only message logs.

Everything the server knows lives here, in plain Python objects owned by one event loop:

- ``TopicStorage``: path -> ``Topic``; creation, lookup, drop, and change notification.
- ``Topic``: settings, ``Consumer``s, partitions, and which partition each producer id and
  message group is bound to.
- ``Partition``: the append-only log of ``StoredMessage``s (offset = index + start offset),
  deduplication state (producer id -> max seq_no), the active flag and the parent/child links
  that auto-partitioning splits create.

Stream handlers never poll: they register a wake-up event (``TopicStorage.listen``) and are woken
whenever anything they may care about changes (an append, a commit, a split); code that follows a
single partition can ``await partition.wait_for_offset(n)`` instead. Tests split a partition with
``TopicStorage.split_partition`` and inspect messages with ``TopicStorage.read``. Writes inside a transaction go to a
``PendingWrites`` hold and reach the log only at commit, at consecutive offsets; the consumer
offsets a transaction commits wait in ``PendingOffsets`` and are checked and applied with them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from .._key_ranges import even_bounds, middle

DEFAULT_RETENTION = dt.timedelta(hours=18)


class StorageError(Exception):
    """A request the storage refuses; ``status`` is the YDB status name to answer with."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message in a partition, as the writer sent it (data possibly compressed)."""

    offset: int
    seq_no: int
    created_at_ns: int
    written_at_ns: int
    producer_id: str
    message_group_id: str
    codec: int
    data: bytes
    uncompressed_size: int
    metadata: tuple[tuple[str, bytes], ...] = ()
    write_session_meta: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class NewMessage:
    """A message offered for appending (the offset and write time are assigned by the log)."""

    seq_no: int
    created_at_ns: int
    codec: int
    data: bytes
    uncompressed_size: int
    producer_id: str = ""
    message_group_id: str = ""
    metadata: tuple[tuple[str, bytes], ...] = ()
    write_session_meta: tuple[tuple[str, str], ...] = ()


class Partition:
    """One partition: an append-only message log plus deduplication state."""

    def __init__(self, topic: Topic, partition_id: int, parent_ids: Iterable[int] = ()) -> None:
        self.topic = topic
        self.partition_id = partition_id
        self.active = True
        self.parent_ids: list[int] = list(parent_ids)
        self.child_ids: list[int] = []
        self.from_bound: bytes | None = None
        self.to_bound: bytes | None = None
        """The key range ``[from_bound, to_bound)`` of a partition of an auto-partitioned topic."""
        self.key_range = False
        """True when the partition has a key range (None bounds are then open ends)."""
        self.generation = 1
        self.node_id = 1
        """The node reported as the partition's location (tests set it to simulate a cluster)."""
        self.start_offset = 0
        self.messages: list[StoredMessage] = []
        self.max_seq_no: dict[str, int] = {}
        self.last_write_ns = 0
        self.bytes_stored = 0
        self._waiters: set[asyncio.Event] = set()

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.messages)

    def last_seq_no(self, producer_id: str) -> int:
        return self.max_seq_no.get(producer_id, 0)

    def is_duplicate(self, producer_id: str, seq_no: int) -> bool:
        """True when ``producer_id`` already wrote ``seq_no`` (or a later one) here."""
        return bool(producer_id) and seq_no <= self.max_seq_no.get(producer_id, 0)

    def append(self, msg: NewMessage, written_at_ns: int | None = None) -> StoredMessage:
        """Store ``msg`` at the next offset (the caller checked deduplication)."""
        if not self.active:
            raise StorageError(
                "OVERLOADED", f"partition {self.partition_id} is inactive (split); write to its children"
            )
        now = written_at_ns or time.time_ns()
        stored = StoredMessage(
            offset=self.end_offset,
            seq_no=msg.seq_no,
            created_at_ns=msg.created_at_ns,
            written_at_ns=now,
            producer_id=msg.producer_id,
            message_group_id=msg.message_group_id,
            codec=msg.codec,
            data=msg.data,
            uncompressed_size=msg.uncompressed_size,
            metadata=msg.metadata,
            write_session_meta=msg.write_session_meta,
        )
        self.messages.append(stored)
        if msg.producer_id:
            self.max_seq_no[msg.producer_id] = max(self.max_seq_no.get(msg.producer_id, 0), msg.seq_no)
        self.last_write_ns = now
        self.bytes_stored += len(msg.data)
        self._wake()
        return stored

    async def wait_for_offset(self, offset: int) -> bool:
        """Wait until the log holds a message at ``offset``; False if the partition became inactive first.

        For code that follows one partition; the stream handlers instead listen to
        ``TopicStorage`` changes, since they wait on client messages and faults as well.
        """
        while self.end_offset <= offset:
            if not self.active:
                return False
            event = asyncio.Event()
            self._waiters.add(event)
            try:
                await event.wait()
            finally:
                self._waiters.discard(event)
        return True

    def _wake(self) -> None:
        for event in self._waiters:
            event.set()

    def read(self, offset: int, limit: int | None = None) -> list[StoredMessage]:
        """Messages from ``offset`` on (at most ``limit``)."""
        first = max(offset, self.start_offset) - self.start_offset
        last = len(self.messages) if limit is None else min(len(self.messages), first + limit)
        return self.messages[first:last]

    def message_at(self, offset: int) -> StoredMessage | None:
        index = offset - self.start_offset
        return self.messages[index] if 0 <= index < len(self.messages) else None

    def first_offset_written_since(self, since_ns: int) -> int:
        """The first offset whose write time is at or after ``since_ns`` (end offset if none)."""
        for m in self.messages:
            if m.written_at_ns >= since_ns:
                return m.offset
        return self.end_offset


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

    def committed_offset(self, partition: Partition) -> int:
        return max(self.committed.get(partition.partition_id, 0), partition.start_offset)

    def commit(self, partition: Partition, offset: int) -> None:
        """Set the committed offset of ``partition`` (validated by the caller)."""
        self.committed[partition.partition_id] = offset

    def record_read(self, partition: Partition, next_offset: int, now_ns: int) -> None:
        """A reader of this consumer was sent ``partition``'s messages up to ``next_offset``."""
        pid = partition.partition_id
        self.read_up_to[pid] = max(self.read_up_to.get(pid, 0), next_offset)
        self.last_read_ns[pid] = now_ns


@dataclass
class TopicSettings:
    """The settings a topic was created (or altered) with."""

    min_active_partitions: int = 1
    max_active_partitions: int = 0
    partition_count_limit: int = 0
    auto_partitioning_strategy: int = 0
    stabilization_window_s: float | None = None
    up_utilization_percent: int = 0
    down_utilization_percent: int = 0
    retention: dt.timedelta = DEFAULT_RETENTION
    retention_storage_mb: int = 0
    supported_codecs: list[int] = field(default_factory=list)
    partition_write_speed_bytes_per_second: int = 0
    partition_write_burst_bytes: int = 0
    attributes: dict[str, str] = field(default_factory=dict)
    metering_mode: int = 0


class Topic:
    """A topic: settings, consumers, partitions and producer/message-group bindings."""

    def __init__(self, path: str, settings: TopicSettings, owner: TopicStorage) -> None:
        self.path = path
        self.settings = settings
        self.owner = owner
        self.partitions: list[Partition] = [Partition(self, i) for i in range(max(1, settings.min_active_partitions))]
        if settings.auto_partitioning_strategy not in (0, 1):  # not UNSPECIFIED or DISABLED
            # As YDB: an auto-partitioned topic's partitions divide the key space evenly.
            for partition, (low, high) in zip(self.partitions, even_bounds(len(self.partitions)), strict=True):
                partition.from_bound, partition.to_bound, partition.key_range = low, high, True
        self.consumers: dict[str, Consumer] = {}
        self.producer_partition: dict[str, int] = {}
        self.group_partition: dict[str, int] = {}
        self.created_ns = time.time_ns()
        self._round_robin = itertools.count()

    def partition(self, partition_id: int) -> Partition:
        if 0 <= partition_id < len(self.partitions):
            return self.partitions[partition_id]
        raise StorageError("BAD_REQUEST", f"topic {self.path} has no partition {partition_id}")

    @property
    def active_partitions(self) -> list[Partition]:
        return [p for p in self.partitions if p.active]

    def consumer(self, name: str) -> Consumer:
        try:
            return self.consumers[name]
        except KeyError:
            raise StorageError("SCHEME_ERROR", f"topic {self.path} has no consumer {name!r}") from None

    def next_active_partition(self) -> Partition:
        active = self.active_partitions
        return active[next(self._round_robin) % len(active)]

    def bind_producer(self, producer_id: str) -> Partition:
        """The partition ``producer_id`` writes to; a new producer gets the next active one."""
        bound = self.producer_partition.get(producer_id)
        if bound is not None:
            partition = self.partitions[bound]
            if partition.active:
                return partition
            # The partition was split: the producer moves on to a child, keeping its seq_no.
            child = self.partitions[partition.child_ids[hash(producer_id) % len(partition.child_ids)]]
            child.max_seq_no[producer_id] = max(child.last_seq_no(producer_id), partition.last_seq_no(producer_id))
            self.producer_partition[producer_id] = child.partition_id
            return child
        partition = self.next_active_partition()
        self.producer_partition[producer_id] = partition.partition_id
        return partition

    def bind_group(self, group: str) -> Partition:
        bound = self.group_partition.get(group)
        if bound is not None and self.partitions[bound].active:
            return self.partitions[bound]
        partition = self.next_active_partition()
        self.group_partition[group] = partition.partition_id
        return partition

    def add_partitions(self, count: int) -> None:
        for _ in range(count):
            self.partitions.append(Partition(self, len(self.partitions)))

    def split(self, partition_id: int) -> tuple[int, int]:
        """Split an active partition into two new children; the parent becomes inactive (read-only)."""
        parent = self.partition(partition_id)
        if not parent.active:
            raise StorageError("BAD_REQUEST", f"partition {partition_id} of {self.path} is already inactive")
        children = []
        bounds = [parent.from_bound, None, parent.to_bound]
        if parent.key_range:
            bounds[1] = middle(parent.from_bound, parent.to_bound)
        for i in range(2):
            child = Partition(self, len(self.partitions), parent_ids=[partition_id])
            if parent.key_range:
                child.from_bound, child.to_bound, child.key_range = bounds[i], bounds[i + 1], True
            self.partitions.append(child)
            children.append(child.partition_id)
        parent.active = False
        parent.child_ids = children
        parent.generation += 1
        parent._wake()
        self.owner.notify()
        return children[0], children[1]


class PendingWrites:
    """Messages written inside a transaction, held outside the partitions until commit."""

    def __init__(self) -> None:
        self.messages: list[tuple[Partition, NewMessage]] = []

    def add(self, partition: Partition, msg: NewMessage) -> None:
        self.messages.append((partition, msg))

    def is_duplicate(self, partition: Partition, producer_id: str, seq_no: int) -> bool:
        """True when ``producer_id`` wrote ``seq_no`` (or a later one) to ``partition``, stored or held here."""
        if partition.is_duplicate(producer_id, seq_no):
            return True
        return bool(producer_id) and any(
            p is partition and m.producer_id == producer_id and seq_no <= m.seq_no for p, m in self.messages
        )

    def check(self) -> None:
        """Raise ABORTED when a held message can no longer be appended (topic dropped, partition split)."""
        for partition, _ in self.messages:
            topic = partition.topic
            if topic.owner.topics.get(topic.path) is not topic:
                raise StorageError("ABORTED", f"topic {topic.path} was dropped while the transaction wrote to it")
            if not partition.active:
                raise StorageError(
                    "ABORTED", f"partition {partition.partition_id} of {topic.path} was split during the transaction"
                )

    def apply(self) -> int:
        """Append every held message, partition by partition at consecutive offsets; returns how many.

        Deduplication is checked again here: a producer may have written the same seq_no outside
        the transaction since it was held.
        """
        stored = 0
        committed_at = time.time_ns()  # one write time: the whole transaction lands at once
        for partition, msg in self.messages:
            if not partition.is_duplicate(msg.producer_id, msg.seq_no):
                partition.append(msg, committed_at)
                stored += 1
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

    def add(self, path: str, consumer: str, partition_id: int, start: int, end: int) -> None:
        self.ranges.setdefault((path, consumer, partition_id), []).append((start, end))

    def check(self, storage: TopicStorage) -> list[tuple[Consumer, Partition, int]]:
        """The commits to make, ``(consumer, partition, new committed offset)``; raises ABORTED on a conflict."""
        plan = []
        for (path, name, partition_id), ranges in self.ranges.items():
            try:
                topic = storage.topic(path)
                consumer = topic.consumer(name)
                partition = topic.partition(partition_id)
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


class TopicStorage:
    """All topics of the local server's database."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.topics: dict[str, Topic] = {}
        self._listeners: set[asyncio.Event] = set()

    # --- paths ----------------------------------------------------------------------------

    def normalize(self, path: str) -> str:
        """Absolute form of ``path`` (database-relative paths are accepted)."""
        if not path or not path.strip("/"):
            raise StorageError("BAD_REQUEST", "empty topic path")
        if path.startswith("/"):
            full = path.rstrip("/")
            if full != self.database and not full.startswith(self.database + "/"):
                raise StorageError("SCHEME_ERROR", f"path {path} is outside database {self.database}")
            return full
        return f"{self.database}/{path.rstrip('/')}"

    def topic(self, path: str) -> Topic:
        full = self.normalize(path)
        topic = self.topics.get(full)
        if topic is None:
            raise StorageError("SCHEME_ERROR", f"path {full} does not exist")
        return topic

    def create(self, path: str, settings: TopicSettings) -> Topic:
        full = self.normalize(path)
        if full in self.topics:
            raise StorageError("ALREADY_EXISTS", f"path {full} already exists")
        topic = Topic(full, settings, self)
        self.topics[full] = topic
        self.notify()
        return topic

    def drop(self, path: str) -> None:
        full = self.topic(path).path
        del self.topics[full]
        self.notify()

    # --- inspection for tests ---------------------------------------------------------------

    def read(self, path: str, partition_id: int, offset: int = 0) -> list[StoredMessage]:
        """The messages stored in one partition, from ``offset`` on."""
        return self.topic(path).partition(partition_id).read(offset)

    def iter_all(self, path: str) -> Iterator[StoredMessage]:
        """Every stored message of a topic, partition by partition."""
        for partition in self.topic(path).partitions:
            yield from partition.messages

    def committed_offsets(self, path: str, consumer: str) -> Mapping[int, int]:
        topic = self.topic(path)
        c = topic.consumer(consumer)
        return {p.partition_id: c.committed_offset(p) for p in topic.partitions}

    def split_partition(self, path: str, partition_id: int) -> tuple[int, int]:
        """Split a partition as auto-partitioning would; returns the two child ids."""
        return self.topic(path).split(partition_id)

    # --- change notification ----------------------------------------------------------------

    def listen(self, wakeup: asyncio.Event) -> None:
        """Set ``wakeup`` on every change from now on."""
        self._listeners.add(wakeup)

    def unlisten(self, wakeup: asyncio.Event) -> None:
        self._listeners.discard(wakeup)

    def notify(self) -> None:
        for wakeup in self._listeners:
            wakeup.set()
