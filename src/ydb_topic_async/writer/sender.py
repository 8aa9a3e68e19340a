"""The writer's background work: one gRPC StreamWrite session at a time, and reconnecting.

``WriterSender.run`` is the writer's single background task. Each loop iteration opens a stream
(``_session``): handshake, then three child tasks under one anyio task group, a sender (moves
messages from the buffer's ``unsent`` queue into WriteRequests), a reader (matches WriteAcks to
``inflight`` messages in seq_no order) and a token refresher. The first failing child ends the
stream; ``run`` then decides, via the retry policy, whether to reconnect (resending every
unacknowledged message with its original seq_no and created_at, so the server deduplicates) or to
give up, in which case the error leaves ``run`` and the writer fans it out to every waiter.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

import anyio
import grpc

from .. import _codecs
from .._errors import (
    ConnectionLostError,
    DeadlineExceededError,
    InternalError,
    MessageTooLargeError,
    UnsupportedCodecError,
    UsageError,
    YdbTopicError,
    error_from_grpc,
    error_from_status,
)
from .._proto import ydb_status_codes_pb2
from .._proto import ydb_topic_pb2 as pb
from .._retry import RetryPolicy, as_ydb_error
from ..observability.logging import sdk_logger, writer_fields
from ..observability.metrics import GaugeShare
from .messages import InitInfo, Skipped, Written, WrittenInTx

if TYPE_CHECKING:
    from .._driver import Driver
    from .buffer import PendingMessage, WriteBuffer

logger = sdk_logger("writer")

_METHOD = "/Ydb.Topic.V1.TopicService/StreamWrite"
_SUCCESS = ydb_status_codes_pb2.StatusIds.SUCCESS
_UNSPECIFIED = ydb_status_codes_pb2.StatusIds.STATUS_CODE_UNSPECIFIED

MESSAGE_OVERHEAD = 48
"""Upper bound of the protobuf framing of one MessageData besides payload and metadata
(seq_no, created_at, uncompressed_size, tags and lengths)."""
METADATA_ITEM_OVERHEAD = 12
REQUEST_OVERHEAD = 64
"""FromClient/WriteRequest framing and the codec field."""
BATCH_TARGET_BYTES = 4 * 1024 * 1024
"""Requests are closed at about this size even when ``max_request_size`` allows more: past a few
MiB the per-request cost is already negligible, while serializing tens of MiB at once costs about
twice the CPU per byte (fresh, page-faulting allocations). A larger message still goes alone in a
request of up to ``max_request_size``."""
MAX_MESSAGES_PER_REQUEST = 100_000
"""Bounds the work done between two awaits when a huge backlog is sent."""


def wire_size(payload_len: int, entry: PendingMessage) -> int:
    """An upper bound of ``entry``'s encoded size inside a WriteRequest, with a payload of
    ``payload_len`` bytes. A message fits a request when this is at most ``max_request_size -
    REQUEST_OVERHEAD``."""
    size = payload_len + MESSAGE_OVERHEAD
    metadata = entry.metadata
    if metadata:
        size += entry.size - entry.data_len + METADATA_ITEM_OVERHEAD * len(metadata)
    return size


@dataclass(frozen=True)
class SenderSettings:
    path: str
    producer_id: str
    partition_id: int | None
    direct_write: bool
    session_metadata: Mapping[str, str]
    codec: int
    encoder: _codecs.Transform
    retry: RetryPolicy
    max_request_size: int
    token_refresh_interval: float
    init_timeout: float


class WriterSender:
    """Keeps one write stream alive and moves the buffer's messages through it."""

    def __init__(
        self,
        driver: Driver,
        settings: SenderSettings,
        buffer: WriteBuffer,
        on_init: Callable[[InitInfo], None],
    ) -> None:
        self._driver = driver
        self._settings = settings
        self._buffer = buffer
        self._on_init = on_init
        self._first_init = True
        self._progress = False
        self._generation: int | None = None
        self._node_id: int | None = None
        self._last_token: str | None = None
        self._pending_token: str | None = None
        self._token_in_flight = False
        self._stream_error: BaseException | None = None
        self.session_id = ""
        self.last_statistics: tuple[int, int, Any] | None = None
        """(partition_id, ack count, WriteStatistics proto) of the latest WriteResponse."""
        self.reconnects = 0
        self.tx_identity: pb.TransactionIdentity | None = None
        """Set for a transactional writer: every WriteRequest carries it."""
        self.log_fields = writer_fields(settings.path, settings.producer_id, settings.partition_id)
        """The ``extra`` of this writer's log records (updated by each handshake)."""
        self._metrics = driver._metrics
        self._sent_marks: deque[_SentMark] = deque()
        """With metrics: one per request of the current stream, oldest first."""
        self._buffer_share = GaugeShare()
        """With metrics: this writer's part of its topic's buffer gauge."""

    # --- reconnect loop -----------------------------------------------------------------

    async def run(self) -> None:
        """Run streams until a failure the retry policy gives up on; that error is raised."""
        try:
            await self._run()
        finally:
            if self._metrics is not None:
                # Stopped or failed: whatever the buffer still holds is the writer's no longer, and
                # the gauge summed over every writer of the topic must not keep it.
                self._report_buffer(self._metrics, 0, 0)

    async def _run(self) -> None:
        attempt = 0
        started = time.monotonic()
        while True:
            try:
                await self._session()
            except Exception as exc:
                error = as_ydb_error(exc)
                if error is None:
                    raise
                if self._progress:
                    attempt, started, self._progress = 0, time.monotonic(), False
                attempt += 1
                delay = self._settings.retry.next_delay(error, attempt, started, idempotent=True)
                if delay is None and self._settings.direct_write and await self._generation_changed():
                    # The partition moved: the old location is stale, not the request.
                    delay = self._settings.retry.fast.delay(attempt - 1)
                if delay is None:
                    logger.debug(
                        "topic writer %s: session %s failed for good: %r",
                        self._settings.path, self.session_id, error, extra=self.log_fields,
                    )
                    raise error from (exc if exc is not error else None)
                logger.info(
                    "topic writer %s: session %s broke (%r); reconnecting in %.3fs",
                    self._settings.path, self.session_id, error, delay, extra=self.log_fields,
                )
                self.reconnects += 1
                if self._metrics is not None:
                    self._metrics.writer_reconnect(self._settings.path, error)
                await anyio.sleep(delay)

    async def _generation_changed(self) -> bool:
        old = self._generation
        try:
            await self._resolve_location()
        except YdbTopicError:
            return False
        return self._generation != old

    async def _resolve_location(self) -> None:
        assert self._settings.partition_id is not None
        info = await self._driver.topic.describe_partition(
            self._settings.path, self._settings.partition_id, include_stats=False, include_location=True
        )
        if info.location is None:
            raise InternalError(f"partition {self._settings.partition_id} has no location for direct write")
        self._generation = info.location.generation
        self._node_id = info.location.node_id

    # --- one stream ---------------------------------------------------------------------

    def _init_request(self) -> pb.StreamWriteMessage.FromClient:
        s = self._settings
        request = pb.StreamWriteMessage.FromClient()
        init = request.init_request
        init.path = s.path
        init.producer_id = s.producer_id
        init.write_session_meta.update(s.session_metadata)
        # Only the first handshake needs the stored seq_no: later ones resend known numbers.
        init.get_last_seq_no = self._first_init
        if s.partition_id is not None:
            if s.direct_write:
                assert self._generation is not None
                init.partition_with_generation.partition_id = s.partition_id
                init.partition_with_generation.generation = self._generation
            else:
                init.partition_id = s.partition_id
        elif s.producer_id:
            # As the official SDKs do: older YDB versions refuse a producer id without a
            # message group or partition.
            init.message_group_id = s.producer_id
        return request

    async def _session(self) -> None:
        s = self._settings
        node_id: int | None = None
        if s.direct_write:
            await self._resolve_location()
            # The partition's own node takes the stream without an extra hop inside the cluster.
            node_id = self._node_id
        call = await self._driver._open_stream(
            _METHOD, pb.StreamWriteMessage.FromClient, pb.StreamWriteMessage.FromServer, node_id=node_id
        )
        try:
            self._last_token = await self._driver._auth_token()
            self._pending_token = None
            self._token_in_flight = False
            await _write(call, self._init_request())
            try:
                with anyio.fail_after(s.init_timeout):
                    response = await _read(call)
            except TimeoutError:
                raise DeadlineExceededError(f"no InitResponse within {s.init_timeout}s") from None
            if response.WhichOneof("server_message") != "init_response":
                raise InternalError(f"expected InitResponse, got {response.WhichOneof('server_message')}")
            self._handle_init(response.init_response)
            self._buffer.rewind()
            self._sent_marks.clear()
            self._stream_error = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._guard, self._send_loop, call, tg.cancel_scope)
                tg.start_soon(self._guard, self._read_loop, call, tg.cancel_scope)
                if s.token_refresh_interval > 0:
                    tg.start_soon(self._guard, self._token_loop, call, tg.cancel_scope)
            raise self._stream_error or ConnectionLostError("write stream ended")
        finally:
            call.cancel()

    async def _guard(
        self, loop: Callable[[Any], Awaitable[None]], call: Any, scope: anyio.CancelScope
    ) -> None:
        # Children report their failure here instead of raising, so the task group does not
        # wrap it in an ExceptionGroup and the first failure is the one that counts.
        try:
            await loop(call)
        except Exception as exc:
            if self._stream_error is None:
                self._stream_error = exc
            scope.cancel()

    def _handle_init(self, init: Any) -> None:
        supported = tuple(init.supported_codecs.codecs)
        codec = self._settings.codec
        if supported and codec not in supported:
            raise UnsupportedCodecError(
                f"the topic accepts codecs {[_codecs.codec_name(c) for c in supported]},"
                f" not the writer's {_codecs.codec_name(codec)}; nothing was sent"
            )
        self.session_id = init.session_id
        settings = self._settings
        self.log_fields = writer_fields(settings.path, settings.producer_id, init.partition_id, init.session_id)
        logger.debug(
            "topic writer %s: session %s started (partition %d, last seq_no %d)",
            settings.path, init.session_id, init.partition_id, init.last_seq_no, extra=self.log_fields,
        )
        info = InitInfo(
            last_seq_no=init.last_seq_no,
            partition_id=init.partition_id,
            supported_codecs=supported,
            session_id=init.session_id,
        )
        if self._first_init:
            self._first_init = False
            self._on_init(info)
        if self._buffer.empty:
            self._progress = True

    # --- sending ------------------------------------------------------------------------

    async def _send_loop(self, call: Any) -> None:
        buffer = self._buffer
        has_unsent = buffer.has_unsent
        while True:
            if self._pending_token is not None and not self._token_in_flight:
                token, self._pending_token = self._pending_token, None
                self._token_in_flight = True
                self._last_token = token
                request = pb.StreamWriteMessage.FromClient()
                request.update_token_request.token = token
                await _write(call, request)
            if not buffer.unsent:
                has_unsent.clear()
                await has_unsent.wait()
                continue
            metrics = self._metrics
            for request in await self._next_requests():
                if metrics is not None:
                    self._sent_marks.append(_SentMark(time.monotonic(), len(request.write_request.messages)))
                await _write(call, request)
            if metrics is not None:
                self._report_buffer(metrics, buffer.messages, buffer.nbytes)

    async def _next_requests(self) -> list[pb.StreamWriteMessage.FromClient]:
        """Take a prefix of ``unsent``, encode it, and pack it into as few requests as fit
        (each up to ``BATCH_TARGET_BYTES``, or one larger message up to ``max_request_size``).

        The taken messages move to ``inflight`` before anything is written, so acks that arrive
        while later requests are still being written find them there.
        """
        target = min(self._settings.max_request_size - REQUEST_OVERHEAD, BATCH_TARGET_BYTES)
        unsent = self._buffer.unsent
        count = 0
        raw_total = 0
        for entry in unsent:
            # Sized by the raw payload: encoding rarely grows data, and an encoded batch is packed
            # again by its encoded sizes (splitting it if it did grow).
            raw_total += wire_size(entry.data_len, entry)
            if (raw_total > target and count) or count >= MAX_MESSAGES_PER_REQUEST:
                break
            count += 1
        batch = list(islice(unsent, count))
        raw = self._settings.codec == _codecs.Codec.RAW
        if raw:
            # Packed already: the batch is within the target, or is one message that ``write``
            # checked fits in a request.
            groups = [batch]
        else:
            await self._encode(batch)
            groups = self._pack_encoded(batch, target)
        requests = [self._new_request(group, raw) for group in groups]
        self._buffer.inflight.extend(batch)
        if count == len(unsent):
            unsent.clear()
        else:
            popleft = unsent.popleft
            for _ in range(count):
                popleft()
        return requests

    def _pack_encoded(self, batch: list[PendingMessage], target: int) -> list[list[PendingMessage]]:
        """Split an encoded batch into groups of at most ``target`` bytes (a larger message alone)."""
        s = self._settings
        limit = s.max_request_size - REQUEST_OVERHEAD
        groups: list[list[PendingMessage]] = []
        group: list[PendingMessage] = []
        size = 0
        for entry in batch:
            payload = entry.encoded
            assert payload is not None
            entry_size = wire_size(len(payload), entry)
            if entry_size > limit:
                raise MessageTooLargeError(
                    f"message seq_no={entry.seq_no} is {len(payload)} bytes after {_codecs.codec_name(s.codec)}"
                    f" encoding; it cannot fit in a request of max_request_size={s.max_request_size}"
                )
            if size and size + entry_size > target:
                groups.append(group)
                group = []
                size = 0
            size += entry_size
            group.append(entry)
        groups.append(group)
        return groups

    def _new_request(self, entries: list[PendingMessage], raw: bool) -> pb.StreamWriteMessage.FromClient:
        """A WriteRequest carrying ``entries``: their raw payloads, or the encoded ones."""
        request = pb.StreamWriteMessage.FromClient()
        write = request.write_request
        write.codec = self._settings.codec
        if self.tx_identity is not None:
            write.tx.CopyFrom(self.tx_identity)
        add = write.messages.add
        for entry in entries:
            payload = entry.data if raw else entry.encoded
            assert payload is not None
            message = add()
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
        return request

    async def _encode(self, batch: list[PendingMessage]) -> None:
        """Encode payloads not encoded yet: inline when there is little to do, otherwise in
        worker threads, the batch split into chunks of similar size that encode in parallel.

        The decision is by the batch's total size and message count, not per message: a batch
        of many small messages costs as much loop time as one large message, and past a few
        hundred messages the per-call overhead of the codec alone (a gzip header and trailer,
        a context) outweighs the bytes.
        """
        todo = [entry for entry in batch if entry.encoded is None]
        if not todo:
            return
        encoder = self._settings.encoder
        total = sum(entry.data_len for entry in todo)
        if _codecs.fits_inline(total, len(todo)):
            try:
                encoded = _codecs.transform_all(encoder, [entry.data for entry in todo])
            except Exception as exc:
                raise self._encoder_error(exc) from exc
            _store_encoded(todo, encoded)
            return
        failures: list[BaseException] = []

        async def encode_chunk(chunk: list[PendingMessage]) -> None:
            payloads = [entry.data for entry in chunk]
            try:
                encoded = await _codecs.run_in_codec_thread(_codecs.transform_all, encoder, payloads)
            except Exception as exc:
                failures.append(exc)
                return
            # Stored by the loop thread: the entries are shared with the rest of the writer.
            _store_encoded(chunk, encoded)

        async with anyio.create_task_group() as tg:
            for start, end in _codecs.split_evenly([entry.data_len for entry in todo], total):
                tg.start_soon(encode_chunk, todo[start:end])
        if failures:
            raise self._encoder_error(failures[0]) from failures[0]

    def _encoder_error(self, exc: BaseException) -> UsageError:
        return UsageError(f"encoder for codec {_codecs.codec_name(self._settings.codec)} failed: {exc!r}")

    # --- receiving ----------------------------------------------------------------------

    async def _read_loop(self, call: Any) -> None:
        while True:
            response = await _read(call)
            kind = response.WhichOneof("server_message")
            if kind == "write_response":
                self._handle_acks(response.write_response)
            elif kind == "update_token_response":
                self._token_in_flight = False
                if self._pending_token is not None:
                    self._buffer.has_unsent.set()  # wake the sender to send the newer token

    def _handle_acks(self, response: Any) -> None:
        partition_id = response.partition_id
        inflight = self._buffer.inflight
        count = 0
        nbytes = 0
        metrics = self._metrics
        skipped = 0
        written_bytes = 0
        for ack in response.acks:
            seq_no = ack.seq_no
            if not inflight:
                raise InternalError(f"protocol violation: WriteAck for seq_no={seq_no} with nothing in flight")
            entry = inflight[0]
            if seq_no != entry.seq_no:
                if seq_no < entry.seq_no:
                    continue  # already settled: a repeated ack changes nothing
                raise InternalError(
                    f"protocol violation: WriteAck for seq_no={seq_no} while seq_no={entry.seq_no} is unacknowledged"
                )
            inflight.popleft()
            count += 1
            nbytes += entry.size
            future = entry.future
            if future is not None and future.done():
                future = None  # the caller cancelled it
            if future is None and metrics is None:
                continue
            status = ack.WhichOneof("message_write_status")
            if future is not None:
                if status == "written":
                    future.set_result(Written(partition_id, ack.written.offset, seq_no))
                elif status == "skipped":
                    future.set_result(Skipped(partition_id, seq_no))
                elif status == "written_in_tx":
                    future.set_result(WrittenInTx(partition_id, seq_no))
                else:
                    raise InternalError(f"protocol violation: WriteAck for seq_no={seq_no} has no status")
            if metrics is not None:
                if status == "skipped":
                    skipped += 1
                else:
                    written_bytes += entry.data_len
        if count:
            self._progress = True
            self.last_statistics = (partition_id, count, response.write_statistics)
            self._buffer.acknowledged(count, nbytes)
            if metrics is not None:
                self._record_acks(metrics, partition_id, count, skipped, written_bytes)

    def _record_acks(self, metrics: Any, partition_id: int, count: int, skipped: int, written_bytes: int) -> None:
        topic = self._settings.path
        metrics.writer_acks(topic, partition_id, count - skipped, skipped, written_bytes)
        # Acks come in seq_no order, and requests were sent in that order: the oldest marks are theirs.
        now = time.monotonic()
        marks = self._sent_marks
        left = count
        while left and marks:
            mark = marks[0]
            taken = min(left, mark.unacked)
            metrics.writer_ack_latency(topic, now - mark.sent_at, taken)
            left -= taken
            mark.unacked -= taken
            if not mark.unacked:
                marks.popleft()
        self._report_buffer(metrics, self._buffer.messages, self._buffer.nbytes)

    def _report_buffer(self, metrics: Any, messages: int, nbytes: int) -> None:
        self._buffer_share.report(metrics.writer_buffer_change, self._settings.path, messages, nbytes)

    # --- tokens -------------------------------------------------------------------------

    async def _token_loop(self, call: Any) -> None:
        del call  # the sender writes the update, so writes to the stream never interleave
        driver = self._driver
        while True:
            await anyio.sleep(self._settings.token_refresh_interval)
            try:
                token = await driver._auth_token()
            except Exception:
                # The current token is still valid for a while; try again at the next tick.
                logger.warning(
                    "topic writer %s: session %s could not refresh its token",
                    self._settings.path, self.session_id, exc_info=True, extra=self.log_fields,
                )
                continue
            if token and token != self._last_token and token != self._pending_token:
                self._pending_token = token
                self._buffer.has_unsent.set()


class _SentMark:
    """A request sent on the current stream: when, and how many of its messages await their ack."""

    __slots__ = ("sent_at", "unacked")

    def __init__(self, sent_at: float, unacked: int) -> None:
        self.sent_at = sent_at
        self.unacked = unacked


def _store_encoded(entries: list[PendingMessage], encoded: list[bytes]) -> None:
    for entry, payload in zip(entries, encoded, strict=True):
        entry.encoded = payload
        entry.data = b""  # only the encoded form is sent (and resent) from now on


async def _write(call: Any, request: pb.StreamWriteMessage.FromClient) -> None:
    try:
        await call.write(request)
    except grpc.RpcError as exc:
        raise error_from_grpc(exc) from None
    except Exception as exc:  # e.g. writing to a call the server already finished
        raise ConnectionLostError(f"write stream broke while sending: {exc!r}") from exc


async def _read(call: Any) -> Any:
    try:
        response = await call.read()
    except grpc.RpcError as exc:
        raise error_from_grpc(exc) from None
    if response is grpc.aio.EOF:
        raise ConnectionLostError("the server closed the write stream")
    status = response.status
    if status != _SUCCESS and status != _UNSPECIFIED:
        raise error_from_status(status, response.issues)
    return response
