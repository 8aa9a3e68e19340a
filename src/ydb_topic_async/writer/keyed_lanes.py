"""The lanes of a keyed writer: one ``TopicWriter`` per partition, made on first use.

Each lane writes with producer id ``{producer_id}_{partition_id}`` and the seq_nos the keyed
writer assigns, counted from the last seq_no that producer id stored (which the lane's first
handshake tells), so every partition keeps YDB's exactly-once deduplication. ``Lanes`` makes
them, hands a call's messages to one (numbering them after its last seq_no), closes those idle
for too long and lets a successor go on with a closed lane's numbers, and sums up what they
went through. Placing a failed lane's messages again is ``rerouting``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import OverloadedError
from .._stream import ConnectionState
from ..observability.logging import sdk_logger
from .messages import InitInfo, Message, MetadataInput, OneMessage, WriteResult, WriteStatistics
from .writer import TopicWriter

if TYPE_CHECKING:
    from .._context import ClientContext
    from ..topic.admin import TopicAdmin
    from .settings import WriterSettings
    from .transaction import WriteTransaction

logger = sdk_logger("writer")


@dataclass(frozen=True)
class PartitionWriterStatus:
    """How the writer of one partition of a ``KeyedWriter`` fares (``KeyedWriter.partition_writers``).

    The fields are those of a ``TopicWriter``: ``producer_id`` is ``{producer_id}_{partition_id}``;
    ``buffered_messages``/``buffered_bytes`` count what it holds unacknowledged.
    """

    partition_id: int
    producer_id: str
    connection_state: ConnectionState
    session_id: str
    init_info: InitInfo | None
    buffered_messages: int
    buffered_bytes: int
    reconnects: int
    last_error: BaseException | None
    last_write_statistics: WriteStatistics | None
    selected_codec: int | None


class LaneWriter(TopicWriter):
    """One partition's writer. OVERLOADED ends it at once, without an ERROR: the keyed writer
    finds out why (a split partition, or only a busy one) and places its messages again.

    It takes seq_nos relative to ``seq_no_base``: the last seq_no the lane's producer id had
    stored when the partition was first written, which its first handshake tells (a writer that
    replaces a broken one is given it). So messages are accepted, and numbered, before the
    writer has connected.
    """

    def __init__(
        self,
        context: ClientContext,
        admin: TopicAdmin,
        path: str,
        settings: WriterSettings,
        *,
        seq_no_base: int | None,
        transaction: WriteTransaction | None = None,
    ) -> None:
        super().__init__(context, admin, path, settings, transaction=transaction)
        self._base_known = seq_no_base is not None
        self._seq_no_base = seq_no_base or 0

    @property
    def seq_no_base(self) -> int | None:
        """What is added to the keyed writer's numbers, or None while the first handshake has
        not told it (nothing was sent before it)."""
        return self._seq_no_base if self._base_known else None

    def _on_init(self, info: InitInfo) -> None:
        if not self._base_known:
            self._base_known = True
            self._seq_no_base = info.last_seq_no
            self._shift_unsent(info.last_seq_no)
        super()._on_init(info)

    def _hands_off(self, error: BaseException) -> bool:
        return isinstance(error, OverloadedError)


class LaneBroken(Exception):
    """A lane's writer failed (OVERLOADED) before it took the messages handed to it."""

    def __init__(self, lane: Lane) -> None:
        super().__init__(lane.partition_id)
        self.lane = lane


class Entry:
    """One accepted message, until the partition it finally lands in acknowledges it."""

    __slots__ = (
        "created_at", "data", "done", "index", "key", "metadata", "partition_id", "result", "seq_no", "size",
    )

    def __init__(self, data: bytes, metadata: MetadataInput | None, created_at: dt.datetime | None, key: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.metadata = metadata
        self.created_at = created_at
        self.key = key
        """The key's bytes: where the message belongs."""
        self.partition_id = -1
        """The partition whose lane took it last, and ``seq_no`` its number there, relative to the
        lane's ``seq_no_base`` (-1: none yet)."""
        self.seq_no = 0
        self.index = 0
        """Acceptance order over the whole keyed writer (flush waits by it)."""
        self.done = False
        self.result: asyncio.Future[WriteResult] | None = None


class Lane:
    """The writer of one partition and its unacknowledged entries, in seq_no order."""

    __slots__ = (
        "failed", "last_used", "lock", "next_seq_no", "partition_id", "pending", "retired", "writer",
    )

    def __init__(self, partition_id: int, writer: LaneWriter, next_seq_no: int) -> None:
        self.partition_id = partition_id
        self.writer = writer
        self.next_seq_no = next_seq_no
        self.pending: deque[Entry] = deque()
        self.lock = asyncio.Lock()
        """Held while numbering and handing over a call's messages: seq_nos must grow."""
        self.failed = False
        self.retired = False
        """Closed for being idle: a write that still holds it takes the partition's new lane."""
        self.last_used = time.monotonic()

    def idle(self) -> bool:
        """Nothing waits for an acknowledgement and nothing is being handed over."""
        return not self.lock.locked() and all(entry.done for entry in self.pending)


class Lanes:
    """The open lanes of one keyed writer, by partition id.

    ``settings`` are those of every lane (numbered by the keyed writer), but for the producer id
    and partition each lane adds; every lane writes into ``transaction`` when one is given.
    ``on_taken(lane, entry, result)`` is told, in order, of each entry a lane took, with the
    future of its acknowledgement.
    """

    def __init__(
        self,
        context: ClientContext,
        admin: TopicAdmin,
        path: str,
        producer_id: str,
        settings: WriterSettings,
        on_taken: Callable[[Lane, Entry, asyncio.Future[WriteResult]], None],
        transaction: WriteTransaction | None = None,
    ) -> None:
        self._context = context
        self._admin = admin
        self._path = path
        self._producer_id = producer_id
        self._settings = settings
        self._on_taken = on_taken
        self._transaction = transaction
        self.open: dict[int, Lane] = {}
        """The open lanes by partition id."""
        self._numbering: dict[int, tuple[int | None, int]] = {}
        """Partition id -> (seq no base, next seq_no) of a lane closed or being replaced, for its successor."""
        self.closed_reconnects = 0
        """Reconnects of lanes closed since (idle or replaced), and the replacements."""
        self._closed_error: BaseException | None = None

    def producer_id(self, partition_id: int) -> str:
        """The producer id of ``partition_id``'s lane."""
        return f"{self._producer_id}_{partition_id}"

    def get(self, partition_id: int) -> Lane:
        """The partition's open lane, made now if there is none (it connects in the background:
        messages are accepted and numbered meanwhile)."""
        lane = self.open.get(partition_id)
        if lane is None:
            base, next_seq_no = self._numbering.pop(partition_id, (None, 1))
            settings = self._settings.replace(producer_id=self.producer_id(partition_id), partition_id=partition_id)
            writer = LaneWriter(
                self._context, self._admin, self._path, settings, seq_no_base=base, transaction=self._transaction
            )
            lane = self.open[partition_id] = Lane(partition_id, writer, next_seq_no)
        return lane

    async def hand_over(self, lane: Lane, entries: list[Entry]) -> Lane:
        """Give ``entries`` to ``lane``'s writer (or, if it was closed meanwhile for being idle,
        to its partition's new one): numbered after its last seq_no, except those it had already,
        which keep their number so that the server can drop what it stored. Returns the lane
        that took them; ``LaneBroken`` when its writer failed before taking them."""
        pid = lane.partition_id
        await lane.lock.acquire()
        while lane.retired:
            lane.lock.release()
            lane = self.get(pid)
            await lane.lock.acquire()
        try:
            numbers: list[int] = []
            free = lane.next_seq_no
            for entry in entries:
                number = entry.seq_no if entry.partition_id == pid else max(free, numbers[-1] + 1 if numbers else 0)
                numbers.append(number)
                free = max(free, number + 1)
            messages: list[OneMessage] = [
                Message(e.data, seq_no=n, created_at=e.created_at, metadata=e.metadata)
                for e, n in zip(entries, numbers, strict=True)
            ]
            try:
                futures = await lane.writer.write_with_ack_future(messages)
            except OverloadedError:
                raise LaneBroken(lane) from None
            lane.next_seq_no = free
            lane.last_used = time.monotonic()
            for entry, number, future in zip(entries, numbers, futures, strict=True):
                entry.partition_id = pid
                entry.seq_no = number
                lane.pending.append(entry)
                self._on_taken(lane, entry, future)
        finally:
            lane.lock.release()
        return lane

    # --- closing lanes --------------------------------------------------------------------

    async def retire_idle(self, timeout: float) -> None:
        """Close the lanes idle for ``timeout`` seconds; their partitions' next lanes go on with their numbers."""
        now = time.monotonic()
        for lane in list(self.open.values()):
            if (
                now - lane.last_used >= timeout
                and not lane.failed
                and lane.writer.seq_no_base is not None
                and lane.idle()
            ):
                await self._retire(lane)

    async def _retire(self, lane: Lane) -> None:
        pid = lane.partition_id
        lane.retired = True
        if self.open.get(pid) is lane:
            del self.open[pid]
        self._numbering[pid] = (lane.writer.seq_no_base, lane.next_seq_no)
        logger.debug("keyed writer %s: closing the idle writer of partition %d", self._path, pid)
        with contextlib.suppress(Exception):
            await lane.writer.close()
        self._forget(lane, None)

    async def remove(self, lane: Lane, error: BaseException) -> None:
        """Close a failed lane (a successor will replace it); ``error`` is why it failed."""
        with contextlib.suppress(Exception):
            await lane.writer.close(timeout=0)
        if self.open.get(lane.partition_id) is lane:
            del self.open[lane.partition_id]
        self._forget(lane, error)
        self.closed_reconnects += 1  # its successor replaces it

    def continue_numbering(self, lane: Lane) -> None:
        """The partition's next lane goes on with ``lane``'s numbers (its messages are resent with them)."""
        self._numbering[lane.partition_id] = (lane.writer.seq_no_base, lane.next_seq_no)

    def _forget(self, lane: Lane, error: BaseException | None) -> None:
        """Keep what a closed lane's writer went through for the keyed writer's totals."""
        self.closed_reconnects += lane.writer.reconnects
        error = error or lane.writer.last_error
        if error is not None:
            self._closed_error = error

    async def close(self, at_once: bool) -> None:
        """Close every lane (``at_once``: without waiting for acknowledgements)."""
        lanes, self.open = list(self.open.values()), {}
        for lane in lanes:
            with contextlib.suppress(Exception):
                await lane.writer.close(timeout=0 if at_once else None)

    # --- what they went through -----------------------------------------------------------

    async def last_stored_seq_no(self, partition_id: int) -> int:
        """The last seq_no the lane's producer id stored: a handshake without a partition tells it,
        since the server carries a producer's seq_no from a split partition to its children."""
        probe = TopicWriter(
            self._context, self._admin, self._path,
            self._settings.replace(producer_id=self.producer_id(partition_id), direct_write=False),
        )
        try:
            return (await probe.wait_init()).last_seq_no
        finally:
            await probe.close()

    @property
    def reconnects(self) -> int:
        """Reconnects of every lane, closed ones included, and the lanes replaced."""
        return self.closed_reconnects + sum(lane.writer.reconnects for lane in self.open.values())

    @property
    def last_error(self) -> BaseException | None:
        """The latest failure an open lane saw, else the latest one of a lane closed since."""
        for lane in reversed(list(self.open.values())):
            if lane.writer.last_error is not None:
                return lane.writer.last_error
        return self._closed_error

    def statuses(self) -> dict[int, PartitionWriterStatus]:
        """How each open lane fares, by partition id."""
        return {
            pid: PartitionWriterStatus(
                partition_id=pid,
                producer_id=writer.producer_id,
                connection_state=writer.connection_state,
                session_id=writer.session_id,
                init_info=writer.init_info,
                buffered_messages=writer.buffered_messages,
                buffered_bytes=writer.buffered_bytes,
                reconnects=writer.reconnects,
                last_error=writer.last_error,
                last_write_statistics=writer.last_write_statistics,
                selected_codec=writer.selected_codec,
            )
            for pid, writer in ((pid, lane.writer) for pid, lane in sorted(self.open.items()))
        }


__all__ = ["Entry", "Lane", "LaneBroken", "LaneWriter", "Lanes", "PartitionWriterStatus"]
