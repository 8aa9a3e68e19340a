"""``TxWriter``: a topic writer bound to one transaction.

A ``TopicWriter`` made with the transaction (``WriteTransaction``), so that its WriteRequests
carry the transaction's identity; the transaction's hooks (``writer/transaction.py``, shared
with ``KeyedTxWriter``) wait at the commit for the server's acknowledgement of every message
written through it and fail the commit on any error; once the transaction ends (either way) the
writer is stopped and every further call raises ``TransactionEndedError``, so a writer can never
serve a second transaction.

The first write waits until the stream is open and that write is acknowledged, as the official
SDK does: on a YDB cluster, attaching a partition to a transaction conflicts with other work
of the same session, so a query run in the transaction right after must not race it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Self, Unpack

from .._errors import WriterClosedError
from .._retry import RetryPolicy
from .messages import InitInfo, Messages, WriteResult
from .settings import WriterOptions, WriterSettings
from .transaction import WriteTransaction, wait_written
from .writer import TopicWriter

if TYPE_CHECKING:
    from .._context import ClientContext
    from ..topic.admin import TopicAdmin


class TxWriter(TopicWriter):
    """Writes messages that become visible when the transaction ``tx`` commits.

    Made by ``driver.topic.tx_writer(tx, path, ...)`` (see ``TxWriter.settings`` for its
    defaults); ``tx`` is a transaction from
    ``driver.query.transaction()`` or from the official ``ydb`` package's asyncio query client.
    Writing begins the transaction if it has not begun; the first write returns once it is
    acknowledged. The options and the members are those of ``TopicWriter``, with other defaults:
    no producer id (``producer_id=""``) and no internal retries
    (``retry=RetryPolicy.no_retries()``), so any stream error fails the transaction. Retries need
    a producer id (``InvalidArgumentError`` otherwise): only deduplication keeps a message resent
    after a lost acknowledgement from being held twice. ``write_with_ack`` answers
    ``WrittenInTx`` (or ``Skipped`` for a resend the server deduplicated). The commit waits for
    every acknowledgement; ``close`` does so early. Entering ``async with`` does not begin the
    transaction; leaving it after the transaction ended does nothing.

    Parameters:
        context: The driver's client context.
        admin: Topic administration (for ``direct_write``).
        tx: The transaction to write into.
        path: The topic, absolute or relative to the driver's database.
        settings: The checked options (``TxWriter.settings(**options)`` gives its defaults).
    """

    def __init__(
        self, context: ClientContext, admin: TopicAdmin, tx: object, path: str, settings: WriterSettings
    ) -> None:
        transaction = WriteTransaction(tx, context.transport)
        settings.check_transactional()
        super().__init__(context, admin, path, settings, transaction=transaction)
        self._transaction = transaction
        transaction.join(self, f"the transactional writer for {self.path}")
        self._first_written = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        return self  # the first write begins the transaction, not entering the block

    async def open(self) -> None:
        """Begin the transaction if it has not begun and start connecting in the background
        (``write`` does both too)."""
        await self._transaction.begin()
        await super().open()

    async def close(self, timeout: float | None = None) -> None:
        """Wait for the acknowledgement of everything written, then stop writing (early, before the
        commit). The transaction's end does this by itself."""
        if self._transaction.ended is None:
            await super().close(timeout)

    def _closed_error(self) -> WriterClosedError:
        return WriterClosedError(f"the transactional writer for {self.path} is closed")

    # --- writing -----------------------------------------------------------------------------

    async def write(self, messages: Messages) -> None:
        """Buffer one message or a list of them (as ``TopicWriter.write``); the commit waits for them.

        The first write through this writer returns only once it is acknowledged.
        """
        await self._accept(messages, False)

    async def _accept(self, messages: Messages, with_futures: bool) -> list[asyncio.Future[WriteResult]] | None:
        # Every message gets a future: the commit checks each was written into the transaction.
        async with self._transaction.writing():
            await self._transaction.begin()
            futures = await super()._accept(messages, True)
            assert futures is not None
            self._transaction.expect(futures)
        if not self._first_written:
            self._first_written = True
            await wait_written(futures)
        return futures if with_futures else None

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until everything written so far is held by the server in the transaction."""
        self._transaction.check_usable()
        await super().flush(timeout)

    async def wait_init(self, timeout: float | None = None) -> InitInfo:
        """Connect (beginning the transaction if needed) and return the server's handshake answer."""
        await self._transaction.begin()
        return await super().wait_init(timeout)

    @staticmethod
    def settings(**options: Unpack[WriterOptions]) -> WriterSettings:
        """The settings of a transactional writer: ``options`` over its own defaults, no producer
        id (``producer_id=""``) and no retries (``retry=RetryPolicy.no_retries()``)."""
        options.setdefault("producer_id", "")
        options.setdefault("retry", RetryPolicy.no_retries())
        return WriterSettings(**options)

    def __repr__(self) -> str:
        ended = self._transaction.ended
        state = f"transaction {ended}" if ended else "open"
        return f"TxWriter({self.path!r}, {state})"


__all__ = ["TxWriter"]
