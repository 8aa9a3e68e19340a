"""One StreamRead session on the local server: its partition sessions and YDB's rules for them.

As in YDB (``ydb/services/persqueue_v1/actors/read_session_actor`` and ``partition_actor``):

- StartPartitionSessionRequest carries the committed offset, also as ``partition_offsets.start``
  (as the PartitionSessionStatusResponse does). The client's StartPartitionSessionResponse may
  set ``read_offset`` (below the committed offset: BAD_REQUEST) and ``commit_offset`` (moving
  the committed offset forward up to the read position; a lower one is ignored). Data below the
  committed offset is never served; below the partition's start (retention), reading starts at
  the first message still stored.
- Data goes out within the client's byte credit, one partition per ReadResponse, the partition
  sessions taking turns.
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
- A session with ``auto_partitioning_support`` that read a split partition to its end gets an
  EndPartitionSession naming the children and their other parents.
- Direct read (``InitRequest.direct_read``, see ``direct_read``): starts carry the partition's
  location; reads are kept for the node hosting the partition instead of sent, and cost the
  credit their ``bytes_size``; unacknowledged ones hold up to ``MAX_DIRECT_BYTES_IN_FLIGHT`` of
  the session (YDB's ``MAX_INFLY_BYTES``), freed by each DirectReadAck (acks out of order or of
  unknown reads: BAD_REQUEST). Stops name the last read formed (``last_direct_read_id``), and a
  partition session is released only on the client's non-graceful answer: a graceful stop it
  confirmed is followed by a non-graceful one, which it must answer too (answering that one
  unasked: BAD_REQUEST). A released partition gives the bytes of its unacknowledged reads back
  to the credit. (``TReadSessionActor``: ``Handle(TEvReleased)``, ``SendReleaseSignal``,
  ``DropPartition``, ``ProcessBalancerDead``.)

A ``ReadSession`` holds the state and applies these rules; it queues the messages it answers with
(built by ``read_wire``) in its ``outbox``. The stream handler (``read_stream``) feeds it client
messages and sends what it queued; the read balancer (``read_balancer``) starts and stops its
partition sessions. A rule broken raises ``StorageError``, which ends the stream with its status.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from . import read_wire
from .direct_read import DirectPartition, DirectReadCache
from .storage import Consumer, Partition, Topic
from .stored import ROW_DATA, StorageError, StoredRow, read_size

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""A ReadResponse is cut at about this size even when the client's credit allows more."""
MAX_RESPONSE_MESSAGES = 10_000
MAX_DIRECT_BYTES_IN_FLIGHT = 25 * 1024 * 1024
"""A direct-read session forms no more reads while its unacknowledged ones hold this many bytes
(YDB's ``MAX_INFLY_BYTES``, ``read_session_actor.h``)."""


def bad_request(message: str) -> StorageError:
    return StorageError("BAD_REQUEST", message)


@dataclass
class Selector:
    """What a read session reads of one topic (the client's TopicReadSettings)."""

    topic: Topic
    partition_ids: frozenset[int] | None
    read_from_ns: int
    max_lag_ns: int


@dataclass(eq=False)
class PartitionSessionState:
    """One partition session: one partition as read by one read session, from the
    StartPartitionSessionRequest the server sends to the stop (or end) that releases it."""

    session_id: int
    """The partition session id the client names the partition by on this stream."""
    topic: Topic
    partition: Partition
    consumer: Consumer | None
    """The reading consumer; None for a reader without one (it commits nothing)."""
    selector: Selector
    """The reader's settings for the topic (partitions, read_from, max_lag)."""
    committed: int = 0
    """The committed offset as this session knows it (the start of the next commit range)."""
    started: bool = False
    """The client confirmed the start (StartPartitionSessionResponse): messages may be sent."""
    read_offset: int = 0
    """The next offset to send."""
    stopping: bool = False
    """A graceful stop was sent and not confirmed yet: nothing more is sent."""
    end_sent: bool = False
    """An EndPartitionSession was sent (the partition was split or merged and read to its end)."""
    pending_commits: list[tuple[int, int]] = field(default_factory=list)
    """Commit ranges received ahead of the committed offset, applied once the gap before them closes."""
    created_ns: int = 0
    """When the session was created (server clock, ns)."""
    in_flight: deque[tuple[int, int]] = field(default_factory=deque)
    """(offset, payload bytes) of the messages sent and not committed (under a partition limit)."""
    in_flight_bytes: int = 0
    """The payload bytes of ``in_flight``."""
    direct: DirectPartition | None = None
    """Its entry in the direct-read cache, when the session reads directly."""

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
        direct_cache: DirectReadCache | None = None,
    ) -> None:
        self.id = f"local-read-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        self.direct_cache = direct_cache
        """Where the session keeps its reads when it reads directly (``InitRequest.direct_read``); None otherwise."""
        self.direct_bytes_in_flight = 0
        """The bytes_size of the direct reads formed and not acknowledged."""
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
        self.node_id = 1
        """The node serving the session's stream."""
        self.expired: StorageError | None = None
        """Set when the session must end (a CommitOffset without its id reset the partition's session)."""
        self._turn = 0

    def expire(self, reason: str) -> None:
        """End the session: its stream closes with SESSION_EXPIRED and ``reason``, as YDB's read
        session does when a partition forgot it (``TPartitionActor`` turns READ_ERROR_NO_SESSION
        into ``TEvCloseSession``)."""
        if self.expired is None:
            self.expired = StorageError("SESSION_EXPIRED", reason)
            self.wakeup.set()

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

    # --- partition sessions, as the balancer hands them out and takes them back ---------------

    @property
    def direct_read(self) -> bool:
        return self.direct_cache is not None

    def start(self, state: PartitionSessionState) -> None:
        partition = state.partition
        committed = state.consumer.committed_offset(partition) if state.consumer else partition.start_offset
        state.committed = committed
        self.sessions[state.session_id] = state
        if self.direct_cache is not None:
            state.direct = DirectPartition(state.session_id, partition)
            self.direct_cache.register(self.id, state.direct)
        self.send(read_wire.start_partition_session(
            state.session_id, state.topic.path, partition, committed, located=self.direct_read
        ))

    def stop(self, state: PartitionSessionState, graceful: bool) -> None:
        committed = state.consumer.committed_offset(state.partition) if state.consumer is not None else None
        direct = state.direct
        if direct is not None and state.consumer is not None:
            # Released only on the client's answer to the non-graceful stop (sent once).
            if direct.final_stop_sent:
                return
            state.stopping = True
            direct.final_stop_sent = not graceful
        elif graceful:
            state.stopping = True
        else:
            self._drop(state)
        self.send(read_wire.stop_partition_session(
            state.session_id, graceful, committed, direct.last_id if direct is not None else None
        ))

    def _drop(self, state: PartitionSessionState) -> None:
        """Forget a partition session; the bytes of its unacknowledged direct reads go back to the credit."""
        self.sessions.pop(state.session_id, None)
        direct = state.direct
        if direct is not None and self.direct_cache is not None:
            self.direct_bytes_in_flight -= direct.bytes_kept
            self.credit += direct.bytes_kept
            self.direct_cache.forget(self.id, direct)

    def end(self) -> None:
        """The session's stream ended: its direct-read entries go with it."""
        for state in list(self.sessions.values()):
            self._drop(state)

    def relocate(self) -> None:
        """UpdatePartitionSession for each directly read partition whose tablet moved (a new
        generation, perhaps on another node), as YDB's read session does once the partition actor
        restored its reads under the new generation (``TReadSessionActor::Handle(TEvUpdateSession)``).
        The unacknowledged reads keep their ids; the stream serving the old entry is told it is gone."""
        for state in self.sessions.values():
            direct = state.direct
            if direct is not None and direct.relocated():
                self.send(read_wire.update_partition_session(state.session_id, direct.node_id, direct.generation))

    def next_turn(self) -> list[PartitionSessionState]:
        """The partition sessions, starting after the one served last (each gets its turn)."""
        states = list(self.sessions.values())
        if not states:
            return states
        self._turn = (self._turn + 1) % len(states)
        return states[self._turn :] + states[: self._turn]

    # --- client messages ------------------------------------------------------------------------

    def confirm_start(self, response: Any) -> bool:
        """StartPartitionSessionResponse: where to read from and what to mark committed (YDB's rules).

        True when it moved a committed offset (the storage's listeners are to be woken)."""
        state = self.sessions.get(response.partition_session_id)
        if state is None or state.started or state.stopping:
            return False  # a partition session already released: the answer is irrelevant
        partition, consumer = state.partition, state.consumer
        has_read, has_commit = response.HasField("read_offset"), response.HasField("commit_offset")
        read, commit = response.read_offset, response.commit_offset
        if consumer is None and has_commit:
            raise bad_request("can't commit when reading without a consumer")
        committed = state.committed
        if has_read:
            if has_commit and read < commit:
                raise bad_request(
                    f"trying to read from position that is less than position provided to commit: "
                    f"read {read} commit {commit}"
                )
            if has_commit and commit < committed:
                raise bad_request(f"trying to commit to position that is less than committed: commit {commit} "
                                  f"committed {committed}")
            stored = consumer.stored_offset(partition) if consumer is not None else 0
            if read < stored:
                raise bad_request(
                    f"trying to read from position that is less than committed: read {read} committed {stored}"
                )
        position = max(committed, read if has_read else 0)
        moved = False
        if consumer is not None and has_commit and commit > committed:
            if commit > position:
                raise bad_request(f"trying to read from position that is less than provided to commit: "
                                  f"read {position} commit {commit}")
            if commit > partition.end_offset:
                raise bad_request(f"trying to commit to future: commit {commit} endOffset {partition.end_offset}")
            consumer.commit(partition, commit)
            state.committed = commit
            state.release_in_flight()
            moved = True
        read_from = max(state.selector.read_from_ns, consumer.read_from_ns if consumer else 0)
        if read_from:
            position = max(position, partition.first_offset_written_since(read_from))
        state.read_offset = max(position, partition.start_offset)
        state.started = True
        return moved

    def confirm_stop(self, response: Any) -> PartitionSessionState | None:
        """StopPartitionSessionResponse: the partition session released (None when it was already
        gone, or when reading directly it is not released yet)."""
        if self.consumer_name is None:
            raise bad_request("it is forbidden to send StopPartitionSessionResponse when reading without a consumer")
        state = self.sessions.get(response.partition_session_id)
        if state is None:
            return None  # already taken away: nothing to confirm
        direct = state.direct
        where = f"partition {state.partition.partition_id} of {state.topic.path}"
        if direct is not None and not response.graceful:
            if not direct.final_stop_sent:
                raise bad_request(f"release of partition that is not requested is forbidden for {where}")
            self._drop(state)
            return state
        if not state.stopping:
            raise bad_request(
                f"graceful release of partition that is not requested for release is forbidden for {where}"
            )
        if direct is not None:
            if not direct.final_stop_sent:  # the graceful answer: the final, non-graceful stop follows
                self.stop(state, graceful=False)
            return None
        del self.sessions[state.session_id]
        return state

    def acknowledge_direct_read(self, ack: Any) -> None:
        """DirectReadAck: the client processed a direct read; its bytes no longer hold up reading."""
        state = self.sessions.get(ack.partition_session_id)
        if state is None:
            return  # a partition session already released
        if state.direct is None:
            raise bad_request(f"unknown direct read in Ack: {ack.direct_read_id}")
        self.direct_bytes_in_flight -= state.direct.acknowledge(ack.direct_read_id)

    def report_status(self, partition_session_id: int) -> None:
        """PartitionSessionStatusRequest: answer with the partition session's offsets."""
        state = self.sessions.get(partition_session_id)
        if state is None or state.stopping:
            return  # asked about a partition session being released: YDB ignores it
        partition = state.partition
        committed = state.consumer.committed_offset(partition) if state.consumer else partition.start_offset
        self.send(read_wire.partition_session_status(
            state.session_id, committed, partition.end_offset, state.read_offset, partition.last_write_ns
        ))

    def commit(self, request: Any) -> bool:
        """CommitOffsetRequest: commit what follows the committed offsets without a gap.

        True when it moved a committed offset (answered; the storage's listeners are to be woken)."""
        if self.consumer_name is None:
            raise bad_request("can't commit when reading without a consumer")
        if not request.commit_offsets:
            raise bad_request("can't commit without offsets")
        moved: list[tuple[int, int]] = []
        for part in request.commit_offsets:
            state = self.sessions.get(part.partition_session_id)
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
                    raise bad_request(
                        f"offsets range [{start}, {end}) has already committed offsets, double committing is "
                        f"forbidden or incorrect"
                    )
                if end > partition.end_offset:
                    raise bad_request(
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
            if committed > state.consumer.stored_offset(partition):
                # Not below a commit made meanwhile with this session's id (CommitOffset).
                state.consumer.commit(partition, committed)
            moved.append((state.session_id, committed))
        if moved:
            self.send(read_wire.commit_response(moved))
        return bool(moved)

    # --- what the session sends on its own --------------------------------------------------------

    def end_partitions(self) -> None:
        """EndPartitionSession for each split partition this session read to its end (with auto-partitioning)."""
        for state in list(self.sessions.values()):
            partition = state.partition
            if (
                state.started
                and not state.end_sent
                and not partition.active
                and self.auto_partitioning
                and max(state.read_offset, partition.start_offset) >= partition.end_offset  # read, or expired
            ):
                state.end_sent = True
                topic = state.topic
                adjacent = {
                    p for c in partition.child_ids for p in topic.partitions[c].parent_ids
                } - {partition.partition_id}
                self.send(read_wire.end_partition_session(state.session_id, partition.child_ids, sorted(adjacent)))

    def next_read(self, now_ns: int) -> tuple[PartitionSessionState, list[StoredRow]] | None:
        """The next messages to send, of one partition session, within the session's credit; None when
        there is nothing to send (or, reading directly, the unacknowledged reads hold too much).
        The read position moves past them."""
        if self.direct_bytes_in_flight >= MAX_DIRECT_BYTES_IN_FLIGHT:
            return None  # an acknowledgement wakes the stream
        budget = min(self.credit, MAX_RESPONSE_BYTES)
        limit = self.partition_limit
        for state in self.next_turn():
            if not state.started or state.stopping:
                continue
            if limit and state.in_flight_bytes >= limit:
                continue  # waits for commits (the commit wakes the stream)
            partition = state.partition
            max_lag = state.selector.max_lag_ns
            if max_lag:
                chunk = self._within_lag(state, budget, now_ns - max_lag)
            else:
                chunk = partition.read_rows(state.read_offset, budget, MAX_RESPONSE_MESSAGES)
            if not chunk:
                continue
            state.read_offset = chunk[-1][0] + 1  # the last row's offset
            if limit:
                for row in chunk:
                    state.in_flight.append((row[0], len(row[ROW_DATA])))
                    state.in_flight_bytes += len(row[ROW_DATA])
            if state.consumer is not None:
                nbytes = sum(len(row[ROW_DATA]) for row in chunk)
                state.consumer.record_read(partition, state.read_offset, now_ns, nbytes)
            return state, chunk
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
