"""``TopicReader``: the public reader facade.

The receive calls take messages out of the read buffer without any I/O; one background task
(``ReaderConnection.run``) owns the stream, reconnects, and fills the buffer. Its terminal
failure is raised by every later call.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._closing import ClosesOnExit
from .._errors import (
    CommitNotAllowedError,
    InvalidArgumentError,
    OperationTimeoutError,
    PartitionSessionClosedError,
    ReaderClosedError,
)
from .._futures import deadline, suppress_future_errors, wait_within
from .._stream import ConnectionState, ConnectionStatus
from .._validate import check_seconds, check_timeout
from ..observability.logging import sdk_logger
from .bookkeeping import PartitionSessionState
from .commits import GAP_ADVICE, CommitTracker
from .messages import (
    MessageBatch,
    PartitionSession,
    PartitionStatus,
    SkippedOffsets,
    TopicMessage,
    TopicSelector,
)
from .session import ReaderConnection
from .settings import ReaderSettings
from .tx import TxReads

if TYPE_CHECKING:
    from .._context import ClientContext


logger = sdk_logger("reader")

GAP_WARNING_DELAY = 2.0
"""Seconds a ``commit_with_ack`` may wait behind uncommitted earlier offsets before it warns."""
TopicsArg = str | TopicSelector | Sequence[str | TopicSelector]
Committable = TopicMessage | MessageBatch | SkippedOffsets


class TopicReader(ConnectionStatus, ClosesOnExit):
    """Reads messages from one or more topics as a consumer (or, without one, from given offsets).

    ``async with driver.topic.reader("events", consumer="c") as reader: async for m in reader``.
    ``buffer_size_bytes`` bounds the bytes received and not yet handed out, counted decoded (a
    compressed response counts its size and what its payloads decode to): credit is granted in
    those terms, as learned from what arrived, with room kept for the one message the server may
    send past it; compressed payloads are decoded as they are handed out. ``decoders`` adds
    codecs (e.g. ``{LZ4_CODEC: lz4_decode}``); a decoder runs in one thread at a time unless
    wrapped in ``ThreadSafe``.
    ``on_partition_start(session)`` may return a read offset (int) or ``StartOffsets``;
    ``on_partition_stop(session)`` is told when a session ends; both may be coroutines.
    ``consumer=None`` reads the selectors' explicit partitions from their ``start_offsets``
    (or offsets from ``on_partition_start``) and refuses commits; after a reconnect it resumes
    after the last message handed out. ``graceful_stop_timeout`` bounds how long a partition the
    server takes away waits for commits of the messages already handed out. ``init_timeout``
    bounds each handshake (the InitRequest write and the InitResponse read together).

    ``partition_max_in_flight_bytes`` bounds, per partition session, the bytes handed out and
    not yet committed: a partition at the limit is not taken from (others are) until commits
    free room; one receive may cross it. The server is told too and stops sending such a
    partition (YDB counts the bytes it sent and not committed). ``None`` or 0: no limit; a
    reader without a consumer (which commits nothing) refuses a limit.
    ``on_commit(ack)`` is called with a ``CommitAck`` (topic, partition, committed offset) each
    time the server moves a partition session's committed offset; it runs on the reader's task
    and must return quickly; an exception it raises is logged and ignored.
    ``seek``, ``seek_to_beginning`` and ``seek_to_end`` move a partition session's position.
    ``direct_read=True`` reads each partition's data from the node hosting it (StreamDirectRead),
    the read stream staying where it is; where the server does not offer it, the reader reads
    the ordinary way and says so once in the log.

    ``retry``: by default the reader reconnects for as long as it is open (``driver.stream_retry``),
    and uncommitted messages are delivered again after a reconnect; a policy with a budget
    (``RetryPolicy(max_elapsed=60)``) makes it fail instead once a streak of failures outlasts
    it. Failures that retrying cannot fix end it at once. ``connection_state``, ``reconnects``
    and ``last_error`` show how the connection fares. A message whose payload cannot be decoded
    makes the receive that reaches it raise ``MessageDecodeError`` (naming the topic, partition,
    offset and codec); the next receive goes on after it.
    """

    def __init__(self, context: ClientContext, topics: TopicsArg, settings: ReaderSettings) -> None:
        """A reader of ``topics`` (not opened yet: the first receive or ``open`` starts it).

        Users get one from ``driver.topic.reader(topics, consumer=..., **options)``, which makes
        ``settings`` from its options.

        Parameters:
            context: What the reader is built from: the transport, the database that relative
                paths are in, the default reconnect policy, metrics and tracing.
            topics: A topic path, a ``TopicSelector`` or a list of them.
            settings: The reader's checked options (``ReaderSettings``).

        Raises:
            InvalidArgumentError: ``topics`` is empty or not paths and selectors, or, without a
                consumer, a selector names no partitions.
        """
        selectors = [self._selector(context, t) for t in self._as_list(topics)]
        if not selectors:
            raise InvalidArgumentError("give at least one topic to read")
        consumer = settings.consumer
        if consumer is None:
            for selector in selectors:
                if not selector.partition_ids:
                    raise InvalidArgumentError(
                        f"reading {selector.path} without a consumer needs explicit partitions "
                        "(TopicSelector(path, partitions=[...]) or start_offsets={partition: offset})"
                    )
        self._context = context
        self.consumer = consumer
        self.selectors: tuple[TopicSelector, ...] = tuple(selectors)
        self._conn = ReaderConnection(context, selectors, settings)
        self._buffer = self._conn.buffer
        self._commits = self._conn.commits
        self._keeper = self._conn.keeper
        self._tracing = context.tracing
        self._hot = self._tracing is None
        """Whether a message at hand may be handed out at once: open, not failed, no tracing
        (one flag instead of three checks per message)."""
        self._task: asyncio.Task[None] | None = None
        self._tx_reads: TxReads | None = None
        self._failure: BaseException | None = None
        self._failure_reported = False
        self._closed = False

    @staticmethod
    def _as_list(topics: TopicsArg) -> list[str | TopicSelector]:
        if isinstance(topics, (str, TopicSelector)):
            return [topics]
        if isinstance(topics, Sequence):
            return list(topics)
        raise InvalidArgumentError(f"topics must be a path, a TopicSelector or a list of them, not {topics!r}")

    @staticmethod
    def _selector(context: ClientContext, topic: str | TopicSelector) -> TopicSelector:
        if isinstance(topic, str):
            return TopicSelector(context.full_path(topic))
        if isinstance(topic, TopicSelector):
            path = context.full_path(topic.path)
            return TopicSelector(path, topic.partitions, topic.read_from, topic.max_lag, topic.start_offsets)
        raise InvalidArgumentError(f"expected a topic path or TopicSelector, got {topic!r}")

    # --- lifecycle -----------------------------------------------------------------------------

    _logger = logger

    async def _stop_now(self) -> None:
        await self._shutdown()

    def _exit_log_fields(self) -> Mapping[str, Any]:
        return self._conn.log_fields

    def __repr__(self) -> str:
        state = "closed" if self._closed else "failed" if self._failure else "open"
        topics = [s.path for s in self.selectors]
        return f"TopicReader({topics!r}, consumer={self.consumer!r}, session={self.read_session_id!r}, {state})"

    async def open(self) -> None:
        """Start reading in the background (the first receive does this too); returns at once."""
        self._check_usable()
        self._start()

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="topic reader")

    async def _run(self) -> None:
        try:
            await self._conn.run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failure = exc
            self._hot = False
            if self._conn.keeper.state is not ConnectionState.FAILED:  # else the keeper logged it
                logger.error("topic reader failed: %r", exc, extra=self._conn.log_fields)
        finally:
            self._buffer.nonempty.set()  # wake receivers: they raise the failure or see the close

    async def close(self, timeout: float | None = None) -> None:
        """Stop reading; wait for the acknowledgement of commits made before the call, then stop.

        The wait ends early when the stream breaks (there is no reconnect for it: those messages
        will be delivered again). Raises ``OperationTimeoutError`` when ``timeout`` passes first,
        and the reader's failure if no call has raised it yet. A second call does nothing.
        """
        timeout = check_timeout(timeout)
        if self._closed:
            return
        self._closed = True
        self._hot = False
        self._conn.closing = True
        timed_out = False
        waiters: list[asyncio.Future[None]] = []
        try:
            if self._failure is None and self._task is not None and not self._task.done():
                waiters = self._conn.close_waiters()
                if waiters:
                    await wait_within(asyncio.wait(waiters), timeout)
        except TimeoutError:
            timed_out = True
        finally:
            await self._shutdown()
            suppress_future_errors(waiters)
        if timed_out:
            raise OperationTimeoutError(
                f"reader close timed out after {timeout:.3g}s waiting for commit acknowledgements"
            )
        if self._failure is not None and not self._failure_reported:
            self._failure_reported = True
            raise self._failure

    async def _shutdown(self) -> None:
        self._closed = True
        self._hot = False
        self._conn.closing = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        self._buffer.reset()
        self._buffer.nonempty.set()

    def _closed_error(self) -> ReaderClosedError:
        return ReaderClosedError("the topic reader is closed")

    def _failure_raised(self) -> None:
        self._failure_reported = True

    # --- receiving -----------------------------------------------------------------------------

    async def _wait(self, timeout: float | None, max_messages: int | None, max_bytes: int | None) -> None:
        """Wait until a take within these limits can run: messages are buffered, freed credit was
        given a chance to go out, and their payloads are decoded."""
        buffer = self._buffer
        if self._task is None:
            self._check_usable()
            self._start()
        try:
            async with deadline(timeout):
                while True:
                    while not buffer or self._closed or self._failure is not None:
                        self._check_usable()
                        buffer.nonempty.clear()
                        await buffer.nonempty.wait()
                    if buffer.credit_ready:
                        # Let the stream's sender grant the freed credit before handing out more.
                        # Another receiver of this reader may take the messages meanwhile: then
                        # wait on, within the same deadline.
                        await asyncio.sleep(0)
                        self._check_usable()
                        if not buffer:
                            continue
                    if buffer.front_ready(max_messages, max_bytes):
                        return
                    await buffer.decode_front(max_messages, max_bytes)
        except TimeoutError:
            last = self.last_error if self.connection_state is not ConnectionState.CONNECTED else None
            raise OperationTimeoutError(
                f"no message arrived within {timeout}s" + (f" (not connected; last error: {last!r})" if last else "")
            ) from None

    async def receive_batch(
        self,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        timeout: float | None = None,
        max_wait: float | None = None,
    ) -> MessageBatch:
        """The next messages of one partition session, in offset order.

        Without ``max_wait`` it returns as soon as a message is there: the batch is what was
        received together with it (up to the limits). With ``max_wait`` it fills the batch:
        once the first message is there, it waits up to ``max_wait`` seconds more for further
        messages of the same partition session, and returns when the batch reaches
        ``max_messages`` or ``max_bytes`` or the window ends. The window starts at the first
        message, not at the call, so an idle reader still waits (up to ``timeout``) for one
        and a batch is never empty; under load, a batch that is full at once returns at once.

        Parameters:
            max_messages: The most messages in the batch (at least one is always returned).
            max_bytes: The most payload bytes in the batch (its first message may exceed it).
            timeout: Seconds to wait for the first message (``None``: no limit).
            max_wait: Seconds to go on filling the batch after its first message.

        Returns:
            The batch, of one partition session.

        Raises:
            OperationTimeoutError: No message arrived within ``timeout``.
            InvalidArgumentError: A limit is not a positive int, or ``max_wait`` not a number of
                seconds.

        Cancelling the call loses nothing: messages are taken only when it returns.
        """
        for value, what in ((max_messages, "max_messages"), (max_bytes, "max_bytes")):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise InvalidArgumentError(f"{what} must be a positive int or None, got {value!r}")
        timeout = check_timeout(timeout)
        if max_wait is None:
            await self._wait(timeout, max_messages, max_bytes)
            batch = self._buffer.pop(max_messages, max_bytes)
        else:
            batch = await self._receive_filled(check_seconds(max_wait, "max_wait"), max_messages, max_bytes, timeout)
        if self._tracing is not None:
            self._tracing.on_receive(self.consumer, batch.messages)
        return batch

    async def _receive_filled(
        self, window: float, max_messages: int | None, max_bytes: int | None, timeout: float | None
    ) -> MessageBatch:
        """``receive_batch`` with a window (see there)."""
        buffer = self._buffer
        loop = asyncio.get_running_loop()
        started = loop.time()
        await self._wait(timeout, max_messages, max_bytes)
        session = buffer.front_session()
        closes = loop.time() + window
        while session is not None and not buffer.holds_enough(session, max_messages, max_bytes):
            left = closes - loop.time()
            if left <= 0 or self._closed or self._failure is not None:
                break
            buffer.nonempty.clear()  # set again by the next response (of any partition)
            with contextlib.suppress(TimeoutError):
                await wait_within(buffer.nonempty.wait(), left)
        if session is not None:
            # Decode ahead now: the take itself must not wait (a cancelled call takes nothing).
            await buffer.decode_session(session, max_messages, max_bytes)
        left_over = None if timeout is None else max(0.0, timeout - (loop.time() - started))
        await self._wait(left_over, max_messages, max_bytes)
        return buffer.pop_more(buffer.pop(max_messages, max_bytes), max_messages, max_bytes)

    async def receive_batch_with_tx(
        self,
        tx: object,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        timeout: float | None = None,
        max_wait: float | None = None,
    ) -> MessageBatch:
        """``receive_batch`` whose offsets are committed by ``tx`` (begun here if it has not begun).

        ``tx`` comes from ``driver.query.transaction()`` or from the official ``ydb`` package's
        asyncio query client. The consumer's committed offsets advance only if ``tx`` commits;
        if it fails or is rolled back, the reader reconnects and the messages are delivered again.
        """
        if self.consumer is None:
            raise CommitNotAllowedError("this reader reads without a consumer: there is nothing to commit to")
        self._check_usable()
        if self._tx_reads is None:
            self._tx_reads = TxReads(self._context, self._conn, self.consumer)
        binding = await self._tx_reads.join(tx)
        batch = await self.receive_batch(max_messages, max_bytes, timeout, max_wait)
        self._tx_reads.record(binding, batch)
        return batch

    async def receive_message(self, timeout: float | None = None) -> TopicMessage:
        """The next message; waits up to ``timeout`` (then ``OperationTimeoutError``)."""
        # The hot path, as in ``__anext__``: a message at hand is taken without suspending.
        if self._hot:
            message = self._buffer.pop_one()
            if message is not None:
                return message
        if timeout is not None:
            timeout = check_timeout(timeout)
        return await self._receive_one(timeout)

    def __aiter__(self) -> TopicReader:
        return self

    async def __anext__(self) -> TopicMessage:
        if self._hot:
            message = self._buffer.pop_one()
            if message is not None:
                return message
        return await self._receive_one(None)

    async def _receive_one(self, timeout: float | None) -> TopicMessage:
        message = self._buffer.pop_one() if not self._closed and self._failure is None else None
        if message is None:
            await self._wait(timeout, 1, None)
            message = self._buffer.pop_one() or self._buffer.pop(1, None)[0]
        if self._tracing is not None:
            self._tracing.on_receive(self.consumer, (message,))
        return message

    # --- commits -------------------------------------------------------------------------------

    def _commit_session(self, item: Committable) -> PartitionSession | None:
        self._check_usable()
        if self.consumer is None:
            raise CommitNotAllowedError("this reader reads without a consumer: there is nothing to commit to")
        if not isinstance(item, (TopicMessage, MessageBatch, SkippedOffsets)):
            raise InvalidArgumentError(
                f"commit takes a TopicMessage, MessageBatch or SkippedOffsets, not {type(item).__name__}"
            )
        session = item.partition_session
        if session.closed:
            return None
        if self._conn.sessions.get(session.id) is not session:
            raise InvalidArgumentError("this message was not received by this reader")
        return session

    def commit(self, item: Committable) -> None:
        """Mark a message or batch (and the offsets before it in its session) processed; returns at once.

        Commits are batched and sent in the background. A message whose partition session has
        ended cannot be committed any more: it is skipped with a warning (it will be delivered
        again to whoever reads that partition next).
        """
        if type(item) is TopicMessage and not self._closed and self._failure is None:
            # The hot path: the message right after the last one committed in its session, whose
            # range is not sent yet (see ``CommitTracker``), extends that range in place.
            books = item.partition_session._bookkeeping
            run = books.commit_run
            if run is not None and run[1] == item._commit_start and books.owner is self._commits:
                run[1] = item.offset + 1
                return
        session = self._commit_session(item)
        if session is None:
            logger.warning(
                "topic reader: commit skipped, %r has ended (the messages will be read again)",
                item.partition_session, extra=self._conn.log_fields,
            )
            return
        start, end = item.commit_range
        self._conn.commits.add(session, start, end, False)

    async def commit_with_ack(self, item: Committable, timeout: float | None = None) -> None:
        """Commit and wait until the server's committed offset covers ``item``.

        Raises ``PartitionSessionClosedError`` when the partition session has ended (before or
        while waiting) and ``OperationTimeoutError`` when ``timeout`` passes (the commit itself
        stays queued). Cancelling the wait does not withdraw the commit.
        """
        timeout = check_timeout(timeout)
        session = self._commit_session(item)
        if session is None:
            raise PartitionSessionClosedError(
                f"cannot commit: {item.partition_session!r} has ended (the messages will be read again)"
            )
        start, end = item.commit_range
        future = self._conn.commits.add(session, start, end, True)
        assert future is not None
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        gap = CommitTracker.scan(session)[1] if not future.done() else None
        if gap is not None and end > gap[0]:
            # Handlers that finish out of order close such gaps a moment later: say something
            # only when the wait stalls, since without a timeout it never ends on its own.
            first_wait = GAP_WARNING_DELAY if timeout is None else min(timeout, GAP_WARNING_DELAY)
            await asyncio.wait([future], timeout=first_wait)
            gap = CommitTracker.scan(session)[1] if not future.done() else None
            if gap is not None and end > gap[0]:
                logger.warning(
                    "topic reader: commit_with_ack up to offset %d of %s waits until offsets %d..%d are committed (%s)",
                    end, session, gap[0], gap[1] - 1, GAP_ADVICE, extra=self._conn.log_fields,
                )
        remaining = None if deadline is None else max(0.0, deadline - loop.time())
        done, _ = await asyncio.wait([future], timeout=remaining)
        if not done:
            raise OperationTimeoutError(f"commit of offsets up to {end} was not acknowledged within {timeout}s")
        future.result()

    # --- positions -----------------------------------------------------------------------------

    async def seek(
        self, partition_session: PartitionSession, position: int | dt.datetime, *, timeout: float | None = None
    ) -> SkippedOffsets | None:
        """Hand out ``partition_session``'s messages from ``position`` on, starting with the next receive.

        ``position`` is an offset, or a time: the offset of the first message written then or
        later (the partition's end offset when there is none yet). Buffered messages of the
        session that the seek passes over are dropped. A forward seek (past what was handed
        out) passes over messages without reading them; a backward one reads them again on a
        short-lived second stream without a consumer, while the session's own messages wait.
        Other partitions, and the stream, are not touched.

        Committed offsets do not move: a seek commits nothing. Messages received before it can
        still be committed. A forward seek returns the ``SkippedOffsets`` it passed over: they
        stay uncommitted (and hold the consumer's committed offset back, commits being
        contiguous) until committed explicitly with ``commit(skipped)``; the partition is
        otherwise read from the committed offset again after a restart or a rebalance.

        Parameters:
            partition_session: A partition session this reader holds.
            position: An offset (at least the committed offset: YDB reads no lower with a
                consumer, and at most the partition's end offset), or a ``datetime`` (naive
                means UTC).
            timeout: Seconds for the server's answers a seek may need (the partition's end or
                the offset of a time).

        Returns:
            The offsets a forward seek passed over, None otherwise.

        Raises:
            InvalidArgumentError: ``position`` is below the committed offset, past the
                partition's end, or neither an offset nor a ``datetime``.
            PartitionSessionClosedError: The session has ended or is being stopped, or is not
                this reader's.
            OperationTimeoutError: The server did not answer within ``timeout``.
        """
        timeout = check_timeout(timeout)
        if isinstance(position, dt.datetime):
            when = position if position.tzinfo is not None else position.replace(tzinfo=dt.UTC)
            offset = await self._offset_at(partition_session, when, timeout)
        elif isinstance(position, int) and not isinstance(position, bool) and position >= 0:
            offset = position
            if offset > max(partition_session.partition_end_offset, partition_session._bookkeeping.next_commit_start):
                await self.partition_status(partition_session, timeout)  # the end may have moved on
        else:
            raise InvalidArgumentError(f"position must be an offset (int >= 0) or a datetime, got {position!r}")
        self._seekable(partition_session)
        lower = partition_session.committed_offset if self.consumer is not None else 0
        if offset < lower:
            raise InvalidArgumentError(
                f"cannot seek {partition_session!r} to offset {offset}: below the committed offset {lower}"
                " (YDB reads no lower for a consumer; move it with driver.topic.commit_offset to read older messages)"
            )
        end = max(partition_session.partition_end_offset, partition_session._bookkeeping.next_commit_start)
        if offset > end:
            raise InvalidArgumentError(
                f"cannot seek {partition_session!r} to offset {offset}: past the partition's end offset {end}"
            )
        return self._conn.seek(partition_session, offset)

    async def seek_to_beginning(
        self, partition_session: PartitionSession, *, timeout: float | None = None
    ) -> SkippedOffsets | None:
        """``seek`` to the first offset the session can read: the committed offset (with a
        consumer; YDB reads nothing below it) or the partition's first stored offset."""
        status = await self.partition_status(partition_session, check_timeout(timeout))
        start = status.partition_start_offset
        if self.consumer is not None:
            start = max(start, partition_session.committed_offset)
        return await self.seek(partition_session, start, timeout=timeout)

    async def seek_to_end(
        self, partition_session: PartitionSession, *, timeout: float | None = None
    ) -> SkippedOffsets | None:
        """``seek`` to the partition's end offset (the next message written is the next handed
        out); returns what it passed over, which stays uncommitted until committed."""
        status = await self.partition_status(partition_session, check_timeout(timeout))
        return await self.seek(partition_session, status.partition_end_offset, timeout=timeout)

    def _seekable(self, session: PartitionSession) -> None:
        self._check_usable()
        if not isinstance(session, PartitionSession):
            raise InvalidArgumentError(f"expected a PartitionSession, got {session!r}")
        if session.state is not PartitionSessionState.ACTIVE or self._conn.sessions.get(session.id) is not session:
            raise PartitionSessionClosedError(f"{session!r} is not an active partition session of this reader")

    async def _offset_at(self, session: PartitionSession, when: dt.datetime, timeout: float | None) -> int:
        """The offset of ``session``'s first readable message written at ``when`` or later (its
        end offset when there is none)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        status = await self.partition_status(session, timeout)
        start = status.partition_start_offset
        if self.consumer is not None:
            start = max(start, session.committed_offset)
        end = status.partition_end_offset
        if start >= end or status.write_time_high_watermark < when:
            return end  # nothing written since: the next message will be
        left = None if timeout is None else max(0.0, timeout - (loop.time() - started))
        self._seekable(session)
        try:
            offset = await wait_within(self._conn.first_offset_since(session, start, when), left)
        except TimeoutError:
            raise OperationTimeoutError(f"no offset for {when.isoformat()} in {session!r} within {timeout}s") from None
        return end if offset is None else offset

    # --- introspection -------------------------------------------------------------------------

    async def partition_status(self, session: PartitionSession, timeout: float | None = None) -> PartitionStatus:
        """Ask the server for a live partition session's offsets and committed position."""
        timeout = check_timeout(timeout)
        self._check_usable()
        if session.closed or self._conn.sessions.get(session.id) is not session:
            raise PartitionSessionClosedError(f"{session!r} is not an active partition session of this reader")
        future = self._conn.request_status(session)
        done, _ = await asyncio.wait([future], timeout=timeout)
        if not done:
            future.cancel()
            raise OperationTimeoutError(f"no status for {session!r} within {timeout}s")
        return future.result()

    @property
    def partition_sessions(self) -> list[PartitionSession]:
        """The partition sessions of the current stream."""
        return list(self._conn.sessions.values())

    @property
    def read_session_id(self) -> str:
        """The server's id of the current read stream ("" before the first handshake)."""
        return self._conn.read_session_id

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet handed out, counted decoded (as ``buffer_size_bytes`` is)."""
        return self._buffer.buffered_bytes

    @property
    def peak_buffered_bytes(self) -> int:
        """The highest ``buffered_bytes`` seen."""
        return self._buffer.peak_buffered_bytes

    @property
    def buffer_size_bytes(self) -> int:
        """The most unread bytes the reader asks the server for."""
        return self._buffer.buffer_size
