"""StreamWrite on the local server: handshake, partition choice, deduplication, acks.

Deduplication follows YDB: within a partition, a message whose producer has already written
that seq_no (or a later one) is answered "skipped, already written" and not stored again.
Without a producer id there is no deduplication. A producer id is bound to one partition (picked
round-robin among active partitions the first time) and keeps it across sessions.

A WriteRequest naming a transaction (``tx``) must name an open read-write transaction of a live
query session (else the stream fails with BAD_SESSION / NOT_FOUND / BAD_REQUEST). Its messages
are acknowledged ``written_in_tx`` and held by the transaction; they reach the partition, at
consecutive offsets and deduplicated again, only when it commits.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from .._proto import ydb_topic_pb2 as pb
from ._inbox import Inbox, receive_handshake
from ._replies import SUCCESS, duration, failure
from .partition_log import NewMessage, Partition, StorageError, Topic

if TYPE_CHECKING:
    from .server import LocalTopicServer

FromServer = pb.StreamWriteMessage.FromServer
MAX_PRODUCER_ID_LENGTH = 2048
_SKIPPED = pb.StreamWriteMessage.WriteResponse.WriteAck.Skipped.REASON_ALREADY_WRITTEN


def _failure(status: str, message: str) -> Any:
    return failure(FromServer, status, message)


class WriteService:
    """Handles every StreamWrite call of one server."""

    _session_ids = itertools.count(1)

    def __init__(self, server: LocalTopicServer) -> None:
        self.server = server

    async def stream_write(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        server = self.server
        wakeup = asyncio.Event()
        inbox = Inbox(requests, wakeup)
        handle = server.faults.register("write", wakeup)
        try:
            init, refused = await receive_handshake(server, inbox, context, "StreamWrite", FromServer)
            if refused is not None:
                yield refused
                return
            try:
                topic, partition, producer_id, meta = self._handshake(init)
            except StorageError as exc:
                yield _failure(exc.status, exc.message)
                return
            session_id = f"local-write-{next(self._session_ids)}-{uuid.uuid4().hex[:8]}"
            reply = FromServer(status=SUCCESS)
            reply.init_response.session_id = session_id
            reply.init_response.partition_id = partition.partition_id
            reply.init_response.last_seq_no = partition.last_seq_no(producer_id) if producer_id else 0
            reply.init_response.supported_codecs.codecs.extend(topic.settings.supported_codecs)
            yield reply

            while True:
                while inbox.messages and not handle.broken:
                    request = inbox.messages.popleft()
                    kind = request.WhichOneof("client_message")
                    if kind == "write_request":
                        try:
                            response = self._write(topic, partition, producer_id, meta, request.write_request, handle)
                        except StorageError as exc:
                            yield _failure(exc.status, exc.message)
                            return
                        if handle.is_broken():
                            break  # stored, but the ack is lost with the stream: the client must resend
                        yield response
                    elif kind == "update_token_request":
                        refusal = server.auth.check_token(request.update_token_request.token)
                        if refusal:
                            yield _failure("UNAUTHORIZED", refusal)
                            return
                        reply = FromServer(status=SUCCESS)
                        reply.update_token_response.SetInParent()
                        yield reply
                    else:
                        yield _failure("BAD_REQUEST", f"unexpected {kind} after the handshake")
                        return
                if handle.broken:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, server.faults.details)
                if inbox.closed and not inbox.messages:
                    return
                await wakeup.wait()
                wakeup.clear()
        finally:
            server.faults.unregister(handle)
            await inbox.close()

    def _handshake(self, init: Any) -> tuple[Topic, Partition, str, tuple[tuple[str, str], ...]]:
        storage = self.server.storage
        topic = storage.topic(init.path)
        producer_id = init.producer_id
        if len(producer_id) > MAX_PRODUCER_ID_LENGTH:
            raise StorageError("BAD_REQUEST", f"producer_id is longer than {MAX_PRODUCER_ID_LENGTH} characters")
        how = init.WhichOneof("partitioning")
        if how == "partition_id":
            partition = topic.partition(init.partition_id)
        elif how == "partition_with_generation":
            pg = init.partition_with_generation
            partition = topic.partition(pg.partition_id)
            if pg.generation != partition.generation:
                raise StorageError(
                    "BAD_REQUEST",
                    f"partition {pg.partition_id} has generation {partition.generation}, not {pg.generation}",
                )
        elif how == "message_group_id":
            if producer_id and init.message_group_id != producer_id:
                raise StorageError("BAD_REQUEST", "message_group_id must equal producer_id when both are set")
            partition = topic.bind_group(init.message_group_id)
        elif producer_id:
            partition = topic.bind_producer(producer_id)
        else:
            partition = topic.next_active_partition()
        if not partition.active:
            raise StorageError("OVERLOADED", f"partition {partition.partition_id} is inactive; it was split")
        if producer_id and how in ("partition_id", "partition_with_generation"):
            topic.producer_partition.setdefault(producer_id, partition.partition_id)
        return topic, partition, producer_id, tuple(sorted(init.write_session_meta.items()))

    def _write(
        self,
        topic: Topic,
        partition: Partition,
        producer_id: str,
        meta: tuple[tuple[str, str], ...],
        request: Any,
        handle: Any,
    ) -> Any:
        started = time.perf_counter()
        codec = request.codec or 1
        allowed = topic.settings.supported_codecs
        if allowed and codec not in allowed:
            raise StorageError("BAD_REQUEST", f"codec {codec} is not supported by topic {topic.path}: {allowed}")
        if topic.path not in self.server.storage.topics:
            raise StorageError("SCHEME_ERROR", f"path {topic.path} was dropped")
        tx = None
        if request.HasField("tx"):
            tx = self.server.query.transaction(request.tx.session, request.tx.id)
            tx.require_read_write("a topic write")
            if not partition.active:
                raise StorageError(
                    "OVERLOADED", f"partition {partition.partition_id} is inactive (split); write to its children"
                )
        written_at = time.time_ns()
        reply = FromServer(status=SUCCESS)
        response = reply.write_response
        response.partition_id = partition.partition_id
        acks = response.acks
        stored = 0
        held = 0
        for m in request.messages:
            ack = acks.add(seq_no=m.seq_no)
            duplicate = (
                tx.writes.is_duplicate(partition, producer_id, m.seq_no)
                if tx is not None
                else partition.is_duplicate(producer_id, m.seq_no)
            )
            if duplicate:
                ack.skipped.reason = _SKIPPED
                continue
            new = NewMessage(
                seq_no=m.seq_no,
                created_at_ns=m.created_at.seconds * 1_000_000_000 + m.created_at.nanos,
                codec=codec,
                data=m.data,
                uncompressed_size=m.uncompressed_size or len(m.data),
                producer_id=producer_id,
                message_group_id=m.message_group_id or producer_id,
                metadata=tuple((item.key, item.value) for item in m.metadata_items),
                write_session_meta=meta,
            )
            if tx is not None:
                tx.writes.add(partition, new)
                ack.written_in_tx.SetInParent()
                held += 1
                continue
            ack.written.offset = partition.append(new, written_at).offset
            stored += 1
        if stored:
            self.server.storage.notify()
        if stored or held:
            # Held messages count too: a lost ack inside a transaction must be injectable.
            self.server.faults.messages_stored(handle, stored + held)
        elapsed = time.perf_counter() - started
        stats = response.write_statistics
        stats.persisting_time.CopyFrom(duration(elapsed))
        stats.min_queue_wait_time.CopyFrom(duration(0))
        stats.max_queue_wait_time.CopyFrom(duration(0))
        stats.partition_quota_wait_time.CopyFrom(duration(0))
        stats.topic_quota_wait_time.CopyFrom(duration(0))
        return reply
