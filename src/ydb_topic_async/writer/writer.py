"""``TopicWriter``: the public writer facade.

``write`` only validates, numbers and buffers messages (no per-message future unless the caller
asks for acks); one background task (``WriterSender.run``) does all the I/O, and the writer turns
its terminal failure into the error of every pending future and every later call.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, overload

from .._closing import ClosesOnExit
from .._errors import InvalidArgumentError, MessageTooLargeError, OperationTimeoutError, WriterClosedError
from .._futures import wait_within
from .._limits import MAX_SEQ_NO, MESSAGE_OVERHEAD, REQUEST_OVERHEAD
from .._stream import ConnectionState, ConnectionStatus
from .._validate import check_timeout
from ..observability.logging import sdk_logger
from ..observability.metrics import writer_report
from .batching import entry_wire_size
from .buffer import PendingMessage, PlainMessage, WriteBuffer
from .messages import (
    InitInfo,
    ManyMessages,
    Message,
    Messages,
    OneMessage,
    WriteResult,
    WriteStatistics,
    check_metadata,
    is_many,
    payload_bytes,
)
from .sender import WriterSender

if TYPE_CHECKING:
    from .._context import ClientContext
    from ..topic.admin import TopicAdmin
    from ..topic.types import PartitionLocation
    from .settings import WriterSettings
    from .transaction import WriteTransaction

logger = sdk_logger("writer")

YIELD_EVERY = 1000
"""A caller that writes in a tight loop never suspends on its own: ``write`` yields to the event
loop once per this many accepted messages, so the sender ships them meanwhile. (Not on every call
while a backlog waits: a sender held by gRPC flow control leaves a backlog for long stretches, and
a loop turn per message costs more than the rest of ``write``.)"""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


class TopicWriter(ConnectionStatus, ClosesOnExit):
    """Writes messages to one topic partition over a reconnecting stream.

    Use it as ``async with driver.topic.writer(path, producer_id=...) as writer`` (the options
    are those of ``WriterSettings``). ``write`` buffers and returns; ``write_with_ack`` waits for
    the server; ``flush`` waits for everything written so far; ``close`` (on exit) waits for
    every acknowledgement and stops the background task. After a non-retriable failure every
    pending future and every later call raises it.

    With ``wait_for_topic=seconds``, a topic that does not exist yet (deploys where the producer
    starts before the topic's migration) is waited for, up to that long from the first answer
    saying so, before the first handshake: ``write`` buffers meanwhile, and the bound passing
    fails the writer with ``TopicNotFoundError`` (a ``SchemeError``). By default a missing topic
    fails the writer at once.

    By default the writer reconnects for as long as it is open (``driver.stream_retry``),
    backing off up to a second between attempts (more for an overloaded server); a ``retry``
    policy with a budget (``RetryPolicy(max_elapsed=60)``) makes it fail instead once a streak
    of failures outlasts it. A failure that retrying cannot fix (a missing topic, a refused
    codec, missing rights, a request over the server's size limit) ends the writer at once
    either way. ``connection_state``, ``reconnects`` and ``last_error`` show how the connection
    fares.

    A message that cannot be sent on its own (its encoder fails, or it no longer fits a request
    once compressed) fails alone: its future gets ``MessageEncodeError`` or
    ``MessageTooLargeError`` (a message given to ``write`` is logged as an ERROR), and the
    writer goes on with the others.

    Parameters:
        context: The driver's client context (transport, policies, metrics, limits).
        admin: Topic administration, to find the partition's node for ``direct_write``.
        path: The topic, absolute or relative to the driver's database.
        settings: The checked options (``WriterSettings``).
        transaction: The transaction every WriteRequest writes into (a transactional writer's;
            it begins the transaction before handing anything over), or None.
    """

    def __init__(
        self,
        context: ClientContext,
        admin: TopicAdmin,
        path: str,
        settings: WriterSettings,
        *,
        transaction: WriteTransaction | None = None,
    ) -> None:
        settings.check_partition_writer()
        resolved = settings.resolve(context, path)
        producer_id = settings.producer_id
        assert producer_id is not None  # WriterSettings makes one when none is given
        self._admin = admin
        self.path = resolved.path
        self.producer_id = producer_id
        self.message_group_id = settings.message_group_id
        """The session's message group (the deduplication identity when ``producer_id`` is
        empty), or None: the producer id's."""
        self.codec = settings.codec
        """The ``codec`` option: a codec id, or ``"auto"`` (see ``selected_codec``)."""
        self._settings = settings
        self._auto_seqno = settings.auto_seqno
        self._auto_created_at = settings.auto_created_at
        self._buffer_wait_timeout = settings.buffer_wait_timeout
        self._request_room = resolved.max_request_size - REQUEST_OVERHEAD
        """The most a message's ``wire_size`` may be."""
        self._max_message_bytes = self._request_room - MESSAGE_OVERHEAD
        """The largest payload without metadata that fits (the same bound, for ``write``'s fast path)."""
        self._partition_id = settings.partition_id
        self._init_timeout = settings.init_timeout
        buffer = self._buffer = WriteBuffer(settings.max_buffer_messages, settings.max_buffer_bytes)
        self._sender = WriterSender(
            context.transport,
            settings,
            resolved,
            buffer,
            self._on_init,
            writer_report(context.metrics, resolved.path, lambda: (buffer.messages, buffer.nbytes)),
            self._locate if settings.direct_write else None,
            self._hands_off,
            transaction,
        )
        self._keeper = self._sender.keeper
        self._tracer = context.tracing
        self._task: asyncio.Task[None] | None = None
        self._init_info: InitInfo | None = None
        self._init_done = asyncio.Event()
        self._next_seq_no = 1
        """Auto numbering: the next seq_no to assign. Counted from 1 until the first handshake,
        which moves every number past the producer's stored last seq_no."""
        self._fast = False
        """Whether ``write`` may take its hot path: started, auto numbering, no tracing, not failed,
        not closed (one flag instead of five checks per message)."""
        self._accepted_since_yield = 0
        self._last_seq_no = 0
        """Manual numbering: the highest seq_no accepted so far."""
        self._seq_no_base = 0
        """Manual numbering: what is added to each given seq_no before it is sent (0: none; a
        subclass that numbers relative to the producer's stored last seq_no sets it)."""
        self._failure: BaseException | None = None
        self._closed = False

    # --- lifecycle ------------------------------------------------------------------------

    _logger = logger

    async def _stop_now(self) -> None:
        await self._shutdown(WriterClosedError("writer was closed by cancellation before these were acknowledged"))

    def _exit_log_fields(self) -> Mapping[str, Any]:
        return self._sender.log_fields

    async def open(self) -> None:
        """Start connecting in the background (``write`` does this too); returns at once."""
        self._check_usable()
        self._start()

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"topic writer {self.path}")
            self._fast = self._auto_seqno and self._tracer is None

    async def _run(self) -> None:
        try:
            await self._sender.run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if self._sender.keeper.state is not ConnectionState.FAILED:  # else the keeper logged it
                logger.error("topic writer %s failed: %r", self.path, exc, extra=self._sender.log_fields)
            self._fail(exc)

    def _fail(self, error: BaseException) -> None:
        self._fast = False
        if self._failure is None:
            self._failure = error
        self._buffer.fail(error)
        self._init_done.set()

    def _hands_off(self, error: BaseException) -> bool:
        """Whether ``error`` is for whoever drives this writer to handle (a subclass says which):
        it ends the writer at once, like a final failure, without retries or an ERROR log."""
        return False

    async def _locate(self) -> PartitionLocation | None:
        assert self._partition_id is not None
        info = await self._admin.describe_partition(
            self.path, self._partition_id, include_stats=False, include_location=True, timeout=self._init_timeout
        )
        return info.location

    async def close(self, timeout: float | None = None) -> None:
        """Stop accepting writes, wait for every acknowledgement (reconnecting as needed), stop.

        Raises the writer's failure if it failed, and ``OperationTimeoutError`` (after cancelling
        the background work and failing the unacknowledged futures) when ``timeout`` passes.
        A writer still waiting for its topic (``wait_for_topic``) stops waiting at once: what it
        holds fails with ``TopicNotFoundError``, which ``close`` raises (nothing held: it just
        closes). A second call does nothing.
        """
        timeout = check_timeout(timeout)
        if self._closed:
            return
        self._closed = True
        self._fast = False
        self._keeper.stop_waiting()
        timed_out = False
        try:
            if self._failure is None and self._task is not None:
                await wait_within(self._buffer.wait_acked(self._buffer.accepted_total), timeout)
        except TimeoutError:
            timed_out = True
        except Exception:
            pass  # the failure is raised below
        finally:
            pending = self._buffer.accepted_total - self._buffer.acked_total
            reason = (
                OperationTimeoutError(
                    f"writer close timed out after {timeout:.3g}s with {pending} unacknowledged messages"
                )
                if timed_out
                else WriterClosedError("writer was closed before these messages were acknowledged")
            )
            await self._shutdown(reason)
        if timed_out:
            raise reason
        if self._failure is not None:
            raise self._failure.with_traceback(None)  # the same error for every call; do not grow its traceback

    async def _shutdown(self, reason: BaseException) -> None:
        self._closed = True
        self._fast = False
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        if not self._buffer.empty:
            self._buffer.fail(reason)
        self._init_done.set()

    def _closed_error(self) -> WriterClosedError:
        return WriterClosedError(f"writer for {self.path} is closed")

    # --- handshake ------------------------------------------------------------------------

    def _on_init(self, info: InitInfo) -> None:
        """The first handshake: called before anything is sent."""
        self._init_info = info
        offset = info.last_seq_no
        if self._auto_seqno and offset:
            # Messages accepted before the handshake were numbered from 1: they follow the
            # producer's stored last seq_no instead.
            self._shift_unsent(offset)
            self._next_seq_no += offset
        self._init_done.set()

    def _shift_unsent(self, offset: int) -> None:
        """Add ``offset`` to the seq_no of every message not sent yet (before the first
        handshake: every message accepted)."""
        unsent = self._buffer.unsent
        for _ in range(len(unsent)):
            entry = unsent.popleft()
            if isinstance(entry, tuple):
                data, seq_no, created_ns = entry
                entry = (data, seq_no + offset, created_ns)
            else:
                entry.seq_no += offset
            unsent.append(entry)

    async def wait_init(self, timeout: float | None = None) -> InitInfo:
        """Wait for the first handshake and return what the server said.

        Raises ``OperationTimeoutError`` when ``timeout`` passes first (the writer keeps trying to
        connect in the background), and the writer's failure if it failed.
        """
        timeout = check_timeout(timeout)
        self._check_usable()
        self._start()
        if not self._init_done.is_set():
            try:
                await wait_within(self._init_done.wait(), timeout)
            except TimeoutError:
                last = self.last_error
                raise OperationTimeoutError(
                    f"writer for {self.path} did not connect within {timeout}s"
                    + (f" (last error: {last!r})" if last is not None else "")
                ) from None
        if self._init_info is None:
            self._check_usable()
            raise WriterClosedError(f"writer for {self.path} closed before connecting")
        return self._init_info

    @property
    def init_info(self) -> InitInfo | None:
        """The first handshake's answer, or None before it."""
        return self._init_info

    # --- writing --------------------------------------------------------------------------

    async def write(self, messages: Messages) -> None:
        """Buffer one message or a list of them; return without waiting for the server.

        Waits while the buffer is full (up to ``buffer_wait_timeout``, then raises
        ``BufferFullTimeoutError`` having accepted nothing from this call).
        """
        if self._accepted_since_yield >= YIELD_EVERY:
            await self._yield()
        if type(messages) is bytes and self._fast:
            # The hot path: one payload, auto numbering, room in the buffer (no await at all then).
            size = len(messages)
            if size <= self._max_message_bytes:
                seq_no = self._next_seq_no
                entry: PlainMessage = (messages, seq_no, time.time_ns() if self._auto_created_at else -1)
                if self._buffer.try_push_one(entry):
                    self._next_seq_no = seq_no + 1
                    self._accepted_since_yield += 1
                    return
        await self._accept(messages, False)

    @overload
    async def write_with_ack(self, messages: OneMessage) -> WriteResult: ...  # type: ignore[overload-overlap]  # a str is one message, not a sequence of them

    @overload
    async def write_with_ack(self, messages: ManyMessages) -> list[WriteResult]: ...

    async def write_with_ack(self, messages: Messages) -> WriteResult | list[WriteResult]:
        """Write and wait for the server's acknowledgement of each message.

        Returns one result (or a list, for a list): ``Written``, ``Skipped`` or ``WrittenInTx``.
        Cancelling this call after the messages were accepted does not withdraw them: they are
        still sent exactly as if ``write`` had been used.
        """
        futures = await self._accept(messages, True)
        assert futures is not None
        if not futures:
            return []
        # asyncio.wait, unlike gather, leaves the futures alone when this call is cancelled.
        await asyncio.wait(futures)
        if isinstance(messages, (bytes, str, Message)):
            return futures[0].result()
        return [f.result() for f in futures]

    @overload
    async def write_with_ack_future(self, messages: OneMessage) -> asyncio.Future[WriteResult]: ...  # type: ignore[overload-overlap]  # a str is one message, not a sequence of them

    @overload
    async def write_with_ack_future(self, messages: ManyMessages) -> list[asyncio.Future[WriteResult]]: ...

    async def write_with_ack_future(
        self, messages: Messages
    ) -> asyncio.Future[WriteResult] | list[asyncio.Future[WriteResult]]:
        """Buffer like ``write`` and return the acknowledgement future(s) instead of waiting."""
        futures = await self._accept(messages, True)
        assert futures is not None
        if isinstance(messages, (bytes, str, Message)):
            return futures[0]
        return futures

    async def _accept(
        self, messages: Messages, with_futures: bool
    ) -> list[asyncio.Future[WriteResult]] | None:
        if with_futures and self._accepted_since_yield >= YIELD_EVERY:
            await self._yield()
        self._check_usable()
        self._start()
        now_ns = time.time_ns() if self._auto_created_at else -1
        if isinstance(messages, (bytes, str, Message)):
            entries = [self._prepare(messages, now_ns)]
        elif is_many(messages):
            entries = [self._prepare(m, now_ns) for m in messages]
            if not entries:
                return [] if with_futures else None
        else:
            raise InvalidArgumentError(
                f"write takes bytes, str, Message or a list of them, not {type(messages).__name__}"
            )
        manual = not self._auto_seqno
        if manual:
            self._check_seq_nos(entries)
        tracer = self._tracer
        # Tracing starts a span per accepted message and adds its context to the message's metadata.
        spans = tracer.start_writes(self.path, self.producer_id, entries, self._request_room) if tracer else None
        count = len(entries)
        nbytes = sum(e.size for e in entries) if count > 1 else entries[0].size
        buffer = self._buffer
        try:
            if not buffer.try_reserve(count, nbytes):
                await buffer.reserve(count, nbytes, self._buffer_wait_timeout)
                # Other calls ran while this one waited.
                try:
                    self._check_usable()
                    if manual:
                        self._check_seq_nos(entries)
                except BaseException:
                    buffer.release(count, nbytes)
                    raise
        except BaseException as exc:
            if tracer is not None and spans is not None:
                tracer.fail_writes(spans, exc)
            raise
        if manual:
            self._last_seq_no = entries[-1].seq_no
            base = self._seq_no_base
            if base:
                for entry in entries:
                    entry.seq_no += base
        else:
            seq_no = self._next_seq_no
            for entry in entries:
                entry.seq_no = seq_no
                seq_no += 1
            self._next_seq_no = seq_no
        futures: list[asyncio.Future[WriteResult]] | None = None
        if with_futures or spans is not None:
            loop = asyncio.get_running_loop()
            futures = []
            for entry in entries:
                entry.future = future = loop.create_future()
                futures.append(future)
            if tracer is not None and spans is not None:
                tracer.end_writes_on_ack(spans, futures)
        buffer.push(entries)
        self._accepted_since_yield += count
        return futures if with_futures else None

    async def _yield(self) -> None:
        # Before accepting anything, so a cancellation here loses nothing.
        self._accepted_since_yield = 0
        await asyncio.sleep(0)

    def _prepare(self, message: OneMessage, now_ns: int) -> PendingMessage:
        if isinstance(message, bytes):
            data = message
            seq_no = None
            created_ns = now_ns
            metadata = None
            meta_size = 0
        elif isinstance(message, str):
            data = payload_bytes(message, "a message")
            seq_no = None
            created_ns = now_ns
            metadata = None
            meta_size = 0
        elif isinstance(message, Message):
            data = payload_bytes(message.data)
            seq_no = message.seq_no
            if seq_no is not None and (
                not isinstance(seq_no, int) or isinstance(seq_no, bool) or not 0 < seq_no <= MAX_SEQ_NO
            ):
                raise InvalidArgumentError(f"seq_no must be a positive int of at most 2**63-1, got {seq_no!r}")
            created_ns = now_ns if message.created_at is None else _to_ns(message.created_at)
            metadata, meta_size = check_metadata(message.metadata) if message.metadata else (None, 0)
        else:
            raise InvalidArgumentError(f"a message must be bytes, str or Message, not {type(message).__name__}")
        if self._auto_seqno:
            if seq_no is not None:
                raise InvalidArgumentError(
                    "this writer numbers messages itself (auto_seqno=True); do not set Message.seq_no"
                )
            seq_no = 0
        elif seq_no is None:
            raise InvalidArgumentError("auto_seqno=False: every message needs an explicit seq_no")
        entry = PendingMessage(data, seq_no, created_ns, metadata, len(data) + meta_size)
        if entry_wire_size(entry.data_len, entry) > self._request_room:
            self._too_large(entry.size)
        return entry

    def _too_large(self, size: int) -> None:
        raise MessageTooLargeError(
            f"a message of {size} bytes cannot fit in one request: the limit is about {self._max_message_bytes}"
            " bytes of payload and metadata (raise max_request_size / the driver's max_message_size, or split it)"
        )

    def _check_seq_nos(self, entries: list[PendingMessage]) -> None:
        last = self._last_seq_no
        for entry in entries:
            if entry.seq_no <= last:
                raise InvalidArgumentError(
                    f"seq_no must strictly increase: got {entry.seq_no} after {last};"
                    " nothing from this call was accepted"
                )
            last = entry.seq_no

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message written before this call is acknowledged (or, for a message
        that could not be sent on its own, dropped). Raises ``OperationTimeoutError`` when
        ``timeout`` passes first: the messages stay buffered and are still sent."""
        timeout = check_timeout(timeout)
        self._check_usable()
        mark = self._buffer.accepted_total
        try:
            await wait_within(self._buffer.wait_acked(mark), timeout)
        except TimeoutError:
            pending = mark - self._buffer.acked_total
            raise OperationTimeoutError(
                f"flush timed out after {timeout:.3g}s with {pending} messages unacknowledged"
            ) from None

    # --- introspection --------------------------------------------------------------------

    @property
    def buffered_messages(self) -> int:
        """Messages accepted and not yet acknowledged."""
        return self._buffer.messages

    @property
    def buffered_bytes(self) -> int:
        """Bytes of messages accepted and not yet acknowledged."""
        return self._buffer.nbytes

    @property
    def selected_codec(self) -> int | None:
        """The codec batches go with: the ``codec`` option; with ``codec="auto"`` the one picked
        for the latest batch sent (None before the first)."""
        selector = self._sender.batcher.selector
        if selector is None:
            return self._settings.batch_codec
        return selector.chosen

    @property
    def session_id(self) -> str:
        """The current stream's session id (for server logs); empty before the first handshake."""
        return self._sender.session_id

    @property
    def last_write_statistics(self) -> WriteStatistics | None:
        """Server timings of the latest acknowledgement batch, or None before any ack."""
        last = self._sender.last_statistics
        if last is None:
            return None
        partition_id, count, stats = last
        return WriteStatistics(
            partition_id=partition_id,
            messages=count,
            persisting_time=stats.persisting_time.ToTimedelta(),
            min_queue_wait_time=stats.min_queue_wait_time.ToTimedelta(),
            max_queue_wait_time=stats.max_queue_wait_time.ToTimedelta(),
            partition_quota_wait_time=stats.partition_quota_wait_time.ToTimedelta(),
            topic_quota_wait_time=stats.topic_quota_wait_time.ToTimedelta(),
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "failed" if self._failure else "open"
        return f"TopicWriter({self.path!r}, producer_id={self.producer_id!r}, {state})"


def _to_ns(value: dt.datetime) -> int:
    if not isinstance(value, dt.datetime):
        raise InvalidArgumentError(f"created_at must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return ((value - _EPOCH) // _MICROSECOND) * 1000


__all__ = ["TopicWriter"]
