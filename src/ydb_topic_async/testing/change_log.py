"""What the local server's storage reports of every change it acknowledges: the change log.

``TopicStorage`` tells its ``ChangeLog`` each change as it makes it, before the change is
acknowledged to a client: topics created, altered, split or dropped, messages appended, source
ids bound, seq_nos inherited by split children, committed offsets, retention deletions, and each
committed transaction's effects as one change. Every change is described in plain values (paths,
ids, offsets, ``StoredRow``s), so a change log needs nothing of the storage's own classes.

The default, ``NO_CHANGE_LOG``, does nothing: a server without a data directory keeps
everything in memory. The durable mode's ``journal.Journal`` writes each change to disk and
replays them into a new storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .stored import StoredRow, TopicSettings

ConsumerRecord = tuple[str, bool, int, tuple[int, ...], tuple[tuple[str, str], ...], float | None]
"""A consumer as a topic change reports it: (name, important, read_from_ns, supported codecs,
attributes, availability period in seconds or None)."""

PartitionRecord = tuple[int, bool, tuple[int, ...], tuple[int, ...], int, int, int]
"""A partition as a topic change reports it: (partition id, active, parent ids, child ids, key
range start, key range end, generation)."""

OffsetCommit = tuple[str, str, int, int]
"""A committed offset: (topic path, consumer name, partition id, offset)."""

PlacedRow = tuple[str, int, StoredRow]
"""A message appended by a transaction: (topic path, partition id, the stored row)."""


class ChangeLog(Protocol):
    """Receives every change of a ``TopicStorage`` before the change is acknowledged."""

    def topic_changed(
        self,
        path: str,
        created_ns: int,
        settings: TopicSettings,
        consumers: Sequence[ConsumerRecord],
        partitions: Sequence[PartitionRecord],
    ) -> None:
        """A topic was created, or its settings, consumers or partitions changed: its whole shape now."""

    def dropped(self, path: str) -> None:
        """The topic at ``path`` was dropped."""

    def appended(self, path: str, partition_id: int, rows: Sequence[StoredRow]) -> None:
        """``rows`` were appended to a partition (one write request's messages)."""

    def bound(self, path: str, source_id: str, partition_id: int) -> None:
        """``source_id`` now writes to ``partition_id``."""

    def seq_no_inherited(self, path: str, partition_id: int, source_id: str, seq_no: int) -> None:
        """A split child took over ``source_id``'s last seq_no from its parent."""

    def committed(self, path: str, consumer: str, partition_id: int, offset: int) -> None:
        """A consumer's committed offset in a partition moved to ``offset``."""

    def truncated(self, path: str, partition_id: int, start_offset: int) -> None:
        """Retention deleted a partition's messages below ``start_offset``."""

    def transaction(self, commits: Sequence[OffsetCommit], messages: Sequence[PlacedRow]) -> None:
        """A transaction committed: its offsets and appended messages, as one change."""

    def close(self) -> None:
        """Stop recording (the server stopped)."""


class NoChangeLog:
    """The in-memory default: records nothing."""

    def topic_changed(
        self,
        path: str,
        created_ns: int,
        settings: TopicSettings,
        consumers: Sequence[ConsumerRecord],
        partitions: Sequence[PartitionRecord],
    ) -> None:
        pass

    def dropped(self, path: str) -> None:
        pass

    def appended(self, path: str, partition_id: int, rows: Sequence[StoredRow]) -> None:
        pass

    def bound(self, path: str, source_id: str, partition_id: int) -> None:
        pass

    def seq_no_inherited(self, path: str, partition_id: int, source_id: str, seq_no: int) -> None:
        pass

    def committed(self, path: str, consumer: str, partition_id: int, offset: int) -> None:
        pass

    def truncated(self, path: str, partition_id: int, start_offset: int) -> None:
        pass

    def transaction(self, commits: Sequence[OffsetCommit], messages: Sequence[PlacedRow]) -> None:
        pass

    def close(self) -> None:
        pass


NO_CHANGE_LOG: ChangeLog = NoChangeLog()
"""The change log of every storage that keeps its data in memory only."""
