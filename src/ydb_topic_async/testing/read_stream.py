"""StreamRead on the local server: handshake, partition sessions, byte credit, reads, commits.

As in YDB (``ydb/services/persqueue_v1/actors/read_session_actor`` and ``partition_actor``):

- Handshake: a consumer must exist on every topic read (BAD_REQUEST otherwise); a topic that
  does not exist is left out as long as another one resolves (SCHEME_ERROR when none does).
  Reading without a consumer needs explicit partition ids: without them the init response is
  sent, then BAD_REQUEST ends the session.
- Which session reads which partition is decided by the read balancer (``read_balancer``).
- StartPartitionSessionRequest carries the committed offset, also as ``partition_offsets.start``
  (as the PartitionSessionStatusResponse does). The client's StartPartitionSessionResponse may
  set ``read_offset`` (below the committed offset: BAD_REQUEST) and ``commit_offset`` (moving
  the committed offset forward up to the read position; a lower one is ignored). Data below the
  committed offset is never served; below the partition's start (retention), reading starts at
  the first message still stored.
- Data goes out within the client's byte credit; each ReadResponse carries one partition, and
  its ``bytes_size`` (the serialized size of the whole response) is what the credit is charged.
- Commits: a range that is empty, overlaps a pending one or starts below the committed offset is
  BAD_REQUEST (the session ends), as is a CommitOffsetRequest without ranges. A range after a
  gap waits, unanswered, until the gap is filled; the CommitOffsetResponse then carries the new
  committed offset.
- ``partition_max_in_flight_bytes`` (InitRequest): a partition whose messages sent and not yet
  committed hold that many payload bytes gets no more ReadResponses until commits bring it
  below (one response may go past it), as YDB's ``TInFlightController`` (``partition_actor``:
  ``Add(offset, size)`` per message read, ``Remove(committed offset)`` on each commit); 0: no limit.
- A StopPartitionSessionResponse the server did not ask for (no graceful stop pending) is
  BAD_REQUEST; for a partition session the server already forgot, it is ignored.
- A topic dropped under an open session ends it with SCHEME_ERROR.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import timestamp_pb2

from .._proto import ydb_topic_pb2 as pb
from ._inbox import Inbox, receive_handshake
from ._replies import SUCCESS, failure, timestamp
from .partition_log import Consumer, Partition, StorageError, StoredRow, Topic, read_size
from .read_balancer import ConsumerGroup, ReaderInfo

if TYPE_CHECKING:
    from .server import LocalTopicServer

FromServer = pb.StreamReadMessage.FromServer
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""A ReadResponse is cut at about this size even when the client's credit allows more."""
MAX_RESPONSE_MESSAGES = 10_000


def _failure(status: str, message: str) -> Any:
    return failure(FromServer, status, message)


def _bad(message: str) -> StorageError:
    return StorageError("BAD_REQUEST", message)


@dataclass
class Selector:
    topic: Topic
    partition_ids: frozenset[int] | None
    read_from_ns: int
    max_lag_ns: int


@dataclass(eq=False)
class PartitionSessionState:
    """One partition as read by one read session."""

    session_id: int
    topic: Topic
    partition: Partition
    consumer: Consumer | None
    selector: Selector
    committed: int = 0
    """The committed offset as this session knows it (the start of the next commit range)."""
    started: bool = False
    read_offset: int = 0
    stopping: bool = False
    end_sent: bool = False
    pending_commits: list[tuple[int, int]] = field(default_factory=list)
    created_ns: int = 0
    in_flight: deque[tuple[int, int]] = field(default_factory=deque)
    """(offset, payload bytes) of the messages sent and not committed (under a partition limit)."""
    in_flight_bytes: int = 0

    def release_in_flight(self) -> None:
        """The committed offset moved: what lies below it is no longer in flight."""
        in_flight = self.in_flight
        while in_flight and in_flight[0][0] < self.committed:
            self.in_flight_bytes -= in_flight.popleft()[1]


class ReadSession:
    """Server side of one StreamRead call."""

    _ids = itertools.count(1)

    def __init__(
        self,
        consumer: str | None,
        reader_name: str,
        auto_partitioning: bool,
        selectors: dict[str, Selector],
        partition_limit: int = 0,
    ) -> None:
        self.id = f"local-read-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        self.partition_limit = partition_limit
        """``partition_max_in_flight_bytes`` (0: no limit)."""
        self.consumer_name = consumer
        self.reader_name = reader_name
        self.auto_partitioning = auto_partitioning
        self.selectors = selectors
        self.credit = 0
        self.sessions: dict[int, PartitionSessionState] = {}
        self.outbox: deque[Any] = deque()
        self.wakeup = asyncio.Event()
        self._turn = 0

    def send(self, message: Any) -> None:
        self.outbox.append(message)
        self.wakeup.set()

    def accepts(self, topic: Topic, partition_id: int) -> bool:
        selector = self.selectors.get(topic.path)
        return (
            selector is not None
            and selector.topic is topic
            and (selector.partition_ids is None or partition_id in selector.partition_ids)
        )

    def start(self, state: PartitionSessionState) -> None:
        partition = state.partition
        committed = state.consumer.committed_offset(partition) if state.consumer else partition.start_offset
        state.committed = committed
        self.sessions[state.session_id] = state
        message = FromServer(status=SUCCESS)
        request = message.start_partition_session_request
        request.partition_session.partition_session_id = state.session_id
        request.partition_session.path = state.topic.path
        request.partition_session.partition_id = partition.partition_id
        request.committed_offset = committed
        request.partition_offsets.start = committed
        request.partition_offsets.end = partition.end_offset
        request.partition_location.node_id = partition.node_id
        request.partition_location.generation = partition.generation
        self.send(message)

    def stop(self, state: PartitionSessionState, graceful: bool) -> None:
        message = FromServer(status=SUCCESS)
        request = message.stop_partition_session_request
        request.partition_session_id = state.session_id
        request.graceful = graceful
        if state.consumer is not None:
            request.committed_offset = state.consumer.committed_offset(state.partition)
        if graceful:
            state.stopping = True
        else:
            self.sessions.pop(state.session_id, None)
        self.send(message)

    def next_turn(self) -> list[PartitionSessionState]:
        """The partition sessions, starting after the one served last (each gets its turn)."""
        states = list(self.sessions.values())
        if not states:
            return states
        self._turn = (self._turn + 1) % len(states)
        return states[self._turn :] + states[: self._turn]


class ReadService:
    """Handles every StreamRead call of one server, and the consumer groups they form."""

    def __init__(self, server: LocalTopicServer, graceful_stop_timeout: float = 10.0) -> None:
        self.server = server
        self.graceful_stop_timeout = graceful_stop_timeout
        self.groups: dict[tuple[str, str], ConsumerGroup] = {}
        self._partition_session_ids = itertools.count(1)

    def new_partition_session(
        self, session: ReadSession, topic: Topic, partition: Partition, consumer: Consumer | None
    ) -> PartitionSessionState:
        return PartitionSessionState(
            session_id=next(self._partition_session_ids),
            topic=topic,
            partition=partition,
            consumer=consumer,
            selector=session.selectors[topic.path],
            created_ns=self.server.clock.now_ns(),
        )

    def read_sessions(self) -> dict[tuple[str, str, int], ReaderInfo]:
        """(topic path, consumer, partition) -> who reads it now, for DescribeConsumer."""
        out = {}
        for (path, consumer), group in self.groups.items():
            for pid, (owner, state) in group.owner.items():
                out[(path, consumer, pid)] = ReaderInfo(owner.id, owner.reader_name, state.created_ns)
        return out

    def _rebalance_all(self) -> None:
        for key, group in list(self.groups.items()):
            if not group.topic.alive:
                del self.groups[key]
                continue
            group.rebalance()

    def _next_deadline(self) -> float | None:
        deadlines = [d for g in self.groups.values() if (d := g.next_deadline()) is not None]
        return min(deadlines) - time.monotonic() if deadlines else None

    # --- the stream -----------------------------------------------------------------------

    async def stream_read(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        server = self.server
        wakeup = asyncio.Event()
        inbox = Inbox(requests, wakeup)
        handle = server.faults.register("read", wakeup)
        session: ReadSession | None = None
        server.storage.listen(wakeup)
        try:
            init, refused = await receive_handshake(server, inbox, context, "StreamRead", FromServer)
            if refused is not None:
                yield refused
                return
            try:
                session = self._handshake(init)
            except StorageError as exc:
                yield _failure(exc.status, exc.message)
                return
            session.wakeup = wakeup
            reply = FromServer(status=SUCCESS)
            reply.init_response.session_id = session.id
            yield reply
            if session.consumer_name is None and any(s.partition_ids is None for s in session.selectors.values()):
                yield _failure("BAD_REQUEST", "reading without a consumer requires explicit partition ids")
                return
            self._join(session)

            while True:
                while inbox.messages:
                    try:
                        self._handle(session, inbox.messages.popleft())
                    except StorageError as exc:
                        yield _failure(exc.status, exc.message)
                        return
                dropped = next((s.topic.path for s in session.selectors.values() if not s.topic.alive), None)
                if dropped is not None:
                    yield _failure("SCHEME_ERROR", f"topic {dropped} was dropped")
                    return
                self._rebalance_all()
                self._end_partitions(session)
                while session.outbox:
                    yield session.outbox.popleft()
                while session.credit > 0 and not handle.broken:
                    response = self._read_response(session)
                    if response is None:
                        break
                    yield response
                if handle.broken:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, server.faults.details)
                if inbox.unparsable:
                    await context.abort(grpc.StatusCode.INTERNAL, inbox.unparsable)
                if inbox.closed and not inbox.messages:
                    return
                # Reading a split partition to its end is itself news: EndPartitionSession.
                self._end_partitions(session)
                if session.outbox:
                    continue
                timeout = self._next_deadline()
                if timeout is None:
                    await wakeup.wait()
                else:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(wakeup.wait(), max(timeout, 0.001))
                wakeup.clear()
        finally:
            server.storage.unlisten(wakeup)
            server.faults.unregister(handle)
            if session is not None:
                self._leave(session)
            await inbox.close()

    def _handshake(self, init: Any) -> ReadSession:
        storage = self.server.storage
        if not init.topics_read_settings:
            raise _bad("no topics in init request")
        selectors: dict[str, Selector] = {}
        missing: StorageError | None = None
        for settings in init.topics_read_settings:
            try:
                topic = storage.topic(settings.path)
            except StorageError as exc:
                if exc.status != "SCHEME_ERROR":
                    raise
                missing = exc  # left out, as long as another topic resolves
                continue
            if init.consumer:
                topic.consumer(init.consumer)
            for pid in settings.partition_ids:
                topic.partition(pid)
            selectors[topic.path] = Selector(
                topic=topic,
                partition_ids=frozenset(settings.partition_ids) or None,
                # In whole milliseconds, as YDB keeps it (and the write times it is compared with).
                read_from_ns=settings.read_from.ToMilliseconds() * 1_000_000 if settings.HasField("read_from") else 0,
                max_lag_ns=settings.max_lag.ToNanoseconds() if settings.HasField("max_lag") else 0,
            )
        if not selectors:
            assert missing is not None
            raise missing
        return ReadSession(
            init.consumer or None,
            init.reader_name,
            init.auto_partitioning_support,
            selectors,
            init.partition_max_in_flight_bytes,
        )

    def _join(self, session: ReadSession) -> None:
        for path, selector in session.selectors.items():
            topic = selector.topic
            if session.consumer_name is None:
                for pid in sorted(selector.partition_ids or ()):
                    session.start(self.new_partition_session(session, topic, topic.partitions[pid], None))
                continue
            key = (path, session.consumer_name)
            group = self.groups.get(key)
            if group is None or group.topic is not topic:
                group = self.groups[key] = ConsumerGroup(self, topic, topic.consumer(session.consumer_name))
            group.members.append(session)
            group.rebalance()

    def _leave(self, session: ReadSession) -> None:
        if session.consumer_name is None:
            return
        for path, selector in session.selectors.items():
            key = (path, session.consumer_name)
            group = self.groups.get(key)
            if group is None or group.topic is not selector.topic:
                continue
            group.forget(session)
            if group.members:
                group.rebalance()
            else:
                del self.groups[key]

    # --- client messages --------------------------------------------------------------------

    def _handle(self, session: ReadSession, request: Any) -> None:
        """Apply one client message; a StorageError ends the stream with that status."""
        kind = request.WhichOneof("client_message")
        if kind == "read_request":
            session.credit += request.read_request.bytes_size
        elif kind == "start_partition_session_response":
            self._started(session, request.start_partition_session_response)
        elif kind == "stop_partition_session_response":
            self._stopped(session, request.stop_partition_session_response)
        elif kind == "commit_offset_request":
            self._commit(session, request.commit_offset_request)
        elif kind == "partition_session_status_request":
            self._status(session, request.partition_session_status_request.partition_session_id)
        elif kind == "update_token_request":
            refusal = self.server.auth.check_token(request.update_token_request.token)
            if refusal:
                raise StorageError("UNAUTHORIZED", refusal)
            reply = FromServer(status=SUCCESS)
            reply.update_token_response.SetInParent()
            session.send(reply)
        elif kind == "direct_read_ack":
            raise _bad("direct read is not supported by the local server")
        elif kind == "init_request":
            raise _bad("got second init request")
        else:
            raise _bad("unsupported request")

    def _started(self, session: ReadSession, response: Any) -> None:
        """StartPartitionSessionResponse: where to read from and what to mark committed (YDB's rules)."""
        state = session.sessions.get(response.partition_session_id)
        if state is None or state.started or state.stopping:
            return  # a partition session already released: the answer is irrelevant
        partition, consumer = state.partition, state.consumer
        has_read, has_commit = response.HasField("read_offset"), response.HasField("commit_offset")
        read, commit = response.read_offset, response.commit_offset
        if consumer is None and has_commit:
            raise _bad("can't commit when reading without a consumer")
        committed = state.committed
        if has_read:
            if has_commit and read < commit:
                raise _bad(
                    f"trying to read from position that is less than position provided to commit: "
                    f"read {read} commit {commit}"
                )
            if has_commit and commit < committed:
                raise _bad(f"trying to commit to position that is less than committed: commit {commit} "
                           f"committed {committed}")
            stored = consumer.stored_offset(partition) if consumer is not None else 0
            if read < stored:
                raise _bad(f"trying to read from position that is less than committed: read {read} committed {stored}")
        position = max(committed, read if has_read else 0)
        if consumer is not None and has_commit and commit > committed:
            if commit > position:
                raise _bad(f"trying to read from position that is less than provided to commit: read {position} "
                           f"commit {commit}")
            if commit > partition.end_offset:
                raise _bad(f"trying to commit to future: commit {commit} endOffset {partition.end_offset}")
            consumer.commit(partition, commit)
            state.committed = commit
            state.release_in_flight()
            self.server.storage.notify()
        read_from = max(state.selector.read_from_ns, consumer.read_from_ns if consumer else 0)
        if read_from:
            position = max(position, partition.first_offset_written_since(read_from))
        state.read_offset = max(position, partition.start_offset)
        state.started = True

    def _stopped(self, session: ReadSession, response: Any) -> None:
        if session.consumer_name is None:
            raise _bad("it is forbidden to send StopPartitionSessionResponse when reading without a consumer")
        state = session.sessions.get(response.partition_session_id)
        if state is None:
            return  # already taken away: nothing to confirm
        if not state.stopping:
            raise _bad(
                f"graceful release of partition that is not requested for release is forbidden for partition "
                f"{state.partition.partition_id} of {state.topic.path}"
            )
        del session.sessions[state.session_id]
        group = self.groups.get((state.topic.path, session.consumer_name))
        if group is not None:
            group.released(state.partition.partition_id)

    def _status(self, session: ReadSession, partition_session_id: int) -> None:
        state = session.sessions.get(partition_session_id)
        if state is None or state.stopping:
            return  # asked about a partition session being released: YDB ignores it
        partition = state.partition
        committed = state.consumer.committed_offset(partition) if state.consumer else partition.start_offset
        reply = FromServer(status=SUCCESS)
        status = reply.partition_session_status_response
        status.partition_session_id = state.session_id
        status.partition_offsets.start = committed
        status.partition_offsets.end = partition.end_offset
        status.read_offset = state.read_offset
        status.committed_offset = committed
        if partition.last_write_ns:
            status.write_time_high_watermark.CopyFrom(timestamp(partition.last_write_ns))
        session.send(reply)

    def _commit(self, session: ReadSession, request: Any) -> None:
        if session.consumer_name is None:
            raise _bad("can't commit when reading without a consumer")
        if not request.commit_offsets:
            raise _bad("can't commit without offsets")
        reply = FromServer(status=SUCCESS)
        for part in request.commit_offsets:
            state = session.sessions.get(part.partition_session_id)
            if state is None or state.consumer is None:
                continue  # a stale commit for a partition session that ended: ignored
            partition = state.partition
            for r in part.offsets:
                start, end = r.start, r.end
                if (
                    start >= end
                    or start < state.committed
                    or any(s < end and start < e for s, e in state.pending_commits)
                ):
                    raise _bad(
                        f"offsets range [{start}, {end}) has already committed offsets, double committing is "
                        f"forbidden or incorrect"
                    )
                if end > partition.end_offset:
                    raise _bad(
                        f"commit range [{start}, {end}) is invalid for partition {partition.partition_id}"
                        f" with end offset {partition.end_offset}"
                    )
                state.pending_commits.append((start, end))
            committed = state.committed
            state.pending_commits.sort()
            while state.pending_commits and state.pending_commits[0][0] == committed:
                committed = state.pending_commits.pop(0)[1]
            if committed == state.committed:
                continue  # behind a gap: answered once the gap is filled
            state.committed = committed
            state.release_in_flight()
            state.consumer.commit(partition, committed)
            reply.commit_offset_response.partitions_committed_offsets.add(
                partition_session_id=state.session_id, committed_offset=committed
            )
        if reply.commit_offset_response.partitions_committed_offsets:
            session.send(reply)
            self.server.storage.notify()

    # --- server messages --------------------------------------------------------------------

    def _end_partitions(self, session: ReadSession) -> None:
        for state in list(session.sessions.values()):
            partition = state.partition
            if (
                state.started
                and not state.end_sent
                and not partition.active
                and session.auto_partitioning
                and max(state.read_offset, partition.start_offset) >= partition.end_offset  # read, or expired
            ):
                state.end_sent = True
                message = FromServer(status=SUCCESS)
                end = message.end_partition_session
                end.partition_session_id = state.session_id
                end.child_partition_ids.extend(partition.child_ids)
                topic = state.topic
                adjacent = {
                    p for c in partition.child_ids for p in topic.partitions[c].parent_ids
                } - {partition.partition_id}
                end.adjacent_partition_ids.extend(sorted(adjacent))
                session.send(message)

    def _read_response(self, session: ReadSession) -> bytes | None:
        """One ReadResponse of one partition within the session's credit, or None when there is nothing to send."""
        budget = min(session.credit, MAX_RESPONSE_BYTES)
        now = self.server.clock.now_ns()
        limit = session.partition_limit
        for state in session.next_turn():
            if not state.started or state.stopping:
                continue
            if limit and state.in_flight_bytes >= limit:
                continue  # waits for commits (the commit wakes the stream)
            partition = state.partition
            max_lag = state.selector.max_lag_ns
            if max_lag:
                chunk = self._within_lag(state, budget, now - max_lag)
            else:
                chunk = partition.read_rows(state.read_offset, budget, MAX_RESPONSE_MESSAGES)
            if not chunk:
                continue
            state.read_offset = chunk[-1][0] + 1  # the last row's offset
            if limit:
                for row in chunk:
                    state.in_flight.append((row[0], len(row[7])))
                    state.in_flight_bytes += len(row[7])
            if state.consumer is not None:
                state.consumer.record_read(partition, state.read_offset, now)
            stats = self.server.stats
            stats.read_responses += 1
            stats.messages_sent += len(chunk)
            return self._response(session, state, chunk)
        return None

    @staticmethod
    def _within_lag(state: PartitionSessionState, budget: int, oldest_ns: int) -> list[StoredRow]:
        """Like ``Partition.read_rows``, skipping (for good) messages written before ``oldest_ns`` (max_lag)."""
        chunk: list[StoredRow] = []
        total = 0
        for message in state.partition.read(state.read_offset, limit=MAX_RESPONSE_MESSAGES):
            if message.written_at_ns < oldest_ns:
                state.read_offset = message.offset + 1
                continue
            chunk.append(message)
            total += read_size(message)
            if total >= budget:
                break
        return chunk

    @staticmethod
    def _response(session: ReadSession, state: PartitionSessionState, chunk: list[StoredRow]) -> bytes:
        """The serialized FromServer message carrying ``chunk``; its size is charged to the session's credit."""
        response = ReadResponse()
        add_batch = response.partition_data.add(partition_session_id=state.session_id).batches.add
        add: Any = None
        last_written, last_producer, last_codec, last_meta = -1, "", -1, None
        last_created, created_field = 0, b""
        # Per message, only what differs between messages is set, field by field (several times
        # cheaper than keyword arguments); one Batch per run of messages that share a write
        # request's producer, codec, session metadata and write time, as YDB groups them.
        for offset, seq_no, created_at_ns, written_at, producer, group, codec, data, size, metadata, meta in chunk:
            if written_at != last_written or producer != last_producer or codec != last_codec or meta != last_meta:
                last_written, last_producer, last_codec, last_meta = written_at, producer, codec, meta
                batch = add_batch(producer_id=producer, codec=codec, write_session_meta=dict(meta))
                batch.written_at.CopyFrom(timestamp(written_at))
                add = batch.message_data.add
            item = add()
            item.offset = offset
            item.seq_no = seq_no
            item.data = data
            item.uncompressed_size = size
            item.message_group_id = group
            if created_at_ns:
                if created_at_ns != last_created:
                    # Messages of one request often share a millisecond: their created_at field,
                    # serialized once, is merged in as bytes.
                    last_created, created_field = created_at_ns, _created_at_field(created_at_ns)
                item.MergeFromString(created_field)
            if metadata:
                items = item.metadata_items
                for key, value in metadata:
                    items.add(key=key, value=value)
        # Serialized here rather than by gRPC, once: ``bytes_size`` (the serialized size of the
        # whole response, what the client's credit pays, as in YDB) is appended to the bytes.
        body = response.SerializeToString()
        bytes_size = len(_SUCCESS_HEADER) + len(_READ_RESPONSE_TAG) + len(_varint(len(body))) + len(body)
        tail = _BYTES_SIZE_TAG + _varint(bytes_size)
        session.credit -= bytes_size
        # One join: the body (up to MAX_RESPONSE_BYTES) is copied once more, not twice.
        return b"".join((_SUCCESS_HEADER, _READ_RESPONSE_TAG, _varint(len(body) + len(tail)), body, tail))


ReadResponse = pb.StreamReadMessage.ReadResponse
_SUCCESS_HEADER = FromServer(status=SUCCESS).SerializeToString()


def _tag(descriptor: Any, name: str) -> bytes:
    """The key of length-delimited or varint field ``name`` (wire type from its kind)."""
    field_descriptor = descriptor.fields_by_name[name]
    wire_type = 2 if field_descriptor.message_type is not None else 0
    return _varint(field_descriptor.number << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _created_at_field(ns: int) -> bytes:
    """A ReadResponse.MessageData's ``created_at`` field, serialized."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    value = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos).SerializeToString()
    return _CREATED_AT_TAG + _varint(len(value)) + value


_READ_RESPONSE_TAG = _tag(FromServer.DESCRIPTOR, "read_response")
_BYTES_SIZE_TAG = _tag(ReadResponse.DESCRIPTOR, "bytes_size")
_CREATED_AT_TAG = _tag(ReadResponse.MessageData.DESCRIPTOR, "created_at")
