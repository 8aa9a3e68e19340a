"""``TxWriter``: a topic writer bound to one transaction.

Each transactional writer wraps a fresh ``TopicWriter`` whose WriteRequests carry the
transaction's identity. The user holds only the wrapper, and the wrapper lets go of its writer
when the transaction ends, so a writer can never serve a second transaction. Its before-commit
hook waits for the server's acknowledgement of every message written through it and fails the
commit on any error; once the transaction ends (either way) the writer is stopped and every
further call raises ``TransactionEndedError``.

The first write waits until the stream is open and that write is acknowledged, as the official
SDK does: on a YDB cluster, attaching a partition to a transaction conflicts with other work
of the same session, so a query run in the transaction right after must not race it.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Unpack, overload

from .._errors import InternalError, InvalidArgumentError, TransactionEndedError, WriterClosedError
from .._futures import suppress_future_errors
from .._retry import RetryPolicy
from .._stream import ConnectionState
from ..query._binding import bind
from .messages import (
    InitInfo,
    ManyMessages,
    Messages,
    OneMessage,
    Skipped,
    WriteResult,
    WriteStatistics,
    WrittenInTx,
)
from .settings import WriterOptions, WriterSettings
from .writer import TopicWriter

if TYPE_CHECKING:
    from .._context import ClientContext
    from ..topic.admin import TopicAdmin


def check_written_in_tx(path: str, result: WriteResult) -> None:
    """Raise ``InternalError`` unless ``result`` acknowledges a write into the transaction
    (``Skipped``: a resend after a lost acknowledgement, deduplicated by its producer id)."""
    if not isinstance(result, WrittenInTx | Skipped):
        raise InternalError(
            f"the server acknowledged a transactional write to {path} as {result!r}, outside the transaction"
        )


class TxWriter:
    """Writes messages that become visible when the transaction ``tx`` commits.

    Made by ``driver.topic.tx_writer(tx, path, ...)`` (see ``TxWriter.settings`` for its
    defaults); ``tx`` is a transaction from
    ``driver.query.transaction()`` or from the official ``ydb`` package's asyncio query client.
    Writing begins the transaction if it has not begun; the first write returns once it is
    acknowledged. The options are those of ``TopicWriter``, with other defaults: no producer id
    (``producer_id=""``) and no internal retries (``retry=RetryPolicy.no_retries()``), so any
    stream error fails the transaction. Retries need a producer id (``InvalidArgumentError``
    otherwise): only deduplication keeps a message resent after a lost acknowledgement from
    being held twice.
    """

    def __init__(
        self, context: ClientContext, admin: TopicAdmin, tx: object, path: str, settings: WriterSettings
    ) -> None:
        binding = bind(tx)
        binding.check_accepting()
        deduplicated = bool(settings.producer_id or settings.message_group_id)
        if not deduplicated and (settings.retry is None or settings.retry.max_attempts != 1):
            raise InvalidArgumentError(
                "a transactional writer retries only with a producer id: without one, a message resent"
                " after a lost acknowledgement would be committed twice (pass producer_id=..., or no retry)"
            )
        self._writer: TopicWriter | None = TopicWriter(context, admin, path, settings)
        self._inner = self._writer
        """The writer, kept after the transaction ends for what it shows (state, statistics)."""
        self._transport = context.transport
        self.path = self._writer.path
        self.producer_id = self._writer.producer_id
        self.message_group_id = self._writer.message_group_id
        self.codec = self._writer.codec
        self._binding = binding
        self._futures: list[asyncio.Future[WriteResult]] = []
        self._writing = 0
        """``write`` calls under way that have not handed their futures over yet."""
        self._writes_settled = asyncio.Event()
        self._writes_settled.set()
        self._first_written = False
        self._bound = False
        self._sealed = False
        self._ended: str | None = None
        binding.on_before_commit(self._before_commit)
        binding.on_after_commit(self._after_commit)
        binding.on_before_rollback(self._before_rollback)
        binding.on_after_rollback(self._after_rollback)

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> TxWriter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._ended is None and self._writer is not None:
            await self._writer.__aexit__(exc_type, exc, tb)

    async def open(self) -> None:
        """Begin the transaction if it has not begun and start connecting in the background
        (``write`` does both too)."""
        writer = await self._bind()
        await writer.open()

    async def close(self, timeout: float | None = None) -> None:
        """Wait for the acknowledgement of everything written, then stop writing (early, before the
        commit). The transaction's end does this by itself."""
        if self._ended is None and self._writer is not None:
            await self._writer.close(timeout)

    @property
    def closed(self) -> bool:
        """True once closed, or once the transaction ended."""
        return self._writer is None or self._writer.closed

    @property
    def failure(self) -> BaseException | None:
        """The error that ended the writer for good (every later call raises it), or None."""
        return self._inner.failure

    def _check_usable(self) -> None:
        if self._ended is not None:
            raise self._ended_error()
        if self._sealed:
            raise TransactionEndedError(
                f"the transaction of the writer for {self.path} is committing: nothing more can be written to it"
            )
        self._binding.check_accepting()
        if self._writer is None or self._writer.closed:
            raise WriterClosedError(f"the transactional writer for {self.path} is closed")

    def _ended_error(self) -> TransactionEndedError:
        return TransactionEndedError(f"the transactional writer for {self.path} stopped: its transaction {self._ended}")

    async def _bind(self) -> TopicWriter:
        self._check_usable()
        if not self._bound:
            identity = await self._binding.identity()
            self._check_usable()
            assert self._writer is not None
            self._writer._sender.tx_identity = identity
            self._bound = True
        assert self._writer is not None
        return self._writer

    # --- writing -----------------------------------------------------------------------------

    async def write(self, messages: Messages) -> None:
        """Buffer one message or a list of them (as ``TopicWriter.write``); the commit waits for them.

        The first write through this writer returns only once it is acknowledged.
        """
        _, futures = await self._accept(messages)
        if not self._first_written:
            self._first_written = True
            await self._wait_acked(futures)

    @overload
    async def write_with_ack(self, messages: OneMessage) -> WriteResult: ...  # type: ignore[overload-overlap]  # a str is one message, not a sequence of them

    @overload
    async def write_with_ack(self, messages: ManyMessages) -> list[WriteResult]: ...

    async def write_with_ack(self, messages: Messages) -> WriteResult | list[WriteResult]:
        """Write and wait until the server holds the message(s) in the transaction (``WrittenInTx``)."""
        result, futures = await self._accept(messages)
        self._first_written = True
        await self._wait_acked(futures)
        if isinstance(result, list):
            return [f.result() for f in futures]
        return result.result()

    @overload
    async def write_with_ack_future(self, messages: OneMessage) -> asyncio.Future[WriteResult]: ...  # type: ignore[overload-overlap]  # a str is one message, not a sequence of them

    @overload
    async def write_with_ack_future(self, messages: ManyMessages) -> list[asyncio.Future[WriteResult]]: ...

    async def write_with_ack_future(
        self, messages: Messages
    ) -> asyncio.Future[WriteResult] | list[asyncio.Future[WriteResult]]:
        """Buffer like ``write`` and return the acknowledgement future(s) (``WrittenInTx``); the
        first write through this writer returns once acknowledged, its futures done."""
        result, futures = await self._accept(messages)
        if not self._first_written:
            self._first_written = True
            await self._wait_acked(futures)
        return result

    async def _accept(
        self, messages: Messages
    ) -> tuple[asyncio.Future[WriteResult] | list[asyncio.Future[WriteResult]], list[asyncio.Future[WriteResult]]]:
        # Counted until the futures are recorded, so that the before-commit hook also waits for
        # a write that began before it and is still waiting for the transaction or buffer space.
        self._writing += 1
        self._writes_settled.clear()
        try:
            writer = await self._bind()
            result = await writer.write_with_ack_future(messages)
            futures = result if isinstance(result, list) else [result]
            self._futures.extend(futures)
            return result, futures
        finally:
            self._writing -= 1
            if not self._writing:
                self._writes_settled.set()

    @staticmethod
    async def _wait_acked(futures: list[asyncio.Future[WriteResult]]) -> None:
        if not futures:
            return
        await asyncio.wait(futures)
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error.with_traceback(None)

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until everything written so far is held by the server in the transaction."""
        self._check_usable()
        assert self._writer is not None
        await self._writer.flush(timeout)

    async def wait_init(self, timeout: float | None = None) -> InitInfo:
        """Connect (beginning the transaction if needed) and return the server's handshake answer."""
        writer = await self._bind()
        return await writer.wait_init(timeout)

    @property
    def init_info(self) -> InitInfo | None:
        """The first handshake's answer, or None before it."""
        return self._inner.init_info

    @property
    def buffered_messages(self) -> int:
        """Messages written and not yet acknowledged."""
        return self._writer.buffered_messages if self._writer is not None else 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes of messages written and not yet acknowledged."""
        return self._writer.buffered_bytes if self._writer is not None else 0

    @property
    def session_id(self) -> str:
        """The current (or last) stream's session id; empty before the first handshake."""
        return self._inner.session_id

    @property
    def last_write_statistics(self) -> WriteStatistics | None:
        """Server timings of the latest acknowledgement batch, or None before any ack."""
        return self._inner.last_write_statistics

    @property
    def selected_codec(self) -> int | None:
        """The codec of the latest batch sent (see ``TopicWriter.selected_codec``)."""
        return self._inner.selected_codec

    @property
    def connection_state(self) -> ConnectionState:
        """Where the connection stands; ``CLOSED`` once the transaction ended."""
        if self._writer is None:
            return ConnectionState.CLOSED
        return self._writer.connection_state

    @property
    def reconnects(self) -> int:
        """How many times a new stream replaced a lost one."""
        return self._inner.reconnects

    @property
    def last_error(self) -> BaseException | None:
        """The failure that ended the latest stream or connection attempt (None before any)."""
        return self._inner.last_error

    # --- transaction hooks -------------------------------------------------------------------

    async def _before_commit(self) -> None:
        self._sealed = True
        try:
            await self._await_acks()
        except BaseException as exc:
            # However the caller reacts, this transaction must never commit without these messages.
            await self._binding.abort(self._transport, exc)
            raise

    async def _await_acks(self) -> None:
        if self._ended is not None:
            if self._ended == "committed":
                return
            raise self._ended_error()
        writer = self._writer
        if writer is None:
            return
        # Writes that began before the commit may still be waiting for buffer space; no new one
        # can start (the writer is sealed).
        await self._writes_settled.wait()
        futures = list(self._futures)
        await self._wait_acked(futures)
        for future in futures:
            check_written_in_tx(self.path, future.result())
        # Everything is acknowledged: close the stream before the commit.
        await writer.close()

    async def _after_commit(self, error: BaseException | None) -> None:
        await self._end("committed" if error is None else f"failed to commit ({error!r})")

    async def _before_rollback(self) -> None:
        await self._end("was rolled back")

    async def _after_rollback(self, error: BaseException | None) -> None:
        await self._end("was rolled back")

    async def _end(self, how: str) -> None:
        if self._ended is None:
            self._ended = how
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer._shutdown(TransactionEndedError(f"the transaction {how} before these were acknowledged"))
        futures, self._futures = self._futures, []
        suppress_future_errors(futures)

    @staticmethod
    def settings(**options: Unpack[WriterOptions]) -> WriterSettings:
        """The settings of a transactional writer: ``options`` over its own defaults, no producer
        id (``producer_id=""``) and no retries (``retry=RetryPolicy.no_retries()``)."""
        options.setdefault("producer_id", "")
        options.setdefault("retry", RetryPolicy.no_retries())
        return WriterSettings(**options)

    def __repr__(self) -> str:
        state = f"transaction {self._ended}" if self._ended else "open"
        return f"TxWriter({self.path!r}, {state})"
