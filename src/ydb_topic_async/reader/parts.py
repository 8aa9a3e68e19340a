"""Received parts: what one response brought for one partition session, until a receive takes it.

A ``BufferedPart`` keeps its server batches as received (see ``wire``) and a cursor to the next
message to take. A take builds the ``TopicMessage``s it hands out (``MessageBatch`` builds them
as it is iterated), so waiting messages cost no Python object each. A compressed part decodes
only what the next take needs: ``planned_count`` judges how many messages that is, by the sizes
their writers declared, and ``decode_ahead`` decodes those not at hand yet (see ``decoding``).

A part's charge (what it counts against the reader's buffer, see ``flow_control``) is split over
its messages, so taking a single message releases its share.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

from .. import _codecs
from .bookkeeping import Rereading
from .decoding import RAW_CODECS, decode_payloads
from .messages import MessageBatch, PartitionSession, Run, TopicMessage
from .parsing import ExternalPayloads, external_of
from .wire import DETACH_SIZE, _DetachedInfo, _ServerBatchInfo, records_between


def server_batches(
    part: Any, external: ExternalPayloads | None, index: int, decoders: Mapping[int, _codecs.Transform]
) -> tuple[list[_ServerBatchInfo], int, bool]:
    """The server batches of a response's ``index``-th partition data ``part`` that hold
    messages, how many messages they hold, and whether some payloads need decoding.

    Nothing per message here: a part's messages stay as received until a receive takes them;
    ``external``: the large payloads the parser left in the received bytes (see ``parsing``).
    """
    batches: list[_ServerBatchInfo] = []
    messages = 0
    compressed = False
    for batch_index, batch in enumerate(part.batches):
        records = batch.message_data
        if not records:
            continue
        codec = batch.codec
        views = None if external is None else external_of(external, index, batch_index, records)
        if views is not None:
            # Payloads still in the received bytes: raw ones are copied out as they are taken,
            # the way compressed ones are decoded.
            decoder = bytes if codec in RAW_CODECS else _codecs.lookup(decoders, codec, "decoder")
            info = _ServerBatchInfo(batch, decoder, views)
            compressed = True
        elif codec in RAW_CODECS:
            info = _ServerBatchInfo(batch)
        else:
            info = _ServerBatchInfo(batch, _codecs.lookup(decoders, codec, "decoder"))
            compressed = True
        batches.append(info)
        messages += len(records)
    return batches, messages, compressed


class BufferedPart:
    """What one response brought for one partition session that is not handed out yet: its
    server batches, as received, and where the next message to take is."""

    # Plain slotted attributes, not properties: the buffer's single-message path (``ReadBuffer.pop_one``)
    # reads the cursor fields (``run``, ``run_end``, ``message_index``, ``share``) directly.
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
        "replay",
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
                    nbytes += info.declared_bytes()
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
        self.replay: Rereading | None = None
        """The backward seek that read this part again, None for a part of the reader's own stream."""

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
                for record in records_between(records, index, len(records)):
                    yield info, record
                index = 0
            else:
                index -= len(records)

    def payload_bytes(self) -> int:
        """The decoded payload bytes of the messages not taken, as their writers declared them."""
        return sum(info.decoded_size(record) for info, record in self.upcoming(0))

    def planned_count(self, max_messages: int | None, max_bytes: int | None) -> int:
        """How many of the next messages a take within these limits hands out, judged by the
        payload sizes the writers declared. For a single message, the following ones that
        decode cheaply along with it (within ``_codecs.fits_inline``) count too."""
        left = self.left
        count = left if max_messages is None or max_messages > left else max_messages
        if max_bytes is None:
            if count > 1:
                return count
            limit_bytes, limit_count = _codecs.OFF_LOOP_THRESHOLD - 1, min(left, _codecs.INLINE_MAX_PAYLOADS - 1)
        else:
            limit_bytes, limit_count = max_bytes, count
        planned = 0
        total = 0
        for info, record in self.upcoming(0):
            total += info.decoded_size(record)
            if planned and (total > limit_bytes or planned >= limit_count):
                break
            planned += 1
        return planned

    async def decode_ahead(self, upto: int) -> None:
        """Decode the compressed payloads among the next ``upto`` messages that are not at hand
        yet, into ``decoded``. Does nothing when another receive got there first."""
        start = self.ready
        if start >= upto:
            return
        results = await decode_payloads(islice(self.upcoming(start), upto - start))
        if self.ready != start:
            return  # another receive decoded (and maybe took) these meanwhile
        self.decoded.extend(results)
        self.ready = upto

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
                info.forget_payloads(index, end)
                last = records[end - 1].offset
            taken += end - index
            index = end
            if index == len(records):
                batch_index += 1
                index = 0
        batch = MessageBatch.of_runs(runs, taken, self.session, self.commit_start, last + 1, self._large())
        self.advance(batch_index, index, taken, last + 1)
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
            for record in records_between(records, index, index + count - taken):
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
                if info.external:
                    info.external.pop(offset, None)  # decoded or copied: see ``forget_payloads``
                append(message)
                start = offset + 1
                taken += 1
                index += 1
                if stopped:
                    break
            if index == len(records):
                batch_index += 1
                index = 0
        self.advance(batch_index, index, taken, start)
        return MessageBatch(messages, session), error

    def skip_to(self, offset: int) -> int:
        """Pass over the messages below ``offset`` without handing them out (a forward seek);
        the next message's commit range starts at ``offset`` at the earliest, so committing it
        does not commit what was passed over. Returns how many messages were passed over."""
        if self.commit_start < offset:
            self.commit_start = offset
        skipped = 0
        batches = self.batches
        batch_index = self.batch_index
        index = self.message_index
        left = self.left
        ready = self.ready
        decoded = self.decoded
        while skipped < left:
            info = batches[batch_index]
            records = info.records
            if records[index].offset >= offset:
                break
            if skipped < ready and info.decoder is not None:
                decoded.popleft()  # its decoded payload (a decoded batch's messages each have one)
            info.forget_payloads(index, index + 1)
            skipped += 1
            index += 1
            if index == len(records):
                batch_index += 1
                index = 0
        if skipped:
            self.advance(batch_index, index, skipped, self.commit_start)
            if self.compressed:
                self.ready = max(0, ready - skipped)
        return skipped

    def head_failed(self) -> bool:
        """Whether the next message is one whose payload could not be decoded."""
        return (
            self.compressed
            and self.ready > 0
            and self.run.decoder is not None
            and isinstance(self.decoded[0], BaseException)
        )

    def next_size(self) -> int:
        """The payload size of the next message (decoded when at hand, else as declared)."""
        info = self.run
        if self.compressed and self.ready and info.decoder is not None:
            head = self.decoded[0]
            if not isinstance(head, BaseException):
                return len(head)
        return info.decoded_size(info.records[self.message_index])

    def _large(self) -> bool:
        """Whether some payloads may be large enough to detach (judged by the average charge)."""
        return self.share >= DETACH_SIZE // 2

    def advance(self, batch_index: int, index: int, taken: int, commit_start: int) -> None:
        """``taken`` messages were handed out: the next one is at ``index`` of server batch
        ``batch_index``, and its commit range starts at ``commit_start``."""
        if batch_index != self.batch_index and batch_index < len(self.batches):
            self.run = self.batches[batch_index]
            self.run_end = len(self.run.records)
        self.batch_index = batch_index
        self.message_index = index
        self.left -= taken
        if self.compressed:
            self.ready -= taken
        self.commit_start = commit_start
