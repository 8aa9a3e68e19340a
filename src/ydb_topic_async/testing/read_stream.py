"""StreamRead on the local server: partition sessions, balancing, byte credit, commits.

Readers of one consumer share the partitions of a topic (``ConsumerGroup``): each partition is
owned by at most one read session, partitions are spread evenly, and when readers join or leave
the surplus is moved with a graceful StopPartitionSessionRequest; the new owner gets the
partition only once the old one confirmed (or after ``graceful_stop_timeout``, with a
non-graceful stop). Readers without a consumer read the partitions they name, independently.

Auto-partitioning: a child partition is handed out only after every parent is finished (inactive,
and committed to its end). A reader that has read an inactive partition to its end gets an
EndPartitionSession naming the children; once it commits the end, the session is stopped and the
children are assigned.
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

from .._proto import ydb_topic_pb2 as pb
from ._inbox import Inbox, receive_handshake
from ._replies import SUCCESS, failure, timestamp
from .partition_log import Consumer, Partition, StorageError, StoredMessage, Topic

if TYPE_CHECKING:
    from .server import LocalTopicServer

FromServer = pb.StreamReadMessage.FromServer
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""A ReadResponse is cut at about this size even when the client's credit allows more."""


def _failure(status: str, message: str) -> Any:
    return failure(FromServer, status, message)


def _finished(consumer: Consumer | None, partition: Partition) -> bool:
    """An inactive partition whose data the consumer has fully committed."""
    if consumer is None or partition.active:
        return False
    return consumer.committed_offset(partition) >= partition.end_offset


@dataclass(frozen=True, slots=True)
class ReaderInfo:
    """The read session that currently owns a partition for a consumer."""

    read_session_id: str
    reader_name: str
    assigned_at_ns: int


@dataclass
class Selector:
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
    started: bool = False
    read_offset: int = 0
    stopping: bool = False
    end_sent: bool = False
    pending_commits: list[tuple[int, int]] = field(default_factory=list)
    created_ns: int = field(default_factory=time.time_ns)


class ReadSession:
    """Server side of one StreamRead call."""

    _ids = itertools.count(1)

    def __init__(
        self, consumer: str | None, reader_name: str, auto_partitioning: bool, selectors: dict[str, Selector]
    ) -> None:
        self.id = f"local-read-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        self.consumer_name = consumer
        self.reader_name = reader_name
        self.auto_partitioning = auto_partitioning
        self.selectors = selectors
        self.credit = 0
        self.sessions: dict[int, PartitionSessionState] = {}
        self.outbox: deque[Any] = deque()
        self.wakeup = asyncio.Event()

    def send(self, message: Any) -> None:
        self.outbox.append(message)
        self.wakeup.set()

    def accepts(self, topic: Topic, partition_id: int) -> bool:
        selector = self.selectors.get(topic.path)
        return selector is not None and (selector.partition_ids is None or partition_id in selector.partition_ids)

    def start(self, state: PartitionSessionState, committed: int) -> None:
        self.sessions[state.session_id] = state
        message = FromServer(status=SUCCESS)
        request = message.start_partition_session_request
        request.partition_session.partition_session_id = state.session_id
        request.partition_session.path = state.topic.path
        request.partition_session.partition_id = state.partition.partition_id
        request.committed_offset = committed
        request.partition_offsets.start = state.partition.start_offset
        request.partition_offsets.end = state.partition.end_offset
        request.partition_location.node_id = state.partition.node_id
        request.partition_location.generation = state.partition.generation
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


@dataclass
class _Release:
    owner: ReadSession
    state: PartitionSessionState
    deadline: float


class ConsumerGroup:
    """The read sessions of one consumer on one topic, and who owns which partition."""

    def __init__(self, service: ReadService, topic: Topic, consumer: Consumer) -> None:
        self.service = service
        self.topic = topic
        self.consumer = consumer
        self.members: list[ReadSession] = []
        self.owner: dict[int, tuple[ReadSession, PartitionSessionState]] = {}
        self.releasing: dict[int, _Release] = {}

    def eligible(self, partition: Partition) -> bool:
        if _finished(self.consumer, partition):
            return False
        parents_done = all(_finished(self.consumer, self.topic.partitions[p]) for p in partition.parent_ids)
        supports = all(m.auto_partitioning for m in self.members)
        return parents_done or not supports

    def forget(self, session: ReadSession) -> None:
        self.members = [m for m in self.members if m is not session]
        for pid, (owner, _) in list(self.owner.items()):
            if owner is session:
                del self.owner[pid]
        for pid, release in list(self.releasing.items()):
            if release.owner is session:
                del self.releasing[pid]

    def released(self, partition_id: int) -> None:
        self.releasing.pop(partition_id, None)
        self.owner.pop(partition_id, None)

    def rebalance(self) -> None:
        if not self.members:
            return
        now = time.monotonic()
        for pid, release in list(self.releasing.items()):
            if release.deadline <= now:
                # The owner did not confirm the graceful stop in time: take the partition away.
                release.owner.stop(release.state, graceful=False)
                self.released(pid)
        for pid, (owner, state) in list(self.owner.items()):
            if _finished(self.consumer, state.partition) and pid not in self.releasing:
                owner.stop(state, graceful=False)
                del self.owner[pid]
        # Partitions on their way to another reader count for nobody until released.
        counts = {id(m): 0 for m in self.members}
        for pid, (owner, _) in self.owner.items():
            if pid not in self.releasing:
                counts[id(owner)] += 1
        for partition in self.topic.partitions:
            pid = partition.partition_id
            if pid in self.owner or not self.eligible(partition):
                continue
            candidates = [m for m in self.members if m.accepts(self.topic, pid)]
            if not candidates:
                continue
            target = min(candidates, key=lambda m: counts[id(m)])
            counts[id(target)] += 1
            state = self.service.new_partition_session(target, self.topic, partition, self.consumer)
            self.owner[pid] = (target, state)
            target.start(state, self.consumer.committed_offset(partition))
        # Even out: readers above their fair share give partitions back gracefully; the
        # least loaded readers get them once the stops are confirmed.
        total = len(self.owner)
        members = sorted(self.members, key=lambda m: counts[id(m)], reverse=True)
        base, extra = divmod(total, len(members))
        for rank, member in enumerate(members):
            share = base + (1 if rank < extra else 0)
            movable = [
                (pid, state)
                for pid, (owner, state) in self.owner.items()
                if owner is member and pid not in self.releasing and state.started
            ]
            while counts[id(member)] > share and movable:
                pid, state = movable.pop()
                if not any(m is not member and m.accepts(self.topic, pid) for m in self.members):
                    continue
                member.stop(state, graceful=True)
                self.releasing[pid] = _Release(member, state, now + self.service.graceful_stop_timeout)
                counts[id(member)] -= 1


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
            if key[0] not in self.server.storage.topics:
                del self.groups[key]
                continue
            group.rebalance()

    def _next_deadline(self) -> float | None:
        deadlines = [r.deadline for g in self.groups.values() for r in g.releasing.values()]
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
            self._join(session)

            while True:
                while inbox.messages:
                    failure = self._handle(session, inbox.messages.popleft())
                    if failure is not None:
                        yield failure
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
            raise StorageError("BAD_REQUEST", "InitRequest names no topics")
        selectors: dict[str, Selector] = {}
        for settings in init.topics_read_settings:
            topic = storage.topic(settings.path)
            if init.consumer:
                topic.consumer(init.consumer)
            elif not settings.partition_ids:
                raise StorageError(
                    "BAD_REQUEST", f"reading {topic.path} without a consumer requires explicit partition ids"
                )
            for pid in settings.partition_ids:
                topic.partition(pid)
            selectors[topic.path] = Selector(
                partition_ids=frozenset(settings.partition_ids) or None,
                read_from_ns=settings.read_from.ToNanoseconds() if settings.HasField("read_from") else 0,
                max_lag_ns=settings.max_lag.ToNanoseconds() if settings.HasField("max_lag") else 0,
            )
        return ReadSession(init.consumer or None, init.reader_name, init.auto_partitioning_support, selectors)

    def _join(self, session: ReadSession) -> None:
        storage = self.server.storage
        for path, selector in session.selectors.items():
            topic = storage.topic(path)
            if session.consumer_name is None:
                for pid in sorted(selector.partition_ids or ()):
                    state = self.new_partition_session(session, topic, topic.partitions[pid], None)
                    session.start(state, 0)
                continue
            key = (path, session.consumer_name)
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = ConsumerGroup(self, topic, topic.consumer(session.consumer_name))
            group.members.append(session)
            group.rebalance()

    def _leave(self, session: ReadSession) -> None:
        for path in session.selectors:
            if session.consumer_name is None:
                continue
            group = self.groups.get((path, session.consumer_name))
            if group is None:
                continue
            group.forget(session)
            if group.members:
                group.rebalance()
            else:
                del self.groups[(path, session.consumer_name)]

    def _handle(self, session: ReadSession, request: Any) -> Any | None:
        """Apply one client message; a returned message ends the stream with that failure."""
        kind = request.WhichOneof("client_message")
        if kind == "read_request":
            session.credit += request.read_request.bytes_size
        elif kind == "start_partition_session_response":
            return self._started(session, request.start_partition_session_response)
        elif kind == "stop_partition_session_response":
            self._stopped(session, request.stop_partition_session_response)
        elif kind == "commit_offset_request":
            return self._commit(session, request.commit_offset_request)
        elif kind == "partition_session_status_request":
            state = session.sessions.get(request.partition_session_status_request.partition_session_id)
            if state is not None:
                reply = FromServer(status=SUCCESS)
                status = reply.partition_session_status_response
                status.partition_session_id = state.session_id
                status.partition_offsets.start = state.partition.start_offset
                status.partition_offsets.end = state.partition.end_offset
                status.read_offset = state.read_offset
                if state.consumer is not None:
                    status.committed_offset = state.consumer.committed_offset(state.partition)
                if state.partition.last_write_ns:
                    status.write_time_high_watermark.CopyFrom(timestamp(state.partition.last_write_ns))
                session.send(reply)
        elif kind == "update_token_request":
            refusal = self.server.auth.check_token(request.update_token_request.token)
            if refusal:
                return _failure("UNAUTHORIZED", refusal)
            reply = FromServer(status=SUCCESS)
            reply.update_token_response.SetInParent()
            session.send(reply)
        elif kind == "direct_read_ack":
            return _failure("BAD_REQUEST", "direct read is not supported by the local server")
        else:
            return _failure("BAD_REQUEST", f"unexpected {kind} after the handshake")
        return None

    def _started(self, session: ReadSession, response: Any) -> Any | None:
        state = session.sessions.get(response.partition_session_id)
        if state is None or state.started:
            return None
        partition = state.partition
        if response.HasField("commit_offset"):
            if state.consumer is None:
                return _failure("BAD_REQUEST", "commit_offset needs a consumer")
            if not partition.start_offset <= response.commit_offset <= partition.end_offset:
                return _failure("BAD_REQUEST", f"commit_offset {response.commit_offset} is outside the partition")
            state.consumer.commit(partition, response.commit_offset)
        if response.HasField("read_offset"):
            offset = response.read_offset
        elif state.consumer is not None:
            offset = state.consumer.committed_offset(partition)
        else:
            offset = partition.start_offset
        read_from = max(state.selector.read_from_ns, state.consumer.read_from_ns if state.consumer else 0)
        if read_from:
            offset = max(offset, partition.first_offset_written_since(read_from))
        state.read_offset = max(offset, partition.start_offset)
        state.started = True
        return None

    def _stopped(self, session: ReadSession, response: Any) -> None:
        state = session.sessions.pop(response.partition_session_id, None)
        if state is None or session.consumer_name is None:
            return
        group = self.groups.get((state.topic.path, session.consumer_name))
        if group is not None:
            group.released(state.partition.partition_id)

    def _commit(self, session: ReadSession, request: Any) -> Any | None:
        if session.consumer_name is None:
            return _failure("BAD_REQUEST", "commits need a consumer; this stream reads without one")
        reply = FromServer(status=SUCCESS)
        for part in request.commit_offsets:
            state = session.sessions.get(part.partition_session_id)
            if state is None or state.consumer is None:
                continue  # the session ended: its commits are void
            partition = state.partition
            for r in part.offsets:
                if r.start > r.end or r.end > partition.end_offset:
                    return _failure(
                        "BAD_REQUEST",
                        f"commit range [{r.start}, {r.end}) is invalid for partition {partition.partition_id}"
                        f" with end offset {partition.end_offset}",
                    )
                state.pending_commits.append((r.start, r.end))
            committed = state.consumer.committed_offset(partition)
            state.pending_commits.sort()
            remaining = []
            for start, end in state.pending_commits:
                if start <= committed:
                    committed = max(committed, end)
                else:
                    remaining.append((start, end))
            state.pending_commits = remaining
            state.consumer.commit(partition, committed)
            reply.commit_offset_response.partitions_committed_offsets.add(
                partition_session_id=state.session_id, committed_offset=committed
            )
        if reply.commit_offset_response.partitions_committed_offsets:
            session.send(reply)
            self.server.storage.notify()
        return None

    def _end_partitions(self, session: ReadSession) -> None:
        for state in list(session.sessions.values()):
            partition = state.partition
            if (
                state.started
                and not state.end_sent
                and not partition.active
                and session.auto_partitioning
                and state.read_offset >= partition.end_offset
            ):
                state.end_sent = True
                message = FromServer(status=SUCCESS)
                end = message.end_partition_session
                end.partition_session_id = state.session_id
                end.child_partition_ids.extend(partition.child_ids)
                session.send(message)

    def _read_response(self, session: ReadSession) -> Any | None:
        """One ReadResponse within the session's credit, or None when there is nothing to send."""
        budget = min(session.credit, MAX_RESPONSE_BYTES)
        reply = FromServer(status=SUCCESS)
        response = reply.read_response
        total = 0
        now = time.time_ns()
        for state in session.sessions.values():
            if total >= budget:
                break
            if not state.started or state.stopping:
                continue
            partition = state.partition
            chunk: list[StoredMessage] = []
            for message in partition.read(state.read_offset, limit=10_000):
                if state.selector.max_lag_ns and message.written_at_ns < now - state.selector.max_lag_ns:
                    state.read_offset = message.offset + 1
                    continue
                chunk.append(message)
                total += len(message.data)
                if total >= budget:
                    break
            if not chunk:
                continue
            state.read_offset = chunk[-1].offset + 1
            if state.consumer is not None:
                state.consumer.record_read(partition, state.read_offset, now)
            data = response.partition_data.add(partition_session_id=state.session_id)
            batch = None
            key: tuple[Any, ...] | None = None
            for message in chunk:
                message_key = (message.producer_id, message.codec, message.write_session_meta, message.written_at_ns)
                if batch is None or message_key != key:
                    key = message_key
                    batch = data.batches.add(
                        producer_id=message.producer_id,
                        codec=message.codec,
                        write_session_meta=dict(message.write_session_meta),
                    )
                    batch.written_at.CopyFrom(timestamp(message.written_at_ns))
                item = batch.message_data.add(
                    offset=message.offset,
                    seq_no=message.seq_no,
                    data=message.data,
                    uncompressed_size=message.uncompressed_size,
                    message_group_id=message.message_group_id,
                )
                if message.created_at_ns:
                    item.created_at.CopyFrom(timestamp(message.created_at_ns))
                for k, v in message.metadata:
                    item.metadata_items.add(key=k, value=v)
        if not response.partition_data:
            return None
        response.bytes_size = total
        session.credit -= total
        return reply
