"""A partition's log: the append-only list of stored messages, what a read of it costs, retention's
truncation, the deduplication state (each source id's highest seq_no), and waiting for data.

The log knows nothing of its topic: ``topics.Partition`` adds where the partition sits (its
topic, key range, parents and children, node and tablet generation).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, islice

from ..stored import (
    ROW_DATA,
    ROW_OFFSET,
    ROW_WRITTEN_AT,
    StorageError,
    StoredMessage,
    StoredMessages,
    StoredRow,
    message_of,
    read_size,
)


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


class PartitionLog:
    """One partition's append-only message log plus deduplication state.

    An inactive log (its partition was split) takes no more writes and can still be read.
    """

    def __init__(self, partition_id: int) -> None:
        self.partition_id = partition_id
        self.active = True
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

    def append(self, msg: NewMessage, written_at_ns: int) -> StoredMessage:
        """Store ``msg`` at the next offset, written at ``written_at_ns`` (the caller checked
        deduplication)."""
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
        self.wake()
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
        self.wake()

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

    def wake(self) -> None:
        """Wake whoever waits for an offset (to find it, or that the log became inactive)."""
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

