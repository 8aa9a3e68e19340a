"""The writer's background work: one StreamWrite session at a time, kept open by a ``StreamKeeper``.

``WriterSender.run`` is the writer's single background task. Each session opens a stream (the
handshake bounded by ``init_timeout``), then runs three child tasks under one anyio task group:
a sender (moves messages from the buffer's ``unsent`` queue into WriteRequests, see
``batching``), a reader (matches WriteAcks to ``inflight`` messages in seq_no order) and a token
refresher. The first failing child ends the stream; the keeper then reconnects (resending every
unacknowledged message with its original seq_no and created_at, so the server deduplicates) or
gives up, in which case the error leaves ``run`` and the writer fans it out to every waiter.
With ``wait_for_topic``, a handshake answered "the topic does not exist" before the first one
that succeeded is not a failure but a wait (the keeper's ``WaitOut``): tried again for that long,
while ``write`` goes on buffering.

A writer that numbers its messages itself (``auto_seqno``) owns its producer id's sequence: a
seq_no it sends for the first time must be new to the server. So ``Skipped`` for such a message
is not a result but a conflict (another writer wrote with the same producer id), and so is a
reconnect's handshake reporting a last seq_no beyond any this writer sent: both fail the writer
with ``SeqNoConflictError``. A message sent again after a reconnect may legitimately come back
``Skipped``: the server had stored it before the old stream broke.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from .. import _codecs
from .._errors import (
    ConnectionLostError,
    InternalError,
    SeqNoConflictError,
    TopicNotFoundError,
    UnsupportedCodecError,
    YdbTopicError,
)
from .._proto import ydb_topic_pb2 as pb
from .._retry import topic_wait
from .._stream import BidiStream, StreamKeeper, StreamMethod, WaitOut, refresh_tokens, tokens_may_change
from ..observability.logging import sdk_logger, writer_fields
from .batching import RequestBatcher
from .buffer import seq_no_of
from .messages import InitInfo, Skipped, WriteResult, Written, WrittenInTx

if TYPE_CHECKING:
    from .._retry import RetryPolicy
    from .._transport import Transport
    from ..observability.metrics import WriterReport
    from ..topic.types import PartitionLocation
    from .buffer import PendingMessage, WriteBuffer
    from .settings import ResolvedSettings, WriterSettings
    from .transaction import WriteTransaction

logger = sdk_logger("writer")

WriteStream = BidiStream[pb.StreamWriteMessage.FromClient, pb.StreamWriteMessage.FromServer]

STREAM_WRITE = StreamMethod(
    "/Ydb.Topic.V1.TopicService/StreamWrite",
    pb.StreamWriteMessage.FromClient,
    pb.StreamWriteMessage.FromServer,
    "write stream",
)


class WriterSender:
    """Keeps one write stream alive and moves the buffer's messages through it.

    It runs on the writer's ``settings`` (checked) and what they came to on the driver
    (``resolved``: the full path, the request size limit, the reconnect policy).
    ``locate()`` resolves the partition's current location (for direct write); ``hand_off(error)``
    picks the failures that end the writer quietly for its owner to handle (see ``StreamKeeper``).
    With a ``transaction``, every WriteRequest writes into it.
    """

    def __init__(
        self,
        transport: Transport,
        settings: WriterSettings,
        resolved: ResolvedSettings,
        buffer: WriteBuffer,
        on_init: Callable[[InitInfo], None],
        report: WriterReport,
        locate: Callable[[], Awaitable[PartitionLocation | None]] | None = None,
        hand_off: Callable[[BaseException], bool] | None = None,
        transaction: WriteTransaction | None = None,
    ) -> None:
        assert settings.producer_id is not None  # WriterSettings makes one when none is given
        self._transport = transport
        self._settings = settings
        self._path = resolved.path
        self._producer_id = settings.producer_id
        self._buffer = buffer
        self._on_init = on_init
        self._report = report
        self._locate = locate
        self._first_init = True
        self._generation: int | None = None
        self._node_id: int | None = None
        self._last_token: str | None = None
        self._pending_token: str | None = None
        self._token_in_flight = False
        self._stream_error: BaseException | None = None
        self._sent_up_to = 0
        """The highest seq_no sent on any stream so far."""
        self._resent_up_to = 0
        """The highest seq_no the current stream may send again (sent on an earlier stream): up
        to it, ``Skipped`` means the server stored it before that stream broke."""
        self._check_seq_nos = settings.auto_seqno
        self.session_id = ""
        self.last_statistics: tuple[int, int, Any] | None = None
        """(partition_id, ack count, WriteStatistics proto) of the latest WriteResponse."""
        self.log_fields = writer_fields(self._path, self._producer_id, settings.partition_id)
        """The ``extra`` of this writer's log records (updated by each handshake)."""
        self.batcher = RequestBatcher(settings, resolved, buffer, self._dropped, transaction)
        self.keeper = StreamKeeper(
            self._describe,
            resolved.retry,
            logger=logger,
            log_fields=lambda: self.log_fields,
            on_reconnect=report.reconnect,
            recover=self._generation_changed if settings.direct_write else None,
            loss=self._loss,
            hand_off=hand_off,
            wait_out=self._topic_wait(settings.wait_for_topic, resolved.retry),
        )

    def _topic_wait(self, within: float | None, retry: RetryPolicy) -> WaitOut | None:
        """``wait_for_topic``: before the first handshake, a missing topic is waited for (at most
        ``within`` seconds from its first answer, tried on ``retry``'s fast schedule)."""
        if within is None:
            return None
        path = self._path

        def gave_up(error: BaseException, waited: float, closed: bool) -> BaseException:
            return TopicNotFoundError.after_waiting(error, path, waited, closed=closed)

        return WaitOut(topic_wait(within, retry), gave_up, "the topic")

    def _describe(self) -> str:
        session = f" (session {self.session_id})" if self.session_id else ""
        return f"topic writer {self._path}{session}"

    def _loss(self) -> str:
        pending = self._buffer.messages
        return f"with {pending} unacknowledged messages" if pending else ""

    def _dropped(self, entry: PendingMessage, error: BaseException) -> None:
        if entry.future is None:
            # Written with write(): nobody holds a future that could tell.
            logger.error("%s: %s", self._describe(), error, extra=self.log_fields)

    # --- reconnect loop -----------------------------------------------------------------

    async def run(self) -> None:
        """Run streams until a failure the retry policy gives up on; that error is raised."""
        try:
            await self.keeper.run(self._session)
        finally:
            self._report.closed()

    async def _generation_changed(self, error: BaseException) -> bool:
        """After a final error of a direct write: whether the partition moved (then the old
        location was stale, not the request, and a reconnect may succeed)."""
        old = self._generation
        try:
            await self._resolve_location()
        except YdbTopicError:
            return False
        return self._generation != old

    async def _resolve_location(self) -> None:
        assert self._locate is not None
        location = await self._locate()
        if location is None:
            raise InternalError(f"partition {self._settings.partition_id} has no location for direct write")
        self._generation = location.generation
        self._node_id = location.node_id

    # --- one stream ---------------------------------------------------------------------

    def _init_request(self) -> pb.StreamWriteMessage.FromClient:
        s = self._settings
        request = pb.StreamWriteMessage.FromClient()
        init = request.init_request
        init.path = self._path
        init.producer_id = self._producer_id
        if s.session_metadata:
            init.write_session_meta.update(s.session_metadata)
        # The first handshake numbers the messages after the stored seq_no; a later one of a
        # self-numbering writer checks that nobody else wrote with the producer id meanwhile.
        init.get_last_seq_no = self._first_init or self._check_seq_nos
        if s.partition_id is not None:
            if s.direct_write:
                assert self._generation is not None
                init.partition_with_generation.partition_id = s.partition_id
                init.partition_with_generation.generation = self._generation
            else:
                init.partition_id = s.partition_id
        elif s.message_group_id:
            init.message_group_id = s.message_group_id
        elif self._producer_id:
            # As the official SDKs do: older YDB versions refuse a producer id without a
            # message group or partition.
            init.message_group_id = self._producer_id
        return request

    async def _session(self) -> None:
        s = self._settings
        node_id: int | None = None
        if s.direct_write:
            await self._resolve_location()
            # The partition's own node takes the stream without an extra hop inside the cluster.
            node_id = self._node_id
        stream, response = await BidiStream.open(
            self._transport,
            STREAM_WRITE,
            self._init_request(),
            expect="init_response",
            timeout=s.init_timeout,
            node_id=node_id,
        )
        try:
            self._last_token = self._transport.current_token
            self._pending_token = None
            self._token_in_flight = False
            self._handle_init(response.init_response)
            self._buffer.rewind()
            self._report.stream_started()
            self._stream_error = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._guard, self._send_loop, stream, tg.cancel_scope)
                tg.start_soon(self._guard, self._read_loop, stream, tg.cancel_scope)
                if s.token_refresh_interval > 0 and tokens_may_change(self._transport):
                    tg.start_soon(self._guard, self._token_loop, stream, tg.cancel_scope)
            raise self._stream_error or ConnectionLostError("write stream ended")
        finally:
            stream.close()

    async def _guard(
        self, loop: Callable[[WriteStream], Awaitable[None]], stream: WriteStream, scope: anyio.CancelScope
    ) -> None:
        # Children report their failure here instead of raising, so the task group does not
        # wrap it in an ExceptionGroup and the first failure is the one that counts.
        try:
            await loop(stream)
        except Exception as exc:
            if self._stream_error is None:
                self._stream_error = exc
            scope.cancel()

    def _handle_init(self, init: Any) -> None:
        supported = tuple(init.supported_codecs.codecs)
        codec = self._settings.batch_codec
        selector = self.batcher.selector
        if selector is not None:
            selector.allow(supported)
        elif supported and codec not in supported:
            raise UnsupportedCodecError(
                f"the topic accepts codecs {[_codecs.codec_name(c) for c in supported]},"
                f" not the writer's {_codecs.codec_name(codec)}; nothing was sent"
            )
        self.session_id = init.session_id
        path, producer_id = self._path, self._producer_id
        self.log_fields = writer_fields(path, producer_id, init.partition_id, init.session_id)
        logger.debug(
            "topic writer %s: session %s started (partition %d, last seq_no %d)",
            path, init.session_id, init.partition_id, init.last_seq_no, extra=self.log_fields,
        )
        if not self._first_init and self._check_seq_nos and init.last_seq_no > self._sent_up_to:
            raise SeqNoConflictError(
                f"topic writer {path}: the server holds seq_no {init.last_seq_no} of producer"
                f" {producer_id!r} on partition {init.partition_id}, beyond seq_no {self._sent_up_to},"
                " the last this writer sent: another writer wrote with the same producer id while this one"
                " reconnected; the unacknowledged messages were not written"
            )
        self._resent_up_to = self._sent_up_to
        if self._first_init:
            # This writer numbers its messages after the stored seq_no: a reconnect's handshake
            # reporting that one is not someone else's, even when this writer sent nothing yet.
            self._sent_up_to = max(self._sent_up_to, init.last_seq_no)
        self.keeper.connected(init.session_id)
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
            self.keeper.progressed()

    # --- sending ------------------------------------------------------------------------

    async def _send_loop(self, stream: WriteStream) -> None:
        buffer = self._buffer
        has_unsent = buffer.has_unsent
        report = self._report
        next_requests = self.batcher.next_requests
        while True:
            if self._pending_token is not None and not self._token_in_flight:
                token, self._pending_token = self._pending_token, None
                self._token_in_flight = True
                self._last_token = token
                request = pb.StreamWriteMessage.FromClient()
                request.update_token_request.token = token
                await stream.write(request)
            if not buffer.unsent:
                has_unsent.clear()
                await has_unsent.wait()
                continue
            for request in await next_requests():
                messages = request.write_request.messages
                report.sent(len(messages))
                if messages:
                    # Counted before the write: a stream that breaks during it may have delivered it.
                    self._sent_up_to = max(self._sent_up_to, messages[len(messages) - 1].seq_no)
                await stream.write(request)
            report.buffer_changed()

    # --- receiving ----------------------------------------------------------------------

    async def _read_loop(self, stream: WriteStream) -> None:
        while True:
            response = await stream.read()
            kind = response.WhichOneof("server_message")
            if kind == "write_response":
                self._handle_acks(response.write_response)
            elif kind == "update_token_response":
                self._token_in_flight = False
                if self._pending_token is not None:
                    self._buffer.has_unsent.set()  # wake the sender to send the newer token

    def _handle_acks(self, response: Any) -> None:
        acks = response.acks
        buffer = self._buffer
        inflight = buffer.inflight
        count = len(acks)
        if 0 < count <= len(inflight) and not self._report.wants_statuses:
            first = seq_no_of(inflight[0])
            last = seq_no_of(inflight[count - 1])
            # YDB acknowledges each message once, in seq_no order. When the first and last acks
            # name the first and last of as many in-flight messages, numbered without gaps, the
            # acks are exactly theirs: settle them without reading every ack (the common case;
            # anything else is checked ack by ack).
            if (
                last - first == count - 1
                and acks[0].seq_no == first
                and acks[count - 1].seq_no == last
                and not (self._check_seq_nos and last > self._resent_up_to and _may_skip(acks, count))
            ):
                self._ack_run(response.partition_id, acks, count)
                self.last_statistics = (response.partition_id, count, response.write_statistics)
                self._report.acked(response.partition_id, count, 0, 0)
                self._report.buffer_changed()
                return
        self._ack_each(response)

    def _ack_run(self, partition_id: int, acks: Any, count: int) -> None:
        """Settle the first ``count`` in-flight messages, which ``acks`` acknowledge in order."""
        buffer = self._buffer
        popleft = buffer.inflight.popleft
        nbytes = 0
        for index in range(count):
            entry = popleft()
            if isinstance(entry, tuple):
                nbytes += len(entry[0])  # a PlainMessage: nobody waits for its result
                continue
            nbytes += entry.size
            future = entry.future
            if future is not None and not future.done():
                future.set_result(_result(partition_id, acks[index]))
        self.keeper.progressed()
        buffer.acknowledged(count, nbytes)
        buffer.settle_dropped()

    def _ack_each(self, response: Any) -> None:
        partition_id = response.partition_id
        inflight = self._buffer.inflight
        count = 0
        nbytes = 0
        skipped = 0
        written_bytes = 0
        statuses = self._report.wants_statuses
        check = self._check_seq_nos
        conflict = 0
        for ack in response.acks:
            seq_no = ack.seq_no
            if not inflight:
                raise InternalError(f"protocol violation: WriteAck for seq_no={seq_no} with nothing in flight")
            expected = seq_no_of(inflight[0])
            if seq_no != expected:
                if seq_no < expected:
                    continue  # already settled: a repeated ack changes nothing
                # Messages dropped unsent get no acks: settle those ahead of this one.
                self._skip_dropped(seq_no)
            if check and seq_no > self._resent_up_to and ack.HasField("skipped"):
                conflict = seq_no  # left in flight: the writer fails, and its future with it
                break
            entry = inflight.popleft()
            count += 1
            future = None
            if isinstance(entry, tuple):
                size = data_len = len(entry[0])  # a PlainMessage
            else:
                size, data_len, future = entry.size, entry.data_len, entry.future
                if future is not None and future.done():
                    future = None  # the caller cancelled it
            nbytes += size
            if future is None and not statuses:
                continue
            status = ack.WhichOneof("message_write_status")
            if future is not None:
                future.set_result(_result(partition_id, ack, status))
            if status == "skipped":
                skipped += 1
            else:
                written_bytes += data_len
        if count:
            self.keeper.progressed()
            self.last_statistics = (partition_id, count, response.write_statistics)
            self._buffer.acknowledged(count, nbytes)
            self._report.acked(partition_id, count, skipped, written_bytes)
        self._buffer.settle_dropped()
        self._report.buffer_changed()
        if conflict:
            raise SeqNoConflictError(
                f"topic writer {self._path}: the server already had seq_no {conflict} of producer"
                f" {self._producer_id!r} on partition {partition_id}, which this writer gave a new message:"
                " another writer is writing with the same producer id; that message and the ones after it"
                " were not written"
            )

    def _skip_dropped(self, seq_no: int) -> None:
        """Settle the dropped messages ahead of the one ``seq_no`` acknowledges."""
        buffer = self._buffer
        buffer.settle_dropped()
        inflight = buffer.inflight
        if not inflight or seq_no_of(inflight[0]) != seq_no:
            expected = seq_no_of(inflight[0]) if inflight else None
            raise InternalError(
                f"protocol violation: WriteAck for seq_no={seq_no} while seq_no={expected} is unacknowledged"
            )

    # --- tokens -------------------------------------------------------------------------

    async def _token_loop(self, stream: WriteStream) -> None:
        del stream  # the sender writes the update, so writes to the stream never interleave
        await refresh_tokens(
            self._transport,
            self._settings.token_refresh_interval,
            self._new_token,
            describe=self._describe,
            logger=logger,
            log_fields=lambda: self.log_fields,
        )

    def _new_token(self, token: str) -> None:
        if token != self._last_token and token != self._pending_token:
            self._pending_token = token
            self._buffer.has_unsent.set()


def _may_skip(acks: Any, count: int) -> bool:
    """Whether the first ``count`` acks may hold a ``Skipped`` without reading each: unless the
    first and the last were written at offsets ``count - 1`` apart. The messages of a request
    that are written get consecutive offsets, so then none in between was skipped (barring acks
    of several requests with other producers' writes in between that make up for the skips
    exactly)."""
    first, last = acks[0], acks[count - 1]
    if not (first.HasField("written") and last.HasField("written")):
        return True
    return bool(last.written.offset - first.written.offset != count - 1)


def _result(partition_id: int, ack: Any, status: str | None = None) -> WriteResult:
    """What a ``write_with_ack`` future gets for ``ack``."""
    if status is None:
        status = ack.WhichOneof("message_write_status")
    if status == "written":
        return Written(partition_id, ack.written.offset, ack.seq_no)
    if status == "skipped":
        return Skipped(partition_id, ack.seq_no)
    if status == "written_in_tx":
        return WrittenInTx(partition_id, ack.seq_no)
    raise InternalError(f"protocol violation: WriteAck for seq_no={ack.seq_no} has no status")
