"""``KeyedWriter``: messages spread over a topic's partitions by key, in order per key.

The keyed writer accepts messages, stamps and routes them, and keeps the books: which accepted
messages are still unacknowledged (``flush`` and ``close`` wait by acceptance order), what each
call's results are, and the totals it shows. A key goes where the partitioner puts it
(``partitioning``): by default where YDB's own key-partitioned producers put it, in the
partition whose key range holds the key's partition key, which travels with the message as its
``__partition_key`` metadata item.

The rest lives beside it: ``keyed_lanes`` holds the partitions' writers ("lanes": one
``TopicWriter`` per partition, made on first use, each with its own producer id and numbering,
closed when idle), and ``rerouting`` places a failed lane's messages again when its partition
split or stayed overloaded, and the messages held while the topic was awaited
(``wait_for_topic``) once its partitions are known.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections import deque
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, overload

from .._closing import ClosesOnExit
from .._errors import (
    InvalidArgumentError,
    OperationTimeoutError,
    OverloadedError,
    TopicNotFoundError,
    WriterClosedError,
)
from .._futures import deadline
from .._stream import ConnectionState
from .._validate import check_timeout
from ..observability.logging import sdk_logger
from .buffer import WriteBuffer
from .keyed_lanes import Entry, Lane, LaneBroken, Lanes, PartitionWriterStatus
from .messages import (
    InitInfo,
    ManyMessages,
    Message,
    OneMessage,
    WriteResult,
    WriteStatistics,
    is_many,
    payload_bytes,
)
from .partitioning import PARTITION_KEY_METADATA, KeyRouter, Partitioner, check_partitioner, key_bytes, partition_key
from .rerouting import Rerouting

if TYPE_CHECKING:
    from .._context import ClientContext
    from ..topic.admin import TopicAdmin
    from ..topic.types import TopicDescription
    from .settings import WriterSettings
    from .transaction import WriteTransaction

logger = sdk_logger("writer")

Key = str | bytes
"""A message key: ``str`` is hashed as UTF-8."""

DEFAULT_IDLE_TIMEOUT = 30.0
"""Seconds a partition's writer may stay idle before the keyed writer closes it (the C++ SDK's
producer closes its sub-sessions after the same ``SubSessionIdleTimeout``)."""


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

    With ``wait_for_topic=seconds``, a topic that does not exist yet is waited for in the
    background (``describe_topic(..., wait_for_topic=)``): ``open`` returns, ``write`` holds the
    messages (as many as one partition's buffer takes, waiting for room up to
    ``buffer_wait_timeout``) and places them, in order, once the topic's partitions are known;
    the bound passing fails the keyed writer and every held message with ``TopicNotFoundError``,
    and ``close`` ends the wait at once. Its partitions' writers do not wait again.

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

    Parameters:
        context: The driver's client context.
        admin: Topic administration, to read the topic's partitions.
        path: The topic, absolute or relative to the driver's database.
        settings: The checked options (``WriterSettings``), those of every partition's writer.
        partitioner: Where a key goes (``driver.topic.keyed_writer`` describes each).
        idle_timeout: Seconds after which an idle partition writer is closed (None: never).
        transaction: The transaction every partition writer writes into (a
            ``KeyedTxWriter``'s), or None.
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
        self._admin = admin
        self._auto_created_at = settings.auto_created_at
        self._buffer_wait_timeout = settings.buffer_wait_timeout
        # The lanes number messages (the keyed writer stamps each message once, resends included);
        # the keyed writer waits for the topic itself, so a lane finds it there.
        lane_settings = settings.replace(
            auto_seqno=False, auto_created_at=False, retry=resolved.retry, wait_for_topic=None
        )
        self._wait_for_topic = settings.wait_for_topic
        self._lanes = Lanes(context, admin, self.path, producer_id, lane_settings, self._taken, transaction)
        self._rerouting = Rerouting(
            self.path, admin, self._lanes, resolved.retry, self._partitioner,
            settle=self._settle, lane_failed=self._lane_failed, rerouted=self._rerouted,
        )
        self._routes: KeyRouter | None = None
        self._order: deque[Entry] = deque()
        """Accepted entries by index; acknowledged ones are dropped from the left."""
        self._next_index = 0
        self._flush_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._pending_messages = 0
        self._pending_bytes = 0
        self._last_acked: Lane | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._open_lock = asyncio.Lock()
        self._opener: asyncio.Task[None] | None = None
        """Waits for the topic to be created (``wait_for_topic``), then places what was held."""
        self._opened = asyncio.Event()
        """Set once the opener is done, either way."""
        self._waiting_since = 0.0
        self._held: list[Entry] = []
        """Accepted while the topic was awaited, in order."""
        self._held_room = WriteBuffer(settings.max_buffer_messages, settings.max_buffer_bytes)
        """The room for held messages: one partition's buffer (only its admission is used)."""
        self._supervisor: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._stopping = False

    # --- lifecycle ------------------------------------------------------------------------

    _logger = logger

    async def _stop_now(self) -> None:
        await self._shutdown(WriterClosedError("keyed writer was closed by cancellation"))

    async def open(self) -> None:
        """Read the topic's partitions (``write`` does this too). With ``wait_for_topic``, a topic
        that does not exist yet is waited for in the background and ``open`` returns (``wait_init``
        waits for it)."""
        self._check_usable()
        if self._opening_done():
            return
        async with self._open_lock:
            if self._opening_done():  # another call opened it meanwhile
                return
            try:
                description = await self._admin.describe_topic(self.path)
            except TopicNotFoundError:
                if self._wait_for_topic is None:
                    raise
                self._check_usable()
                self._waiting_since = time.monotonic()
                self._opener = asyncio.get_running_loop().create_task(
                    self._open_once_created(self._wait_for_topic), name=f"keyed writer {self.path}: waiting for it"
                )
                return
            self._check_usable()  # closed meanwhile: start nothing
            self._start(description)

    def _opening_done(self) -> bool:
        """The topic's partitions are known, or awaited in the background."""
        return self._routes is not None or self._opener is not None

    def _start(self, description: TopicDescription) -> None:
        """The topic's partitions are known: route by them, and start the background tasks."""
        self._routes = KeyRouter(description, self._partitioner)
        loop = asyncio.get_running_loop()
        self._supervisor = loop.create_task(self._supervise(), name=f"keyed writer {self.path}")
        if self._idle_timeout is not None:
            self._reaper = loop.create_task(
                self._close_idle(self._idle_timeout), name=f"keyed writer {self.path}: idle partitions"
            )

    async def _open_once_created(self, within: float) -> None:
        """Wait for the topic (``wait_for_topic``), then place the messages held meanwhile; a wait
        that fails fails the keyed writer."""
        try:
            description = await self._admin.describe_topic(self.path, wait_for_topic=within)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)
        else:
            self._start(description)
            routes = self._routes
            assert routes is not None
            held, self._held = self._held, []
            if held:
                # Before any write that comes now, which waits until these are placed.
                self._rerouting.place(held, lambda entry: routes.partition_for(entry.key))
            room = self._held_room
            room.release(room.messages, room.nbytes)  # calls waiting for room route their messages now
        finally:
            self._opened.set()

    async def close(self, timeout: float | None = None) -> None:
        """Wait for every acknowledgement, then stop; raises the writer's failure if it failed.

        ``OperationTimeoutError`` when ``timeout`` passes first (the unacknowledged messages
        fail with it). A keyed writer still waiting for its topic (``wait_for_topic``) stops
        waiting at once: the messages it holds fail with ``TopicNotFoundError``, which ``close``
        raises (none held: it just closes). A second call does nothing.
        """
        if self._closed:
            return
        self._closed = True
        reason: BaseException = WriterClosedError("keyed writer was closed before these messages were acknowledged")
        opener = self._opener
        if opener is not None and not opener.done():
            # Still waiting for the topic: the wait ends now, and what it held cannot be written.
            opener.cancel()
            await asyncio.wait([opener])
            if self._failure is None and self._unacked():
                waited = time.monotonic() - self._waiting_since
                self._fail(TopicNotFoundError.after_waiting(None, self.path, waited, closed=True))
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
        tasks = [task for task in (self._opener, self._supervisor, self._reaper) if task is not None]
        self._supervisor = self._reaper = None
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._rerouting.steady.set()  # writes waiting for a recovery that will not finish now see the close
        await self._lanes.close(at_once=bool(self._failure or self._unacked()))
        self._fail_pending(reason)
        self._held_room.fail(self._closed_error())  # writes waiting for room to hold see the close

    def _closed_error(self) -> WriterClosedError:
        return WriterClosedError(f"keyed writer for {self.path} is closed")

    # --- routing --------------------------------------------------------------------------

    def partition_for(self, key: Key) -> int:
        """The partition ``key`` goes to now (after ``open``)."""
        if self._routes is None:
            raise WriterClosedError("the keyed writer is not open yet: call open() or enter it first")
        return self._routes.partition_for(key_bytes(key))

    def _rerouted(self, routes: KeyRouter) -> None:
        self._routes = routes

    async def _close_idle(self, timeout: float) -> None:
        """Close the partition writers idle for ``timeout`` seconds, for as long as the keyed writer is open."""
        while True:
            await asyncio.sleep(max(timeout / 4, 0.01))
            if not self._rerouting.steady.is_set():
                continue  # a recovery is moving messages between lanes
            await self._lanes.retire_idle(timeout)

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

    async def _accept(self, messages: OneMessage | ManyMessages, key: Key, with_results: bool) -> list[Entry]:
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
        if self._routes is None and await self._hold(entries):
            return entries
        rerouting = self._rerouting
        while True:
            if not rerouting.steady.is_set():
                await rerouting.wait_steady(self._buffer_wait_timeout)
            self._check_usable()
            assert self._routes is not None
            lane = self._lanes.get(self._routes.partition_for(key))
            if lane.failed:
                continue  # being replaced: wait for that
            try:
                lane = await self._lanes.hand_over(lane, entries)
            except LaneBroken as broken:
                # The lane broke before taking them (its partition split or is overloaded).
                self._lane_failed(broken.lane)
                continue
            await self._handed_over(lane, entries)
            return entries

    async def _hold(self, entries: list[Entry]) -> bool:
        """While the topic is awaited: keep a call's ``entries`` until its partitions are known,
        within one partition's buffer (waiting for room up to ``buffer_wait_timeout``, then
        ``BufferFullTimeoutError`` with nothing accepted). False when the partitions became known
        first: the caller routes them."""
        self._check_usable()
        count, nbytes = len(entries), sum(entry.size for entry in entries)
        room = self._held_room
        if not room.try_reserve(count, nbytes):
            await room.reserve(count, nbytes, self._buffer_wait_timeout)
        if self._routes is not None or self._closed or self._failure is not None:
            room.release(count, nbytes)
            self._check_usable()
            return False
        for entry in entries:
            self._count(entry)
        self._held.extend(entries)
        return True

    async def _handed_over(self, lane: Lane, entries: list[Entry]) -> None:
        """Told when ``lane`` took a call's ``entries`` (a subclass may wait for them)."""

    def _taken(self, lane: Lane, entry: Entry, future: asyncio.Future[WriteResult]) -> None:
        """``lane`` took ``entry``: count it (the first time) and follow its acknowledgement."""
        self._count(entry)
        future.add_done_callback(partial(self._on_ack, lane, entry))

    def _count(self, entry: Entry) -> None:
        """Count an accepted entry as unacknowledged, in acceptance order (once)."""
        if not entry.index:
            self._next_index += 1
            entry.index = self._next_index
            self._order.append(entry)
            self._pending_messages += 1
            self._pending_bytes += entry.size

    def _on_ack(self, lane: Lane, entry: Entry, future: asyncio.Future[WriteResult]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is None:
            self._rerouting.acknowledged(lane.partition_id)
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

    def _settle(self, entry: Entry, result: WriteResult) -> None:
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
                if self._routes is None:  # the topic is awaited (wait_for_topic)
                    await self._opened.wait()
                    self._check_usable()
                return {lane.partition_id: await lane.writer.wait_init() for lane in list(self._lanes.open.values())}
        except TimeoutError:
            waiting = " (its topic does not exist yet)" if self._routes is None else ""
            raise OperationTimeoutError(
                f"keyed writer for {self.path} did not connect within {timeout}s{waiting}"
            ) from None

    @property
    def init_info(self) -> dict[int, InitInfo]:
        """The first handshake's answer of each open partition writer that had one."""
        return {pid: info for pid, lane in self._lanes.open.items() if (info := lane.writer.init_info) is not None}

    @property
    def partition_writers(self) -> dict[int, PartitionWriterStatus]:
        """How the writer of each partition open now fares (closed idle ones are not shown)."""
        return self._lanes.statuses()

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
        states = {lane.writer.connection_state for lane in self._lanes.open.values()}
        if not self._rerouting.steady.is_set() or states & {ConnectionState.RECONNECTING, ConnectionState.FAILED}:
            return ConnectionState.RECONNECTING
        if ConnectionState.CONNECTING in states:
            return ConnectionState.CONNECTING
        return ConnectionState.CONNECTED

    @property
    def reconnects(self) -> int:
        """Streams opened to replace lost ones, over all partition writers (closed ones
        included), and the partition writers replaced after a split or an overload."""
        return self._lanes.reconnects

    @property
    def last_error(self) -> BaseException | None:
        """The latest failure a partition writer open now saw, else the latest one of a partition
        writer closed since (None before any)."""
        return self._lanes.last_error

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

    def _lane_failed(self, lane: Lane) -> None:
        if lane.failed or self._stopping or self._failure is not None:
            return
        self._rerouting.take(lane)

    async def _supervise(self) -> None:
        try:
            await self._rerouting.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    def _fail(self, error: BaseException) -> None:
        if self._failure is not None:
            return
        self._failure = error
        logger.error("keyed writer %s failed: %r", self.path, error)
        self._fail_pending(error)
        self._held.clear()
        self._held_room.fail(error)  # and those waiting for room to hold their messages
        self._rerouting.steady.set()  # writes waiting for a recovery see the failure

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


def _entry(message: OneMessage, key: bytes, tag: tuple[str, bytes] | None, now: dt.datetime | None) -> Entry:
    """An accepted message; ``tag`` (the partition key's metadata item) is added to its metadata."""
    if isinstance(message, (bytes, str)):
        return Entry(payload_bytes(message, "a message"), None if tag is None else (tag,), now, key)
    if isinstance(message, Message):
        if message.seq_no is not None:
            raise InvalidArgumentError("a keyed writer numbers messages itself: do not set Message.seq_no")
        metadata = message.metadata
        if tag is not None:
            items = list(metadata.items() if isinstance(metadata, Mapping) else metadata or ())
            metadata = items if any(name == tag[0] for name, _ in items) else [*items, tag]
        return Entry(payload_bytes(message.data), metadata, message.created_at or now, key)
    raise InvalidArgumentError(f"a message must be bytes, str or Message, not {type(message).__name__}")


__all__ = ["DEFAULT_IDLE_TIMEOUT", "Key", "KeyedWriter", "PartitionWriterStatus"]
