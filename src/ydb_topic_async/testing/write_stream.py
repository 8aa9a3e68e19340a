"""StreamWrite on the local server: handshake, partition choice, validation, deduplication, acks.

As in YDB (``ydb/services/persqueue_v1/actors/write_session_actor``):

- The source id is the ``message_group_id`` when one is given (not empty), else the
  ``producer_id``; with a source id, deduplication is on: a message whose seq_no the source
  already wrote to the partition (or a lower one) is answered "skipped, already written" and not
  stored again. With neither there is no deduplication. A ``producer_id`` is accepted with no
  (or an empty) ``message_group_id``, the same one, or a partition; a different group is
  BAD_REQUEST ("unsupported producer_id / message_group_id / partition_id settings in init
  request", ``TWriteSessionTopicApiActor::HandleInit``).
- A new source id is placed by the MD5 of its name (see ``Topic.partition_for_key``) and keeps
  its partition across sessions; after a split it moves to the child owning its key, seq_nos
  and all. Asking for an explicit partition other than the bound one (or its descendant) is
  BAD_REQUEST.
- Every WriteRequest is checked before anything is stored: it must carry messages, a codec
  (not 0) the topic accepts, seq_nos greater than 0 and strictly increasing, created_at within
  the protobuf Timestamp range, and per-message metadata of at most 4096 bytes. A bad request
  ends the session with BAD_REQUEST. Times are stored with millisecond precision.
- A path that does not exist, or is not a topic (a directory), is SCHEME_ERROR at the
  handshake with issue code UNKNOWN_TOPIC, in the words of YDB's describer. A topic dropped (and
  maybe recreated) under an open session ends it with SCHEME_ERROR; nothing is acknowledged into
  a dropped topic.
- One session owns a (partition, source id): a new session with the same source id takes it
  over and the older one is ended at once with BAD_REQUEST "status is not ok: ownership session
  is killed by another session with id <new session> partition id <N>" (YDB's
  ``TOwnerInfo::GenerateCookie``); its requests not yet stored are dropped, unanswered. A
  session without a source id owns nothing.
- A session whose partition's tablet moved to another node (``LocalTopicCluster.stop_node``)
  ends with UNAVAILABLE "pipe to partition's tablet is dead"; a direct write
  (``partition_with_generation``) naming another generation, or sent to a node of a cluster
  that does not run the partition, is refused the same way.

A WriteRequest naming a transaction (``tx``) must name an open read-write transaction of a live
query session (else the stream fails with BAD_SESSION / NOT_FOUND / BAD_REQUEST). Its messages
are acknowledged ``written_in_tx`` and held by the transaction; they reach the partition, at
consecutive offsets and deduplicated again, only when it commits.

With ``LocalTopicServer(write_quotas=True)`` a request waits for its partition's write quota
(``quotas``) before it is stored, and the wait is reported in its WriteStatistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from .._proto import ydb_topic_pb2 as pb
from ._inbox import Inbox, receive_handshake
from ._replies import SUCCESS, failure
from .auth import refused_in_band
from .retention import check_not_full
from .storage import NewMessage, Partition, Topic, source_key
from .stored import READ_ITEM_OVERHEAD, READ_MESSAGE_OVERHEAD, StorageError, StoredRow

if TYPE_CHECKING:
    from .nodes import ServerNode
    from .query_service import QueryService, Transaction
    from .state import ServerState

FromServer = pb.StreamWriteMessage.FromServer
MAX_PRODUCER_ID_LENGTH = 2048
MAX_METADATA_BYTES = 4096
"""Keys plus values of one message's metadata, at most (YDB's MAX_METADATA_SIZE_PER_MESSAGE)."""
_MIN_TIMESTAMP_SECONDS = -62_135_596_800  # 0001-01-01T00:00:00Z
_MAX_TIMESTAMP_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z
_SKIPPED = pb.StreamWriteMessage.WriteResponse.WriteAck.Skipped.REASON_ALREADY_WRITTEN
OWNERSHIP_KILLED_ISSUE_CODE = 500_003
"""The issue code of a session killed by a newer owner: 500000 plus PersQueue's BAD_REQUEST (3)."""
UNKNOWN_TOPIC_ISSUE_CODE = 500_017
"""The issue code of a write session whose path is not a topic (PersQueue's UNKNOWN_TOPIC)."""


def _failure(status: str, message: str, issue_code: int = 0) -> Any:
    return failure(FromServer, status, message, issue_code)


def _bad(message: str) -> StorageError:
    return StorageError("BAD_REQUEST", f"bad write request - {message}")


@dataclass(slots=True, eq=False)
class _Session:
    """What one write session is bound to."""

    topic: Topic
    partition: Partition
    source_id: str
    meta: tuple[tuple[str, str], ...]
    generation: int
    """The partition's tablet generation when the session started: a move (a new generation)
    ends the session, as its pipe to the tablet dies."""
    session_id: str = ""
    wakeup: asyncio.Event | None = None
    killed: StorageError | None = None
    """Set once another session took the producer's ownership: the session ends with it."""


CheckedRow = tuple[int, int, bytes, int, str, tuple[tuple[str, bytes], ...], int]
"""One checked message: (seq_no, created_at_ns, data, uncompressed_size, message_group_id, metadata,
read size). A plain tuple: it is built once per message written, so it must be cheap."""


@dataclass(slots=True)
class _Batch:
    """A checked WriteRequest, ready to store."""

    rows: list[CheckedRow]
    size: int
    """The bytes of the messages' data."""
    codec: int
    tx: Transaction | None


class WriteService:
    """Handles every StreamWrite call of one server."""

    _session_ids = itertools.count(1)

    def __init__(self, state: ServerState, transactions: QueryService) -> None:
        self.state = state
        self.transactions = transactions
        """Where a write naming a transaction finds it."""
        self.owners: dict[tuple[Partition, str], _Session] = {}
        """The session that owns each (partition, source id): the newest one to start."""

    async def stream_write(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any], node: ServerNode
    ) -> AsyncIterator[Any]:
        """One StreamWrite call, served by ``node``."""
        state = self.state
        wakeup = asyncio.Event()
        inbox = Inbox(requests, wakeup)
        handle = state.faults.register("write", wakeup)
        session: _Session | None = None
        try:
            init, refused = await receive_handshake(state, inbox, context, "StreamWrite", FromServer)
            if refused is not None:
                yield refused
                return
            try:
                session = self._handshake(init, node)
            except StorageError as exc:
                yield _failure(exc.status, exc.message, exc.issue_code)
                return
            session.wakeup = wakeup
            session.session_id = f"local-write-{next(self._session_ids)}-{uuid.uuid4().hex[:8]}"
            self._take_ownership(session)
            session.topic.watchers.add(wakeup)
            reply = FromServer(status=SUCCESS)
            reply.init_response.session_id = session.session_id
            reply.init_response.partition_id = session.partition.partition_id
            reply.init_response.last_seq_no = session.partition.last_seq_no(session.source_id)
            reply.init_response.supported_codecs.codecs.extend(session.topic.settings.supported_codecs)
            yield reply

            while True:
                while inbox.messages and not handle.broken and _interruption(session) is None:
                    request = inbox.messages.popleft()
                    kind = request.WhichOneof("client_message")
                    if kind == "write_request":
                        state.stats.write_requests += 1
                        try:
                            batch = self._check(session, request.write_request)
                            waited = await self._wait_for_quota(session.partition, batch, wakeup, handle, inbox)
                            response = self._store(session, batch, waited, handle)
                        except StorageError as exc:
                            yield _failure(exc.status, exc.message, exc.issue_code)
                            return
                        state.stats.messages_received += len(batch.rows)
                        if handle.is_broken():
                            break  # stored, but the ack is lost with the stream: the client must resend
                        yield response
                    elif kind == "update_token_request":
                        refusal = refused_in_band(state.auth, request.update_token_request.token)
                        if refusal:
                            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal)
                        state.stats.token_updates += 1
                        reply = FromServer(status=SUCCESS)
                        reply.update_token_response.SetInParent()
                        yield reply
                    elif kind == "init_request":
                        yield _failure("BAD_REQUEST", "got second init request")
                        return
                    else:
                        yield _failure("BAD_REQUEST", "'client_message' is not set")
                        return
                if handle.broken:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, state.faults.details)
                if not session.topic.alive:
                    yield _failure("SCHEME_ERROR", f"topic {session.topic.path} was dropped")
                    return
                interruption = _interruption(session)
                if interruption is not None:
                    yield _failure(interruption.status, interruption.message, interruption.issue_code)
                    return
                if inbox.unparsable:
                    await context.abort(grpc.StatusCode.INTERNAL, inbox.unparsable)
                if inbox.closed and not inbox.messages:
                    return
                await wakeup.wait()
                wakeup.clear()
        finally:
            if session is not None:
                session.topic.watchers.discard(wakeup)
                self._release_ownership(session)
            state.faults.unregister(handle)
            await inbox.close()

    # --- producer ownership -----------------------------------------------------------------

    def _take_ownership(self, session: _Session) -> None:
        """Make ``session`` the owner of its (partition, source id); the session that owned it is
        killed at once, as YDB's partition gives ownership to the newest session (every session
        asks with ``force``). A session without a source id owns nothing and conflicts with nobody."""
        if not session.source_id:
            return
        key = (session.partition, session.source_id)
        previous = self.owners.get(key)
        self.owners[key] = session
        if previous is not None and previous is not session:
            # YDB's partition answers the old owner BAD_REQUEST (issue code 500003), and its write
            # session closes with "status is not ok: " and that reason.
            previous.killed = StorageError(
                "BAD_REQUEST",
                f"status is not ok: ownership session is killed by another session with id {session.session_id} "
                f"partition id {session.partition.partition_id}",
                issue_code=OWNERSHIP_KILLED_ISSUE_CODE,
            )
            if previous.wakeup is not None:
                previous.wakeup.set()

    def _release_ownership(self, session: _Session) -> None:
        if session.source_id:
            key = (session.partition, session.source_id)
            if self.owners.get(key) is session:
                del self.owners[key]

    # --- the handshake ----------------------------------------------------------------------

    def _handshake(self, init: Any, node: ServerNode) -> _Session:
        topic = self._topic(init.path)
        producer_id = init.producer_id
        if len(producer_id) > MAX_PRODUCER_ID_LENGTH:
            raise StorageError("BAD_REQUEST", f"producer_id is longer than {MAX_PRODUCER_ID_LENGTH} characters")
        how = init.WhichOneof("partitioning")
        group = init.message_group_id if how == "message_group_id" else ""
        if producer_id and group and group != producer_id:
            # YDB accepts a producer id only with no message group, the same one, or a partition.
            raise StorageError(
                "BAD_REQUEST", "unsupported producer_id / message_group_id / partition_id settings in init request"
            )
        source_id = group or producer_id
        if how in ("partition_id", "partition_with_generation"):
            partition = self._explicit_partition(topic, init, how, source_id, node)
        elif source_id:
            partition = topic.bound_partition(source_id) or topic.partition_for_key(source_key(source_id))
            topic.bind(source_id, partition)
        else:
            partition = topic.next_active_partition()
        meta = tuple(sorted(init.write_session_meta.items()))
        return _Session(topic, partition, source_id, meta, partition.generation)

    def _topic(self, path: str) -> Topic:
        """The topic a write session names. A path that does not exist or is not a topic is
        SCHEME_ERROR with issue code UNKNOWN_TOPIC, in the words of YDB's describer ("You do not
        have access permissions or the '<path>' does not exist", "The '<path>' path is not a
        topic"; the write session's ``ErrorCodeFromDescriberStatus``)."""
        storage = self.state.storage
        full = storage.normalize(path)
        topic = storage.topics.get(full)
        if topic is not None:
            return topic
        if storage.is_directory(full):
            message = f"The '{full}' path is not a topic"
        else:
            message = f"You do not have access permissions or the '{full}' does not exist"
        raise StorageError("SCHEME_ERROR", message, UNKNOWN_TOPIC_ISSUE_CODE)

    def _explicit_partition(self, topic: Topic, init: Any, how: str, source_id: str, node: ServerNode) -> Partition:
        pid = init.partition_id if how == "partition_id" else init.partition_with_generation.partition_id
        if not 0 <= pid < len(topic.partitions) and topic.settings.autopartitioned:
            raise StorageError("OVERLOADED", f"partition {pid} of {topic.path} is not active")
        partition = topic.partition(pid)
        if how == "partition_with_generation":
            # Direct write: the partition's tablet must be the generation the client located, on the
            # node that took the stream; otherwise the pipe to it is refused (PartitionNotLocal),
            # which ends the session with UNAVAILABLE, and the client locates the partition again.
            generation = init.partition_with_generation.generation
            if generation != partition.generation or (self.state.clustered and partition.node_id != node.node_id):
                raise StorageError("UNAVAILABLE", "pipe to partition's tablet is dead")
        if not partition.active:
            raise StorageError("OVERLOADED", f"partition {pid} is inactive; it was split")
        if source_id:
            bound = topic.source_partition.get(source_id)
            if bound is not None and not topic.descends_from(partition, bound):
                raise StorageError(
                    "BAD_REQUEST",
                    f"producer {source_id!r} writes to partition {bound} of {topic.path}; "
                    f"it cannot write to partition {pid}",
                )
            if bound is not None and bound != pid:
                topic.inherit_seq_no(source_id, topic.partitions[bound], partition)
            topic.bind(source_id, partition)
        return partition

    # --- one write request ------------------------------------------------------------------

    def _check(self, session: _Session, request: Any) -> _Batch:
        """Validate a WriteRequest as YDB does, before anything of it is stored."""
        topic, partition = session.topic, session.partition
        if not topic.alive:
            raise StorageError("SCHEME_ERROR", f"topic {topic.path} was dropped")
        messages = request.messages
        if not messages:
            raise _bad("messages meta repeated fields are empty, write request contains no messages")
        codec = request.codec
        if codec == 0:
            raise _bad("codec is invalid: unspecified (id 0)")
        allowed = topic.settings.supported_codecs
        if allowed and codec not in allowed:
            raise _bad(f"codec is invalid: codec {codec} is not configured for topic {topic.path}: {allowed}")
        tx = None
        if request.HasField("tx"):
            tx = self.transactions.transaction(request.tx.session, request.tx.id)
            tx.require_read_write("a topic write")
            if not partition.active:
                raise StorageError(
                    "OVERLOADED", f"partition {partition.partition_id} is inactive (split); write to its children"
                )
        source_id = session.source_id
        rows: list[CheckedRow] = []
        append = rows.append
        size = 0
        previous = 0
        # The per-message loop reads each field once and builds one tuple; everything else about
        # the request (deduplication, storage, bookkeeping) is done per request in ``_store``.
        for m in messages:
            seq_no = m.seq_no
            if seq_no <= previous:
                index = len(rows)
                if seq_no <= 0:
                    raise _bad(
                        f"sequence number must be greater than 0. Value at position {index} has seq_no {seq_no}"
                    )
                raise _bad(
                    f"sequence numbers are unsorted. Value {seq_no} at position {index} is less than or equal "
                    f"to value {previous} at position {index - 1}"
                )
            previous = seq_no
            created = m.created_at
            seconds, nanos = created.seconds, created.nanos
            if not (_MIN_TIMESTAMP_SECONDS <= seconds <= _MAX_TIMESTAMP_SECONDS and 0 <= nanos < 1_000_000_000):
                raise _bad(f"created_at of the message at position {len(rows)} is not a valid timestamp")
            data = m.data
            group = m.message_group_id or source_id
            read_size = len(data) + len(group) + READ_MESSAGE_OVERHEAD
            metadata: tuple[tuple[str, bytes], ...] = ()
            if m.metadata_items:
                metadata = tuple((item.key, item.value) for item in m.metadata_items)
                if sum(len(k.encode()) + len(v) for k, v in metadata) > MAX_METADATA_BYTES:
                    raise StorageError(
                        "BAD_REQUEST", f"Message level metadata size is limited to {MAX_METADATA_BYTES} per message"
                    )
                read_size += sum(len(k) + len(v) + READ_ITEM_OVERHEAD for k, v in metadata)
            size += len(data)
            append((
                seq_no,
                (seconds * 1000 + nanos // 1_000_000) * 1_000_000,
                data,
                m.uncompressed_size or len(data),
                group,
                metadata,
                read_size,
            ))
        if tx is None and topic.settings.retention_storage_mb:
            check_not_full(partition, size, self.state.clock.now_ns())
        return _Batch(rows, size, codec, tx)

    async def _wait_for_quota(
        self, partition: Partition, batch: _Batch, wakeup: asyncio.Event, handle: Any, inbox: Inbox
    ) -> float:
        """Throttle a request to its partition's write quota (with quotas on); returns the seconds waited."""
        quotas = self.state.quotas
        if quotas is None or batch.tx is not None:
            return 0.0
        wait = quotas.reserve(partition, batch.size)
        if not wait:
            return 0.0
        try:
            deadline = time.monotonic() + wait  # the client leaving, a fault or the server stopping cut it short
            while not (handle.broken or inbox.error or self.state.closing) and (
                left := deadline - time.monotonic()
            ) > 0:
                # Short slices: a server stopping mid-wait must not wait for the whole quota.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wakeup.wait(), min(left, 0.05))
                wakeup.clear()  # the stream loop looks at its inbox again once this request is done
        finally:
            quotas.waited(partition, batch.size)
        return wait

    def _store(self, session: _Session, batch: _Batch, waited: float, handle: Any) -> Any:
        started = time.perf_counter()
        if not session.topic.alive:  # dropped while the request waited for its quota
            raise StorageError("SCHEME_ERROR", f"topic {session.topic.path} was dropped")
        interrupted = _interruption(session)  # or killed, or its partition moved, meanwhile
        if interrupted is not None:
            raise interrupted
        partition, source_id, tx = session.partition, session.source_id, batch.tx
        storage = self.state.storage
        written_at = storage.clock.now_ns() // 1_000_000 * 1_000_000
        reply = FromServer(status=SUCCESS)
        response = reply.write_response
        response.partition_id = partition.partition_id
        add_ack = response.acks.add
        rows = batch.rows
        stored = 0
        held = 0
        if tx is not None:
            held = self._hold(session, batch, add_ack)
        else:
            # Seq_nos increase within a request, so what the source already wrote is a prefix.
            skip = 0
            if source_id:
                last = partition.last_seq_no(source_id)
                while skip < len(rows) and rows[skip][0] <= last:
                    add_ack(seq_no=rows[skip][0]).skipped.reason = _SKIPPED
                    skip += 1
            fresh = rows[skip:] if skip else rows
            if fresh:
                codec, meta = batch.codec, session.meta
                offset = partition.end_offset
                messages: list[StoredRow] = []
                keep = messages.append
                for seq_no, created, data, size, group, metadata, _ in fresh:
                    add_ack(seq_no=seq_no).written.offset = offset
                    keep((offset, seq_no, created, written_at, source_id, group, codec, data, size, metadata, meta))
                    offset += 1
                data_bytes = batch.size - sum(len(row[2]) for row in rows[:skip]) if skip else batch.size
                partition.extend(messages, data_bytes, [row[6] for row in fresh])
                stored = len(messages)
                storage.appended(partition, stored)
                storage.notify()
        if stored or held:
            # Held messages count too: a lost ack inside a transaction must be injectable.
            self.state.faults.messages_stored(handle, stored + held)
        stats = response.write_statistics
        _set_milliseconds(stats.persisting_time, time.perf_counter() - started)
        stats.min_queue_wait_time.SetInParent()  # zero, present
        stats.max_queue_wait_time.SetInParent()
        _set_milliseconds(stats.partition_quota_wait_time, waited)
        stats.topic_quota_wait_time.SetInParent()
        return reply

    @staticmethod
    def _hold(session: _Session, batch: _Batch, add_ack: Any) -> int:
        """Hold a transaction's messages (deduplicated against the partition and the transaction); returns how many."""
        tx, partition, source_id = batch.tx, session.partition, session.source_id
        assert tx is not None
        held = 0
        for seq_no, created, data, uncompressed, group, metadata, _ in batch.rows:
            ack = add_ack(seq_no=seq_no)
            if tx.writes.is_duplicate(partition, source_id, seq_no):
                ack.skipped.reason = _SKIPPED
                continue
            tx.writes.add(partition, NewMessage(
                seq_no=seq_no,
                created_at_ns=created,
                codec=batch.codec,
                data=data,
                uncompressed_size=uncompressed,
                producer_id=source_id,
                message_group_id=group,
                metadata=metadata,
                write_session_meta=session.meta,
            ))
            ack.written_in_tx.SetInParent()
            held += 1
        return held


def _interruption(session: _Session) -> StorageError | None:
    """Why ``session`` ends now, or None: another session took its producer's ownership, or its
    partition's tablet moved to another node (a new generation; a split is answered elsewhere)."""
    if session.killed is not None:
        return session.killed
    partition = session.partition
    if partition.active and partition.generation != session.generation:
        return StorageError("UNAVAILABLE", "pipe to partition's tablet is dead")
    return None


def _set_milliseconds(target: Any, seconds: float) -> None:
    """Set a Duration to ``seconds`` rounded to whole milliseconds, the precision YDB reports."""
    milliseconds = round(seconds * 1000)
    target.seconds, remainder = divmod(milliseconds, 1000)
    target.nanos = remainder * 1_000_000
