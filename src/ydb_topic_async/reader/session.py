"""The read stream and its reconnection, and the partition session lifecycle.

``ReaderConnection.run`` opens a StreamRead, runs it until it breaks, and on a retriable error
opens a new one after a backoff. Everything tied to a stream dies with it: partition sessions
(so their messages can no longer be committed), buffered messages (the server delivers the
uncommitted ones again), pending commit acknowledgements. Within a stream three tasks run: the
receiver (server messages, decoding), the sender (the only writer to the stream: commits, credit,
partition session answers, token updates) and the token refresher.

Partition sessions: a start is answered (with the offsets ``on_partition_start`` returns); a
graceful stop is answered once the session's buffered messages were handed out and the commits
of everything handed out were acknowledged (or ``graceful_stop_timeout`` passed); a non-graceful
stop drops the session's buffered messages at once. For auto-partitioned topics a partition's
children are started only once the ended parent was fully handed out and committed.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import grpc
import grpc.aio

from .. import _codecs
from .._errors import (
    ConnectionLostError,
    PartitionSessionClosedError,
    error_from_grpc,
    error_from_status,
)
from .._proto import ydb_status_codes_pb2
from .._proto import ydb_topic_pb2 as pb
from .._retry import RetryPolicy, as_ydb_error
from ..observability.logging import reader_fields, sdk_logger
from ..observability.metrics import GaugeShare
from .commits import GAP_ADVICE, CommitTracker
from .flow_control import ReadBuffer
from .messages import (
    PartitionSession,
    PartitionSessionState,
    PartitionStatus,
    StartOffsets,
    TopicMessage,
    TopicSelector,
    _ServerBatchInfo,
    timestamp_to_datetime,
)

logger = sdk_logger("reader")

_METHOD = "/Ydb.Topic.V1.TopicService/StreamRead"
_SUCCESS = ydb_status_codes_pb2.StatusIds.SUCCESS
_RAW_CODECS = (0, _codecs.Codec.RAW)
_HEALTHY_AFTER = 5.0
"""A stream that lived this long (or delivered data) resets the retry attempt count."""

StartResult = int | StartOffsets | None
OnPartitionStart = Callable[[PartitionSession], StartResult | Awaitable[StartResult]]
OnPartitionStop = Callable[[PartitionSession], Awaitable[None] | None]
_Key = tuple[str, int]


@dataclass
class ReaderSettings:
    selectors: Sequence[TopicSelector]
    consumer: str | None
    decoders: Mapping[int, _codecs.Transform]
    on_partition_start: OnPartitionStart | None
    on_partition_stop: OnPartitionStop | None
    retry: RetryPolicy
    reader_name: str
    auto_partitioning_support: bool
    graceful_stop_timeout: float
    token_refresh_interval: float
    init_timeout: float


def _waits_for_drain_or_commits(session: PartitionSession) -> bool:
    """Whether the stream's sender must look at ``session`` again once its buffered messages were
    taken or its commits acknowledged: a graceful stop to confirm, or an ended parent to release."""
    return session.state is PartitionSessionState.STOPPING or session.ended


async def _call_user(fn: Callable[[PartitionSession], Any], session: PartitionSession) -> Any:
    result = fn(session)
    if inspect.isawaitable(result):
        result = await result
    return result


class ReaderConnection:
    """Reconnecting StreamRead: owns the per-stream state and the partition sessions."""

    def __init__(self, driver: Any, settings: ReaderSettings, buffer_size: int, release_threshold: int) -> None:
        self._driver = driver
        self._settings = settings
        self.wake = asyncio.Event()
        self.buffer = ReadBuffer(buffer_size, release_threshold, self._on_drained, self.wake)
        self.commits = CommitTracker(self.wake)
        self.stream_id = 0
        self.read_session_id = ""
        self.sessions: dict[int, PartitionSession] = {}
        self.closing = False
        self._outbox: list[Any] = []
        self._stopping: set[PartitionSession] = set()
        self._ended: set[PartitionSession] = set()
        self._gates: dict[_Key, set[PartitionSession]] = {}
        """Child partition -> its ended parents in this stream that are not finished yet."""
        self._deferred: list[PartitionSession] = []
        self._status_waiters: dict[int, list[asyncio.Future[PartitionStatus]]] = {}
        self._resume: dict[_Key, int] = {}
        """Without a consumer: where each partition continues after a reconnect."""
        self._start_offsets: dict[_Key, int] = {}
        for selector in settings.selectors:
            for pid, offset in (selector.start_offsets or {}).items():
                self._start_offsets[(selector.path, pid)] = offset
        self._token: str | None = None
        self._stream_error: BaseException | None = None
        self._healthy = False
        self._stream_scope: anyio.CancelScope | None = None
        self._restart_requested = False
        self._replaced: list[PartitionSession] = []
        """Partition sessions ended by ``restart`` whose stop is still to be reported."""
        self._metrics = driver._metrics
        self._consumer_label = settings.consumer or ""
        self._buffer_share = GaugeShare()
        """With metrics: this reader's part of its consumer's buffer gauge."""
        self.log_fields = reader_fields(settings.selectors[0].path, settings.consumer)
        """The ``extra`` of this reader's log records (updated by each handshake)."""

    # --- reconnect loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Read until closed; raise the error that ended reading for good."""
        try:
            await self._run()
        finally:
            if self._metrics is not None:
                # Closed or failed: take this reader's share out of the gauge shared by its consumer.
                self._report_buffer(self._metrics, 0, 0)

    async def _run(self) -> None:
        attempt = 0
        started = time.monotonic()
        while True:
            self.stream_id += 1
            self._healthy = False
            stream_started = time.monotonic()
            try:
                await self._run_stream()
                error: BaseException = ConnectionLostError("the server ended the read stream")
            except asyncio.CancelledError:
                self._end_stream(PartitionSessionClosedError("the reader was closed"))
                raise
            except Exception as exc:
                error = as_ydb_error(exc) or exc
            lost = self._replaced + self._end_stream(
                PartitionSessionClosedError(f"the read stream was lost ({error}): commit no longer possible")
            )
            self._replaced = []
            if self.closing:
                return
            for session in lost:
                await self._notify_stop(session)
            if self._restart_requested:
                self._restart_requested = False
                attempt = 0
                started = time.monotonic()
                logger.info("topic reader: %s; reading again from the committed offsets", error)
                continue
            if self._healthy or time.monotonic() - stream_started >= _HEALTHY_AFTER:
                attempt = 0
                started = time.monotonic()
            attempt += 1
            delay = self._settings.retry.next_delay(error, attempt, started, idempotent=True)
            if delay is None:
                raise error
            logger.warning(
                "topic reader: session %s failed (%s); reconnecting in %.3fs",
                self.read_session_id, error, delay, extra=self.log_fields,
            )
            if self._metrics is not None:
                self._metrics.reader_reconnect(self._consumer_label, error)
            await anyio.sleep(delay)

    def _init_request(self) -> Any:
        s = self._settings
        request = pb.StreamReadMessage.FromClient()
        init = request.init_request
        init.consumer = s.consumer or ""
        init.reader_name = s.reader_name
        init.auto_partitioning_support = s.auto_partitioning_support
        for selector in s.selectors:
            item = init.topics_read_settings.add(path=selector.path, partition_ids=selector.partition_ids)
            if selector.read_from is not None:
                item.read_from.FromDatetime(selector.read_from)
            if selector.max_lag is not None:
                item.max_lag.FromTimedelta(selector.max_lag)
        return request

    async def _run_stream(self) -> None:
        self._token = await self._driver._auth_token()
        call = await self._driver._open_stream(
            _METHOD, pb.StreamReadMessage.FromClient, pb.StreamReadMessage.FromServer
        )
        try:
            try:
                await call.write(self._init_request())
                with anyio.fail_after(self._settings.init_timeout):
                    response = await self._read(call)
                if response.WhichOneof("server_message") != "init_response":
                    raise ConnectionLostError(f"expected an init response, got {response.WhichOneof('server_message')}")
                self.read_session_id = response.init_response.session_id
                self.log_fields = reader_fields(
                    self._settings.selectors[0].path, self._settings.consumer, self.read_session_id
                )
                logger.debug(
                    "topic reader: session %s started (stream %d, consumer %r)",
                    self.read_session_id, self.stream_id, self._settings.consumer, extra=self.log_fields,
                )
                credit = self.buffer.reset()
                await call.write(pb.StreamReadMessage.FromClient(read_request={"bytes_size": credit}))
            except grpc.aio.AioRpcError as exc:
                raise error_from_grpc(exc) from None
            except TimeoutError:
                raise ConnectionLostError(
                    f"no init response within {self._settings.init_timeout}s"
                ) from None
            self._stream_error = None
            async with anyio.create_task_group() as tg:
                self._stream_scope = tg.cancel_scope
                tg.start_soon(self._guard, self._receive_loop, call, tg.cancel_scope)
                tg.start_soon(self._guard, self._send_loop, call, tg.cancel_scope)
                if self._settings.token_refresh_interval > 0:
                    tg.start_soon(self._guard, self._token_loop, call, tg.cancel_scope)
            if self._stream_error is not None:
                raise self._stream_error
        finally:
            self._stream_scope = None
            call.cancel()

    def restart(self, reason: str) -> None:
        """End the current stream and open a new one at once, so that the server delivers
        again everything not committed (after a failed transaction that read from it)."""
        scope = self._stream_scope
        if scope is None or self.closing or self._stream_error is not None:
            return
        self._stream_error = ConnectionLostError(reason)
        self._restart_requested = True
        # The reader task ends the stream only when it next runs; until then a read would still
        # get the old stream's buffered messages, whose offsets no longer continue from the
        # committed ones. End its partition sessions and drop its buffer now.
        ended = PartitionSessionClosedError(f"the read stream was replaced ({reason}): commit no longer possible")
        self._replaced.extend(self._end_stream(ended))
        scope.cancel()

    async def _guard(self, fn: Callable[[Any], Awaitable[None]], call: Any, scope: anyio.CancelScope) -> None:
        try:
            await fn(call)
        except Exception as exc:
            if isinstance(exc, grpc.aio.AioRpcError):
                exc = error_from_grpc(exc)
            elif isinstance(exc, asyncio.InvalidStateError):
                # Sending on a call the server has just ended: the stream broke, reconnect.
                exc = ConnectionLostError(f"read stream broke while sending: {exc}")
            if self._stream_error is None:
                self._stream_error = exc
            scope.cancel()

    async def _read(self, call: Any) -> Any:
        message = await call.read()
        if message is grpc.aio.EOF:
            code = await call.code()
            details = await call.details()
            if code is None or code == grpc.StatusCode.OK:
                raise ConnectionLostError("the server ended the read stream")
            raise error_from_grpc(grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details))
        status = message.status
        if status and status != _SUCCESS:
            raise error_from_status(status, message.issues, "read stream")
        return message

    def _end_stream(self, error: BaseException) -> list[PartitionSession]:
        """Close every session of the ended stream; return them."""
        lost = list(self.sessions.values())
        for session in lost:
            self._close_session(session, error, drop=False)
        self.sessions.clear()
        self.buffer.reset()
        self._outbox.clear()
        self._stopping.clear()
        self._ended.clear()
        self._gates.clear()
        self._deferred.clear()
        self.commits.take_request()
        return lost

    # --- receiving ---------------------------------------------------------------------------

    async def _receive_loop(self, call: Any) -> None:
        commits = self.commits
        sessions = self.sessions
        while True:
            message = await self._read(call)
            kind = message.WhichOneof("server_message")
            if kind == "read_response":
                await self._on_read_response(message.read_response)
                self._healthy = True
            elif kind == "commit_offset_response":
                for item in message.commit_offset_response.partitions_committed_offsets:
                    session = sessions.get(item.partition_session_id)
                    if session is not None:
                        commits.on_ack(session, item.committed_offset)
                        if self._metrics is not None:
                            committed = session.committed_offset
                            self._metrics.reader_commit_ack(
                                session.topic_path,
                                session.partition_id,
                                committed,
                                max(0, session._next_commit_start - committed),
                            )
                        if _waits_for_drain_or_commits(session):
                            self.wake.set()
            elif kind == "start_partition_session_request":
                await self._on_start(message.start_partition_session_request)
            elif kind == "stop_partition_session_request":
                await self._on_stop(message.stop_partition_session_request)
            elif kind == "end_partition_session":
                self._on_end(message.end_partition_session)
            elif kind == "update_partition_session":
                update = message.update_partition_session
                logger.debug(
                    "topic reader: partition session %d updated", update.partition_session_id, extra=self.log_fields
                )
            elif kind == "partition_session_status_response":
                self._on_status(message.partition_session_status_response)
            elif kind == "update_token_response":
                pass
            else:
                logger.debug("topic reader: ignoring server message %s", kind, extra=self.log_fields)

    async def _on_read_response(self, response: Any) -> None:
        buffer = self.buffer
        total = response.bytes_size
        buffer.charge(total)
        parts = response.partition_data
        count = len(parts)
        if not count:
            buffer.release(total)
            return
        share = total // count
        accepted: list[tuple[Any, PartitionSession, int]] = []
        for index, part in enumerate(parts):
            nbytes = share if index < count - 1 else total - share * (count - 1)
            session = self.sessions.get(part.partition_session_id)
            if session is None or session.state is not PartitionSessionState.ACTIVE:
                buffer.release(nbytes)  # data of a session already stopped: nobody reads it
                continue
            accepted.append((part, session, nbytes))
        decoded = await self._decode([part for part, _, _ in accepted])
        position = 0
        for part, session, nbytes in accepted:
            messages: list[TopicMessage] = []
            append = messages.append
            start = session._next_commit_start
            for batch in part.batches:
                info = _ServerBatchInfo(batch)
                records = batch.message_data
                if info.codec in _RAW_CODECS:
                    for record in records:
                        offset = record.offset
                        append(TopicMessage(record.data, offset, record.seq_no, info, record, session, start))
                        start = offset + 1
                else:
                    end = position + len(records)
                    for record, data in zip(records, decoded[position:end], strict=True):
                        offset = record.offset
                        append(TopicMessage(data, offset, record.seq_no, info, record, session, start))
                        start = offset + 1
                    position = end
            if session.closed:
                buffer.release(nbytes)
                continue
            session._next_commit_start = start
            if messages:
                buffer.push(session, messages, nbytes)
                if self._metrics is not None:
                    self._metrics.reader_messages(
                        session.topic_path, session.partition_id, len(messages), sum(len(m.data) for m in messages)
                    )
            else:
                buffer.release(nbytes)
        if self._metrics is not None:
            self._record_buffer(self._metrics)

    def _record_buffer(self, metrics: Any) -> None:
        messages = sum(session._buffered for session in self.sessions.values())
        self._report_buffer(metrics, messages, self.buffer.buffered_bytes)

    def _report_buffer(self, metrics: Any, messages: int, nbytes: int) -> None:
        self._buffer_share.report(metrics.reader_buffer_change, self._consumer_label, messages, nbytes)

    async def _decode(self, parts: Sequence[Any]) -> list[bytes]:
        """The decoded payloads of every compressed batch of ``parts``, in order.

        Decided for the whole response, like the writer's encoding: one made of many small
        batches (many producers) costs as much loop time as one large batch. Inline when there
        is little to do; otherwise in worker threads, split into chunks that decode in parallel.
        """
        decoders = self._settings.decoders
        payloads: list[bytes] = []
        sizes: list[int] = []
        runs: list[tuple[int, int, _codecs.Transform]] = []  # per batch: its range of payloads, its decoder
        for part in parts:
            for batch in part.batches:
                if batch.codec in _RAW_CODECS:
                    continue
                fn = _codecs.lookup(decoders, batch.codec, "decoder")
                first = len(payloads)
                for record in batch.message_data:
                    data = record.data
                    payloads.append(data)
                    # The work is in producing the output: judge by the size the writer
                    # declared, as a highly compressible payload is small on the wire.
                    sizes.append(max(len(data), record.uncompressed_size))
                runs.append((first, len(payloads), fn))
        if not payloads:
            return payloads
        total = sum(sizes)
        if _codecs.fits_inline(total, len(payloads)):
            return _decode_span(runs, payloads, 0, len(payloads))
        bounds = _codecs.split_evenly(sizes, total)
        results: list[list[bytes]] = [[] for _ in bounds]
        failures: list[BaseException] = []

        async def decode_chunk(index: int, start: int, end: int) -> None:
            try:
                results[index] = await _codecs.run_in_codec_thread(_decode_span, runs, payloads, start, end)
            except Exception as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            for index, (start, end) in enumerate(bounds):
                tg.start_soon(decode_chunk, index, start, end)
        if failures:
            raise failures[0]
        return [data for chunk in results for data in chunk]

    # --- partition sessions ------------------------------------------------------------------

    async def _on_start(self, request: Any) -> None:
        info = request.partition_session
        session = PartitionSession(
            info.partition_session_id,
            info.path,
            info.partition_id,
            request.committed_offset,
            request.partition_offsets.start,
            request.partition_offsets.end,
        )
        self.sessions[session.id] = session
        if self._gates.get((session.topic_path, session.partition_id)):
            logger.debug("topic reader: %r waits for its parent partitions", session, extra=self.log_fields)
            self._deferred.append(session)
            return
        await self._confirm_start(session)

    async def _confirm_start(self, session: PartitionSession) -> None:
        key = (session.topic_path, session.partition_id)
        read_offset: int | None = None
        commit_offset: int | None = None
        if self._settings.consumer is None:
            read_offset = self._resume.get(key, self._start_offsets.get(key))
        else:
            read_offset = self._start_offsets.get(key)
        callback = self._settings.on_partition_start
        if callback is not None:
            result = await _call_user(callback, session)
            if isinstance(result, StartOffsets):
                if result.read_offset is not None:
                    read_offset = result.read_offset
                commit_offset = result.commit_offset
            elif isinstance(result, int) and not isinstance(result, bool):
                read_offset = result
            elif result is not None:
                raise TypeError(f"on_partition_start must return None, an int or StartOffsets, not {result!r}")
        if session.closed:
            return
        answer = pb.StreamReadMessage.FromClient()
        response = answer.start_partition_session_response
        response.partition_session_id = session.id
        if read_offset is not None:
            response.read_offset = read_offset
        if commit_offset is not None:
            response.commit_offset = commit_offset
            if commit_offset > session.committed_offset:
                session.committed_offset = commit_offset
        # Commit ranges start at the committed offset (so offsets skipped by a later read offset
        # are committed too), or at the read offset when reading without a consumer or
        # re-reading below the committed offset (those commits are no-ops).
        start = session.committed_offset
        if read_offset is not None and (self._settings.consumer is None or read_offset < start):
            start = read_offset
        session._next_commit_start = start
        session._delivered_end = start
        self._send(answer)

    async def _on_stop(self, request: Any) -> None:
        session = self.sessions.get(request.partition_session_id)
        if session is None:
            return
        if request.committed_offset:
            self.commits.on_ack(session, request.committed_offset)
        if request.graceful:
            if session in self._deferred:
                self._deferred.remove(session)
                self._confirm_stop(session)
                await self._notify_stop(session)
            elif session.state is PartitionSessionState.ACTIVE:
                session.state = PartitionSessionState.STOPPING
                session._stop_deadline = time.monotonic() + self._settings.graceful_stop_timeout
                self._stopping.add(session)
                self.wake.set()
            return
        dropped = self.buffer.drop_session(session)
        logger.debug(
            "topic reader: %r stopped by the server, %d buffered messages dropped",
            session, dropped, extra=self.log_fields,
        )
        self._forget(session)
        self._close_session(
            session, PartitionSessionClosedError(f"{session!r} was stopped by the server"), drop=False
        )
        await self._notify_stop(session)

    def _on_end(self, message: Any) -> None:
        session = self.sessions.get(message.partition_session_id)
        if session is None:
            return
        session.ended = True
        session.child_partition_ids = tuple(message.child_partition_ids)
        for child in session.child_partition_ids:
            self._gates.setdefault((session.topic_path, child), set()).add(session)
        self._ended.add(session)
        self.wake.set()

    def _on_drained(self, session: PartitionSession) -> None:
        if _waits_for_drain_or_commits(session):
            self.wake.set()

    def _parent_finished(self, session: PartitionSession) -> bool:
        if session.closed:
            return True
        if session._buffered:
            return False
        return self._settings.consumer is None or session.committed_offset >= session._next_commit_start

    def _release_children(self, parent: PartitionSession) -> list[PartitionSession]:
        """``parent`` no longer holds back its children; return the deferred starts now free."""
        self._ended.discard(parent)
        for child in parent.child_partition_ids:
            gate = self._gates.get((parent.topic_path, child))
            if gate is not None:
                gate.discard(parent)
                if not gate:
                    del self._gates[(parent.topic_path, child)]
        ready = [s for s in self._deferred if not self._gates.get((s.topic_path, s.partition_id))]
        self._deferred = [s for s in self._deferred if s not in ready]
        return ready

    def _forget(self, session: PartitionSession) -> None:
        self._stopping.discard(session)
        if session in self._deferred:
            self._deferred.remove(session)

    def _confirm_stop(self, session: PartitionSession) -> None:
        self._send(
            pb.StreamReadMessage.FromClient(
                stop_partition_session_response={"partition_session_id": session.id, "graceful": True}
            )
        )
        self._forget(session)
        self._close_session(session, PartitionSessionClosedError(f"{session!r} was stopped by the server"), drop=False)

    def _close_session(self, session: PartitionSession, error: BaseException, *, drop: bool) -> None:
        if session.closed:
            return
        if drop:
            self.buffer.drop_session(session)
        session.state = PartitionSessionState.CLOSED
        if self._settings.consumer is None and session._delivered_end > 0:
            self._resume[(session.topic_path, session.partition_id)] = session._delivered_end
        self.sessions.pop(session.id, None)
        self.commits.fail_session(session, error)
        for future in self._status_waiters.pop(session.id, []):
            if not future.done():
                future.set_exception(error)
        self._ended.discard(session)

    async def _notify_stop(self, session: PartitionSession) -> None:
        callback = self._settings.on_partition_stop
        if callback is not None:
            await _call_user(callback, session)

    # --- status ------------------------------------------------------------------------------

    def request_status(self, session: PartitionSession) -> asyncio.Future[PartitionStatus]:
        future: asyncio.Future[PartitionStatus] = asyncio.get_running_loop().create_future()
        self._status_waiters.setdefault(session.id, []).append(future)
        self._send(
            pb.StreamReadMessage.FromClient(partition_session_status_request={"partition_session_id": session.id})
        )
        return future

    def _on_status(self, response: Any) -> None:
        waiters = self._status_waiters.pop(response.partition_session_id, [])
        session = self.sessions.get(response.partition_session_id)
        if session is not None and response.committed_offset > session.committed_offset:
            self.commits.on_ack(session, response.committed_offset)
        status = PartitionStatus(
            partition_start_offset=response.partition_offsets.start,
            partition_end_offset=response.partition_offsets.end,
            committed_offset=response.committed_offset,
            read_offset=response.read_offset,
            write_time_high_watermark=timestamp_to_datetime(response.write_time_high_watermark),
        )
        for future in waiters:
            if not future.done():
                future.set_result(status)

    # --- sending -----------------------------------------------------------------------------

    def _send(self, message: Any) -> None:
        self._outbox.append(message)
        self.wake.set()

    async def _send_loop(self, call: Any) -> None:
        wake = self.wake
        buffer = self.buffer
        while True:
            timeout: float | None = None
            if self._stopping:
                deadline = min(s._stop_deadline or 0.0 for s in self._stopping)
                timeout = max(0.0, deadline - time.monotonic())
            if not wake.is_set():
                with anyio.move_on_after(timeout):
                    await wake.wait()
            wake.clear()
            stopped: list[PartitionSession] = []
            for session in list(self._stopping):
                if self._stop_ready(session):
                    stopped.append(session)
            freed: list[PartitionSession] = []
            for parent in list(self._ended):
                if self._parent_finished(parent):
                    freed.extend(self._release_children(parent))
            # Commits first: the server applies them before it releases a stopped session.
            commit = self.commits.take_request()
            if commit is not None:
                await call.write(commit)
            for session in stopped:
                self._confirm_stop(session)
            if buffer.credit_ready:
                credit = buffer.take_credit()
                if credit > 0:
                    self._outbox.append(pb.StreamReadMessage.FromClient(read_request={"bytes_size": credit}))
                    if self._metrics is not None:
                        self._record_buffer(self._metrics)
            outbox, self._outbox = self._outbox, []
            for message in outbox:
                await call.write(message)
            for session in stopped:
                await self._notify_stop(session)
            for session in freed:
                logger.debug("topic reader: parents done, starting %r", session, extra=self.log_fields)
                await self._confirm_start(session)

    def _stop_ready(self, session: PartitionSession) -> bool:
        if session._buffered:
            return False
        if self._settings.consumer is None or session.committed_offset >= session._delivered_end:
            return True
        return session._stop_deadline is not None and time.monotonic() >= session._stop_deadline

    async def _token_loop(self, call: Any) -> None:
        driver = self._driver
        while True:
            await anyio.sleep(self._settings.token_refresh_interval)
            try:
                token = await driver._auth_token()
            except Exception:
                # The current token is still valid for a while: keep the stream and try again at
                # the next tick (the SDK's log filter masks the tokens it has seen).
                logger.warning(
                    "topic reader: session %s could not refresh its token; trying again in %gs",
                    self.read_session_id, self._settings.token_refresh_interval,
                    exc_info=True, extra=self.log_fields,
                )
                continue
            if token and token != self._token:
                self._token = token
                self._send(pb.StreamReadMessage.FromClient(update_token_request={"token": token}))

    # --- closing -------------------------------------------------------------------------------

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
                session._ack_waiters.append((reach, future))
                futures.append(future)
        return futures


def _decode_span(
    runs: Sequence[tuple[int, int, _codecs.Transform]], payloads: Sequence[bytes], start: int, end: int
) -> list[bytes]:
    """``payloads[start:end]`` decoded, each by the decoder of its run."""
    decoded: list[bytes] = []
    for run_start, run_end, fn in runs:
        if run_end > start and run_start < end:
            decoded += _codecs.transform_all(fn, payloads[max(start, run_start) : min(end, run_end)])
    return decoded
