"""StreamRead on the local server: the stream handler, the handshake, and the consumer groups.

As in YDB (``ydb/services/persqueue_v1/actors/read_session_actor``):

- Handshake: a consumer must exist on every topic read (BAD_REQUEST otherwise); a topic that
  does not exist is left out as long as another one resolves (SCHEME_ERROR when none does).
  Reading without a consumer needs explicit partition ids: without them the init response is
  sent, then BAD_REQUEST ends the session.
- Which session reads which partition is decided by the read balancer (``read_balancer``); what
  a session answers and how it reads is ``read_session``'s; the messages are ``read_wire``'s.
- Each ReadResponse carries one partition, and its ``bytes_size`` (the serialized size of the
  whole response) is what the client's byte credit is charged.
- A topic dropped under an open session ends it with SCHEME_ERROR.
- With ``direct_read`` in the InitRequest the session sends no data: each read it forms goes to
  the node hosting the partition (``direct_read``), and the client acknowledges it here
  (DirectReadAck). A directly read partition whose tablet moved gets UpdatePartitionSession.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from . import read_wire
from ._inbox import Inbox, receive_handshake
from .auth import TokenRefused, refused_in_band
from .direct_read import DirectReadCache
from .nodes import ServerNode
from .read_balancer import ConsumerGroup, ReaderInfo
from .read_session import PartitionSessionState, ReadSession, Selector, bad_request
from .state import ServerState
from .storage import Consumer, Partition, Topic
from .stored import StorageError

FromServer = read_wire.FromServer


class ReadService:
    """Handles every StreamRead call of one server, and the consumer groups they form."""

    def __init__(self, state: ServerState, graceful_stop_timeout: float = 10.0, direct_read: bool = True) -> None:
        self.state = state
        self.graceful_stop_timeout = graceful_stop_timeout
        self.groups: dict[tuple[str, str], ConsumerGroup] = {}
        self.direct_cache = DirectReadCache() if direct_read else None
        """The directly read partition sessions, as the nodes hosting their partitions know them
        (None: the server does not offer direct read, and ignores the flag)."""
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
            created_ns=self.state.clock.now_ns(),
        )

    def holder(self, topic: Topic, consumer: str, partition_id: int) -> ReadSession | None:
        """The read session that holds ``partition_id`` of ``topic`` for ``consumer`` now."""
        group = self.groups.get((topic.path, consumer))
        if group is None or group.topic is not topic:
            return None
        held = group.owner.get(partition_id)
        return held[0] if held is not None else None

    def read_sessions(self) -> dict[tuple[str, str, int], ReaderInfo]:
        """(topic path, consumer, partition) -> who reads it now, for DescribeConsumer."""
        out = {}
        for (path, consumer), group in self.groups.items():
            for pid, (owner, partition_session) in group.owner.items():
                out[(path, consumer, pid)] = ReaderInfo(
                    owner.id, owner.reader_name, partition_session.created_ns, owner.node_id
                )
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
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any], node: ServerNode
    ) -> AsyncIterator[Any]:
        """One StreamRead call, served by ``node``."""
        state = self.state
        wakeup = asyncio.Event()
        inbox = Inbox(requests, wakeup)
        handle = state.faults.register("read", wakeup)
        session: ReadSession | None = None
        state.storage.listen(wakeup)
        try:
            init, refused = await receive_handshake(state, inbox, context, "StreamRead", FromServer)
            if refused is not None:
                yield refused
                return
            try:
                session = self._handshake(init)
            except StorageError as exc:
                yield read_wire.error(exc.status, exc.message)
                return
            session.wakeup = wakeup
            session.node_id = node.node_id
            yield read_wire.init_response(session.id)
            if session.consumer_name is None and any(s.partition_ids is None for s in session.selectors.values()):
                yield read_wire.error("BAD_REQUEST", "reading without a consumer requires explicit partition ids")
                return
            self._join(session)

            while True:
                while inbox.messages and session.expired is None:
                    try:
                        self._handle(session, inbox.messages.popleft())
                    except StorageError as exc:
                        yield read_wire.error(exc.status, exc.message)
                        return
                    except TokenRefused as exc:
                        await context.abort(grpc.StatusCode.UNAUTHENTICATED, exc.details)
                if session.expired is not None:
                    yield read_wire.error(session.expired.status, session.expired.message)
                    return
                dropped = next((s.topic.path for s in session.selectors.values() if not s.topic.alive), None)
                if dropped is not None:
                    yield read_wire.error("SCHEME_ERROR", f"topic {dropped} was dropped")
                    return
                if handle.stop_partitions:
                    handle.stop_partitions = False
                    if session.consumer_name is None:
                        for partition_session in list(session.sessions.values()):
                            session.stop(partition_session, graceful=False)
                self._rebalance_all()
                session.end_partitions()
                if session.direct_read:
                    session.relocate()
                while session.outbox:
                    yield session.outbox.popleft()
                while session.credit > 0 and not handle.broken:
                    response = self._read_response(session, node.node_id)
                    if response is None:
                        break
                    if response:
                        yield response
                    else:
                        # A direct read, kept for its node's stream: let that stream send it
                        # while the next one is formed, as YDB's node cache pushes a published
                        # read at once (instead of every read the credit allows formed first).
                        await asyncio.sleep(0)
                if handle.broken:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, state.faults.details)
                if inbox.unparsable:
                    await context.abort(grpc.StatusCode.INTERNAL, inbox.unparsable)
                if inbox.closed and not inbox.messages:
                    return
                # Reading a split partition to its end is itself news: EndPartitionSession.
                session.end_partitions()
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
            state.storage.unlisten(wakeup)
            state.faults.unregister(handle)
            if session is not None:
                self._leave(session)
                session.end()
            await inbox.close()

    def _handshake(self, init: Any) -> ReadSession:
        storage = self.state.storage
        if not init.topics_read_settings:
            raise bad_request("no topics in init request")
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
                topic.reading_consumer(init.consumer)
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
            self.direct_cache if init.direct_read else None,
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
            if session.confirm_start(request.start_partition_session_response):
                self.state.storage.notify()
        elif kind == "stop_partition_session_response":
            released = session.confirm_stop(request.stop_partition_session_response)
            if released is not None:
                self._released(session, released)
        elif kind == "commit_offset_request":
            if session.commit(request.commit_offset_request):
                self.state.storage.notify()
        elif kind == "partition_session_status_request":
            session.report_status(request.partition_session_status_request.partition_session_id)
        elif kind == "update_token_request":
            refusal = refused_in_band(self.state.auth, request.update_token_request.token)
            if refusal:
                raise TokenRefused(refusal)
            self.state.stats.token_updates += 1
            session.send(read_wire.update_token_response())
        elif kind == "direct_read_ack":
            session.acknowledge_direct_read(request.direct_read_ack)
        elif kind == "init_request":
            raise bad_request("got second init request")
        else:
            raise bad_request("unsupported request")

    def _released(self, session: ReadSession, state: PartitionSessionState) -> None:
        """The reader gave a partition back (a stop it confirmed): its group may hand it on, unless it
        did already (the reader answered after the group stopped waiting)."""
        group = self.groups.get((state.topic.path, session.consumer_name or ""))
        if group is None:
            return
        held = group.owner.get(state.partition.partition_id)
        if held is not None and held[1] is state:
            group.released(state.partition.partition_id)

    # --- data -------------------------------------------------------------------------------

    def _read_response(self, session: ReadSession, node_id: int) -> bytes | None:
        """One ReadResponse of one partition within the session's credit, or None when there is nothing to
        send. Reading directly, the read is kept for the partition's node instead, and the answer is b""."""
        found = session.next_read(self.state.clock.now_ns())
        if found is None:
            return None
        partition_session, chunk = found
        stats = self.state.stats
        stats.messages_sent += len(chunk)
        direct = partition_session.direct
        if direct is None:
            stats.read_responses += 1
            response, bytes_size = read_wire.read_response(partition_session.session_id, chunk)
            session.credit -= bytes_size
            stats.count_read_bytes(len(response), partition_session.partition.node_id != node_id)
            return response
        stats.direct_read_responses += 1
        direct.last_id += 1
        payload, bytes_size = read_wire.direct_read_response(
            partition_session.session_id, direct.last_id, read_wire.partition_data(partition_session.session_id, chunk)
        )
        session.credit -= bytes_size
        session.direct_bytes_in_flight += bytes_size
        direct.add(payload, bytes_size)
        return b""
