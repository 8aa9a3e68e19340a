"""The local server's database: its topics by path, creating and dropping them, placing partitions
on the live nodes, the change log every acknowledged change is reported to, and waking the
streams when anything changes."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterable, Iterator, Mapping

from ..change_log import NO_CHANGE_LOG, ChangeLog, ConsumerRecord, PartitionRecord
from ..clock import ServerClock
from ..stored import StorageError, StoredMessage, TopicSettings
from .consumers import Consumer
from .topics import Partition, Topic
from .transactions import PendingWrites


def _consumer_record(c: Consumer) -> ConsumerRecord:
    return (c.name, c.important, c.read_from_ns, tuple(c.supported_codecs), tuple(c.attributes.items()),
            c.availability_period_s)


def _partition_record(p: Partition) -> PartitionRecord:
    return (p.partition_id, p.active, tuple(p.parent_ids), tuple(p.child_ids), p.key_from, p.key_to, p.generation)


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

