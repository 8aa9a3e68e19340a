"""The reader's flow control: byte credit, the buffer of received messages, and its bound.

The protocol works in credit: the client sends ``ReadRequest(bytes_size=N)`` to allow N more
bytes of ``ReadResponse`` (sizes as the server counts them). The reader grants the whole buffer
when a stream starts, charges each response's ``bytes_size`` to the buffer, and gives the bytes
back as the user takes messages out. So the bytes buffered (received, not yet handed to the
user) stay at most ``buffer_size``, except that the server may send one response past the credit
(its first message may exceed what is left); that overshoot is given back like any other bytes.

Credit returns in chunks of at least ``release_threshold`` bytes to keep ReadRequests few.
A response's bytes are split over its messages, so taking a single message returns its share.

A message that could not be decoded sits in the queue on its own, with its error: the receive
that reaches it takes it out and raises the error, and the next receive goes on after it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from .messages import PartitionSession, TopicMessage


class BufferedBatch:
    """Received messages of one partition session with the credit bytes they still hold."""

    __slots__ = ("bytes_left", "error", "messages", "pos", "session")

    def __init__(
        self, session: PartitionSession, messages: list[TopicMessage], nbytes: int, error: BaseException | None = None
    ) -> None:
        self.session = session
        self.messages = messages
        self.pos = 0
        self.bytes_left = nbytes
        self.error = error
        """Set for a single message that cannot be handed out: its receive raises this instead."""

    def take(self, count: int) -> tuple[list[TopicMessage], int]:
        """The next ``count`` messages and the credit bytes they free."""
        left = len(self.messages) - self.pos
        freed = self.bytes_left if count >= left else self.bytes_left * count // left
        self.bytes_left -= freed
        whole = self.pos == 0 and count >= left
        taken = self.messages if whole else self.messages[self.pos : self.pos + count]
        self.pos += len(taken)
        return taken, freed


class ReadBuffer:
    """Messages waiting for the user, in arrival order, and the byte credit they hold."""

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
        """Bytes of responses received and not yet handed to the user."""
        self.peak_buffered_bytes = 0
        self.pending_credit = 0
        """Bytes freed by the user and not yet granted back to the server."""
        self._queue: deque[BufferedBatch] = deque()
        self.nonempty = asyncio.Event()
        self.credit_ready = False
        """True when enough credit accumulated for a ReadRequest (the stream's sender is woken)."""
        self._wake_sender = wake_sender
        self._on_drained = on_drained

    # --- the stream side ---------------------------------------------------------------

    def reset(self) -> int:
        """Forget everything buffered (a new stream starts); return the initial credit."""
        for entry in self._queue:
            entry.session._buffered = 0
        self._queue.clear()
        self.nonempty.clear()
        self.buffered_bytes = 0
        self.pending_credit = 0
        self.credit_ready = False
        return self.buffer_size

    def charge(self, nbytes: int) -> None:
        """A response of ``nbytes`` (as the server counts them) arrived."""
        self.buffered_bytes += nbytes
        if self.buffered_bytes > self.peak_buffered_bytes:
            self.peak_buffered_bytes = self.buffered_bytes

    def push(
        self, session: PartitionSession, messages: list[TopicMessage], nbytes: int, error: BaseException | None = None
    ) -> None:
        """Queue decoded messages holding ``nbytes`` of the charged bytes."""
        session._buffered += len(messages)
        self._queue.append(BufferedBatch(session, messages, nbytes, error))
        self.nonempty.set()

    def push_with_failures(
        self, session: PartitionSession, messages: list[TopicMessage], nbytes: int, failures: dict[int, BaseException]
    ) -> None:
        """``push``, where the messages at the indexes of ``failures`` go on their own, to raise
        their error when reached instead of being handed out."""
        share = nbytes // len(messages)
        left = nbytes
        run: list[TopicMessage] = []
        for index, message in enumerate(messages):
            error = failures.get(index)
            if error is None:
                run.append(message)
                continue
            if run:
                left -= share * len(run)
                self.push(session, run, share * len(run))
                run = []
            left -= share
            self.push(session, [message], share, error)
        if run:
            self.push(session, run, left)
        elif left:
            self.release(left)  # rounding: nothing is left to carry these bytes

    def take_credit(self) -> int:
        """The credit to grant in the next ReadRequest (0: nothing to send)."""
        credit, self.pending_credit = self.pending_credit, 0
        self.credit_ready = False
        return credit

    def drop_session(self, session: PartitionSession) -> int:
        """Discard what is buffered for ``session``; return how many messages were dropped."""
        kept: deque[BufferedBatch] = deque()
        dropped = 0
        for entry in self._queue:
            if entry.session is session:
                dropped += len(entry.messages) - entry.pos
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
        """Give ``nbytes`` of credit back (granted once enough accumulates)."""
        self.buffered_bytes -= nbytes
        self.pending_credit += nbytes
        if not self.credit_ready and (
            self.pending_credit >= self.release_threshold or self.buffered_bytes <= 0 < self.pending_credit
        ):
            self.credit_ready = True
            self._wake_sender.set()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def pop(self, max_messages: int | None, max_bytes: int | None) -> tuple[PartitionSession, list[TopicMessage]]:
        """Take the front messages of one partition session; the queue must not be empty.

        Raises the error of a front message that cannot be handed out (taking it out)."""
        entry = self._queue[0]
        if entry.error is not None:
            self._fail_front(entry)
        left = len(entry.messages) - entry.pos
        count = left if max_messages is None or max_messages >= left else max_messages
        if max_bytes is not None:
            total = 0
            messages = entry.messages
            for i in range(entry.pos, entry.pos + count):
                total += len(messages[i].data)
                if total > max_bytes and i > entry.pos:
                    count = i - entry.pos
                    break
        taken, freed = entry.take(count)
        self._finish(entry, len(taken), freed, taken[-1].offset + 1)
        return entry.session, taken

    def pop_one(self) -> TopicMessage:
        """Take the front message; the queue must not be empty (raises like ``pop``)."""
        entry = self._queue[0]
        if entry.error is not None:
            self._fail_front(entry)
        message = entry.messages[entry.pos]
        entry.pos += 1
        if entry.pos == len(entry.messages):
            freed = entry.bytes_left
        else:
            freed = entry.bytes_left // (len(entry.messages) - entry.pos + 1)
        entry.bytes_left -= freed
        self._finish(entry, 1, freed, message.offset + 1)
        return message

    def _fail_front(self, entry: BufferedBatch) -> None:
        error = entry.error
        assert error is not None
        message = entry.messages[0]
        entry.pos = 1
        self._finish(entry, 1, entry.bytes_left, message.offset + 1)
        raise error

    def _finish(self, entry: BufferedBatch, count: int, freed: int, delivered_end: int) -> None:
        if entry.pos >= len(entry.messages):
            self._queue.popleft()
            if not self._queue:
                self.nonempty.clear()
        self.release(freed)
        session = entry.session
        session._buffered -= count
        session._delivered_end = delivered_end
        if session._buffered == 0:
            self._on_drained(session)
