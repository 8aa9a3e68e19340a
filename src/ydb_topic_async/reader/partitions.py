"""The partition sessions of one read stream: starts, stops, ends of auto-partitioned parents.

A start is answered (with the offsets ``on_partition_start`` returns); a graceful stop is
answered once the session's buffered messages were handed out and the commits of everything
handed out were acknowledged (or ``graceful_stop_timeout`` passed); a non-graceful stop drops
the session's buffered messages at once. For auto-partitioned topics a partition's children are
started only once the ended parent was fully handed out and committed. Every session dies with
its stream (``end_all``): its offsets can no longer be committed, and the server delivers what
was not committed again on the next stream.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import PartitionSessionClosedError
from .._proto import ydb_topic_pb2 as pb
from ..observability.logging import sdk_logger
from .bookkeeping import PartitionSessionState
from .commits import CommitTracker
from .flow_control import ReadBuffer
from .messages import PartitionSession, PartitionStatus, StartOffsets, TopicSelector
from .settings import ReaderSettings
from .wire import timestamp_to_datetime

logger = sdk_logger("reader")

_Key = tuple[str, int]


def waits_for_drain_or_commits(session: PartitionSession) -> bool:
    """Whether the stream's sender must look at ``session`` again once its buffered messages were
    taken or its commits acknowledged: a graceful stop to confirm, or an ended parent to release."""
    books = session._bookkeeping
    return books.state is PartitionSessionState.STOPPING or books.ended


async def _call_user(fn: Callable[[PartitionSession], Any], session: PartitionSession) -> Any:
    result = fn(session)
    if inspect.isawaitable(result):
        result = await result
    return result


class PartitionSessions:
    """The partition sessions of the current stream and what each waits for.

    ``settings``: the reader's (its consumer, partition callbacks and ``graceful_stop_timeout``);
    ``selectors``: what it reads (their ``start_offsets``). ``send(message)`` queues a message
    for the stream's sender (the only writer to the stream); ``wake`` wakes that sender.
    """

    def __init__(
        self,
        settings: ReaderSettings,
        selectors: Sequence[TopicSelector],
        *,
        buffer: ReadBuffer,
        commits: CommitTracker,
        send: Callable[[Any], None],
        wake: asyncio.Event,
        log_fields: Callable[[], Mapping[str, Any]],
        on_closed: Callable[[PartitionSession], None] | None = None,
    ) -> None:
        self._consumer = settings.consumer
        self._on_closed = on_closed
        """Told of every session that closes, whatever ended it (for the metrics)."""
        self._on_partition_start = settings.on_partition_start
        self._on_partition_stop = settings.on_partition_stop
        self._graceful_stop_timeout = settings.graceful_stop_timeout
        self._buffer = buffer
        self._commits = commits
        self._send = send
        self._wake = wake
        self._log_fields = log_fields
        self.sessions: dict[int, PartitionSession] = {}
        self._stopping: set[PartitionSession] = set()
        self._ended: set[PartitionSession] = set()
        self._gates: dict[_Key, set[PartitionSession]] = {}
        """Child partition -> its ended parents in this stream that are not finished yet."""
        self._deferred: list[PartitionSession] = []
        self._status_waiters: dict[int, list[asyncio.Future[PartitionStatus]]] = {}
        self._resume: dict[_Key, int] = {}
        """Without a consumer: where each partition continues after a reconnect."""
        self._start_offsets: dict[_Key, int] = {}
        for selector in selectors:
            for pid, offset in (selector.start_offsets or {}).items():
                self._start_offsets[(selector.path, pid)] = offset

    # --- the server's requests ----------------------------------------------------------------

    async def on_start(self, request: Any) -> None:
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
            logger.debug("topic reader: %r waits for its parent partitions", session, extra=self._log_fields())
            self._deferred.append(session)
            return
        await self._confirm_start(session)

    async def _confirm_start(self, session: PartitionSession) -> None:
        key = (session.topic_path, session.partition_id)
        read_offset: int | None = None
        commit_offset: int | None = None
        if self._consumer is None:
            read_offset = self._resume.get(key, self._start_offsets.get(key))
        else:
            read_offset = self._start_offsets.get(key)
        callback = self._on_partition_start
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
        books = session._bookkeeping
        if commit_offset is not None:
            response.commit_offset = commit_offset
            if commit_offset > books.committed_offset:
                books.committed_offset = commit_offset
        # Commit ranges start at the committed offset (so offsets skipped by a later read offset
        # are committed too), or at the read offset when reading without a consumer or
        # re-reading below the committed offset (those commits are no-ops).
        start = books.committed_offset
        if read_offset is not None and (self._consumer is None or read_offset < start):
            start = read_offset
        books.next_commit_start = start
        books.delivered_end = start
        self._send(answer)

    async def on_stop(self, request: Any) -> None:
        session = self.sessions.get(request.partition_session_id)
        if session is None:
            return
        if request.committed_offset:
            self._commits.on_ack(session, request.committed_offset)
        if request.graceful:
            if session in self._deferred:
                self._deferred.remove(session)
                self.confirm_stop(session)
                await self.notify_stop(session)
            elif session.state is PartitionSessionState.ACTIVE:
                books = session._bookkeeping
                books.state = PartitionSessionState.STOPPING
                books.stop_deadline = time.monotonic() + self._graceful_stop_timeout
                self._stopping.add(session)
                self._wake.set()
            return
        dropped = self._buffer.drop_session(session)
        logger.debug(
            "topic reader: %r stopped by the server, %d buffered messages dropped",
            session, dropped, extra=self._log_fields(),
        )
        self._forget(session)
        self._close_session(session, PartitionSessionClosedError(f"{session!r} was stopped by the server"))
        await self.notify_stop(session)

    def on_end(self, message: Any) -> None:
        session = self.sessions.get(message.partition_session_id)
        if session is None:
            return
        books = session._bookkeeping
        books.ended = True
        books.child_partition_ids = tuple(message.child_partition_ids)
        for child in books.child_partition_ids:
            self._gates.setdefault((session.topic_path, child), set()).add(session)
        self._ended.add(session)
        self._wake.set()

    def on_drained(self, session: PartitionSession) -> None:
        """The buffer handed out the last buffered message of ``session``."""
        if waits_for_drain_or_commits(session):
            self._wake.set()

    # --- the sender's turn --------------------------------------------------------------------

    def stop_timeout(self) -> float | None:
        """Seconds until the earliest graceful stop must be confirmed anyway (None: none waits)."""
        if not self._stopping:
            return None
        deadline = min(s._bookkeeping.stop_deadline or 0.0 for s in self._stopping)
        return max(0.0, deadline - time.monotonic())

    def due(self) -> tuple[list[PartitionSession], list[PartitionSession]]:
        """The graceful stops ready to confirm, and the deferred starts whose parents are done."""
        stopped = [session for session in self._stopping if self._stop_ready(session)]
        freed: list[PartitionSession] = []
        for parent in list(self._ended):
            if self._parent_finished(parent):
                freed.extend(self._release_children(parent))
        return stopped, freed

    async def finish(self, stopped: list[PartitionSession], freed: list[PartitionSession]) -> None:
        """After the sender wrote the stops' confirmations: tell the user, start the freed children."""
        for session in stopped:
            await self.notify_stop(session)
        for session in freed:
            logger.debug("topic reader: parents done, starting %r", session, extra=self._log_fields())
            await self._confirm_start(session)

    def _stop_ready(self, session: PartitionSession) -> bool:
        books = session._bookkeeping
        if books.buffered or books.replay is not None:
            return False
        if self._consumer is None or books.committed_offset >= books.delivered_end:
            return True
        return books.stop_deadline is not None and time.monotonic() >= books.stop_deadline

    def _parent_finished(self, session: PartitionSession) -> bool:
        books = session._bookkeeping
        if books.state is PartitionSessionState.CLOSED:
            return True
        if books.buffered or books.replay is not None:
            return False
        return self._consumer is None or books.committed_offset >= books.next_commit_start

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

    def confirm_stop(self, session: PartitionSession) -> None:
        """Answer a graceful stop (queued for the sender) and close the session."""
        self._send(
            pb.StreamReadMessage.FromClient(
                stop_partition_session_response={"partition_session_id": session.id, "graceful": True}
            )
        )
        self._forget(session)
        self._close_session(session, PartitionSessionClosedError(f"{session!r} was stopped by the server"))

    def _forget(self, session: PartitionSession) -> None:
        self._stopping.discard(session)
        if session in self._deferred:
            self._deferred.remove(session)

    def _close_session(self, session: PartitionSession, error: BaseException) -> None:
        books = session._bookkeeping
        if books.state is PartitionSessionState.CLOSED:
            return
        books.state = PartitionSessionState.CLOSED
        if books.replay is not None:
            books.replay.cancel()  # a backward seek's reading ends with the session
        if self._consumer is None and books.delivered_end > 0:
            self._resume[(session.topic_path, session.partition_id)] = books.delivered_end
        self.sessions.pop(session.id, None)
        self._commits.fail_session(session, error)
        for future in self._status_waiters.pop(session.id, []):
            if not future.done():
                future.set_exception(error)
        self._ended.discard(session)
        if self._on_closed is not None:
            self._on_closed(session)

    async def notify_stop(self, session: PartitionSession) -> None:
        callback = self._on_partition_stop
        if callback is not None:
            await _call_user(callback, session)

    def end_all(self, error: BaseException) -> list[PartitionSession]:
        """The stream ended: close every session with ``error``; return them."""
        lost = list(self.sessions.values())
        for session in lost:
            self._close_session(session, error)
        self.sessions.clear()
        self._stopping.clear()
        self._ended.clear()
        self._gates.clear()
        self._deferred.clear()
        return lost

    # --- status -------------------------------------------------------------------------------

    def request_status(self, session: PartitionSession) -> asyncio.Future[PartitionStatus]:
        future: asyncio.Future[PartitionStatus] = asyncio.get_running_loop().create_future()
        self._status_waiters.setdefault(session.id, []).append(future)
        self._send(
            pb.StreamReadMessage.FromClient(partition_session_status_request={"partition_session_id": session.id})
        )
        return future

    def on_status(self, response: Any) -> None:
        waiters = self._status_waiters.pop(response.partition_session_id, [])
        session = self.sessions.get(response.partition_session_id)
        if session is not None:
            books = session._bookkeeping
            books.partition_end_offset = max(books.partition_end_offset, response.partition_offsets.end)
            if response.committed_offset > books.committed_offset:
                self._commits.on_ack(session, response.committed_offset)
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
