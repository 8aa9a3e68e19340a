"""StreamDirectRead on the local server: a partition's data served by the node that hosts it.

A read session opened with ``direct_read`` (``read_stream``) never sends data itself: its
partition sessions start with the partition's location (node id, tablet generation), and each
read it forms within the client's credit becomes a *direct read* of one partition session,
numbered 1, 2, 3, ... and kept here until the client acknowledges it on the control stream
(``DirectReadAck``). The client opens a StreamDirectRead on each node it was named, and asks
there for its partition sessions; the node sends the kept reads from the id asked for on, and
each new one as it is formed. As in YDB:

- ``DirectPartition`` is a partition session's entry in the node-local cache
  (``ydb/core/persqueue/dread_cache_service/caching_service.cpp``): registered under the read
  session id and partition session id, for the node that runs the partition's tablet and the
  tablet's generation. Only that node knows it: a StartDirectReadPartitionSessionRequest naming
  an entry the node does not hold (another node, a session that ended, a made-up id) ends the
  whole stream with BAD_REQUEST "Unknown session"; one naming another generation is refused for
  that partition alone (StopDirectReadPartitionSession, UNAVAILABLE "Generation mismatch").
  A start is answered at once, and the kept reads after ``last_direct_read_id`` follow.
- When the entry goes away (the partition session was released, its read session ended, or its
  tablet moved and registered a newer generation), the stream serving it gets
  StopDirectReadPartitionSession with SESSION_EXPIRED "Closed by server"; the stream goes on.
- The handshake (``direct_read_actor.cpp``): a second InitRequest, no topics, an empty topic
  path or no read session id is BAD_REQUEST; an unknown topic SCHEME_ERROR. The InitResponse does
  not check the read session id: a wrong one shows at the first start.
- A directly read partition whose tablet moves to another node (``LocalTopicCluster.stop_node``)
  keeps its unacknowledged reads under their ids, and the read session sends
  UpdatePartitionSession with the new node and generation (``read_stream``); the client starts
  it again there, naming the last read it received.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from . import read_wire
from ._inbox import Inbox, receive_handshake
from .auth import TokenRefused, refused_in_band
from .nodes import ServerNode
from .state import ServerState
from .storage import Partition
from .stored import StorageError

DirectFromServer = read_wire.DirectFromServer

CLOSED_BY_SERVER = "Closed by server"


class DirectStream:
    """One StreamDirectRead call: the node serving it and the partition sessions attached to it."""

    __slots__ = ("attached", "node_id", "outbox", "session_id", "wakeup")

    def __init__(self, node_id: int, wakeup: asyncio.Event) -> None:
        self.node_id = node_id
        self.wakeup = wakeup
        self.session_id = ""
        """The read session whose partition sessions it serves (from its InitRequest)."""
        self.outbox: list[Any] = []
        """Start responses and stops, sent before any more data."""
        self.attached: dict[int, DirectPartition] = {}
        """Partition session id -> the entry whose reads it sends."""

    def send(self, message: Any) -> None:
        self.outbox.append(message)
        self.wakeup.set()


class DirectPartition:
    """One directly read partition session's entry in the cache of the node hosting the partition:
    the reads formed for it and not yet acknowledged, and the stream they go to."""

    __slots__ = (
        "acknowledged", "bytes_kept", "final_stop_sent", "generation", "last_id", "next_to_send",
        "node_id", "partition", "partition_session_id", "reads", "stream",
    )

    def __init__(self, partition_session_id: int, partition: Partition) -> None:
        self.partition_session_id = partition_session_id
        self.partition = partition
        self.node_id = partition.node_id
        """The node the entry is registered on: the one that ran the partition's tablet then, and serves it."""
        self.generation = partition.generation
        """The tablet generation the entry is registered under."""
        self.reads: dict[int, tuple[bytes, int]] = {}
        """Direct read id -> (the serialized DirectReadResponse, its bytes_size), unacknowledged ones, in id order."""
        self.bytes_kept = 0
        """The ``bytes_size`` of ``reads``."""
        self.last_id = 0
        """The id of the last read formed (0: none yet)."""
        self.acknowledged = 0
        """The id of the last read acknowledged."""
        self.final_stop_sent = False
        """The non-graceful stop was sent: the partition session is released on the client's answer."""
        self.stream: DirectStream | None = None
        self.next_to_send = 1

    def add(self, payload: bytes, bytes_size: int) -> None:
        """Keep a formed read (numbered ``last_id``, which the caller advanced) and wake its stream."""
        self.reads[self.last_id] = (payload, bytes_size)
        self.bytes_kept += bytes_size
        if self.stream is not None:
            self.stream.wakeup.set()

    def acknowledge(self, direct_read_id: int) -> int:
        """The client processed read ``direct_read_id``: forget it; returns its bytes_size.

        As YDB's read session (``TReadSessionActor::Handle(TEvDirectReadAck)``): an id not kept
        and reads out of order end the session with BAD_REQUEST."""
        kept = self.reads.get(direct_read_id)
        if kept is None:
            raise StorageError("BAD_REQUEST", f"unknown direct read in Ack: {direct_read_id}")
        if direct_read_id != self.acknowledged + 1:
            raise StorageError(
                "BAD_REQUEST",
                f"direct reads must be confirmed in strict order - expecting {self.acknowledged + 1} "
                f"but got {direct_read_id}",
            )
        del self.reads[direct_read_id]
        self.acknowledged = direct_read_id
        self.bytes_kept -= kept[1]
        return kept[1]

    def attach(self, stream: DirectStream, first_id: int) -> None:
        if self.stream is not None and self.stream is not stream:
            self.stream.attached.pop(self.partition_session_id, None)
        self.stream = stream
        self.next_to_send = max(first_id, self.acknowledged + 1)
        stream.attached[self.partition_session_id] = self

    def detach(self, status: str | None = "SESSION_EXPIRED", reason: str = CLOSED_BY_SERVER) -> None:
        """Stop serving the entry on its stream; the stream is told (``status``) unless None."""
        stream, self.stream = self.stream, None
        if stream is None:
            return
        stream.attached.pop(self.partition_session_id, None)
        if status is not None:
            stream.send(read_wire.direct_stop(self.partition_session_id, status, reason))

    def relocated(self) -> bool:
        """Whether the partition's tablet moved since the entry was registered (a new generation):
        if so, the entry is registered again, on the partition's node now, and its stream told it is gone."""
        partition = self.partition
        if partition.generation == self.generation:
            return False
        self.detach()
        self.node_id, self.generation = partition.node_id, partition.generation
        return True

    def take_next(self) -> bytes | None:
        """The next kept read its stream has not sent yet, or None."""
        kept = self.reads.get(self.next_to_send)
        if kept is None:
            return None
        self.next_to_send += 1
        return kept[0]


class DirectReadCache:
    """The entries of every node's cache, keyed by (read session id, partition session id); an entry
    is visible only to the node it names."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], DirectPartition] = {}

    def register(self, read_session_id: str, entry: DirectPartition) -> None:
        self._entries[(read_session_id, entry.partition_session_id)] = entry

    def forget(self, read_session_id: str, entry: DirectPartition) -> None:
        """The entry is gone (the partition session released, or its read session ended)."""
        if self._entries.get((read_session_id, entry.partition_session_id)) is entry:
            del self._entries[(read_session_id, entry.partition_session_id)]
        entry.detach()

    def lookup(self, node_id: int, read_session_id: str, partition_session_id: int) -> DirectPartition | None:
        entry = self._entries.get((read_session_id, partition_session_id))
        if entry is None or entry.node_id != node_id:
            return None
        return entry


class DirectReadService:
    """Handles every StreamDirectRead call of one server (any of its nodes)."""

    def __init__(self, state: ServerState, cache: DirectReadCache) -> None:
        self.state = state
        self.cache = cache

    async def stream_direct_read(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any], node: ServerNode
    ) -> AsyncIterator[Any]:
        """One StreamDirectRead call, served by ``node``."""
        state = self.state
        wakeup = asyncio.Event()
        inbox = Inbox(requests, wakeup)
        handle = state.faults.register("direct_read", wakeup)
        stream = DirectStream(node.node_id, wakeup)
        try:
            init, refused = await receive_handshake(state, inbox, context, "StreamDirectRead", DirectFromServer)
            if refused is not None:
                yield refused
                return
            try:
                stream.session_id = self._handshake(init)
            except StorageError as exc:
                yield read_wire.direct_error(exc.status, exc.message)
                return
            yield read_wire.direct_init_response()
            while True:
                while inbox.messages:
                    try:
                        self._handle(stream, inbox.messages.popleft())
                    except StorageError as exc:
                        yield read_wire.direct_error(exc.status, exc.message)
                        return
                    except TokenRefused as exc:
                        await context.abort(grpc.StatusCode.UNAUTHENTICATED, exc.details)
                if handle.broken:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, state.faults.details)
                # Start answers and stops go first: a partition's data never precedes its start.
                while stream.outbox:
                    yield stream.outbox.pop(0)
                sent = True
                while sent and not handle.broken:
                    sent = False
                    for entry in list(stream.attached.values()):
                        payload = entry.take_next()
                        if payload is not None:
                            sent = True
                            state.stats.count_read_bytes(len(payload), entry.partition.node_id != node.node_id)
                            yield payload
                if inbox.unparsable:
                    await context.abort(grpc.StatusCode.INTERNAL, inbox.unparsable)
                if inbox.closed and not inbox.messages:
                    return
                if stream.outbox or handle.broken:
                    continue
                await wakeup.wait()
                wakeup.clear()
        finally:
            for entry in list(stream.attached.values()):
                entry.detach(status=None)
            state.faults.unregister(handle)
            await inbox.close()

    def _handshake(self, init: Any) -> str:
        """The read session id the stream serves; a StorageError ends the stream."""
        if not init.topics_read_settings:
            raise StorageError("BAD_REQUEST", "no topics in init request")
        if not init.session_id:
            raise StorageError("BAD_REQUEST", "no session id in init request")
        for settings in init.topics_read_settings:
            if not settings.path:
                raise StorageError("BAD_REQUEST", "empty topic in init request")
        for settings in init.topics_read_settings:
            topic = self.state.storage.topic(settings.path)  # SCHEME_ERROR when missing
            if init.consumer:
                topic.reading_consumer(init.consumer)
        return str(init.session_id)

    def _handle(self, stream: DirectStream, request: Any) -> None:
        kind = request.WhichOneof("client_message")
        if kind == "start_direct_read_partition_session_request":
            start = request.start_direct_read_partition_session_request
            entry = self.cache.lookup(stream.node_id, stream.session_id, start.partition_session_id)
            if entry is None:
                raise StorageError("BAD_REQUEST", "Unknown session")
            if entry.generation != start.generation:
                stream.send(read_wire.direct_stop(start.partition_session_id, "UNAVAILABLE", "Generation mismatch"))
                return
            stream.send(read_wire.direct_start_response(start.partition_session_id, start.generation))
            entry.attach(stream, start.last_direct_read_id + 1)
        elif kind == "update_token_request":
            refusal = refused_in_band(self.state.auth, request.update_token_request.token)
            if refusal:
                raise TokenRefused(refusal)
            self.state.stats.token_updates += 1
            stream.send(read_wire.direct_update_token_response())
        elif kind == "init_request":
            raise StorageError("BAD_REQUEST", "got second init request")
        else:
            raise StorageError("BAD_REQUEST", "unsupported request")
