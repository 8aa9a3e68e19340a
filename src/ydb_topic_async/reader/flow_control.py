"""The reader's flow control: byte credit, the buffer of received messages, and its bound.

The protocol works in credit: the client sends ``ReadRequest(bytes_size=N)`` to allow N more
bytes of ``ReadResponse`` (sizes as the server counts them, on the wire). The reader bounds what
it holds in *decoded* bytes: each response is charged its wire bytes, plus what its compressed
payloads grow by when decoded (as their writers declared it), and credit is granted back only
while the bytes held plus the credit the server still has stay within ``buffer_size``. So a
response that decodes to ten times its wire size makes the reader wait until the user took that
much before it asks for more. The server may send one response past the credit (its first
message may exceed what is left); that overshoot is charged like any other bytes.

Messages stay as the server sent them until a receive takes them: only then is a
``TopicMessage`` built for each, and a compressed payload decoded (see ``decoding``; a
single-message receive decodes a few more along with its own). So the buffer holds each payload
once (in its response), costs no Python object per message (nothing for the garbage collector to
walk), and a decoded payload exists only once it is about to be handed out.

Credit returns in chunks of at least ``release_threshold`` bytes to keep ReadRequests few. A
part's charge is split over its messages, so taking a single message returns its share.

A message that could not be decoded is handed out on its own, as the error of the receive that
reaches it; the next receive goes on after it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from .decoding import RAW_CODECS, decode_ahead, decode_error, planned_count
from .messages import MessageBatch, PartitionSession, Run, TopicMessage
from .wire import DETACH_SIZE, _DetachedInfo, _ServerBatchInfo


class BufferedPart:
    """What one response brought for one partition session that is not handed out yet: its
    server batches, as received, and where the next message to take is."""

    __slots__ = (
        "batch_index",
        "batches",
        "charge",
        "commit_start",
        "compressed",
        "count",
        "decoded",
        "left",
        "message_index",
        "ready",
        "run",
        "run_end",
        "session",
        "share",
    )

    def __init__(
        self,
        session: PartitionSession,
        batches: list[_ServerBatchInfo],
        count: int,
        nbytes: int,
        commit_start: int,
        compressed: bool,
    ) -> None:
        """``nbytes``: the part's share of its response's bytes on the wire; compressed payloads
        are charged what they decode to as well, as their writers declared it: the response
        stays in memory until its last message is taken, so until then both are held. (Not
        the decoded size minus the wire size: measuring a batch on the wire means serializing
        it again, a copy of megabytes on the event loop for large messages.)"""
        if compressed:
            for info in batches:
                if info.decoder is not None and info.codec not in RAW_CODECS:
                    nbytes += sum(record.uncompressed_size for record in info.records)
        self.session = session
        self.batches = batches
        """The server batches that hold messages, in offset order."""
        self.batch_index = 0
        self.message_index = 0
        """Where the next message to take is: its server batch, its index there."""
        self.run = batches[0]
        self.run_end = len(batches[0].records)
        """The server batch of the next message (``batches[batch_index]``), and its size."""
        self.count = count
        self.left = count
        """Messages not taken yet."""
        self.charge = nbytes
        """What the part counts against the buffer (its decoded bytes)."""
        self.share = nbytes // count
        """The charge each message releases when taken (the last one also the remainder)."""
        self.commit_start = commit_start
        """The commit range start of the next message (the end of the one before it)."""
        self.compressed = compressed
        """Whether some payloads need decoding before they are handed out."""
        self.ready = 0
        """How many of the next messages have their payload at hand (compressed parts only)."""
        self.decoded: deque[bytes | BaseException] = deque()
        """The decoded payloads (or decoding errors) of the compressed messages among those."""

    @property
    def bytes_left(self) -> int:
        """The part's charge not released yet."""
        left = self.left
        return self.charge - self.share * (self.count - left) if left else 0

    def upcoming(self, skip: int) -> Iterator[tuple[_ServerBatchInfo, Any]]:
        """The part's messages after the next ``skip`` ones, as (server batch, record) pairs."""
        index = self.message_index + skip
        for info in self.batches[self.batch_index :]:
            records = info.records
            if index < len(records):
                for record in islice(records, index, None):
                    yield info, record
                index = 0
            else:
                index -= len(records)

    def payload_bytes(self) -> int:
        """The decoded payload bytes of the messages not taken, as their writers declared them."""
        return sum(record.uncompressed_size or info.payload_size(record) for info, record in self.upcoming(0))

    def take(self, count: int, max_bytes: int | None) -> tuple[MessageBatch, BaseException | None]:
        """Hand out up to ``count`` messages (at least one; at most ``max_bytes`` payload bytes
        after the first) as a batch.

        Only payloads at hand are taken (``ready``, for a compressed part). When the first one
        could not be decoded, it is taken alone, as received, with its error."""
        if count > self.left:
            count = self.left
        if self.compressed and count > self.ready:
            count = self.ready
        if max_bytes is not None:
            return self._take_each(count, max_bytes)
        # The batch's messages are built as it is iterated: here only the runs of records.
        runs: list[Run] = []
        batches = self.batches
        batch_index = self.batch_index
        index = self.message_index
        taken = 0
        last = -1
        while taken < count:
            info = batches[batch_index]
            records = info.records
            end = min(len(records), index + count - taken)
            payloads: list[bytes] | None = None
            if info.decoder is not None:
                decoded = self.decoded
                payloads = []
                for _ in range(end - index):
                    payload = decoded.popleft()
                    if isinstance(payload, BaseException):
                        decoded.appendleft(payload)
                        end = index + len(payloads)
                        count = taken + len(payloads)  # the failed one goes alone, next
                        break
                    payloads.append(payload)
                if not taken and not payloads:
                    return self._take_each(1, None)  # the failed one, alone
            if end > index:
                runs.append((info, index, end, payloads))
                last = records[end - 1].offset
            taken += end - index
            index = end
            if index == len(records):
                batch_index += 1
                index = 0
        batch = MessageBatch.of_runs(runs, taken, self.session, self.commit_start, last + 1, self._large())
        self._advance(batch_index, index, taken, last + 1)
        return batch, None

    def _take_each(self, count: int, max_bytes: int | None) -> tuple[MessageBatch, BaseException | None]:
        """``take``, building each message now (to count its bytes, or to fail it alone)."""
        messages: list[TopicMessage] = []
        append = messages.append
        session = self.session
        start = self.commit_start
        batches = self.batches
        batch_index = self.batch_index
        index = self.message_index
        budget = -1 if max_bytes is None else max_bytes
        large = self._large()
        decoded = self.decoded
        error: BaseException | None = None
        taken = 0
        stopped = False
        while taken < count and not stopped:
            info = batches[batch_index]
            records = info.records
            for record in islice(records, index, min(len(records), index + count - taken)):
                data = record.data if info.decoder is None else decoded.popleft()
                if isinstance(data, BaseException):
                    stopped = True
                    if taken:
                        decoded.appendleft(data)  # the next receive raises it
                        break
                    error = data
                    data = info.payload(record)  # handed out as received, with its error
                elif budget >= 0:
                    if taken and len(data) > budget:
                        if info.decoder is not None:
                            decoded.appendleft(data)
                        stopped = True
                        break
                    budget -= len(data)
                offset = record.offset
                message = TopicMessage(data, offset, info, index, session, start)
                if large and len(data) >= DETACH_SIZE:
                    message._info = _DetachedInfo(info, index)
                append(message)
                start = offset + 1
                taken += 1
                index += 1
                if stopped:
                    break
            if index == len(records):
                batch_index += 1
                index = 0
        self._advance(batch_index, index, taken, start)
        return MessageBatch(messages, session), error

    def _large(self) -> bool:
        """Whether some payloads may be large enough to detach (judged by the average charge)."""
        return self.share >= DETACH_SIZE // 2

    def _advance(self, batch_index: int, index: int, taken: int, commit_start: int) -> None:
        if batch_index != self.batch_index and batch_index < len(self.batches):
            self.run = self.batches[batch_index]
            self.run_end = len(self.run.records)
        self.batch_index = batch_index
        self.message_index = index
        self.left -= taken
        if self.compressed:
            self.ready -= taken
        self.commit_start = commit_start


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
        "_on_drained",
        "_queue",
        "_wake_sender",
        "buffer_size",
        "buffered_bytes",
        "credit_ready",
        "nonempty",
        "peak_buffered_bytes",
        "release_threshold",
        "server_credit",
    )

    def __init__(
        self,
        buffer_size: int,
        release_threshold: int,
        on_drained: Callable[[PartitionSession], None],
        wake_sender: asyncio.Event,
    ) -> None:
        self.buffer_size = buffer_size
        self.release_threshold = max(1, min(release_threshold, buffer_size))
        self.buffered_bytes = 0
        """Bytes of messages received and not yet handed to the user (decoded sizes)."""
        self.peak_buffered_bytes = 0
        self.server_credit = 0
        """Bytes the server may still send (negative after it overshot)."""
        self._grant_level = 0
        """Credit is worth granting once ``buffered_bytes`` is at most this (see ``_set_credit``)."""
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
        """Forget everything buffered (a new stream starts); return the initial credit."""
        self._sync()
        self._cursor_info = self._cursor_records = self._cursor_session = None
        for entry in self._queue:
            entry.session._buffered = 0
        self._queue.clear()
        self.nonempty.clear()
        self.buffered_bytes = 0
        self._set_credit(self.buffer_size)
        self.credit_ready = False
        return self.buffer_size

    def _set_credit(self, server_credit: int) -> None:
        self.server_credit = server_credit
        # Credit worth a ReadRequest: buffer_size - buffered_bytes - server_credit >= release_threshold.
        self._grant_level = self.buffer_size - server_credit - self.release_threshold

    def charge(self, nbytes: int) -> None:
        """A response of ``nbytes`` (as the server counts them) arrived: that much credit is used."""
        self._set_credit(self.server_credit - nbytes)

    def push(self, part: BufferedPart) -> None:
        """Queue a response's messages for one partition session, charged ``part.bytes_left``."""
        part.session._buffered += 1
        self._queue.append(part)
        self.buffered_bytes += part.bytes_left
        if self.buffered_bytes > self.peak_buffered_bytes:
            self.peak_buffered_bytes = self.buffered_bytes
        self.nonempty.set()

    def take_credit(self) -> int:
        """The credit to grant in the next ReadRequest (0: nothing to send)."""
        self._sync()
        self.credit_ready = False
        credit = self.buffer_size - self.buffered_bytes - self.server_credit
        if credit <= 0:
            return 0
        self._set_credit(self.server_credit + credit)
        return credit

    def drop_session(self, session: PartitionSession) -> int:
        """Discard what is buffered for ``session``; return how many messages were dropped."""
        self._sync()
        kept: deque[BufferedPart] = deque()
        dropped = 0
        for entry in self._queue:
            if entry.session is session:
                dropped += entry.left
                self.release(entry.bytes_left)
            else:
                kept.append(entry)
        self._queue = kept
        session._buffered = 0
        if not kept:
            self.nonempty.clear()
        return dropped

    # --- the user side -----------------------------------------------------------------

    def release(self, nbytes: int) -> None:
        """``nbytes`` of what the buffer held are gone: grant credit once enough accumulates."""
        buffered = self.buffered_bytes = self.buffered_bytes - nbytes
        if not self.credit_ready and (
            buffered <= self._grant_level or (buffered <= 0 < self.buffer_size - self.server_credit)
        ):
            self.credit_ready = True
            self._wake_sender.set()

    def __bool__(self) -> bool:
        self._sync()
        return bool(self._queue)

    @property
    def messages(self) -> int:
        """Messages received and not yet handed to the user."""
        self._sync()
        return sum(part.left for part in self._queue)

    def front_ready(self, max_messages: int | None, max_bytes: int | None) -> bool:
        """Whether the next take (``pop`` with these limits) finds its payloads at hand."""
        self._sync()
        part = self._queue[0]
        return not part.compressed or part.ready >= planned_count(part, max_messages, max_bytes)

    async def decode_front(self, max_messages: int | None, max_bytes: int | None) -> None:
        """Decode what the next take needs (the state may have moved on meanwhile: check again)."""
        self._sync()
        part = self._queue[0]
        await decode_ahead(part, planned_count(part, max_messages, max_bytes))

    def pop(self, max_messages: int | None, max_bytes: int | None) -> MessageBatch:
        """Take the front messages of one partition session (``front_ready`` must hold).

        Raises the error of a front message that cannot be handed out (taking it out)."""
        self._sync()
        part = self._queue[0]
        batch, error = part.take(part.left if max_messages is None else max_messages, max_bytes)
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
        if self.credit_ready or not self._queue:
            return None
        part = self._queue[0]
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
        self._cursor_stop = min(part.run_end, index + max(1, self.release_threshold // (2 * part.share or 1)))
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
            part._advance(batch_index, index, taken, self._cursor_start)
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
        session._delivered_end = part.commit_start
        if not left:
            session._buffered -= 1
            if not session._buffered:
                self._on_drained(session)
