"""The durable mode of the local server: an append-only journal of everything it acknowledged.

``LocalTopicServer(data_dir=...)`` writes one record per change to ``<data_dir>/journal.log``
*before* acknowledging the change: topics with their settings, consumers and partitions, the
messages of every write request (with their seq_nos, so deduplication survives), source-id
bindings, committed offsets, retention deletions, and each committed transaction's effects as
one record. The next server started on the same directory replays the journal and continues
where the last one stopped.

A record reaches the operating system with one ``write`` call before the reply is sent, so it
survives the server process being killed (SIGKILL included). It is not flushed to the disk
(no fsync): a machine crash or power loss may lose the newest records. A record cut short by
such a crash is detected by its checksum and dropped, with everything after it.

Record framing: 4-byte little-endian payload length, 4-byte CRC-32 of the payload, then the
payload, a ``marshal``-encoded tuple of plain values (the journal is read back by the same
Python version that wrote it; it is a test fixture, not an archive format).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import marshal
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .change_log import NO_CHANGE_LOG, ConsumerRecord, OffsetCommit, PartitionRecord, PlacedRow
from .storage import Consumer, Partition, Topic, TopicStorage
from .stored import StoredMessage, StoredRow, TopicSettings

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger("ydb_topic_async.testing")

JOURNAL_NAME = "journal.log"
_HEADER = struct.Struct("<II")

_SETTINGS_FIELDS = (
    "min_active_partitions",
    "max_active_partitions",
    "partition_count_limit",
    "auto_partitioning_strategy",
    "stabilization_window_s",
    "up_utilization_percent",
    "down_utilization_percent",
    "retention_storage_mb",
    "supported_codecs",
    "partition_write_speed_bytes_per_second",
    "partition_write_burst_bytes",
    "attributes",
    "metering_mode",
    "metrics_level",
)
"""Appended to, never reordered: a journal written before a field existed lacks it at the end
and replays with its default."""


def _message_record(m: StoredMessage | StoredRow) -> tuple[Any, ...]:
    return tuple(m)  # a plain tuple in StoredMessage's field order (marshal takes no NamedTuple)


def _message(record: tuple[Any, ...]) -> StoredMessage:
    offset, seq_no, created, written, producer, group, codec, data, size, metadata, meta = record
    return StoredMessage(
        offset, seq_no, created, written, producer, group, codec, data, size,
        tuple(tuple(item) for item in metadata), tuple(tuple(item) for item in meta),
    )


class JournalLockedError(RuntimeError):
    """Another server is using the data directory."""


class Journal:
    """Records changes of one ``TopicStorage`` in ``<data_dir>/journal.log`` and replays them: the
    storage's ``ChangeLog`` in durable mode."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.directory = Path(data_dir)
        self.path = self.directory / JOURNAL_NAME
        self._fd: int | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    def open(self, storage: TopicStorage, replay: bool = True) -> int:
        """Lock the directory, replay the journal into ``storage`` (unless it holds it already), and
        start recording; returns how many records were replayed."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise JournalLockedError(f"{self.directory} is in use by another local topic server") from None
            with open(fd, "rb", closefd=False) as source:
                data = source.read()
            count, good = 0, 0
            replayer = _Replay(storage)
            for record, end in self._records(data):
                if replay:
                    replayer.apply(record)
                count += 1
                good = end
            if good < len(data):
                logger.warning("journal %s: dropping %d bytes of an incomplete record", self.path, len(data) - good)
                os.ftruncate(fd, good)
            os.lseek(fd, 0, os.SEEK_END)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        storage.changes = self
        return count

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # also releases the lock

    @staticmethod
    def _records(data: bytes) -> Iterator[tuple[tuple[Any, ...], int]]:
        position = 0
        while position + _HEADER.size <= len(data):
            length, checksum = _HEADER.unpack_from(data, position)
            start = position + _HEADER.size
            payload = data[start : start + length]
            if len(payload) < length or zlib.crc32(payload) != checksum:
                return
            position = start + length
            yield marshal.loads(payload), position

    def _write(self, record: tuple[Any, ...]) -> None:
        if self._fd is None:
            return
        payload = marshal.dumps(record)
        # Header and payload go out separately (no copy of a large payload); a record cut
        # between them is detected at replay, and nothing is acknowledged before both are out.
        for part in (_HEADER.pack(len(payload), zlib.crc32(payload)), payload):
            view = memoryview(part)
            while view:
                view = view[os.write(self._fd, view) :]

    # --- what the storage records ---------------------------------------------------------

    def topic_changed(
        self,
        path: str,
        created_ns: int,
        settings: TopicSettings,
        consumers: Sequence[ConsumerRecord],
        partitions: Sequence[PartitionRecord],
    ) -> None:
        values = tuple(getattr(settings, name) for name in _SETTINGS_FIELDS)
        self._write(("topic", path, created_ns, values, settings.retention.total_seconds(), tuple(consumers),
                     tuple(partitions)))

    def dropped(self, path: str) -> None:
        self._write(("drop", path))

    def appended(self, path: str, partition_id: int, rows: Sequence[StoredRow]) -> None:
        self._write(("append", path, partition_id, tuple(_message_record(m) for m in rows)))

    def bound(self, path: str, source_id: str, partition_id: int) -> None:
        self._write(("bind", path, source_id, partition_id))

    def seq_no_inherited(self, path: str, partition_id: int, source_id: str, seq_no: int) -> None:
        self._write(("seqno", path, partition_id, source_id, seq_no))

    def committed(self, path: str, consumer: str, partition_id: int, offset: int) -> None:
        self._write(("commit", path, consumer, partition_id, offset))

    def truncated(self, path: str, partition_id: int, start_offset: int) -> None:
        self._write(("truncate", path, partition_id, start_offset))

    def transaction(self, commits: Sequence[OffsetCommit], messages: Sequence[PlacedRow]) -> None:
        placed = tuple((path, partition_id, _message_record(row)) for path, partition_id, row in messages)
        self._write(("tx", tuple(commits), placed))


class _Replay:
    """Applies journal records to a storage, with recording switched off."""

    def __init__(self, storage: TopicStorage) -> None:
        self.storage = storage

    def apply(self, record: tuple[Any, ...]) -> None:
        kind = record[0]
        getattr(self, f"_{kind}")(*record[1:])

    def _topic_at(self, path: str) -> Topic | None:
        return self.storage.topics.get(path)

    def _topic(
        self, path: str, created_ns: int, settings: tuple[Any, ...], retention_s: float,
        consumers: tuple[Any, ...], partitions: tuple[Any, ...],
    ) -> None:
        values = dict(zip(_SETTINGS_FIELDS, settings, strict=False))
        values["supported_codecs"] = list(values["supported_codecs"])
        values["attributes"] = dict(values["attributes"])
        topic_settings = TopicSettings(retention=dt.timedelta(seconds=retention_s), **values)
        topic = self._topic_at(path)
        if topic is None or topic.created_ns != created_ns:
            topic = Topic(path, topic_settings, self.storage)
            topic.created_ns = created_ns
            topic.partitions = []
            self.storage.topics[path] = topic
        topic.settings = topic_settings
        old = topic.consumers
        topic.consumers = {}
        for name, important, read_from_ns, codecs, attributes, availability in consumers:
            consumer = old.get(name) or Consumer(name)
            consumer.important, consumer.read_from_ns = important, read_from_ns
            consumer.supported_codecs, consumer.attributes = list(codecs), dict(attributes)
            consumer.availability_period_s = availability
            topic.consumers[name] = consumer
        for pid, active, parents, children, key_from, key_to, generation in partitions:
            if pid == len(topic.partitions):
                topic.partitions.append(Partition(topic, pid, parents, (key_from, key_to)))
            partition = topic.partitions[pid]
            partition.active, partition.child_ids, partition.generation = active, list(children), generation

    def _drop(self, path: str) -> None:
        topic = self.storage.topics.pop(path, None)
        if topic is not None:
            topic.dropped = True

    def _append(self, path: str, partition_id: int, messages: tuple[Any, ...]) -> None:
        topic = self._topic_at(path)
        if topic is not None:
            topic.partitions[partition_id].restore(_message(record) for record in messages)

    def _bind(self, path: str, source_id: str, partition_id: int) -> None:
        topic = self._topic_at(path)
        if topic is not None:
            topic.source_partition[source_id] = partition_id

    def _seqno(self, path: str, partition_id: int, source_id: str, seq_no: int) -> None:
        topic = self._topic_at(path)
        if topic is not None:
            partition = topic.partitions[partition_id]
            partition.max_seq_no[source_id] = max(partition.last_seq_no(source_id), seq_no)

    def _commit(self, path: str, consumer: str, partition_id: int, offset: int) -> None:
        topic = self._topic_at(path)
        if topic is not None and consumer in topic.consumers:
            topic.consumers[consumer].committed[partition_id] = offset

    def _truncate(self, path: str, partition_id: int, start_offset: int) -> None:
        topic = self._topic_at(path)
        if topic is not None:
            topic.partitions[partition_id].truncate(start_offset)

    def _tx(self, commits: tuple[Any, ...], messages: tuple[Any, ...]) -> None:
        for path, consumer, partition_id, offset in commits:
            self._commit(path, consumer, partition_id, offset)
        for path, partition_id, record in messages:
            self._append(path, partition_id, (record,))


def open_journal(storage: TopicStorage, data_dir: str | os.PathLike[str] | None, replay: bool = True) -> Journal | None:
    """A journal recording ``storage`` in ``data_dir`` (after replaying it), or None without a directory."""
    if data_dir is None:
        return None
    journal = Journal(data_dir)
    count = journal.open(storage, replay)
    logger.info("local topic server: replayed %d journal records from %s", count, journal.path)
    return journal


def close_journal(storage: TopicStorage) -> None:
    """Stop recording ``storage`` (closing its journal, if it has one): it keeps its data in memory from now on."""
    changes, storage.changes = storage.changes, NO_CHANGE_LOG
    with contextlib.suppress(OSError):
        changes.close()
