"""``KeyedTxWriter``: keyed writes inside a transaction.

A keyed writer made with the transaction (``WriteTransaction``), which it hands to every
partition writer it makes: every WriteRequest names it, so the messages of all partitions become
visible together when the transaction commits, and none if it rolls back. The transaction's
hooks are ``TxWriter``'s (``writer/transaction.py``): the before-commit hook waits for the
server's acknowledgement of every message written through it and fails the commit on any error
(then the transaction is rolled back, whatever the caller does); once the transaction ends the
writer stops and every further call raises ``TransactionEndedError``. The first write to each partition
returns only once it is acknowledged: attaching a partition to a transaction must not race a
query run in the same transaction (see ``TxWriter``).

Inside a transaction nothing is moved between partitions: a partition that splits fails the
transaction on YDB, so a split (or an overload that outlasts the partition writer's retries)
fails the writer and the commit. Idle partition writers are not closed before the transaction
ends.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .._errors import OverloadedError, TransactionEndedError
from .keyed import Key, KeyedWriter
from .messages import ManyMessages, OneMessage, WriteResult
from .transaction import WriteTransaction, wait_written

if TYPE_CHECKING:
    from .._context import ClientContext
    from ..topic.admin import TopicAdmin
    from .keyed_lanes import Entry, Lane
    from .partitioning import Partitioner
    from .settings import WriterSettings


class KeyedTxWriter(KeyedWriter):
    """Writes messages by key into the transaction ``tx``: they become visible when it commits.

    Made by ``driver.topic.keyed_tx_writer(tx, path, ...)``; ``tx`` is a transaction from
    ``driver.query.transaction()`` or from the official ``ydb`` package's asyncio query client.
    Writing begins the transaction if it has not begun. The options and the members are the
    keyed writer's; ``write_with_ack`` answers ``WrittenInTx`` (or ``Skipped`` for a resend the
    server deduplicated). The commit waits for every acknowledgement; ``close`` does so early.
    """

    def __init__(
        self,
        context: ClientContext,
        admin: TopicAdmin,
        tx: object,
        path: str,
        settings: WriterSettings,
        partitioner: Partitioner = "ydb",
    ) -> None:
        settings.check_transactional()
        transaction = WriteTransaction(tx, context.transport)
        super().__init__(context, admin, path, settings, partitioner, idle_timeout=None, transaction=transaction)
        self._transaction = transaction
        transaction.join(self, f"the keyed writer for {self.path}")
        self._joined: set[int] = set()
        """Partitions whose first write was acknowledged: they are part of the transaction."""
        self._joining: dict[int, list[asyncio.Future[WriteResult]]] = {}
        """The results of each partition's first write, while it is not acknowledged yet."""

    # --- writing -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Read the topic's partitions (``write`` does this too, and begins the transaction)."""
        self._transaction.check_usable()
        await super().open()

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message written before this call is held by the server in the transaction."""
        self._transaction.check_usable()
        await super().flush(timeout)

    async def _accept(self, messages: OneMessage | ManyMessages, key: Key, with_results: bool) -> list[Entry]:
        async with self._transaction.writing():
            await self._transaction.begin()
            # Every message gets a result: the commit checks each was written into the transaction.
            entries = await super()._accept(messages, key, True)
            self._transaction.expect([entry.result for entry in entries if entry.result is not None])
            return entries

    async def _handed_over(self, lane: Lane, entries: list[Entry]) -> None:
        pid = lane.partition_id
        if pid in self._joined:
            return
        # A write that comes while the partition's first write waits for its acknowledgement
        # waits for it too: until then the partition may not be part of the transaction yet.
        first = self._joining.setdefault(pid, [entry.result for entry in entries if entry.result is not None])
        await wait_written(first)
        self._joined.add(pid)
        self._joining.pop(pid, None)

    def _lane_failed(self, lane: Lane) -> None:
        # Inside a transaction a split partition fails the transaction: nothing is moved.
        if lane.failed or self._stopping or self._failure is not None:
            return
        lane.failed = True
        error = lane.writer.failure or OverloadedError(f"partition {lane.partition_id} is overloaded")
        failure = TransactionEndedError(
            f"partition {lane.partition_id} of {self.path} failed inside the transaction (it was split, or stayed"
            f" overloaded): {error!r}; the transaction cannot commit these messages"
        )
        failure.__cause__ = error
        self._fail(failure)

    async def close(self, timeout: float | None = None) -> None:
        """Wait for the acknowledgement of everything written, then stop writing (early, before
        the commit: the transaction's end does this by itself)."""
        if self._transaction.ended is None:
            await super().close(timeout)

    def __repr__(self) -> str:
        ended = self._transaction.ended
        state = f"transaction {ended}" if ended else "open"
        return f"KeyedTxWriter({self.path!r}, producer_id={self.producer_id!r}, {state})"


__all__ = ["KeyedTxWriter"]
