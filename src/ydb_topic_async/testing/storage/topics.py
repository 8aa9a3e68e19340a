"""A topic: its settings, consumers and partitions, where each source id (producer id or message
group id) writes, and splitting a partition.

Partition choice follows YDB: a new source id is placed by the MD5 of its name, over the active
partitions of a plain topic or by key range on a topic that was split (auto-partitioning).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from typing import Any, Protocol

from ..._key_ranges import KEY_SPACE, even_ranges, key_number, split_point
from ..change_log import ChangeLog
from ..clock import ServerClock
from ..stored import StorageError, StoredMessage, TopicSettings
from .consumers import Consumer
from .log import NewMessage, PartitionLog


def source_key(source_id: str) -> int:
    """The 128-bit hash key of a source id (MD5, big-endian), as YDB places producers."""
    return key_number(source_id.encode())


def shard_of(key: int, count: int) -> int:
    """Which of ``count`` equal slices of the key space holds ``key``."""
    return min(key // ((KEY_SPACE - 1) // count), count - 1)


class TopicOwner(Protocol):
    """What a topic needs of the storage that holds it (``TopicStorage``)."""

    clock: ServerClock
    changes: ChangeLog

    def place(self, path: str, partition_id: int) -> int: ...

    def changed(self, topic: Topic) -> None: ...


class Partition(PartitionLog):
    """One partition of a topic: its log, and where it sits (key range, parents and children, the
    node its tablet runs on)."""

    def __init__(
        self,
        topic: Topic,
        partition_id: int,
        parent_ids: Iterable[int] = (),
        key_range: tuple[int, int] = (0, KEY_SPACE),
    ) -> None:
        super().__init__(partition_id)
        self.topic = topic
        self.parent_ids: list[int] = list(parent_ids)
        self.child_ids: list[int] = []
        self.key_from, self.key_to = key_range
        self.generation = 1
        """The generation of the partition's tablet: it grows each time the tablet restarts or moves
        to another node (and when the partition is split)."""
        self.node_id = topic.owner.place(topic.path, partition_id)
        """The node the partition's tablet runs on (its location), as ``TopicStorage.place`` put it."""
        self.write_quota: Any = None
        """The partition's write-quota bucket, when the server models quotas (see ``quotas``)."""

    def owns_key(self, key: int) -> bool:
        return self.key_from <= key < self.key_to

    def append(self, msg: NewMessage, written_at_ns: int | None = None) -> StoredMessage:
        """Store ``msg`` at the next offset (the caller checked deduplication); written now unless told."""
        if written_at_ns is None:
            written_at_ns = self.topic.owner.clock.now_ns() // 1_000_000 * 1_000_000
        return super().append(msg, written_at_ns)

    def log_commit(self, consumer: str, offset: int) -> None:
        """Report ``consumer``'s new committed offset of this partition to the change log."""
        self.topic.owner.changes.committed(self.topic.path, consumer, self.partition_id, offset)


class Topic:
    """A topic: settings, consumers, partitions and source-id bindings."""

    def __init__(self, path: str, settings: TopicSettings, owner: TopicOwner) -> None:
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
        parent.wake()
        self.owner.changed(self)
        return children[0], children[1]

