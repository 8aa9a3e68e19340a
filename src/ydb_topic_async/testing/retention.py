"""Retention on the local server: old messages are deleted by age and by partition size.

As in YDB, a topic keeps each message for ``retention_period`` (24 hours by default) and, when
``retention_storage_mb`` is set, deletes the oldest messages of a partition that holds more than
that. Deleting moves the partition's start offset forward; readers asked for an offset below it
get the first message still stored. Messages that an *important* consumer has not committed yet
are never deleted; a partition whose size limit is held up that way is full, and writes to it
answer OVERLOADED until the consumer catches up.

Time is the server's clock (``ServerClock``): ``LocalTopicServer.advance_time`` moves it and
applies retention at once; ``Retention.run`` also applies it every ``interval`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib

from .storage import Partition, TopicStorage
from .stored import StorageError

MIB = 1024 * 1024


def protected_from(partition: Partition) -> int:
    """The lowest offset an important consumer still needs (the end offset when none does)."""
    offsets = [c.committed_offset(partition) for c in partition.topic.consumers.values() if c.important]
    return min(offsets, default=partition.end_offset)


def expire(partition: Partition, now_ns: int) -> int:
    """Delete what retention allows in ``partition``; returns how many messages went."""
    settings = partition.topic.settings
    cutoff = now_ns - int(settings.retention.total_seconds() * 1_000_000_000)
    new_start = partition.first_offset_written_since(cutoff)
    limit = settings.retention_storage_mb * MIB
    if limit and partition.bytes_stored > limit:
        excess = partition.bytes_stored - limit
        messages = partition.messages
        excess -= sum(len(m.data) for m in messages[: new_start - partition.start_offset])
        index = new_start - partition.start_offset
        while excess > 0 and index < len(messages):
            excess -= len(messages[index].data)
            index += 1
        new_start = partition.start_offset + index
    new_start = min(new_start, protected_from(partition))
    deleted = partition.truncate(new_start)
    if deleted:
        partition.topic.owner.changes.truncated(partition.topic.path, partition.partition_id, partition.start_offset)
    return deleted


def check_not_full(partition: Partition, incoming: int, now_ns: int) -> None:
    """OVERLOADED when ``partition`` is over its size limit and retention may not free it."""
    limit = partition.topic.settings.retention_storage_mb * MIB
    if not limit or partition.bytes_stored + incoming <= limit:
        return
    expire(partition, now_ns)
    if partition.bytes_stored >= limit and protected_from(partition) < partition.end_offset:
        raise StorageError(
            "OVERLOADED",
            f"partition {partition.partition_id} of {partition.topic.path} is full: it holds "
            f"{partition.bytes_stored} bytes (limit {limit}) that an important consumer has not committed",
        )


def expire_all(storage: TopicStorage) -> int:
    """Apply retention to every partition of every topic; returns how many messages were deleted."""
    now_ns = storage.clock.now_ns()
    deleted = 0
    for topic in list(storage.topics.values()):
        for partition in topic.partitions:
            if partition.rows:
                deleted += expire(partition, now_ns)
    if deleted:
        storage.notify()
    return deleted


class Retention:
    """Runs ``expire_all`` every ``interval`` seconds while the server serves."""

    def __init__(self, storage: TopicStorage, interval: float = 1.0) -> None:
        self.storage = storage
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="local-server retention")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            expire_all(self.storage)
