"""``KeyedWriter``: messages spread over a topic's partitions by key, in order per key.

One ``TopicWriter`` per partition ("lane"), made on first use and connecting in the
background, writes with producer id ``{producer_id}_{partition_id}`` and seq_nos the keyed
writer assigns, counted from the last seq_no that producer id stored (which the lane's first
handshake tells), so every partition keeps YDB's exactly-once deduplication. A key goes where the
partitioner puts it (``partitioning``): by default where YDB's own key-partitioned producers put
it, in the partition whose key range holds the key's partition key, which travels with the
message as its ``__partition_key`` metadata item.

When a partition splits, its lane fails with OVERLOADED (the partition is inactive). The keyed
writer then holds new writes back, reads the new partitions and their ranges, asks the server
which of the lane's unacknowledged messages the old partition stored (the last seq_no of the
lane's producer id), and sends the rest, in their order, to the partitions their keys now belong
to, before any later message. A lane that is merely overloaded is replaced after a back-off and
resends its messages with their seq_nos, which the server deduplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, overload

from .._closing import ClosesOnExit
from .._errors import (
    BufferFullTimeoutError,
    InvalidArgumentError,
    OperationTimeoutError,
    OverloadedError,
    WriterClosedError,
)
from .._futures import deadline
from .._retry import RetryState
from .._stream import ConnectionState
from .._validate import check_timeout
from ..observability.logging import sdk_logger
from .messages import (
    InitInfo,
    ManyMessages,
    Message,
    MetadataInput,
    OneMessage,
    Skipped,
    WriteResult,
    WriteStatistics,
    is_many,
    payload_bytes,
)
from .partitioning import PARTITION_KEY_METADATA, KeyRouter, Partitioner, check_partitioner, key_bytes, partition_key
from .writer import TopicWriter

if TYPE_CHECKING:
    from .._context import ClientContext
    from ..topic.admin import TopicAdmin
    from .settings import WriterSettings
    from .transaction import WriteTransaction

logger = sdk_logger("writer")

Key = str | bytes
"""A message key: ``str`` is hashed as UTF-8."""

DEFAULT_IDLE_TIMEOUT = 30.0
"""Seconds a partition's writer may stay idle before the keyed writer closes it (the C++ SDK's
producer closes its sub-sessions after the same ``SubSessionIdleTimeout``)."""


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


class _LaneWriter(TopicWriter):
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


class _LaneBroken(Exception):
    """A lane's writer failed (OVERLOADED) before it took the messages handed to it."""

    def __init__(self, lane: _Lane) -> None:
        super().__init__(lane.partition_id)
        self.lane = lane


class _Entry:
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


class _Lane:
    """The writer of one partition and its unacknowledged entries, in seq_no order."""

    __slots__ = (
        "failed", "last_used", "lock", "next_seq_no", "partition_id", "pending", "retired", "writer",
    )

    def __init__(self, partition_id: int, writer: _LaneWriter, next_seq_no: int) -> None:
        self.partition_id = partition_id
        self.writer = writer
        self.next_seq_no = next_seq_no
        self.pending: deque[_Entry] = deque()
        self.lock = asyncio.Lock()
        """Held while numbering and handing over a call's messages: seq_nos must grow."""
        self.failed = False
        self.retired = False
        """Closed for being idle: a write that still holds it takes the partition's new lane."""
        self.last_used = time.monotonic()

    def idle(self) -> bool:
        """Nothing waits for an acknowledgement and nothing is being handed over."""
        return not self.lock.locked() and all(entry.done for entry in self.pending)


class KeyedWriter(ClosesOnExit):
    """Writes messages to the partitions of one topic by key: one key's messages stay in order.

    Use it as ``async with driver.topic.keyed_writer(path, producer_id=...) as writer`` and call
    ``write(message, key=...)``. The key's hash picks the partition (stable across processes and
    runs while the topic keeps its partitions); each partition gets its own producer id,
    ``{producer_id}_{partition_id}``, so exactly-once deduplication holds as with ``TopicWriter``.
    When an auto-partitioned topic splits a partition, keys follow the new partitions' key
    ranges, and a key's later messages are stored after its earlier ones. A topic created with
    one partition and grown by ``alter_topic`` is laid out as a new topic of that size for keyed
    writers opened afterwards; partitions added to a topic created with several have no key
    range, and the default partitioner refuses such a topic (``InvalidArgumentError`` at
    ``open``), as YDB's producers do.

    ``write`` buffers, ``write_with_ack`` waits for the server, ``flush`` waits for everything
    written so far, ``close`` (on exit) flushes and stops. The options are ``TopicWriter``'s;
    the buffer limits apply to each partition. ``write`` waits for the server only once, the
    first time (``open``), to read the topic's partitions (``describe_topic``, retried by the
    driver's ``retry`` policy); after that it buffers at once, also for a partition not written
    to yet while the server cannot be reached (its writer connects in the background), and waits
    only while that partition's buffer is full, as ``TopicWriter.write`` does, or while a split
    or overloaded partition's messages are being placed again; either wait ends after
    ``buffer_wait_timeout`` with ``BufferFullTimeoutError``, having accepted nothing of the
    call. Messages are numbered by the writer: ``Message.seq_no`` is not accepted. A message
    whose acknowledgement was lost as its partition split, and which that partition had stored,
    resolves as ``Skipped``. Placing a split partition's messages again reads the topic's
    partitions, retried under ``retry``.

    A partition's writer that has nothing unacknowledged and was not written to for
    ``idle_timeout`` seconds is closed (its stream too); the next write to that partition opens
    a new one, which goes on with the same producer id and numbers, so a keyed writer over many
    partitions keeps streams only to those it writes to. ``partition_writers`` shows the open
    ones; ``connection_state``, ``reconnects``, ``last_error``, ``buffered_messages`` and the
    others sum them up as ``TopicWriter``'s members do for one.
    """

    def __init__(
        self,
        context: ClientContext,
        admin: TopicAdmin,
        path: str,
        settings: WriterSettings,
        partitioner: Partitioner = "ydb",
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        *,
        transaction: WriteTransaction | None = None,
    ) -> None:
        self._partitioner = check_partitioner(partitioner)
        idle = check_timeout(idle_timeout, "idle_timeout")
        if idle == 0:
            raise InvalidArgumentError("idle_timeout must be a positive number of seconds or None (never close)")
        self._idle_timeout = idle
        settings.check_keyed()
        resolved = settings.resolve(context, path)  # checked now, as TopicWriter does, not at the first write
        producer_id = settings.producer_id
        assert producer_id  # check_keyed refuses an empty one
        self.path = resolved.path
        self.producer_id = producer_id
        self.codec = settings.codec
        """The ``codec`` option of every partition's writer (a codec id or ``"auto"``)."""
        self._context = context
        self._admin = admin
        self._lane_transaction = transaction
        self._retry = resolved.retry
        self._auto_created_at = settings.auto_created_at
        # The lanes number messages (the keyed writer stamps each message once, resends included).
        self._lane_settings = settings.replace(auto_seqno=False, auto_created_at=False, retry=self._retry)
        self._routes: KeyRouter | None = None
        self._lanes: dict[int, _Lane] = {}
        self._numbering: dict[int, tuple[int | None, int]] = {}
        """Partition id -> (seq_no base, next seq_no) of a lane being replaced, for its successor."""
        self._order: deque[_Entry] = deque()
        """Accepted entries by index; acknowledged ones are dropped from the left."""
        self._next_index = 0
        self._flush_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._broken: asyncio.Queue[_Lane] = asyncio.Queue()
        self._steady = asyncio.Event()
        """Clear while a failed lane is being replaced or its partition's split handled."""
        self._steady.set()
        self._overloads: dict[int, RetryState] = {}
        """Partition id -> its streak of overloads (until a message of it is acknowledged)."""
        self._pending_messages = 0
        self._pending_bytes = 0
        self._closed_reconnects = 0
        """Reconnects of partition writers closed since (idle or replaced), and the replacements."""
        self._last_lane_error: BaseException | None = None
        self._last_acked: _Lane | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._open_lock = asyncio.Lock()
        self._supervisor: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._stopping = False

    # --- lifecycle ------------------------------------------------------------------------

    _logger = logger

    async def _stop_now(self) -> None:
        await self._shutdown(WriterClosedError("keyed writer was closed by cancellation"))

    async def open(self) -> None:
        """Read the topic's partitions (``write`` does this too)."""
        self._check_usable()
        if self._routes is not None:
            return
        async with self._open_lock:
            if self._routes is None:
                description = await self._admin.describe_topic(self.path)
                self._routes = KeyRouter(description, self._partitioner)
                loop = asyncio.get_running_loop()
                self._supervisor = loop.create_task(self._supervise(), name=f"keyed writer {self.path}")
                if self._idle_timeout is not None:
                    self._reaper = loop.create_task(
                        self._close_idle(self._idle_timeout), name=f"keyed writer {self.path}: idle partitions"
                    )

    async def close(self, timeout: float | None = None) -> None:
        """Wait for every acknowledgement, then stop; raises the writer's failure if it failed.

        ``OperationTimeoutError`` when ``timeout`` passes first (the unacknowledged messages
        fail with it). A second call does nothing.
        """
        if self._closed:
            return
        self._closed = True
        reason: BaseException = WriterClosedError("keyed writer was closed before these messages were acknowledged")
        timed_out = False
        try:
            if self._failure is None:
                async with asyncio.timeout(timeout):
                    await self._wait_acked(self._next_index)
        except TimeoutError:
            timed_out = True
            pending = sum(1 for e in self._order if not e.done)
            reason = OperationTimeoutError(
                f"keyed writer close timed out after {timeout:.3g}s with {pending} unacknowledged messages"
            )
        except Exception:
            pass  # the failure is raised below
        finally:
            await self._shutdown(reason)
        if timed_out:
            raise reason
        if self._failure is not None:
            raise self._failure.with_traceback(None)

    async def _shutdown(self, reason: BaseException) -> None:
        if self._stopping:
            return
        self._closed = True
        self._stopping = True
        tasks = [task for task in (self._supervisor, self._reaper) if task is not None]
        self._supervisor = self._reaper = None
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._steady.set()  # writes waiting for a recovery that will not finish now see the close
        lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            with contextlib.suppress(Exception):
                await lane.writer.close(timeout=0 if self._failure or self._unacked() else None)
        self._fail_pending(reason)

    def _closed_error(self) -> WriterClosedError:
        return WriterClosedError(f"keyed writer for {self.path} is closed")

    # --- routing --------------------------------------------------------------------------

    def partition_for(self, key: Key) -> int:
        """The partition ``key`` goes to now (after ``open``)."""
        if self._routes is None:
            raise WriterClosedError("the keyed writer is not open yet: call open() or enter it first")
        return self._routes.partition_for(key_bytes(key))

    def _lane_producer_id(self, partition_id: int) -> str:
        return f"{self.producer_id}_{partition_id}"

    def _lane(self, partition_id: int) -> _Lane:
        lane = self._lanes.get(partition_id)
        if lane is None:
            # Connects in the background: messages are accepted and numbered meanwhile.
            base, next_seq_no = self._numbering.pop(partition_id, (None, 1))
            settings = self._lane_settings.replace(
                producer_id=self._lane_producer_id(partition_id), partition_id=partition_id
            )
            writer = self._new_lane_writer(settings, base)
            lane = self._lanes[partition_id] = _Lane(partition_id, writer, next_seq_no)
        return lane

    def _new_lane_writer(self, settings: WriterSettings, seq_no_base: int | None) -> _LaneWriter:
        return _LaneWriter(
            self._context, self._admin, self.path, settings, seq_no_base=seq_no_base, transaction=self._lane_transaction
        )

    async def _close_idle(self, timeout: float) -> None:
        """Close the partition writers idle for ``timeout`` seconds, for as long as the keyed writer is open."""
        while True:
            await asyncio.sleep(max(timeout / 4, 0.01))
            if not self._steady.is_set():
                continue  # a recovery is moving messages between lanes
            now = time.monotonic()
            for lane in list(self._lanes.values()):
                if (
                    now - lane.last_used >= timeout
                    and not lane.failed
                    and lane.writer.seq_no_base is not None
                    and lane.idle()
                ):
                    await self._retire(lane)

    async def _retire(self, lane: _Lane) -> None:
        """Close an idle lane; the partition's next lane goes on with its numbers."""
        pid = lane.partition_id
        lane.retired = True
        if self._lanes.get(pid) is lane:
            del self._lanes[pid]
        self._numbering[pid] = (lane.writer.seq_no_base, lane.next_seq_no)
        logger.debug("keyed writer %s: closing the idle writer of partition %d", self.path, pid)
        with contextlib.suppress(Exception):
            await lane.writer.close()
        self._forget(lane, None)

    def _forget(self, lane: _Lane, error: BaseException | None) -> None:
        """Keep what a closed lane's writer went through for the keyed writer's totals."""
        self._closed_reconnects += lane.writer.reconnects
        error = error or lane.writer.last_error
        if error is not None:
            self._last_lane_error = error

    # --- writing --------------------------------------------------------------------------

    async def write(self, messages: OneMessage | ManyMessages, *, key: Key) -> None:
        """Buffer one message or a list of them under ``key``; return without waiting for the server."""
        await self._accept(messages, key, False)

    @overload
    async def write_with_ack(self, messages: OneMessage, *, key: Key) -> WriteResult: ...  # type: ignore[overload-overlap]  # a str is one message, not a sequence of them

    @overload
    async def write_with_ack(self, messages: ManyMessages, *, key: Key) -> list[WriteResult]: ...

    async def write_with_ack(self, messages: OneMessage | ManyMessages, *, key: Key) -> WriteResult | list[WriteResult]:
        """Write under ``key`` and wait until the server stored each message (``Written``/``Skipped``)."""
        entries = await self._accept(messages, key, True)
        futures = [e.result for e in entries if e.result is not None]
        if futures:
            await asyncio.wait(futures)
        results = [f.result() for f in futures]
        return results if is_many(messages) else results[0]

    async def _accept(self, messages: OneMessage | ManyMessages, key: Key, with_results: bool) -> list[_Entry]:
        self._check_usable()
        key = key_bytes(key)
        tag = (PARTITION_KEY_METADATA, partition_key(key)) if self._partitioner == "ydb" else None
        created_at = dt.datetime.now(dt.UTC) if self._auto_created_at else None
        if isinstance(messages, (bytes, str, Message)):
            entries = [_entry(messages, key, tag, created_at)]
        elif is_many(messages):
            entries = [_entry(m, key, tag, created_at) for m in messages]
        else:
            raise InvalidArgumentError(
                f"write takes bytes, str, Message or a list of them, not {type(messages).__name__}"
            )
        if not entries:
            return []
        if with_results:
            loop = asyncio.get_running_loop()
            for entry in entries:
                entry.result = loop.create_future()
        await self.open()
        while True:
            if not self._steady.is_set():
                await self._wait_steady()
            self._check_usable()
            assert self._routes is not None
            lane = self._lane(self._routes.partition_for(key))
            if lane.failed:
                continue  # being replaced: wait for that
            try:
                lane = await self._hand_over(lane, entries)
            except _LaneBroken as broken:
                # The lane broke before taking them (its partition split or is overloaded).
                self._lane_failed(broken.lane)
                continue
            await self._handed_over(lane, entries)
            return entries

    async def _wait_steady(self) -> None:
        """Wait while a split or overloaded partition's messages are being placed again: as
        long as a full buffer would make ``TopicWriter.write`` wait (``buffer_wait_timeout``)."""
        timeout = self._lane_settings.buffer_wait_timeout
        try:
            await asyncio.wait_for(self._steady.wait(), timeout)
        except TimeoutError:
            raise BufferFullTimeoutError(
                f"keyed writer for {self.path}: a split or overloaded partition's messages were still being"
                f" placed again after {timeout}s (buffer_wait_timeout); nothing from this call was accepted"
            ) from None

    async def _handed_over(self, lane: _Lane, entries: list[_Entry]) -> None:
        """Told when ``lane`` took a call's ``entries`` (a subclass may wait for them)."""

    async def _hand_over(self, lane: _Lane, entries: list[_Entry]) -> _Lane:
        """Give ``entries`` to ``lane``'s writer (or, if it was closed meanwhile for being idle,
        to its partition's new one): numbered after its last seq_no, except those it had already,
        which keep their number so that the server can drop what it stored. Returns the lane
        that took them."""
        pid = lane.partition_id
        await lane.lock.acquire()
        while lane.retired:
            lane.lock.release()
            lane = self._lane(pid)
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
                raise _LaneBroken(lane) from None
            lane.next_seq_no = free
            lane.last_used = time.monotonic()
            for entry, number, future in zip(entries, numbers, futures, strict=True):
                entry.partition_id = pid
                entry.seq_no = number
                if not entry.index:
                    self._next_index += 1
                    entry.index = self._next_index
                    self._order.append(entry)
                    self._pending_messages += 1
                    self._pending_bytes += entry.size
                lane.pending.append(entry)
                future.add_done_callback(partial(self._on_ack, lane, entry))
        finally:
            lane.lock.release()
        return lane

    def _on_ack(self, lane: _Lane, entry: _Entry, future: asyncio.Future[WriteResult]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            self._overloads.pop(lane.partition_id, None)
            self._last_acked = lane
            self._settle(entry, future.result())
            while lane.pending and lane.pending[0].done:
                lane.pending.popleft()
        elif self._stopping:
            pass  # closing: the entry fails with the close's reason
        elif isinstance(error, OverloadedError):
            self._lane_failed(lane)
        else:
            self._fail(error)

    def _settle(self, entry: _Entry, result: WriteResult) -> None:
        if entry.done:
            return  # failed with the keyed writer already
        entry.done = True
        entry.data = b""
        self._pending_messages -= 1
        self._pending_bytes -= entry.size
        if entry.result is not None and not entry.result.done():
            entry.result.set_result(result)
        order = self._order
        while order and order[0].done:
            order.popleft()
        waiters = self._flush_waiters
        while waiters and (not order or order[0].index > waiters[0][0]):
            _, waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _unacked(self) -> bool:
        return any(not e.done for e in self._order)

    async def _wait_acked(self, mark: int) -> None:
        """Wait until every entry with an index up to ``mark`` is acknowledged."""
        while self._order and self._order[0].done:
            self._order.popleft()
        if not self._order or self._order[0].index > mark:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((mark, waiter))
        await waiter

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message written before this call is acknowledged."""
        self._check_usable()
        try:
            async with asyncio.timeout(timeout):
                await self._wait_acked(self._next_index)
        except TimeoutError:
            raise OperationTimeoutError(f"keyed writer flush timed out after {timeout:.3g}s") from None

    @overload
    async def write_with_ack_future(self, messages: OneMessage, *, key: Key) -> asyncio.Future[WriteResult]: ...  # type: ignore[overload-overlap]  # a str is one message, not a sequence of them

    @overload
    async def write_with_ack_future(
        self, messages: ManyMessages, *, key: Key
    ) -> list[asyncio.Future[WriteResult]]: ...

    async def write_with_ack_future(
        self, messages: OneMessage | ManyMessages, *, key: Key
    ) -> asyncio.Future[WriteResult] | list[asyncio.Future[WriteResult]]:
        """Buffer like ``write`` and return the acknowledgement future(s) instead of waiting."""
        entries = await self._accept(messages, key, True)
        futures = [e.result for e in entries if e.result is not None]
        return futures if is_many(messages) else futures[0]

    # --- introspection --------------------------------------------------------------------

    async def wait_init(self, timeout: float | None = None) -> dict[int, InitInfo]:
        """Read the topic's partitions (``open``) and wait for the first handshake of every
        partition writer open now; return their answers by partition id (empty when nothing was
        written yet). ``OperationTimeoutError`` when ``timeout`` passes first."""
        timeout = check_timeout(timeout)
        try:
            async with deadline(timeout):
                await self.open()
                return {lane.partition_id: await lane.writer.wait_init() for lane in list(self._lanes.values())}
        except TimeoutError:
            raise OperationTimeoutError(f"keyed writer for {self.path} did not connect within {timeout}s") from None

    @property
    def init_info(self) -> dict[int, InitInfo]:
        """The first handshake's answer of each open partition writer that had one."""
        return {pid: info for pid, lane in self._lanes.items() if (info := lane.writer.init_info) is not None}

    @property
    def partition_writers(self) -> dict[int, PartitionWriterStatus]:
        """How the writer of each partition open now fares (closed idle ones are not shown)."""
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
            for pid, writer in ((pid, lane.writer) for pid, lane in sorted(self._lanes.items()))
        }

    @property
    def connection_state(self) -> ConnectionState:
        """The worst state of its partition writers: ``RECONNECTING`` while one reconnects or is
        being replaced (a split, an overload), ``CONNECTING`` before the topic's partitions are
        read or while one connects; ``CONNECTED`` otherwise (also with no partition writer open)."""
        if self._closed:
            return ConnectionState.CLOSED
        if self._failure is not None:
            return ConnectionState.FAILED
        if self._routes is None:
            return ConnectionState.CONNECTING
        states = {lane.writer.connection_state for lane in self._lanes.values()}
        if not self._steady.is_set() or states & {ConnectionState.RECONNECTING, ConnectionState.FAILED}:
            return ConnectionState.RECONNECTING
        if ConnectionState.CONNECTING in states:
            return ConnectionState.CONNECTING
        return ConnectionState.CONNECTED

    @property
    def reconnects(self) -> int:
        """Streams opened to replace lost ones, over all partition writers (closed ones
        included), and the partition writers replaced after a split or an overload."""
        return self._closed_reconnects + sum(lane.writer.reconnects for lane in self._lanes.values())

    @property
    def last_error(self) -> BaseException | None:
        """The latest failure a partition writer open now saw, else the latest one of a partition
        writer closed since (None before any)."""
        for lane in reversed(list(self._lanes.values())):
            if lane.writer.last_error is not None:
                return lane.writer.last_error
        return self._last_lane_error

    @property
    def buffered_messages(self) -> int:
        """Messages accepted and not yet acknowledged."""
        return self._pending_messages

    @property
    def buffered_bytes(self) -> int:
        """Payload bytes of the messages accepted and not yet acknowledged."""
        return self._pending_bytes

    @property
    def last_write_statistics(self) -> WriteStatistics | None:
        """Server timings of the latest acknowledgement batch of any partition (its
        ``partition_id`` says which), or None before any ack."""
        lane = self._last_acked
        return lane.writer.last_write_statistics if lane is not None else None

    # --- failures, overloads and splits ------------------------------------------------------

    def _lane_failed(self, lane: _Lane) -> None:
        if lane.failed or self._stopping or self._failure is not None:
            return
        lane.failed = True
        self._steady.clear()
        self._broken.put_nowait(lane)

    async def _supervise(self) -> None:
        while True:
            lane = await self._broken.get()
            try:
                await self._recover(lane)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._fail(exc)
                return
            if self._broken.empty():
                self._steady.set()

    async def _recover(self, lane: _Lane) -> None:
        pid = lane.partition_id
        error = lane.writer.failure or OverloadedError(f"partition {pid} is overloaded")
        with contextlib.suppress(Exception):
            await lane.writer.close(timeout=0)
        if self._lanes.get(pid) is lane:
            del self._lanes[pid]
        self._forget(lane, error)
        self._closed_reconnects += 1  # its successor replaces it
        entries = [e for e in lane.pending if not e.done]
        lane.pending.clear()
        base = lane.writer.seq_no_base
        # Retried under the keyed writer's own policy (by default for as long as it is open, as
        # its lanes reconnect), not the driver's budget for one call: an outage during a split's
        # recovery delays it instead of failing the keyed writer and every message it holds.
        description = await self._admin.describe_topic(self.path, retry=self._retry)
        info = next((p for p in description.partitions if p.partition_id == pid), None)
        if info is not None and info.active:
            # Only overloaded: back off, then resend with the same seq_nos (the server drops what it has).
            self._numbering[pid] = (base, lane.next_seq_no)
            await self._back_off(pid, error)
            if entries:
                await self._distribute(entries, lambda _: pid)
            return
        self._routes = KeyRouter(description, self._partitioner)
        # A lane that never connected sent nothing: none of its messages can be stored.
        stored = await self._last_stored_seq_no(pid) - base if base is not None else 0
        logger.info(
            "keyed writer %s: partition %d was split; %d unacknowledged messages, %d of them stored there",
            self.path, pid, len(entries), sum(1 for e in entries if e.partition_id == pid and e.seq_no <= stored),
        )
        leftovers = []
        for entry in entries:
            if entry.partition_id == pid and entry.seq_no <= stored:
                self._settle(entry, Skipped(pid, entry.seq_no + (base or 0)))
            else:
                leftovers.append(entry)
        await self._distribute(leftovers, self._route)

    def _route(self, entry: _Entry) -> int:
        assert self._routes is not None
        return self._routes.partition_for(entry.key)

    async def _distribute(self, entries: list[_Entry], target: Callable[[_Entry], int]) -> None:
        """Hand ``entries`` over, in order, to the lanes ``target`` picks; a lane that breaks
        before taking its share keeps the entries for its own recovery."""
        groups: dict[int, list[_Entry]] = {}
        for entry in entries:
            groups.setdefault(target(entry), []).append(entry)
        for pid, group in groups.items():
            try:
                await self._hand_over(self._lane(pid), group)
            except _LaneBroken as broken:
                broken.lane.pending.extend(group)
                self._lane_failed(broken.lane)

    async def _back_off(self, partition_id: int, error: BaseException) -> None:
        streak = self._overloads.get(partition_id)
        if streak is None:
            streak = self._overloads[partition_id] = RetryState(self._retry)
        delay = streak.next_delay(error)
        if delay is None:
            raise error
        logger.info("keyed writer %s: partition %d overloaded; resending in %.3fs", self.path, partition_id, delay)
        await asyncio.sleep(delay)

    async def _last_stored_seq_no(self, partition_id: int) -> int:
        """The last seq_no the lane's producer id stored: a handshake without a partition tells it,
        since the server carries a producer's seq_no from a split partition to its children."""
        probe = TopicWriter(
            self._context, self._admin, self.path,
            self._lane_settings.replace(producer_id=self._lane_producer_id(partition_id), direct_write=False),
        )
        try:
            return (await probe.wait_init()).last_seq_no
        finally:
            await probe.close()

    def _fail(self, error: BaseException) -> None:
        if self._failure is not None:
            return
        self._failure = error
        logger.error("keyed writer %s failed: %r", self.path, error)
        self._fail_pending(error)
        self._steady.set()  # writes waiting for a recovery see the failure

    def _fail_pending(self, error: BaseException) -> None:
        self._pending_messages = self._pending_bytes = 0
        for entry in self._order:
            if not entry.done:
                entry.done = True
                if entry.result is not None and not entry.result.done():
                    entry.result.set_exception(error.with_traceback(None))
                    entry.result.exception()  # reported through flush/close too: no "never retrieved"
        self._order.clear()
        waiters, self._flush_waiters = self._flush_waiters, deque()
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error.with_traceback(None))

    def __repr__(self) -> str:
        state = "closed" if self._closed else "failed" if self._failure else "open"
        return f"KeyedWriter({self.path!r}, producer_id={self.producer_id!r}, {state})"


def _entry(message: OneMessage, key: bytes, tag: tuple[str, bytes] | None, now: dt.datetime | None) -> _Entry:
    """An accepted message; ``tag`` (the partition key's metadata item) is added to its metadata."""
    if isinstance(message, (bytes, str)):
        return _Entry(payload_bytes(message, "a message"), None if tag is None else (tag,), now, key)
    if isinstance(message, Message):
        if message.seq_no is not None:
            raise InvalidArgumentError("a keyed writer numbers messages itself: do not set Message.seq_no")
        metadata = message.metadata
        if tag is not None:
            items = list(metadata.items() if isinstance(metadata, Mapping) else metadata or ())
            metadata = items if any(name == tag[0] for name, _ in items) else [*items, tag]
        return _Entry(payload_bytes(message.data), metadata, message.created_at or now, key)
    raise InvalidArgumentError(f"a message must be bytes, str or Message, not {type(message).__name__}")


__all__ = ["DEFAULT_IDLE_TIMEOUT", "Key", "KeyedWriter", "PartitionWriterStatus"]
