"""The reader's flow control: byte credit, the buffer of received parts, and its bound.

The protocol works in credit: the client sends ``ReadRequest(bytes_size=N)`` to allow N more
bytes of ``ReadResponse`` (sizes as the server counts them, on the wire). The reader bounds what
it holds in *decoded* bytes: each response is charged its wire bytes, plus what its compressed
payloads grow by when decoded (as their writers declared it), since the response stays in memory
until its last message is taken and the decoded payloads exist beside it meanwhile.

Credit is granted in those terms too. The reader learns how many bytes it is charged per wire
byte (``ratio``: 1 for raw payloads, about 1 + the compression ratio for compressed ones) from
what arrived, and grants ``(buffer_size - buffered - reserve) / ratio - server_credit``: so what
the server may still send, once decoded, fits beside what is held. ``reserve`` is the largest
message charge seen lately: the server may send one message past the credit (the message that
crosses it goes out whole), and that message fits in the buffer too. Before anything arrived,
the ratio is assumed to be ``UNMEASURED_RATIO``: the first grant is a small part of the buffer,
and the rest follows the first response. (Granting the buffer in wire bytes, the reader would let
a stream of 3.7x compressed payloads bring about four buffers' worth of decoded data in.)

Messages stay as the server sent them, in ``BufferedPart``s (see ``parts``), until a receive
takes them: only then is a ``TopicMessage`` built for each, and a compressed payload decoded
(see ``decoding``; a single-message receive decodes a few more along with its own). So the buffer
holds each payload once (in its response), costs no Python object per message (nothing for the
garbage collector to walk), and a decoded payload exists only once it is about to be handed out.

Credit returns in chunks of at least ``release_threshold`` bytes to keep ReadRequests few. A
part's charge is split over its messages, so taking a single message returns its share.

A message that could not be decoded is handed out on its own, as the error of the receive that
reaches it; the next receive goes on after it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from .bookkeeping import Rereading, SessionBookkeeping
from .decoding import decode_error
from .messages import MessageBatch, PartitionSession, TopicMessage
from .parts import BufferedPart
from .settings import ReaderSettings
from .wire import DETACH_SIZE, _DetachedInfo

UNMEASURED_RATIO = 16.0
"""The bytes charged per wire byte assumed before any response was measured: the first grant of a
reader is ``buffer_size / 16``, safe for payloads that decode to up to 15 times their wire size."""


class ReadBuffer:
    """Messages waiting for the user, in arrival order, and the byte credit they hold."""

    __slots__ = (
        "_cursor",
        "_cursor_index",
        "_cursor_info",
        "_cursor_records",
        "_cursor_session",
        "_cursor_start",
        "_cursor_stop",
        "_grant_level",
        "_grant_when_empty",
        "_on_drained",
        "_queue",
        "_seen_charge",
        "_seen_wire",
        "_wake_sender",
        "buffer_size",
        "buffered_bytes",
        "credit_ready",
        "nonempty",
        "partition_limit",
        "peak_buffered_bytes",
        "ratio",
        "release_threshold",
        "reserve",
        "server_credit",
    )

    def __init__(
        self,
        settings: ReaderSettings,
        on_drained: Callable[[PartitionSession], None],
        wake_sender: asyncio.Event,
    ) -> None:
        """``settings``: the reader's (``buffer_size_bytes``, ``credit_release_fraction``,
        ``partition_max_in_flight_bytes``); ``on_drained(session)`` is told when the last
        buffered message of ``session`` was handed out or dropped; ``wake_sender`` wakes the
        stream's sender when credit is ready to grant."""
        buffer_size = self.buffer_size = settings.buffer_size_bytes
        self.partition_limit = settings.partition_max_in_flight_bytes or 0
        """``partition_max_in_flight_bytes``: a partition session whose messages handed out and
        not committed reach this many bytes is not taken from until commits free room (0: no limit)."""
        self.release_threshold = max(1, min(int(buffer_size * settings.credit_release_fraction), buffer_size))
        self.buffered_bytes = 0
        """Bytes of messages received and not yet handed to the user (decoded sizes)."""
        self.peak_buffered_bytes = 0
        self.server_credit = 0
        """Bytes the server may still send (negative after it overshot)."""
        self.ratio = UNMEASURED_RATIO
        """Bytes charged per wire byte, as learned from what arrived (see ``measured``)."""
        self.reserve = 0
        """The largest message charge seen lately: room kept for the message the server may send
        past the credit."""
        self._seen_wire = 0.0
        self._seen_charge = 0.0
        """Wire bytes and charges of the responses received, older ones weighing less (see ``measured``)."""
        self._grant_level = 0
        """Credit is worth granting once ``buffered_bytes`` is at most this (see ``_set_credit``)."""
        self._grant_when_empty = False
        """Whether an empty buffer grants credit whatever its amount (see ``_set_credit``)."""
        self._queue: deque[BufferedPart] = deque()
        self.nonempty = asyncio.Event()
        self.credit_ready = False
        """True when enough credit can be granted for a ReadRequest (the stream's sender is woken)."""
        self._wake_sender = wake_sender
        self._on_drained = on_drained
        # The cursor of ``pop_one``: the front part whose current server batch it hands out
        # from, that batch and its records, the next index and where to stop, and the next
        # message's commit start. ``_cursor_stop`` is 0 while there is none.
        self._cursor: BufferedPart | None = None
        self._cursor_info: Any = None  # a _ServerBatchInfo while there is a cursor
        self._cursor_records: Any = None
        self._cursor_index = 0
        self._cursor_stop = 0
        self._cursor_start = 0
        self._cursor_session: Any = None  # a PartitionSession while there is a cursor

    # --- the stream side ---------------------------------------------------------------

    def reset(self) -> int:
        """Forget everything buffered (a new stream starts); return the initial credit.

        What was learned of the payloads (``ratio``, ``reserve``) is kept: a new stream of the
        same reader reads the same topics."""
        self._sync()
        self._cursor_info = self._cursor_records = self._cursor_session = None
        for entry in self._queue:
            entry.session._bookkeeping.buffered = 0
        self._queue.clear()
        self.nonempty.clear()
        self.buffered_bytes = 0
        self._set_credit(0)
        credit = self._room()
        self._set_credit(credit)
        self.credit_ready = False
        return credit

    def _room(self) -> int:
        """The credit to grant now, so that what the server may send, charged as ``ratio``
        predicts, fits in the buffer beside what it holds and ``reserve`` (at least one byte when
        nothing is held or expected: a message larger than the buffer still comes, alone)."""
        credit = int((self.buffer_size - self.buffered_bytes - self.reserve) / self.ratio) - self.server_credit
        if credit <= 0 and self.buffered_bytes <= 0 and self.server_credit <= 0:
            credit = max(1, int(self.buffer_size / self.ratio) - self.server_credit)
        return credit

    def _set_credit(self, server_credit: int) -> None:
        self.server_credit = server_credit
        # Credit worth a ReadRequest (``_room() >= release_threshold / ratio``): buffered_bytes at
        # most this level. An empty buffer grants whatever there is room for.
        free = self.buffer_size - self.reserve - int(server_credit * self.ratio)
        self._grant_level = free - self.release_threshold
        self._grant_when_empty = free > 0 or server_credit <= 0

    def charge(self, nbytes: int) -> None:
        """A response of ``nbytes`` (as the server counts them) arrived: that much credit is used."""
        self._set_credit(self.server_credit - nbytes)

    def measured(self, wire: int, charge: int, largest: int) -> None:
        """The parts of a response that the reader keeps: ``wire`` of its bytes on the wire,
        charged ``charge`` in all, ``largest`` for one message at most.

        ``ratio`` becomes the larger of the latest response's charge per wire byte and the
        average over what arrived, each response's weight fading as about a buffer's worth of
        bytes arrives after it: payloads that decode to more take effect at once, ones that
        decode to less over a buffer's worth. ``reserve`` moves to a larger message at once, and
        towards smaller ones the same way."""
        if wire <= 0:
            return
        keep = max(0.0, 1.0 - wire / self.buffer_size)
        self._seen_wire = self._seen_wire * keep + wire
        self._seen_charge = self._seen_charge * keep + charge
        self.ratio = max(1.0, charge / wire, self._seen_charge / self._seen_wire)
        reserve = self.reserve
        if largest >= reserve:
            reserve = largest
        else:
            reserve -= int((reserve - largest) * (1.0 - keep))
        self.reserve = min(self.buffer_size, reserve)
        self._set_credit(self.server_credit)

    def push(self, part: BufferedPart) -> None:
        """Queue a response's messages for one partition session, charged ``part.bytes_left``."""
        part.session._bookkeeping.buffered += 1
        self._queue.append(part)
        self.buffered_bytes += part.bytes_left
        if self.buffered_bytes > self.peak_buffered_bytes:
            self.peak_buffered_bytes = self.buffered_bytes
        self.nonempty.set()

    def take_credit(self) -> int:
        """The credit to grant in the next ReadRequest (0: nothing to send)."""
        self._sync()
        self.credit_ready = False
        credit = self._room()
        if credit <= 0:
            return 0
        self._set_credit(self.server_credit + credit)
        return credit

    def drop_session(self, session: PartitionSession) -> int:
        """Discard what is buffered for ``session``; return how many messages were dropped."""
        dropped = self._drop(lambda entry: entry.session is session)
        session._bookkeeping.buffered = 0
        return dropped

    def drop_replay(self, replay: Rereading) -> int:
        """Discard the parts a backward seek of ``session`` read again; return how many messages."""
        return self._drop(lambda entry: entry.replay is replay)

    def _drop(self, dropping: Callable[[BufferedPart], bool]) -> int:
        self._sync()
        kept: deque[BufferedPart] = deque()
        dropped = 0
        for entry in self._queue:
            if dropping(entry):
                dropped += entry.left
                self.release(entry.bytes_left)
                books = entry.session._bookkeeping
                books.buffered -= 1
                if not books.buffered:
                    self._on_drained(entry.session)
            else:
                kept.append(entry)
        self._queue = kept
        if not kept:
            self.nonempty.clear()
        return dropped

    def skip_to(self, session: PartitionSession, offset: int) -> None:
        """Pass over the buffered messages of ``session``'s own stream below ``offset`` (a
        forward seek): they are not handed out, their bytes go back."""
        self._sync()
        kept: deque[BufferedPart] = deque()
        for entry in self._queue:
            if entry.session is session and entry.replay is None:
                before = entry.bytes_left
                entry.skip_to(offset)
                self.release(before - entry.bytes_left)
                if not entry.left:
                    books = session._bookkeeping
                    books.buffered -= 1
                    if not books.buffered:
                        self._on_drained(session)
                    continue
            kept.append(entry)
        self._queue = kept
        if kept:
            self.nonempty.set()  # what was held back may be taken now
        else:
            self.nonempty.clear()

    def paused_changed(self, session: PartitionSession) -> None:
        """``session``'s hold or in-flight limit changed: wake receivers if it may be taken from."""
        books = session._bookkeeping
        books.paused = books.hold or books.over_limit
        if books.buffered and not books.over_limit:
            # Held by a backward seek, what it reads again may go: let receivers look.
            self.nonempty.set()

    def settle(self) -> None:
        """Bring the partition sessions up to date with what single-message receives handed out."""
        self._sync()

    def drained(self, session: PartitionSession) -> None:
        """Tell the stream's side that ``session`` may have nothing left to hand out."""
        if not session._bookkeeping.buffered:
            self._on_drained(session)

    def release_in_flight(self, session: PartitionSession) -> None:
        """``session``'s committed offset moved: what it covers is no longer in flight."""
        books = session._bookkeeping
        marks = books.in_flight_marks
        if not marks:
            return
        committed = books.committed_offset
        in_flight = books.in_flight
        while marks and marks[0][0] <= committed:
            in_flight -= marks.popleft()[1]
        books.in_flight = in_flight
        if books.over_limit and in_flight < self.partition_limit:
            books.over_limit = False
            self.paused_changed(session)

    def forget_in_flight(self, session: PartitionSession, offset: int) -> None:
        """A backward seek to ``offset``: what was handed out from there on is handed out again
        (and counted again then), so it is no longer in flight. A take that straddles ``offset``
        is forgotten whole: the limit is a bound that one take may cross anyway, and counting
        it twice could hold the session over the limit with nothing left to commit."""
        books = session._bookkeeping
        marks = books.in_flight_marks
        if not marks:
            return
        kept = deque(mark for mark in marks if mark[0] <= offset)
        books.in_flight -= sum(nbytes for _, nbytes in marks) - sum(nbytes for _, nbytes in kept)
        books.in_flight_marks = kept
        if books.over_limit and books.in_flight < self.partition_limit:
            books.over_limit = False
            self.paused_changed(session)

    # --- the user side -----------------------------------------------------------------

    def release(self, nbytes: int) -> None:
        """``nbytes`` of what the buffer held are gone: grant credit once enough accumulates."""
        buffered = self.buffered_bytes = self.buffered_bytes - nbytes
        if not self.credit_ready and (
            buffered <= self._grant_level or (buffered <= 0 and self._grant_when_empty)
        ):
            self.credit_ready = True
            self._wake_sender.set()

    def __bool__(self) -> bool:
        """Whether a message can be taken now (some may wait: see ``_front``)."""
        self._sync()
        return self._front() is not None

    def _front(self) -> BufferedPart | None:
        """The first part whose messages may be handed out now, moved to the front of the queue
        (``_sync`` first). Parts of a paused session wait (a backward seek being read again, or
        over the in-flight limit); the first part of another session that may go is the
        earliest of that session, so each session's order is kept."""
        queue = self._queue
        if not queue:
            return None
        part = queue[0]
        if not part.session._bookkeeping.paused:
            return part
        for index, part in enumerate(queue):
            books = part.session._bookkeeping
            if not books.paused or (part.replay is not None and not books.over_limit):
                if index:
                    del queue[index]
                    queue.appendleft(part)
                return part
        return None

    def front_session(self) -> PartitionSession | None:
        """The partition session the next take hands out from."""
        self._sync()
        part = self._front()
        return None if part is None else part.session

    def _parts_of(self, session: PartitionSession) -> list[BufferedPart]:
        """The buffered parts of ``session`` that may be handed out now, in order."""
        parts = []
        books = session._bookkeeping
        for part in self._queue:
            if part.session is session:
                if books.paused and (part.replay is None or books.over_limit):
                    break
                parts.append(part)
        return parts

    def holds_enough(self, session: PartitionSession, max_messages: int | None, max_bytes: int | None) -> bool:
        """Whether what may be taken of ``session`` fills a batch of these limits (never without one)."""
        self._sync()
        count = 0
        nbytes = 0
        for part in self._parts_of(session):
            count += part.left
            if max_messages is not None and count >= max_messages:
                return True
            if max_bytes is not None:
                nbytes += part.payload_bytes()
                if nbytes >= max_bytes:
                    return True
        return False

    async def decode_session(self, session: PartitionSession, max_messages: int | None, max_bytes: int | None) -> None:
        """Decode ahead what a take of ``session``'s messages within these limits will need,
        part after part (the state may move on meanwhile: takes check again)."""
        self._sync()
        for part in self._parts_of(session):
            planned = part.planned_count(max_messages, max_bytes)
            await part.decode_ahead(planned)
            if max_messages is not None:
                max_messages -= planned
                if max_messages <= 0:
                    return

    def pop_more(self, batch: MessageBatch, max_messages: int | None, max_bytes: int | None) -> MessageBatch:
        """``batch`` and the messages of its session after it that are at hand, within these
        limits (for the whole batch); never raises a decoding error (that message stays next)."""
        session = batch.partition_session
        batches = [batch]
        count = len(batch)
        nbytes = sum(len(m.data) for m in batch) if max_bytes is not None else 0
        while max_messages is None or count < max_messages:
            self._sync()
            part = self._front()
            if part is None or part.session is not session or part.head_failed():
                break
            room = None if max_messages is None else max_messages - count
            if self.partition_limit:
                room = self._within_limit(part, part.left if room is None else room)
            room_bytes = None if max_bytes is None else max_bytes - nbytes
            if room_bytes is not None and part.next_size() > room_bytes:
                break
            if part.compressed and not part.ready:
                break  # not decoded yet: left for the next receive (a take only hands out what is at hand)
            more, error = part.take(part.left if room is None else room, room_bytes)
            self._finish(part, len(more))
            assert error is None
            batches.append(more)
            count += len(more)
            if room_bytes is not None:
                nbytes += sum(len(m.data) for m in more)
        return MessageBatch._joined(batches)

    @property
    def messages(self) -> int:
        """Messages received and not yet handed to the user."""
        self._sync()
        return sum(part.left for part in self._queue)

    def front_ready(self, max_messages: int | None, max_bytes: int | None) -> bool:
        """Whether the next take (``pop`` with these limits) finds its payloads at hand."""
        self._sync()
        part = self._front()
        assert part is not None
        return not part.compressed or part.ready >= part.planned_count(max_messages, max_bytes)

    async def decode_front(self, max_messages: int | None, max_bytes: int | None) -> None:
        """Decode what the next take needs (the state may have moved on meanwhile: check again)."""
        self._sync()
        part = self._front()
        assert part is not None
        await part.decode_ahead(part.planned_count(max_messages, max_bytes))

    def pop(self, max_messages: int | None, max_bytes: int | None) -> MessageBatch:
        """Take the front messages of one partition session (``front_ready`` must hold).

        Raises the error of a front message that cannot be handed out (taking it out)."""
        self._sync()
        part = self._front()
        assert part is not None
        count = part.left if max_messages is None else max_messages
        if self.partition_limit:
            count = self._within_limit(part, count)
        batch, error = part.take(count, max_bytes)
        self._finish(part, len(batch))
        if error is not None:
            raise decode_error(batch[0], error)
        return batch

    def pop_one(self) -> TopicMessage | None:
        """Take the front message if it is at hand and no credit waits to be granted (else None:
        the caller waits as ``pop`` would). Raises like ``pop``."""
        index = self._cursor_index
        if index < self._cursor_stop:
            # The hot path of one receive per message: the next raw message under the cursor,
            # touching nothing else (``_sync`` brings the rest up to date).
            info = self._cursor_info
            record = self._cursor_records[index]
            offset = record.offset
            data = record.data
            message = TopicMessage(data, offset, info, index, self._cursor_session, self._cursor_start)
            if len(data) >= DETACH_SIZE:
                message._info = _DetachedInfo(info, index)
            self._cursor_index = index = index + 1
            self._cursor_start = offset + 1
            if index == self._cursor_stop:
                self._sync()  # the credit of what the cursor handed out goes back now
            return message
        self._sync()
        part = self._front()
        if self.credit_ready or part is None:
            return None
        if part.compressed:
            return self.pop(1, None)[0] if part.ready else None
        # Point the cursor at the rest of the part's current server batch, or at about half a
        # credit release's worth of it (one large message): the credit of what it hands out goes
        # back when it ends.
        index = part.message_index
        self._cursor = part
        self._cursor_info = part.run
        self._cursor_records = part.run.records
        self._cursor_index = index
        stop = min(part.run_end, index + max(1, self.release_threshold // (2 * part.share or 1)))
        if self.partition_limit:
            # The cursor hands out at most what fits under the partition's in-flight limit.
            room = self.partition_limit - part.session._bookkeeping.in_flight
            stop = min(stop, index + max(1, room // (part.share or 1)))
        self._cursor_stop = stop
        self._cursor_start = part.commit_start
        self._cursor_session = part.session
        return self.pop_one()

    def _sync(self) -> None:
        """Bring the front part, the credit and its session up to date with what the cursor of
        ``pop_one`` handed out, and end the cursor. Every other use of the buffer starts here."""
        part = self._cursor
        if part is None:
            return
        self._cursor = None
        self._cursor_stop = 0
        taken = self._cursor_index - part.message_index
        if taken:
            index = self._cursor_index
            batch_index = part.batch_index
            if index == part.run_end:
                batch_index += 1
                index = 0
            part.advance(batch_index, index, taken, self._cursor_start)
            self._finish(part, taken)

    def _finish(self, part: BufferedPart, count: int) -> None:
        left = part.left
        freed = part.charge - part.share * (part.count - left - count) - part.bytes_left
        if not left:
            self._queue.popleft()
            if not self._queue:
                self.nonempty.clear()
        self.release(freed)
        session = part.session
        books = session._bookkeeping
        end = books.delivered_end = part.commit_start
        if self.partition_limit:
            self._count_in_flight(books, end, freed)
        if not left:
            books.buffered -= 1
            if not books.buffered:
                self._on_drained(session)
        if part.replay is not None:
            part.replay.taken(freed, not left)

    def _within_limit(self, part: BufferedPart, count: int) -> int:
        """``count`` cut to what fits under the part's partition in-flight limit (at least one)."""
        room = self.partition_limit - part.session._bookkeeping.in_flight
        return min(count, max(1, room // (part.share or 1)))

    def _count_in_flight(self, books: SessionBookkeeping, end: int, nbytes: int) -> None:
        """``nbytes`` of a session up to offset ``end`` were handed out: in flight until committed."""
        books.in_flight += nbytes
        books.in_flight_marks.append((end, nbytes))
        if books.in_flight >= self.partition_limit and not books.over_limit:
            books.over_limit = books.paused = True
