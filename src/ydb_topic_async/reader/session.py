"""The read stream and its reconnection.

``ReaderConnection.run`` keeps a StreamRead open through a ``StreamKeeper``: it opens a stream,
runs it until it breaks, and on a retriable error opens a new one after a backoff. Everything
tied to a stream dies with it: partition sessions (so their messages can no longer be
committed, see ``partitions``), buffered messages (the server delivers the uncommitted ones
again), pending commit acknowledgements. Within a stream three tasks run: the receiver (server
messages, decoding), the sender (the only writer to the stream: commits, credit, partition
session answers, token updates) and the token refresher.

With ``direct_read`` the stream asks the server for direct read: data then comes from the node
hosting each partition (``direct``, whose streams run among the stream's tasks), and is
acknowledged here (DirectReadAck); the stream keeps everything else. Where the server does not
offer it (a partition started without a location, a direct stream refused as UNIMPLEMENTED or
left unanswered), the reader says so once and reads the ordinary way from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .._errors import ConnectionLostError, PartitionSessionClosedError
from .._futures import wait_within
from .._proto import ydb_topic_pb2 as pb
from .._stream import BidiStream, RestartStream, StreamKeeper, refresh_tokens, tokens_may_change
from ..observability.logging import reader_fields, sdk_logger
from ..observability.metrics import reader_report
from .bookkeeping import PartitionSessionState
from .commits import GAP_ADVICE, CommitTracker
from .direct import DirectReads
from .flow_control import ReadBuffer
from .messages import CommitAck, PartitionSession, PartitionStatus, SkippedOffsets, TopicSelector
from .parsing import STREAM_READ, ExternalPayloads, ReadResponseParser
from .partitions import PartitionSessions, waits_for_drain_or_commits
from .parts import BufferedPart, server_batches
from .seeking import REPLAY_WINDOW, Replay, SideRead, position_of
from .settings import ReaderSettings

if TYPE_CHECKING:
    from .._context import ClientContext

logger = sdk_logger("reader")

ReadStream = BidiStream[pb.StreamReadMessage.FromClient, pb.StreamReadMessage.FromServer]

__all__ = ["STREAM_READ", "ReaderConnection"]


class ReaderConnection:
    """Reconnecting StreamRead: owns the per-stream state and the partition sessions.

    Built from the client ``context`` (the transport, the metrics, the default reconnect policy),
    the ``selectors`` to read (full paths) and the reader's checked ``settings``.
    """

    def __init__(self, context: ClientContext, selectors: Sequence[TopicSelector], settings: ReaderSettings) -> None:
        self._transport = context.transport
        self._settings = settings
        self._selectors = tuple(selectors)
        self._retry = settings.retry or context.stream_retry
        self._reader_name = settings.reader_name or f"ydb-topic-async-{uuid.uuid4().hex[:8]}"
        self._parser = ReadResponseParser()
        self.wake = asyncio.Event()
        self.buffer = ReadBuffer(settings, self._on_drained, self.wake)
        self.commits = CommitTracker(self.wake)
        self.commits.on_committed = self._on_committed
        self.stream_id = 0
        self.read_session_id = ""
        self.closing = False
        self._outbox: list[Any] = []
        self._acks: list[Any] = []
        """DirectReadAcks to send, in the order the reads arrived (ahead of ``_outbox``)."""
        self.partitions = PartitionSessions(
            settings,
            self._selectors,
            buffer=self.buffer,
            commits=self.commits,
            send=self._send,
            wake=self.wake,
            log_fields=lambda: self.log_fields,
            on_closed=lambda session: self._report.partition_closed(session.id),
        )
        self.sessions = self.partitions.sessions
        self._stream_error: BaseException | None = None
        self._stream_scope: anyio.CancelScope | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        """The current stream's tasks (a backward seek's reading joins them)."""
        self._restart: str | None = None
        """Why ``restart`` ended the current stream, until the keeper opens the next one."""
        self._replaced: list[PartitionSession] = []
        """Partition sessions ended by ``restart`` whose stop is still to be reported."""
        self._direct_refused: str | None = None
        """Why the server does not offer direct read (None: not found out); asked no more then."""
        self._direct: DirectReads | None = None
        """The current stream's direct reads (None: the stream reads the ordinary way)."""
        self._held_stops: dict[int, tuple[int, Any]] = {}
        """Partition session id -> (last direct read id, graceful stop) until that read arrived."""
        buffer = self.buffer
        self._report = reader_report(
            context.metrics, settings.consumer or "", lambda: (self._buffered_messages(), buffer.buffered_bytes)
        )
        self.log_fields = reader_fields(self._selectors[0].path, settings.consumer)
        """The ``extra`` of this reader's log records (updated by each handshake)."""
        self.keeper = StreamKeeper(
            self._describe,
            self._retry,
            logger=logger,
            log_fields=lambda: self.log_fields,
            on_reconnect=self._report.reconnect,
            closing=lambda: self.closing,
        )

    def _describe(self) -> str:
        consumer = f"consumer {self._settings.consumer!r}" if self._settings.consumer else "no consumer"
        session = f", session {self.read_session_id}" if self.read_session_id else ""
        return f"topic reader ({consumer}{session})"

    def _buffered_messages(self) -> int:
        return self.buffer.messages

    # --- reconnect loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Read until closed; raise the error that ended reading for good."""
        try:
            await self.keeper.run(self._session)
        finally:
            # Closed or failed: take this reader's share out of the gauge shared by its consumer.
            self._report.closed()

    async def _session(self) -> None:
        """One stream, and the partition sessions that end with it."""
        self.stream_id += 1
        try:
            await self._run_stream()
            error: BaseException = ConnectionLostError("the server ended the read stream")
        except asyncio.CancelledError:
            self._end_stream(PartitionSessionClosedError("the reader was closed"))
            raise
        except Exception as exc:
            error = exc
        lost = self._replaced + self._end_stream(
            PartitionSessionClosedError(f"the read stream was lost ({error}): commit no longer possible")
        )
        self._replaced = []
        if not self.closing:
            for session in lost:
                await self.partitions.notify_stop(session)
        restart, self._restart = self._restart, None
        if restart is not None:
            raise RestartStream(f"{restart}; reading again from the committed offsets")
        raise error

    def _init_request(self) -> Any:
        s = self._settings
        request = pb.StreamReadMessage.FromClient()
        init = request.init_request
        init.consumer = s.consumer or ""
        init.reader_name = self._reader_name
        init.auto_partitioning_support = s.auto_partitioning_support
        init.partition_max_in_flight_bytes = s.partition_max_in_flight_bytes or 0
        init.direct_read = s.direct_read and self._direct_refused is None
        for selector in self._selectors:
            item = init.topics_read_settings.add(path=selector.path, partition_ids=selector.partition_ids)
            if selector.read_from is not None:
                item.read_from.FromDatetime(selector.read_from)
            if selector.max_lag is not None:
                item.max_lag.FromTimedelta(selector.max_lag)
        return request

    async def _run_stream(self) -> None:
        stream, response = await BidiStream.open(
            self._transport,
            STREAM_READ,
            self._init_request(),
            expect="init_response",
            timeout=self._settings.init_timeout,
            deserializer=self._parser,
        )
        try:
            self.read_session_id = response.init_response.session_id
            self.log_fields = reader_fields(self._selectors[0].path, self._settings.consumer, self.read_session_id)
            logger.debug(
                "topic reader: session %s started (stream %d, consumer %r)",
                self.read_session_id, self.stream_id, self._settings.consumer, extra=self.log_fields,
            )
            self.keeper.connected(self.read_session_id)
            self._parser.forget()
            credit = self.buffer.reset()
            await stream.write(pb.StreamReadMessage.FromClient(read_request={"bytes_size": credit}))
            self._stream_error = None
            asked = self._settings.direct_read and self._direct_refused is None
            self._direct = self._direct_reads() if asked else None
            async with anyio.create_task_group() as tg:
                self._stream_scope = tg.cancel_scope
                self._task_group = tg
                if self._direct is not None:
                    tg.start_soon(self._guard, self._run_direct, stream, tg.cancel_scope)
                tg.start_soon(self._guard, self._receive_loop, stream, tg.cancel_scope)
                tg.start_soon(self._guard, self._send_loop, stream, tg.cancel_scope)
                if self._settings.token_refresh_interval > 0 and tokens_may_change(self._transport):
                    tg.start_soon(self._guard, self._token_loop, stream, tg.cancel_scope)
            if self._stream_error is not None:
                raise self._stream_error
        finally:
            self._stream_scope = None
            self._task_group = None
            self._direct = None
            self._held_stops.clear()
            stream.close()

    def restart(self, reason: str) -> None:
        """End the current stream and open a new one at once, so that the server delivers
        again everything not committed (after a failed transaction that read from it)."""
        scope = self._stream_scope
        if scope is None or self.closing or self._stream_error is not None:
            return
        self._stream_error = ConnectionLostError(reason)
        self._restart = reason
        # The reader task ends the stream only when it next runs; until then a read would still
        # get the old stream's buffered messages, whose offsets no longer continue from the
        # committed ones. End its partition sessions and drop its buffer now.
        ended = PartitionSessionClosedError(f"the read stream was replaced ({reason}): commit no longer possible")
        self._replaced.extend(self._end_stream(ended))
        scope.cancel()

    async def _guard(
        self, fn: Callable[[ReadStream], Awaitable[None]], stream: ReadStream, scope: anyio.CancelScope
    ) -> None:
        try:
            await fn(stream)
        except Exception as exc:
            if self._stream_error is None:
                self._stream_error = exc
            scope.cancel()

    def _end_stream(self, error: BaseException) -> list[PartitionSession]:
        """Close every session of the ended stream; return them."""
        self.buffer.reset()  # first: it brings the sessions up to date with what was handed out
        lost = self.partitions.end_all(error)
        self._outbox.clear()
        self._acks.clear()
        self.commits.take_request()
        return lost

    # --- receiving ---------------------------------------------------------------------------

    async def _receive_loop(self, stream: ReadStream) -> None:
        commits = self.commits
        sessions = self.sessions
        partitions = self.partitions
        keeper = self.keeper
        report = self._report
        parser = self._parser
        while True:
            message = await stream.read()
            kind = message.WhichOneof("server_message")
            if kind == "read_response":
                self._on_read_response(message.read_response, parser.payloads_of(message))
                keeper.progressed()
            elif kind == "commit_offset_response":
                for item in message.commit_offset_response.partitions_committed_offsets:
                    session = sessions.get(item.partition_session_id)
                    if session is not None:
                        commits.on_ack(session, item.committed_offset)
                        if report.recording:
                            committed = session.committed_offset
                            received_past = max(0, session._bookkeeping.next_commit_start - committed)
                            report.commit_acked(session.topic_path, session.partition_id, committed, received_past)
                        if waits_for_drain_or_commits(session):
                            self.wake.set()
            elif kind == "start_partition_session_request":
                request = message.start_partition_session_request
                await partitions.on_start(request)
                direct = self._direct
                if direct is not None:
                    if request.HasField("partition_location"):
                        location = request.partition_location
                        psid = request.partition_session.partition_session_id
                        direct.add(psid, location.node_id, location.generation)
                    else:
                        # The server ignored the flag: its data comes on this stream, as usual.
                        self._direct = None
                        self._refuse_direct("partitions start without a location", restart=False)
                if report.recording:
                    started = sessions.get(request.partition_session.partition_session_id)
                    if started is not None:
                        self._report_progress(started)
            elif kind == "stop_partition_session_request":
                await self._on_stop(message.stop_partition_session_request)
            elif kind == "end_partition_session":
                partitions.on_end(message.end_partition_session)
            elif kind == "update_partition_session":
                update = message.update_partition_session
                logger.debug(
                    "topic reader: partition session %d updated", update.partition_session_id, extra=self.log_fields
                )
                if self._direct is not None and update.HasField("partition_location"):
                    location = update.partition_location
                    self._direct.move(update.partition_session_id, location.node_id, location.generation)
            elif kind == "partition_session_status_response":
                status = message.partition_session_status_response
                partitions.on_status(status)
                if report.recording and status.partition_session_id in sessions:
                    self._report_progress(sessions[status.partition_session_id])
            elif kind == "update_token_response":
                pass
            else:
                logger.debug("topic reader: ignoring server message %s", kind, extra=self.log_fields)

    def _on_read_response(self, response: Any, external: ExternalPayloads | None) -> None:
        self._on_data(response.bytes_size, response.partition_data, external)

    def _on_data(self, total: int, parts: Sequence[Any], external: ExternalPayloads | None) -> None:
        """Data received (``parts``: PartitionData, ``total``: the bytes_size the credit paid).

        Nothing per message here: a part's messages stay as received until a receive takes
        them (see ``parts``); only compressed batches are looked into, for the size their
        payloads decode to. ``external``: the large payloads the parser left in the received
        bytes (see ``parsing``)."""
        buffer = self.buffer
        buffer.charge(total)
        count = len(parts)
        share = total // count if count else 0
        decoders = self._settings.decoder_table
        report = self._report
        kept = charged = largest = 0  # what the buffer learns its credit from (see ``ReadBuffer.measured``)
        for index, part in enumerate(parts):
            nbytes = share if index < count - 1 else total - share * (count - 1)
            session = self.sessions.get(part.partition_session_id)
            if session is None:
                continue
            books = session._bookkeeping
            if books.state is not PartitionSessionState.ACTIVE:
                continue  # data of a session already stopped: nobody reads it
            batches, messages, compressed = server_batches(part, external, index, decoders)
            if not messages:
                continue
            start = books.next_commit_start
            end = batches[-1].records[-1].offset + 1
            skip = books.skip_to
            if skip:  # a forward seek past what had been received: drop what it passed over
                if end > skip:
                    books.skip_to = 0
                else:
                    end = skip
            books.next_commit_start = end
            buffered = BufferedPart(session, batches, messages, nbytes, start, compressed)
            kept += nbytes
            charged += buffered.charge
            if buffered.share > largest:
                largest = buffered.share
            if skip:
                buffered.skip_to(skip)
                if not buffered.left:
                    continue  # all of it passed over: its bytes go back with the credit below
            buffer.push(buffered)
            if report.recording:  # only then: the payload sizes are summed over the part's messages
                report.received(session.topic_path, session.partition_id, messages, buffered.payload_bytes())
                self._report_progress(session)
        buffer.measured(kept, charged, largest)
        buffer.release(0)  # the bytes of parts nobody reads may be granted again
        report.buffer_changed()

    # --- direct read (see ``direct``) ----------------------------------------------------------

    def _direct_reads(self) -> DirectReads:
        s = self._settings
        return DirectReads(
            self._transport,
            read_session_id=self.read_session_id,
            consumer=s.consumer,
            paths=[selector.path for selector in self._selectors],
            retry=self._retry,
            init_timeout=s.init_timeout,
            token_refresh_interval=s.token_refresh_interval,
            deliver=self._on_direct_read,
            unsupported=lambda reason: self._refuse_direct(reason, restart=True),
            log_fields=lambda: self.log_fields,
        )

    async def _run_direct(self, stream: ReadStream) -> None:
        del stream  # the direct reads' acknowledgements go through the sender
        direct = self._direct
        if direct is not None:
            await direct.run()

    def _refuse_direct(self, reason: str, *, restart: bool) -> None:
        """The server does not offer direct read: read the ordinary way from now on (``restart``:
        open the stream again without asking for it, since this one sends no data)."""
        if self._direct_refused is None:
            self._direct_refused = reason
            logger.warning(
                "topic reader: the server does not offer direct read (%s); reading through the read stream",
                reason, extra=self.log_fields,
            )
        if restart:
            self.restart("direct read is not offered")

    async def _on_direct_read(
        self, partition_session_id: int, direct_read_id: int, bytes_size: int, data: Any,
        external: ExternalPayloads | None,
    ) -> None:
        """A direct read arrived: acknowledged (in the order received) and buffered as if the
        read stream had brought it; a graceful stop waiting for it goes ahead."""
        self._acks.append(pb.StreamReadMessage.FromClient(direct_read_ack={
            "partition_session_id": partition_session_id, "direct_read_id": direct_read_id
        }))
        self.wake.set()
        self._on_data(bytes_size, (data,), external)
        self.keeper.progressed()
        held = self._held_stops.get(partition_session_id)
        if held is not None and direct_read_id >= held[0]:
            del self._held_stops[partition_session_id]
            await self.partitions.on_stop(held[1])

    async def _on_stop(self, request: Any) -> None:
        """StopPartitionSessionRequest. Reading directly, a graceful stop waits until the last read
        it names (``last_direct_read_id``) arrived, since data and stop come on different streams;
        a non-graceful stop (which follows a confirmed graceful one too) is answered, as the
        server releases the partition only then."""
        direct = self._direct
        if direct is None:
            await self.partitions.on_stop(request)
            return
        psid = request.partition_session_id
        if request.graceful:
            if direct.received(psid) < request.last_direct_read_id:
                self._held_stops[psid] = (request.last_direct_read_id, request)
                return
            await self.partitions.on_stop(request)
            return
        self._held_stops.pop(psid, None)
        direct.remove(psid)
        if self._settings.consumer is not None:  # without one, YDB forbids the answer
            self._send(pb.StreamReadMessage.FromClient(
                stop_partition_session_response={"partition_session_id": psid, "graceful": False}
            ))
        await self.partitions.on_stop(request)

    # --- sending -----------------------------------------------------------------------------

    def _send(self, message: Any) -> None:
        self._outbox.append(message)
        self.wake.set()

    def _on_drained(self, session: PartitionSession) -> None:
        self.partitions.on_drained(session)

    async def _send_loop(self, stream: ReadStream) -> None:
        wake = self.wake
        buffer = self.buffer
        partitions = self.partitions
        while True:
            if not wake.is_set():
                # A graceful stop waiting for commits is confirmed anyway at its deadline.
                with contextlib.suppress(TimeoutError):
                    await wait_within(wake.wait(), partitions.stop_timeout())
            wake.clear()
            # What lets the server send more goes first: each write waits for the one before it
            # to complete, and meanwhile a receive may hand out a whole batch without yielding.
            acks, self._acks = self._acks, []
            for ack in acks:
                await stream.write(ack)
            if buffer.credit_ready:
                credit = buffer.take_credit()
                if credit > 0:
                    await stream.write(pb.StreamReadMessage.FromClient(read_request={"bytes_size": credit}))
                    self._report.buffer_changed()
            stopped, freed = partitions.due()
            # Then commits: the server applies them before it releases a stopped session.
            commit = self.commits.take_request()
            if commit is not None:
                if self._report.recording:  # before the write: its answer may be handled before it returns
                    for item in commit.commit_offset_request.commit_offsets:
                        self._report.commit_sent(item.partition_session_id, item.offsets[-1].end)
                await stream.write(commit)
            for session in stopped:
                partitions.confirm_stop(session)
            outbox, self._outbox = self._outbox, []
            for message in outbox:
                await stream.write(message)
            await partitions.finish(stopped, freed)

    async def _token_loop(self, stream: ReadStream) -> None:
        del stream  # the sender writes the update, so writes to the stream never interleave
        await refresh_tokens(
            self._transport,
            self._settings.token_refresh_interval,
            lambda token: self._send(pb.StreamReadMessage.FromClient(update_token_request={"token": token})),
            describe=self._describe,
            logger=logger,
            log_fields=lambda: self.log_fields,
        )

    def _report_progress(self, session: PartitionSession) -> None:
        """Tell the metrics the partition's end, as far as this reader knows it (the end when the
        session started or at its last status, or past the last message received), and its
        committed offset: the consumer lag between them."""
        books = session._bookkeeping
        if books.state is PartitionSessionState.CLOSED:
            return  # a late acknowledgement (of a transaction) must not bring its share back
        end = books.next_commit_start
        if books.partition_end_offset > end:
            end = books.partition_end_offset
        self._report.partition_progress(
            session.id, session.topic_path, session.partition_id, end, books.committed_offset
        )

    # --- commits acknowledged ---------------------------------------------------------------

    def _on_committed(self, session: PartitionSession) -> None:
        self.buffer.release_in_flight(session)
        if self._report.recording:
            self._report_progress(session)
        observer = self._settings.on_commit
        if observer is not None:
            try:
                observer(CommitAck(session, session.committed_offset))
            except Exception:
                # An observer's bug must not end reading (or fail the transaction that committed).
                logger.exception("topic reader: on_commit raised; ignored", extra=self.log_fields)

    # --- seeking (see ``seeking``) ---------------------------------------------------------------

    def seek(self, session: PartitionSession, offset: int) -> SkippedOffsets | None:
        """Hand out ``session``'s messages from ``offset`` on (checked by the caller: at least the
        committed offset, at most the partition's end); return what a forward seek passed over."""
        buffer = self.buffer
        buffer.settle()
        resume = position_of(session)
        books = session._bookkeeping
        if books.replay is not None:
            books.replay.cancel()
        if offset >= resume:
            buffer.skip_to(session, offset)
            if offset > books.next_commit_start:
                books.skip_to = offset
                books.next_commit_start = offset
            books.delivered_end = offset
            logger.debug("topic reader: %r sought forward to %d", session, offset, extra=self.log_fields)
            return SkippedOffsets(session, resume, offset) if offset > resume else None
        group = self._task_group
        if group is None:
            raise PartitionSessionClosedError(f"{session!r} has ended: its stream is gone")
        replay = Replay(
            session,
            offset,
            resume,
            buffer=buffer,
            window=min(REPLAY_WINDOW, buffer.buffer_size),
            open_side=self._side_read,
            failed=self._replay_failed,
        )
        books.replay = replay
        books.hold = True
        buffer.forget_in_flight(session, offset)
        buffer.paused_changed(session)
        group.start_soon(replay.run, name=f"topic reader replay {session.topic_path}:{session.partition_id}")
        logger.debug("topic reader: %r sought back to %d (reading %r)", session, offset, replay, extra=self.log_fields)
        return None

    def _side_read(self, session: PartitionSession, start: int, read_from: dt.datetime | None = None) -> SideRead:
        selector = next((s for s in self._selectors if s.path == session.topic_path), None)
        if selector is not None and selector.read_from is not None:
            # What the session itself skips (written before the selector's read_from) stays skipped.
            read_from = selector.read_from if read_from is None else max(read_from, selector.read_from)
        return SideRead(
            self._transport,
            session.topic_path,
            session.partition_id,
            start,
            # The first grant, in bytes on the wire: a window's worth once decoded.
            window=max(1, int(min(REPLAY_WINDOW, self.buffer.buffer_size) / self.buffer.ratio)),
            decoders=self._settings.decoder_table,
            reader_name=self._reader_name,
            init_timeout=self._settings.init_timeout,
            read_from=read_from,
            max_lag=None if selector is None else selector.max_lag,
        )

    def _replay_failed(self, replay: Replay, error: BaseException) -> None:
        logger.warning(
            "topic reader: reading %r again after a seek failed (%r); reading everything uncommitted again",
            replay.session, error, extra=self.log_fields,
        )
        self.restart(f"reading {replay.session!r} again after a seek failed ({error!r})")

    async def first_offset_since(self, session: PartitionSession, start: int, when: dt.datetime) -> int | None:
        """The offset of ``session``'s first message from ``start`` on written at ``when`` or
        later (None: the partition ended before one)."""
        async with self._side_read(session, start, when) as side:
            got = await side.next_part()
        if got is None:
            return None
        offset: int = got[0][0].records[0].offset
        return offset

    # --- status and closing ----------------------------------------------------------------------

    def request_status(self, session: PartitionSession) -> asyncio.Future[PartitionStatus]:
        return self.partitions.request_status(session)

    def close_waiters(self) -> list[asyncio.Future[None]]:
        """Futures resolving when the commits requested so far that can advance are acknowledged."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[None]] = []
        for session in self.sessions.values():
            reach, gap = CommitTracker.scan(session)
            if gap is not None:
                # Nothing will commit the gap any more: waiting for these acks would never end.
                logger.warning(
                    "topic reader: commits of %s past offset %d cannot be acknowledged: offsets %d..%d were"
                    " never committed (%s)",
                    session, reach, gap[0], gap[1] - 1, GAP_ADVICE, extra=self.log_fields,
                )
            if reach > session.committed_offset:
                future: asyncio.Future[None] = loop.create_future()
                session._bookkeeping.ack_waiters.append((reach, future))
                futures.append(future)
        return futures
