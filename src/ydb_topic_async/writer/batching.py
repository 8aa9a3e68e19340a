"""Packing the writer's buffered messages into WriteRequests.

``RequestBatcher.next_requests`` takes a prefix of the buffer's ``unsent`` queue, encodes it
with the writer's codec (inline or in worker threads, see ``_codecs.transform_batch``) and packs
it into as few requests as fit. A message that cannot be sent (its encoder failed, or it no
longer fits a request once encoded) is dropped on its own: its future fails with the reason and
every other message goes on.

With ``codec="auto"`` a ``CodecSelector`` picks each batch's codec, as the official SDKs do: the
candidates are the codecs the topic accepts (RAW and GZIP when it lists none) that the writer
has an encoder for; a sample of a batch is compressed with each, off the event loop when it is
large, and the smallest output wins; the choice is measured again every ``MEASURE_EVERY``
batches. A message keeps the codec it was encoded with when it is resent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from typing import TYPE_CHECKING, Any

from .. import _codecs
from .._errors import MessageEncodeError, MessageTooLargeError, UnsupportedCodecError
from .._limits import BATCH_TARGET_BYTES, MAX_MESSAGES_PER_REQUEST, MESSAGE_OVERHEAD, REQUEST_OVERHEAD, wire_size
from .._proto import ydb_topic_pb2 as pb
from .buffer import as_pending

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .buffer import Entry, PendingMessage, WriteBuffer
    from .settings import ResolvedSettings, WriterSettings
    from .transaction import WriteTransaction


def entry_wire_size(payload_len: int, entry: PendingMessage) -> int:
    """``wire_size`` of ``entry`` with a payload of ``payload_len`` bytes."""
    metadata = entry.metadata
    if not metadata:
        return wire_size(payload_len)
    return wire_size(payload_len, entry.size - entry.data_len, len(metadata))


DEFAULT_AUTO_CODECS = (_codecs.Codec.RAW, _codecs.Codec.GZIP)
"""The candidates when the topic lists no codecs, as in the official SDKs (a codec the SDK
learns later does not reach topics whose readers may not know it)."""
MEASURE_EVERY = 100
"""Batches between two measurements of the candidates (the Go SDK's interval)."""
SAMPLE_BYTES = 64 * 1024
"""About how much of a batch the candidates compress to be compared: its first messages (the
last one cut short), so that a large batch is never compressed whole with a codec that loses."""
MIN_SAVING = 0.05
"""A compressing codec is picked over RAW only when it saves at least this share of the bytes:
gzip compresses 60-170 MB/s per core (level 6, text), so a smaller saving is not worth its CPU."""


class CodecSelector:
    """Picks the codec of each batch for ``codec="auto"`` (see the module's docstring).

    ``encoders`` are the writer's encoders by codec id; ``allow`` takes the topic's codecs from
    each handshake.
    """

    def __init__(self, encoders: Mapping[int, _codecs.Transform]) -> None:
        self._encoders = encoders
        self.candidates: tuple[int, ...] = ()
        self.chosen: int | None = None
        """The codec of the latest batch (None before the first)."""
        self._batches = 0

    def allow(self, supported: tuple[int, ...]) -> None:
        """The topic accepts ``supported`` (empty: any): the candidates are those the writer can
        encode; ``UnsupportedCodecError`` when there are none. New candidates are measured anew."""
        wanted = sorted(set(supported)) if supported else list(DEFAULT_AUTO_CODECS)
        candidates = tuple(codec for codec in wanted if codec in self._encoders)
        if not candidates:
            raise UnsupportedCodecError(
                f"the topic accepts codecs {[_codecs.codec_name(c) for c in wanted]}, and the writer has an encoder"
                " for none of them (register one in encoders); nothing was sent"
            )
        if candidates != self.candidates:
            self.candidates = candidates
            self.chosen = None
            self._batches = 0

    async def choose(self, payloads: list[bytes]) -> int:
        """The codec for a batch of ``payloads`` (measured on them when it is time)."""
        if len(self.candidates) == 1:
            self.chosen = self.candidates[0]
        elif self.chosen is None or self._batches % MEASURE_EVERY == 0:
            self.chosen = await self._measure(payloads)
        self._batches += 1
        return self.chosen

    async def _measure(self, payloads: list[bytes]) -> int:
        sample: list[bytes] = []
        room = SAMPLE_BYTES
        for data in payloads:
            sample.append(data[:room])
            room -= len(sample[-1])
            if room <= 0:
                break
        raw = sum(map(len, sample))
        candidates = self.candidates
        encoders = [self._encoders[codec] for codec in candidates]

        def sizes() -> list[float]:
            out: list[float] = []
            for codec, encoder in zip(candidates, encoders, strict=True):
                if codec == _codecs.Codec.RAW:
                    out.append(raw)
                    continue
                try:
                    out.append(sum(len(encoder(data)) for data in sample))
                except Exception:
                    out.append(float("inf"))  # the encoder fails on this data: not a candidate now
            return out

        serial = any(isinstance(encoder, _codecs.SerialTransform) for encoder in encoders)
        if not serial and _codecs.fits_inline(raw * (len(candidates) - 1), len(sample)):
            measured = sizes()
        else:
            measured = await _codecs.run_in_codec_thread(sizes)
        best = min(range(len(candidates)), key=lambda i: (measured[i], candidates[i]))
        if _codecs.Codec.RAW in candidates and measured[best] > raw * (1 - MIN_SAVING):
            return int(_codecs.Codec.RAW)
        return candidates[best]


class RequestBatcher:
    """Turns the buffer's unsent messages into WriteRequests, with the codec of ``settings``
    (``picks_codec``: a ``CodecSelector``'s per batch) within ``resolved.max_request_size``.

    ``on_dropped(entry, error)`` is told about a message dropped because it cannot be sent.
    With a ``transaction``, every WriteRequest carries its identity.
    """

    def __init__(
        self,
        settings: WriterSettings,
        resolved: ResolvedSettings,
        buffer: WriteBuffer,
        on_dropped: Callable[[PendingMessage, BaseException], None],
        transaction: WriteTransaction | None = None,
    ) -> None:
        self._codec = settings.batch_codec
        self._encoder = settings.encoder
        self._encoders = settings.encoder_table
        self._max_request_size = resolved.max_request_size
        self._buffer = buffer
        self._on_dropped = on_dropped
        self._transaction = transaction
        self.selector = CodecSelector(settings.encoder_table) if settings.picks_codec else None
        self._raw = self._codec == _codecs.Codec.RAW and self.selector is None
        self._target = min(resolved.max_request_size - REQUEST_OVERHEAD, BATCH_TARGET_BYTES)

    async def next_requests(self) -> list[pb.StreamWriteMessage.FromClient]:
        """Take a prefix of ``unsent``, encode it, and pack it into as few requests as fit
        (each up to ``BATCH_TARGET_BYTES``, or one larger message up to ``max_request_size``).

        The taken messages move to ``inflight`` before anything is written, so acks that arrive
        while later requests are still being written find them there. Dropped messages move
        along with the others, unsent, and are settled in order.
        """
        target = self._target
        buffer = self._buffer
        unsent = buffer.unsent
        count = 0
        raw_total = 0
        for entry in unsent:
            # Sized by the raw payload: encoding rarely grows data, and an encoded batch is packed
            # again by its encoded sizes (splitting it if it did grow). (``entry_wire_size``
            # inlined for messages without metadata: this loop runs once per message.)
            if isinstance(entry, tuple):
                raw_total += len(entry[0]) + MESSAGE_OVERHEAD
            else:
                data_len = entry.data_len
                raw_total += data_len + MESSAGE_OVERHEAD if entry.metadata is None else entry_wire_size(data_len, entry)
            if (raw_total > target and count) or count >= MAX_MESSAGES_PER_REQUEST:
                break
            count += 1
        if self._raw:
            # Packed already: the batch is within the target, or is one message that ``write``
            # checked fits in a request. Nothing raw is ever dropped (there is no encoding), and
            # nothing is awaited, so the messages move to ``inflight`` at once.
            if count == len(unsent):
                batch = list(unsent)
                unsent.clear()
            else:
                popleft = unsent.popleft
                batch = [popleft() for _ in range(count)]
            buffer.inflight.extend(batch)
            return [self._new_request(batch)]
        # Encoding awaits worker threads: the messages stay in ``unsent`` meanwhile, so a stream
        # that breaks during the wait loses none of them. Each becomes a PendingMessage, which
        # keeps its encoded payload for resending.
        pending = [as_pending(entry) for entry in islice(unsent, count)]
        await self._encode(pending)
        requests = [self._new_request(group, codec) for group, codec in self._pack(pending) if group]
        buffer.inflight.extend(pending)
        if count == len(unsent):
            unsent.clear()
        else:
            popleft = unsent.popleft
            for _ in range(count):
                popleft()
        buffer.settle_dropped()
        return requests

    def _drop(self, entry: PendingMessage, error: BaseException) -> None:
        self._buffer.drop_message(entry, error)
        self._on_dropped(entry, error)

    def _pack(self, batch: list[PendingMessage]) -> list[tuple[list[PendingMessage], int]]:
        """Split a batch into groups of one codec and at most ``target`` bytes (a larger message
        alone), by the payloads as they will be sent; a message too large for any request is
        dropped."""
        limit = self._max_request_size - REQUEST_OVERHEAD
        target = self._target
        groups: list[tuple[list[PendingMessage], int]] = []
        group: list[PendingMessage] = []
        group_codec = self._codec
        size = 0
        for entry in batch:
            if entry.error is not None:
                continue
            payload = entry.encoded
            assert payload is not None
            codec = entry.codec or self._codec
            entry_size = entry_wire_size(len(payload), entry)
            if entry_size > limit:
                self._drop(
                    entry,
                    MessageTooLargeError(
                        f"message seq_no={entry.seq_no} is {len(payload)} bytes after"
                        f" {_codecs.codec_name(codec)} encoding; it cannot fit in a request of"
                        f" max_request_size={self._max_request_size}, so it was not sent"
                    ),
                )
                continue
            if group and (size + entry_size > target or codec != group_codec):
                groups.append((group, group_codec))
                group = []
                size = 0
            group_codec = codec
            size += entry_size
            group.append(entry)
        groups.append((group, group_codec))
        return groups

    def _new_request(self, entries: Sequence[Entry], codec: int | None = None) -> pb.StreamWriteMessage.FromClient:
        """A WriteRequest carrying ``entries``: their raw payloads, or the ones encoded with
        ``codec`` (the writer's codec when not given)."""
        request = pb.StreamWriteMessage.FromClient()
        write = request.write_request
        write.codec = self._codec if codec is None else codec
        if self._transaction is not None:
            write.tx.CopyFrom(self._transaction.identity)
        add = write.messages.add
        raw = self._raw
        for entry in entries:
            if isinstance(entry, tuple):
                # A PlainMessage (only a raw writer sends one as it is): this loop runs once per
                # message, so its few fields are set here rather than through ``_fill``.
                data, seq_no, created_ns = entry
                message = add()
                message.seq_no = seq_no
                if created_ns >= 0:
                    created = message.created_at
                    created.seconds, created.nanos = divmod(created_ns, 1_000_000_000)
                message.data = data
                message.uncompressed_size = len(data)
            else:
                payload = entry.data if raw else entry.encoded
                assert payload is not None
                _fill(add(), entry, payload)
        return request

    async def _encode(self, batch: list[PendingMessage]) -> None:
        """Encode the payloads not encoded yet (see ``_codecs.transform_batch``), with the
        writer's codec or the one the selector picks for them; a message whose encoder fails is
        dropped."""
        todo = [entry for entry in batch if entry.encoded is None and entry.error is None]
        if not todo:
            return
        codec = self._codec
        encoder = self._encoder
        selector = self.selector
        if selector is not None:
            codec = await selector.choose([entry.data for entry in todo])
            for entry in todo:
                entry.codec = codec
            if codec == _codecs.Codec.RAW:
                for entry in todo:
                    entry.encoded = entry.data
                    entry.data = b""
                return
            encoder = self._encoders[codec]
        payloads = [entry.data for entry in todo]
        try:
            encoded: list[bytes | None] = list(
                await _codecs.transform_batch(
                    [entry.data_len for entry in todo],
                    lambda start, end: _codecs.transform_all(encoder, payloads[start:end]),
                    serial=isinstance(encoder, _codecs.SerialTransform),
                )
            )
        except _codecs.PartialTransformError as exc:
            encoded = exc.results
            name = _codecs.codec_name(codec)
            for index, error in exc.failures.items():
                entry = todo[index]
                failure = MessageEncodeError(
                    f"the encoder for codec {name} failed for message seq_no={entry.seq_no}: {error!r};"
                    " the message was not sent"
                )
                failure.__cause__ = error
                self._drop(entry, failure)
        # Stored by the loop thread: the entries are shared with the rest of the writer.
        for entry, payload in zip(todo, encoded, strict=True):
            if payload is not None:
                entry.encoded = payload
                entry.data = b""  # only the encoded form is sent (and resent) from now on


def _fill(message: Any, entry: PendingMessage, payload: bytes) -> None:
    """Set a WriteRequest's MessageData from ``entry``, carrying ``payload``."""
    message.seq_no = entry.seq_no
    if entry.created_ns >= 0:
        created = message.created_at
        created.seconds, created.nanos = divmod(entry.created_ns, 1_000_000_000)
    message.data = payload
    message.uncompressed_size = entry.data_len
    if entry.metadata:
        items = message.metadata_items
        for key, value in entry.metadata:
            items.add(key=key, value=value)
