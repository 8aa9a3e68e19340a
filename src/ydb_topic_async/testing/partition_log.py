"""The local server's storage: topics, partitions and their append-only message logs.

Everything the server knows lives here, in plain Python objects owned by one event loop:

- ``TopicStorage``: path -> ``Topic``; creation, lookup, drop, change notification, and the
  ``ChangeLog`` every acknowledged change is reported to (``change_log``: nothing in memory,
  the ``journal`` in durable mode).
- ``Topic``: settings, ``Consumer``s, partitions, and which partition each source id (producer
  id or message group id) is bound to.
- ``Partition``: the append-only log of ``StoredMessage``s (offset = index + start offset; the
  start moves when retention deletes old messages), deduplication state (source id -> max
  seq_no), the active flag, the parent/child links and the hash-key range that splits create.

The value types they hold (``StoredMessage``, ``TopicSettings``, ``StorageError``) are ``stored``'s.

Partition choice follows YDB: a new source id is placed by the MD5 of its name, over the active
partitions of a plain topic or by key range on a topic that was split (auto-partitioning).

Stream handlers never poll: they register a wake-up event (``TopicStorage.listen``) and are woken
whenever anything they may care about changes (an append, a commit, a split); code that follows a
single partition can ``await partition.wait_for_offset(n)`` instead. Tests split a partition with
``TopicStorage.split_partition`` and inspect messages with ``TopicStorage.read``. Writes inside a
transaction go to a ``PendingWrites`` hold and reach the log only at commit, at consecutive
offsets; the consumer offsets a transaction commits wait in ``PendingOffsets`` and are checked and
applied with them.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, islice
from typing import Any

from .._key_ranges import KEY_SPACE, even_ranges, key_number, split_point
from .change_log import NO_CHANGE_LOG, ChangeLog, ConsumerRecord, PartitionRecord
from .clock import ServerClock
from .stored import (
    ROW_DATA,
    ROW_OFFSET,
    ROW_WRITTEN_AT,
    StorageError,
    StoredMessage,
    StoredMessages,
    StoredRow,
    TopicSettings,
    message_of,
    read_size,
)

SERVICE_TYPE = "data-streams"
"""The consumer service type a YDB database uses by default."""

_DAY_NS = 86_400_000_000_000


def source_key(source_id: str) -> int:
    """The 128-bit hash key of a source id (MD5, big-endian), as YDB places producers."""
    return key_number(source_id.encode())


def shard_of(key: int, count: int) -> int:
    """Which of ``count`` equal slices of the key space holds ``key``."""
    return min(key // ((KEY_SPACE - 1) // count), count - 1)


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

    def __init__(
        self,
        topic: Topic,
        partition_id: int,
        parent_ids: Iterable[int] = (),
        key_range: tuple[int, int] = (0, KEY_SPACE),
    ) -> None:
        self.topic = topic
        self.partition_id = partition_id
        self.active = True
        self.parent_ids: list[int] = list(parent_ids)
        self.child_ids: list[int] = []
        self.key_from, self.key_to = key_range
        self.generation = 1
        """The generation of the partition's tablet: it grows each time the tablet restarts or moves
        to another node (and when the partition is split)."""
        self.node_id = topic.owner.place(topic.path, partition_id)
        """The node the partition's tablet runs on (its location), as ``TopicStorage.place`` put it."""
        self.start_offset = 0
        self.rows: list[StoredRow] = []
        """The log: the message at offset ``start_offset + i`` is ``rows[i]``."""
        self.read_sizes: list[int] = [0]
        """Running total of ``read_size`` over ``rows``: entry i is the size of the messages before
        ``rows[i]``, so a read finds where its credit runs out by bisection instead of summing
        message by message."""
        self.max_seq_no: dict[str, int] = {}
        self.last_write_ns = 0
        self.bytes_stored = 0
        self.write_quota: Any = None
        """The partition's write-quota bucket, when the server models quotas (see ``quotas``)."""
        self._waiters: set[asyncio.Event] = set()

    @property
    def messages(self) -> StoredMessages:
        """The stored messages, oldest first."""
        return StoredMessages(self.rows)

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.rows)

    def last_seq_no(self, source_id: str) -> int:
        return self.max_seq_no.get(source_id, 0)

    def is_duplicate(self, source_id: str, seq_no: int) -> bool:
        """True when ``source_id`` already wrote ``seq_no`` (or a later one) here."""
        return bool(source_id) and seq_no <= self.max_seq_no.get(source_id, 0)

    def owns_key(self, key: int) -> bool:
        return self.key_from <= key < self.key_to

    def append(self, msg: NewMessage, written_at_ns: int | None = None) -> StoredMessage:
        """Store ``msg`` at the next offset (the caller checked deduplication); written now unless told."""
        if written_at_ns is None:
            written_at_ns = self.topic.owner.clock.now_ns() // 1_000_000 * 1_000_000
        self._check_active()
        row = (
            self.start_offset + len(self.rows),
            msg.seq_no,
            msg.created_at_ns,
            written_at_ns,
            msg.producer_id,
            msg.message_group_id,
            msg.codec,
            msg.data,
            msg.uncompressed_size,
            msg.metadata,
            msg.write_session_meta,
        )
        self.restore([row])
        self._wake()
        return message_of(row)

    def extend(self, rows: Sequence[StoredRow], data_bytes: int, read_sizes: Iterable[int]) -> None:
        """Append the rows of one write request (checked and deduplicated by the caller, offsets
        following the log's end): ``data_bytes`` is the sum of their data lengths, ``read_sizes``
        their ``read_size``s. The bookkeeping is done once per request, not per message."""
        self._check_active()
        if not rows:
            return
        self.rows.extend(rows)
        last = message_of(rows[-1])
        source = last.producer_id
        if source and last.seq_no > self.max_seq_no.get(source, 0):
            self.max_seq_no[source] = last.seq_no  # seq_nos increase within a request: the last is the largest
        self.last_write_ns = last.written_at_ns
        self.bytes_stored += data_bytes
        sizes = self.read_sizes
        sizes.extend(islice(accumulate(read_sizes, initial=sizes[-1]), 1, None))
        self._wake()

    def _check_active(self) -> None:
        if not self.active:
            raise StorageError(
                "OVERLOADED", f"partition {self.partition_id} is inactive (split); write to its children"
            )

    def restore(self, messages: Iterable[StoredMessage | StoredRow]) -> None:
        """Put already stored messages back at the end of the log (replaying a journal)."""
        rows, max_seq_no, sizes = self.rows, self.max_seq_no, self.read_sizes
        for message in messages:
            stored = message_of(message)
            rows.append(tuple(message))  # type: ignore[arg-type]
            source = stored.producer_id
            if source and stored.seq_no > max_seq_no.get(source, 0):
                max_seq_no[source] = stored.seq_no
            self.last_write_ns = stored.written_at_ns
            self.bytes_stored += len(stored.data)
            sizes.append(sizes[-1] + read_size(stored))

    def truncate(self, offset: int) -> int:
        """Delete the messages below ``offset`` (retention); their seq_nos stay known. Returns how many."""
        count = min(offset, self.end_offset) - self.start_offset
        if count <= 0:
            return 0
        self.bytes_stored -= sum(len(row[ROW_DATA]) for row in self.rows[:count])
        del self.rows[:count]
        del self.read_sizes[:count]
        self.start_offset += count
        return count

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
        last = len(self.rows) if limit is None else min(len(self.rows), first + limit)
        return [message_of(row) for row in self.rows[first:last]]

    def read_rows(self, offset: int, budget: int, limit: int) -> list[StoredRow]:
        """Rows from ``offset`` on until their ``read_size``s reach ``budget`` (the last one may
        pass it), at most ``limit``."""
        first = max(offset, self.start_offset) - self.start_offset
        last = min(len(self.rows), first + limit)
        if first >= last:
            return []
        sizes = self.read_sizes
        # sizes[k] - sizes[first] is the size of rows[first:k]: the first k where that reaches
        # the budget ends the read (``last + 1`` when it never does).
        end = bisect.bisect_left(sizes, sizes[first] + budget, first + 1, last + 1)
        return self.rows[first : min(end, last)]

    def message_at(self, offset: int) -> StoredMessage | None:
        index = offset - self.start_offset
        return message_of(self.rows[index]) if 0 <= index < len(self.rows) else None

    def first_offset_written_since(self, since_ns: int) -> int:
        """The first offset whose write time is at or after ``since_ns`` (end offset if none)."""
        for row in self.rows:
            if row[ROW_WRITTEN_AT] >= since_ns:
                return row[ROW_OFFSET]
        return self.end_offset

    def bytes_written_since(self, since_ns: int) -> int:
        """Bytes of the stored messages written at or after ``since_ns``."""
        total = 0
        for row in reversed(self.rows):
            if row[ROW_WRITTEN_AT] < since_ns:
                break
            total += len(row[ROW_DATA])
        return total


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

    def stored_offset(self, partition: Partition) -> int:
        """The committed offset as recorded, even when retention deleted data above it."""
        return self.committed.get(partition.partition_id, 0)

    def committed_offset(self, partition: Partition) -> int:
        """Where this consumer resumes: the recorded offset, or the partition's start when retention passed it."""
        return max(self.committed.get(partition.partition_id, 0), partition.start_offset)

    def commit(self, partition: Partition, offset: int) -> None:
        """Set (and log) the committed offset of ``partition``, validated by the caller."""
        self.committed[partition.partition_id] = offset
        partition.topic.owner.changes.committed(partition.topic.path, self.name, partition.partition_id, offset)

    def record_read(self, partition: Partition, next_offset: int, now_ns: int, nbytes: int = 0) -> None:
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

    def bytes_read_since(self, partition: Partition, since_ns: int) -> int:
        """Bytes of ``partition``'s data sent to this consumer's readers at or after ``since_ns``."""
        total = 0
        for at_ns, nbytes in reversed(self.reads.get(partition.partition_id, ())):
            if at_ns < since_ns:
                break
            total += nbytes
        return total


class Topic:
    """A topic: settings, consumers, partitions and source-id bindings."""

    def __init__(self, path: str, settings: TopicSettings, owner: TopicStorage) -> None:
        self.path = path
        self.settings = settings
        self.owner = owner
        count = max(1, settings.min_active_partitions)
        self.partitions: list[Partition] = [
            Partition(self, i, key_range=key_range) for i, key_range in enumerate(even_ranges(count))
        ]
        self.consumers: dict[str, Consumer] = {}
        self.source_partition: dict[str, int] = {}
        """Source id (producer id or message group id) -> the partition it writes to."""
        self.created_ns = owner.clock.now_ns()
        self.dropped = False
        self.watchers: set[asyncio.Event] = set()
        """Wake-up events of the streams open on this topic: set when the topic is dropped."""
        self._round_robin = itertools.count()

    @property
    def alive(self) -> bool:
        """Not dropped (a topic recreated under the same path is a different ``Topic``)."""
        return not self.dropped

    def partition(self, partition_id: int, status: str = "BAD_REQUEST") -> Partition:
        if 0 <= partition_id < len(self.partitions):
            return self.partitions[partition_id]
        raise StorageError(status, f"topic {self.path} has no partition {partition_id}")

    @property
    def active_partitions(self) -> list[Partition]:
        return [p for p in self.partitions if p.active]

    def consumer(self, name: str, status: str = "BAD_REQUEST") -> Consumer:
        try:
            return self.consumers[name]
        except KeyError:
            raise StorageError(status, f"topic {self.path} has no consumer {name!r}") from None

    def reading_consumer(self, name: str) -> Consumer:
        """The consumer a read session or a CommitOffset names: BAD_REQUEST when the topic has no
        such consumer, with the reason YDB's read init actor gives (``TReadInitAndAuthActor``,
        ydb/services/persqueue_v1/actors/read_init_auth_actor.cpp)."""
        consumer = self.consumers.get(name)
        if consumer is None:
            raise StorageError(
                "BAD_REQUEST",
                f"no read rule provided for consumer '{name}' in topic '{self.path}' in current cluster ''",
            )
        return consumer

    def next_active_partition(self) -> Partition:
        """Round robin over the active partitions (writers without a source id)."""
        active = self.active_partitions
        return active[next(self._round_robin) % len(active)]

    def partition_for_key(self, key: int) -> Partition:
        """The active partition a new source id with hash ``key`` is placed on."""
        active = self.active_partitions
        if self.settings.autopartitioned or len(active) != len(self.partitions):
            for partition in active:
                if partition.owns_key(key):
                    return partition
        return active[shard_of(key, len(active))]

    def bound_partition(self, source_id: str) -> Partition | None:
        """The partition ``source_id`` is bound to; a split moves it (and its seq_no) to the child owning its key."""
        bound = self.source_partition.get(source_id)
        if bound is None:
            return None
        partition = self.partitions[bound]
        if partition.active:
            return partition
        key = source_key(source_id)
        while not partition.active and partition.child_ids:
            children = [self.partitions[c] for c in partition.child_ids]
            child = next((c for c in children if c.owns_key(key)), children[0])
            self.inherit_seq_no(source_id, partition, child)
            partition = child
        self.bind(source_id, partition)
        return partition

    def inherit_seq_no(self, source_id: str, parent: Partition, child: Partition) -> None:
        """A source moving from ``parent`` to its descendant ``child`` keeps its seq_no there (logged)."""
        last = parent.last_seq_no(source_id)
        if last > child.last_seq_no(source_id):
            child.max_seq_no[source_id] = last
            self.owner.changes.seq_no_inherited(self.path, child.partition_id, source_id, last)

    def bind(self, source_id: str, partition: Partition) -> None:
        """Bind ``source_id`` to ``partition`` (logged: in durable mode the binding outlives a restart)."""
        if self.source_partition.get(source_id) == partition.partition_id:
            return
        self.source_partition[source_id] = partition.partition_id
        self.owner.changes.bound(self.path, source_id, partition.partition_id)

    def descends_from(self, partition: Partition, ancestor_id: int) -> bool:
        """Whether ``partition`` is ``ancestor_id`` or was split off it."""
        todo = [partition.partition_id]
        while todo:
            pid = todo.pop()
            if pid == ancestor_id:
                return True
            todo.extend(self.partitions[pid].parent_ids)
        return False

    def lay_even_ranges(self) -> None:
        """Give the partitions, in id order, the even key ranges of a topic created with as many
        (auto-partitioning was turned on: YDB's scheme shard lays them out so)."""
        for partition, (low, high) in zip(self.partitions, even_ranges(len(self.partitions)), strict=True):
            partition.key_from, partition.key_to = low, high

    def add_partitions(self, count: int) -> None:
        for _ in range(count):
            self.partitions.append(Partition(self, len(self.partitions)))

    def split(self, partition_id: int) -> tuple[int, int]:
        """Split an active partition into two new children; the parent becomes inactive (read-only)."""
        parent = self.partition(partition_id)
        if not parent.active:
            raise StorageError("BAD_REQUEST", f"partition {partition_id} of {self.path} is already inactive")
        middle = split_point(parent.key_from, parent.key_to)
        children = []
        for key_range in ((parent.key_from, middle), (middle, parent.key_to)):
            child = Partition(self, len(self.partitions), parent_ids=[partition_id], key_range=key_range)
            self.partitions.append(child)
            children.append(child.partition_id)
        parent.active = False
        parent.child_ids = children
        parent.generation += 1
        parent._wake()
        self.owner.changed(self)
        return children[0], children[1]


def _consumer_record(c: Consumer) -> ConsumerRecord:
    return (c.name, c.important, c.read_from_ns, tuple(c.supported_codecs), tuple(c.attributes.items()),
            c.availability_period_s)


def _partition_record(p: Partition) -> PartitionRecord:
    return (p.partition_id, p.active, tuple(p.parent_ids), tuple(p.child_ids), p.key_from, p.key_to, p.generation)


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

    def __init__(self, database: str, clock: ServerClock | None = None) -> None:
        self.database = database
        self.clock = clock or ServerClock()
        self.topics: dict[str, Topic] = {}
        self.changes: ChangeLog = NO_CHANGE_LOG
        """Where every change is reported before it is acknowledged (the journal in durable mode)."""
        self.node_ids: list[int] = [1]
        """The live nodes partitions are placed on (one, node 1, for a single server)."""
        self._listeners: set[asyncio.Event] = set()

    @property
    def journal(self) -> ChangeLog | None:
        """The durable change log (the journal of ``data_dir``) recording this storage; None in memory."""
        return None if self.changes is NO_CHANGE_LOG else self.changes

    # --- placement on nodes -------------------------------------------------------------------

    def place(self, path: str, partition_id: int) -> int:
        """The live node a partition's tablet runs on: spread by topic and partition id, so the
        partitions of a topic land on every node; node 1 when no node is live."""
        live = self.node_ids
        if not live:
            return 1
        return live[(zlib.crc32(path.encode()) + partition_id) % len(live)]

    def move_off_dead_nodes(self) -> list[Partition]:
        """Move every partition whose node is not live to a live one, with a new tablet generation
        (as a tablet restarts elsewhere when its node is lost); returns the partitions moved.

        Write sessions of a moved partition end with UNAVAILABLE (their pipe to the tablet
        died); nothing stored is lost, since the storage is shared. With no live node, nothing moves.
        """
        live = set(self.node_ids)
        moved: list[Partition] = []
        if not live:
            return moved
        for topic in self.topics.values():
            touched = False
            for partition in topic.partitions:
                if partition.node_id not in live:
                    partition.node_id = self.place(topic.path, partition.partition_id)
                    partition.generation += 1
                    moved.append(partition)
                    touched = True
            if touched:
                for wakeup in topic.watchers:
                    wakeup.set()
                self.changed(topic)
        return moved

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
        return f"{self.database}/{path.strip('/')}"

    def topic(self, path: str) -> Topic:
        """The topic at ``path``: SCHEME_ERROR when there is none, saying whether the path does not
        exist or is a directory (YDB's describer: "The '<path>' path is not a topic")."""
        full = self.normalize(path)
        topic = self.topics.get(full)
        if topic is None:
            if self.is_directory(full):
                raise StorageError("SCHEME_ERROR", f"The '{full}' path is not a topic")
            raise StorageError("SCHEME_ERROR", f"path {full} does not exist")
        return topic

    def is_directory(self, full: str) -> bool:
        """Whether ``full`` (absolute, normalized) holds topics: a directory, for the server."""
        prefix = full + "/"
        return any(other.startswith(prefix) for other in self.topics)

    def check_new_path(self, full: str) -> None:
        """SCHEME_ERROR unless a topic may be created at ``full`` (an absolute, normalized path).

        As in YDB's scheme shard: not the database root, not inside a topic (a topic is not a
        directory), and not where a directory (a prefix of existing topic paths) already is.
        """
        if full == self.database:
            raise StorageError("SCHEME_ERROR", f"cannot create a topic at the database root {full}")
        parent = full.rsplit("/", 1)[0]
        while len(parent) > len(self.database):
            if parent in self.topics:
                raise StorageError("SCHEME_ERROR", f"path {parent} is a topic, not a directory: cannot create {full}")
            parent = parent.rsplit("/", 1)[0]
        if self.is_directory(full):
            raise StorageError("SCHEME_ERROR", f"path {full} is a directory, not a topic")

    def create(self, path: str, settings: TopicSettings, consumers: Iterable[Consumer] = ()) -> Topic:
        full = self.normalize(path)
        if full in self.topics:
            raise StorageError("ALREADY_EXISTS", f"path {full} already exists")
        self.check_new_path(full)
        topic = Topic(full, settings, self)
        topic.consumers = {c.name: c for c in consumers}
        self.topics[full] = topic
        self.changed(topic)
        return topic

    def drop(self, path: str) -> None:
        topic = self.topic(path)
        del self.topics[topic.path]
        topic.dropped = True
        for wakeup in topic.watchers:
            wakeup.set()
        self.changes.dropped(topic.path)
        self.notify()

    def changed(self, topic: Topic) -> None:
        """``topic``'s settings, consumers or partitions changed: log them and wake the streams."""
        self.changes.topic_changed(
            topic.path,
            topic.created_ns,
            topic.settings,
            [_consumer_record(c) for c in topic.consumers.values()],
            [_partition_record(p) for p in topic.partitions],
        )
        self.notify()

    # --- writes outside streams -------------------------------------------------------------

    def appended(self, partition: Partition, count: int) -> None:
        """The last ``count`` messages of ``partition`` were just appended: log them."""
        self.changes.appended(partition.topic.path, partition.partition_id, partition.rows[-count:])

    def apply_transaction(
        self, offsets: list[tuple[Consumer, Partition, int]], writes: PendingWrites
    ) -> None:
        """Commit a checked transaction's offsets and held writes together (one logged change)."""
        for consumer, partition, offset in offsets:
            consumer.committed[partition.partition_id] = offset
        stored = writes.apply(self.clock.now_ns() // 1_000_000 * 1_000_000)
        self.changes.transaction(
            [(p.topic.path, c.name, p.partition_id, offset) for c, p, offset in offsets],
            [(p.topic.path, p.partition_id, m) for p, m in stored],
        )
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
