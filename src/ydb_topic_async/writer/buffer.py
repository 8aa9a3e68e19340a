"""The writer's accumulator: accepted-but-unacknowledged messages, limits and waiting for space.

Messages live here from the moment ``write`` accepts them until their WriteAck arrives, in
sequence-number order, split into ``unsent`` (not yet sent on the current stream) and
``inflight`` (sent, awaiting acks). A reconnect moves everything back to ``unsent`` so it is
resent with the original seq_no and created_at.

A message takes one of two shapes here. One that ``write`` accepted through its hot path (a
``bytes`` payload, automatic numbering, no metadata, nobody waiting for its acknowledgement) is a
``PlainMessage``, a bare tuple; every other one is a ``PendingMessage``. See ``PlainMessage`` for
why; ``seq_no_of`` and ``as_pending`` read either shape where speed does not matter.

Space is reserved when a call is admitted (count and bytes of all its messages at once) and
released when acks arrive. The byte limit counts each message's payload and metadata plus
``MESSAGE_MEMORY``, what holding a message costs beyond them, so that it bounds the memory of many
small messages too (a message of 10 bytes is charged 266). A call is admitted when it fits, or
when the buffer is empty (so a single call larger than the limits still makes progress). Waiting
calls are admitted in FIFO order, so a large call is never starved by a stream of small ones.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from typing import TYPE_CHECKING

from .._errors import BufferFullTimeoutError

if TYPE_CHECKING:
    from .messages import WriteResult

MESSAGE_MEMORY = 256
"""Bytes a buffered message costs beyond its payload and metadata, charged against the byte
limit for each message: its tuple or object, the integers of its sequence number and creation
time, its queue slot, the payload's object header (about 170 bytes as a ``PlainMessage``, 120
more once it is a ``PendingMessage``, measured with ``tracemalloc`` on CPython 3.11)."""


class PendingMessage:
    """One accepted message, as it will be (re)sent."""

    __slots__ = (
        "codec", "created_ns", "data", "data_len", "encoded", "error", "future", "metadata", "seq_no", "size",
    )

    def __init__(
        self,
        data: bytes,
        seq_no: int,
        created_ns: int,
        metadata: list[tuple[str, bytes]] | None,
        size: int,
    ) -> None:
        self.data = data
        """The raw payload; dropped (emptied) once encoded, so a compressed message is held once."""
        self.data_len = len(data)
        self.seq_no = seq_no
        self.created_ns = created_ns
        """Nanoseconds since the epoch; -1 when the message carries no creation time."""
        self.metadata = metadata
        self.size = size
        """Bytes counted against the buffer limit: payload plus metadata."""
        self.encoded: bytes | None = None
        """The payload after the writer's codec, kept so a resend does not compress again."""
        self.codec = 0
        """The codec ``encoded`` is in when the writer picks codecs itself (``codec="auto"``);
        0 otherwise (the writer's one codec)."""
        self.future: asyncio.Future[WriteResult] | None = None
        self.error: BaseException | None = None
        """Why this message cannot be sent (too large once encoded, its encoder failed); such a
        message stays in sequence, unsent, until every message before it is settled."""


PlainMessage = tuple[bytes, int, int]
"""``(data, seq_no, created_ns)``: a message as ``write``'s hot path accepts it; it holds
``len(data)`` bytes of the buffer.

A bare tuple for speed, the one shape here that exists for it: it costs a fifth of a
``PendingMessage`` to build, and the garbage collector stops tracking a tuple of bytes and ints
at its first pass. A buffer holds up to 100 000 messages by default, and with a slotted object
per message every collection walked all of them: about a sixth of the writer's CPU per small
message went to the collector."""

Entry = PendingMessage | PlainMessage
"""A message in the buffer, in either shape."""


def seq_no_of(entry: Entry) -> int:
    """The sequence number of a message in either shape."""
    return entry[1] if isinstance(entry, tuple) else entry.seq_no


def as_pending(entry: Entry) -> PendingMessage:
    """``entry`` as a ``PendingMessage`` (a new one for a ``PlainMessage``)."""
    if isinstance(entry, tuple):
        data, seq_no, created_ns = entry
        return PendingMessage(data, seq_no, created_ns, None, len(data))
    return entry


class _SpaceWaiter:
    __slots__ = ("count", "future", "nbytes")

    def __init__(self, count: int, nbytes: int, future: asyncio.Future[None]) -> None:
        self.count = count
        self.nbytes = nbytes
        self.future = future


class WriteBuffer:
    """Accepted messages in seq_no order, with count/byte limits (``None``: unlimited)."""

    def __init__(self, max_messages: int | None, max_bytes: int | None) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        # The limits as plain ints (unlimited: larger than anything), for the checks per message.
        self._message_limit = sys.maxsize if max_messages is None else max_messages
        self._byte_limit = sys.maxsize if max_bytes is None else max_bytes
        self.unsent: deque[Entry] = deque()
        self.inflight: deque[Entry] = deque()
        self.messages = 0
        """Messages admitted and not yet acknowledged (including space reserved by admitted calls)."""
        self.nbytes = 0
        """Their payload and metadata bytes (the byte limit also counts ``MESSAGE_MEMORY`` per message)."""
        self.accepted_total = 0
        """Messages ever accepted; a flush waits until ``acked_total`` reaches this mark."""
        self.acked_total = 0
        self.has_unsent = asyncio.Event()
        """Set when the empty ``unsent`` gains messages; the sender clears it, once it took them
        all, before it waits on it."""
        self._space_waiters: deque[_SpaceWaiter] = deque()
        self._flush_waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._failure: BaseException | None = None

    # --- admission ------------------------------------------------------------------------

    def try_reserve(self, count: int, nbytes: int) -> bool:
        """Reserve space without waiting; False when the call has to queue."""
        if self._space_waiters:
            return False
        if self.messages and not self._fits(count, nbytes):
            return False
        self.messages += count
        self.nbytes += nbytes
        return True

    async def reserve(self, count: int, nbytes: int, timeout: float | None) -> None:
        """Wait (FIFO) until the call is admitted; ``BufferFullTimeoutError`` after ``timeout``."""
        if self._failure is not None:
            raise self._failure.with_traceback(None)  # the same error for every call; do not grow its traceback
        if self.try_reserve(count, nbytes):
            return
        loop = asyncio.get_running_loop()
        waiter = _SpaceWaiter(count, nbytes, loop.create_future())
        self._space_waiters.append(waiter)
        timer = None
        if timeout is not None:
            timer = loop.call_later(timeout, self._expire, waiter, timeout)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                # Granted just before the cancellation landed: give the space back.
                self.release(count, nbytes)
            else:
                self._drop_waiter(waiter)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _fits(self, count: int, nbytes: int) -> bool:
        messages = self.messages + count
        return messages <= self._message_limit and self.nbytes + nbytes + messages * MESSAGE_MEMORY <= self._byte_limit

    def _expire(self, waiter: _SpaceWaiter, timeout: float) -> None:
        if waiter.future.done():
            return
        self._drop_waiter(waiter)
        waiter.future.set_exception(
            BufferFullTimeoutError(
                f"writer buffer stayed full for {timeout}s (holding {self.messages} messages / {self.nbytes} bytes,"
                f" limits {self.max_messages} / {self.max_bytes} counting {MESSAGE_MEMORY} bytes per message;"
                f" the call needs {waiter.count} / {waiter.nbytes}); nothing from this call was accepted"
            )
        )

    def _drop_waiter(self, waiter: _SpaceWaiter) -> None:
        try:
            self._space_waiters.remove(waiter)
        except ValueError:
            return
        # The head may have been blocking smaller calls behind it.
        self._grant()

    def _grant(self) -> None:
        waiters = self._space_waiters
        while waiters:
            head = waiters[0]
            if head.future.done():
                waiters.popleft()
                continue
            if self.messages and not self._fits(head.count, head.nbytes):
                return
            waiters.popleft()
            self.messages += head.count
            self.nbytes += head.nbytes
            head.future.set_result(None)

    def release(self, count: int, nbytes: int) -> None:
        """Free space (acknowledged messages, or a reservation that was not used)."""
        self.messages -= count
        self.nbytes -= nbytes
        if self._space_waiters:
            self._grant()

    # --- queue ----------------------------------------------------------------------------

    def push(self, entries: list[PendingMessage]) -> None:
        """Queue admitted messages for sending (their space is already reserved)."""
        if not self.unsent:
            self.has_unsent.set()
        self.unsent.extend(entries)
        self.accepted_total += len(entries)

    def try_push_one(self, entry: PlainMessage) -> bool:
        """Reserve space for one message and queue it, if that needs no waiting (else do nothing
        and return False): ``try_reserve`` and ``push`` in one call, for ``write``'s hot path."""
        messages = self.messages
        size = len(entry[0])
        if self._space_waiters or (
            messages
            and (
                messages >= self._message_limit
                or self.nbytes + size + (messages + 1) * MESSAGE_MEMORY > self._byte_limit
            )
        ):
            return False
        self.messages = messages + 1
        self.nbytes += size
        unsent = self.unsent
        if not unsent:
            self.has_unsent.set()
        unsent.append(entry)
        self.accepted_total += 1
        return True

    def rewind(self) -> None:
        """A new stream starts: every unacknowledged message is to be sent again, in order."""
        if self.inflight:
            self.inflight.extend(self.unsent)
            self.unsent, self.inflight = self.inflight, deque()
        if self.unsent:
            self.has_unsent.set()

    @property
    def empty(self) -> bool:
        return not self.unsent and not self.inflight

    def drop_message(self, entry: PendingMessage, error: BaseException) -> bool:
        """Mark ``entry`` as one that cannot be sent: its future fails with ``error`` now, and it
        is settled (counted for ``flush``, its space freed) once every message before it is.
        Return whether a caller holds a future that learns of it."""
        entry.error = error
        entry.encoded = None
        entry.data = b""
        future = entry.future
        if future is not None and not future.done():
            future.set_exception(error)
            return True
        return False

    def settle_dropped(self) -> None:
        """Settle the dropped messages at the head of ``inflight``: no acknowledgement will come
        for them, and everything before them is acknowledged."""
        inflight = self.inflight
        count = 0
        nbytes = 0
        while inflight:
            head = inflight[0]
            if isinstance(head, tuple) or head.error is None:
                break
            inflight.popleft()
            nbytes += head.size
            count += 1
        if count:
            self.acknowledged(count, nbytes)

    def acknowledged(self, count: int, nbytes: int) -> None:
        """``count`` messages were popped from ``inflight`` by acks; wake flushes and writers."""
        self.acked_total += count
        self.release(count, nbytes)
        waiters = self._flush_waiters
        while waiters and waiters[0][0] <= self.acked_total:
            future = waiters.popleft()[1]
            if not future.done():
                future.set_result(None)

    async def wait_acked(self, mark: int) -> None:
        """Wait until the first ``mark`` accepted messages are acknowledged (or the writer fails)."""
        if self._failure is not None:
            raise self._failure.with_traceback(None)  # the same error for every call; do not grow its traceback
        if self.acked_total >= mark:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((mark, future))
        try:
            await future
        finally:
            if not future.done():
                # Cancelled or timed out: stop tracking this waiter.
                future.cancel()
                self._flush_waiters = deque(w for w in self._flush_waiters if w[1] is not future)

    # --- failure --------------------------------------------------------------------------

    def fail(self, error: BaseException) -> int:
        """Fail every pending future and waiter with ``error``; return how many messages were lost."""
        if self._failure is None:
            self._failure = error
        lost = 0
        for queue in (self.inflight, self.unsent):
            for entry in queue:
                if isinstance(entry, tuple):
                    continue  # nobody holds a future for it
                future = entry.future
                if future is not None and not future.done():
                    future.set_exception(error)
                    # The caller may hold the future without awaiting it (write_with_ack_future);
                    # the writer reports the error itself, so do not warn about it at GC time.
                    future.exception()
            lost += len(queue)
            queue.clear()
        self.messages = self.nbytes = 0
        for waiter in self._space_waiters:
            if not waiter.future.done():
                waiter.future.set_exception(error)
        self._space_waiters.clear()
        for _, flush_waiter in self._flush_waiters:
            if not flush_waiter.done():
                flush_waiter.set_exception(error)
        self._flush_waiters.clear()
        return lost
