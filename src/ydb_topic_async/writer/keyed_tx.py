"""``KeyedTxWriter``: keyed writes inside a transaction.

A keyed writer whose partition writers write into one transaction: every WriteRequest names it,
so the messages of all partitions become visible together when the transaction commits, and
none if it rolls back. As ``TxWriter`` does, its before-commit hook waits for the server's
acknowledgement of every message written through it and fails the commit on any error (then
the transaction is rolled back, whatever the caller does); once the transaction ends the writer
stops and every further call raises ``TransactionEndedError``. The first write to each partition
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

from .._errors import OverloadedError, TransactionEndedError, WriterClosedError
from .._futures import suppress_future_errors
from ..query._binding import bind
from .keyed import Key, KeyedWriter, _Entry, _Lane, _LaneWriter
from .messages import ManyMessages, OneMessage, WriteResult
from .tx_writer import check_written_in_tx

if TYPE_CHECKING:
    from .._context import ClientContext
    from .._proto import ydb_topic_pb2 as pb
    from ..topic.admin import TopicAdmin
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
        binding = bind(tx)
        binding.check_accepting()
        super().__init__(context, admin, path, settings, partitioner, idle_timeout=None)
        self._binding = binding
        self._identity: pb.TransactionIdentity | None = None
        self._joined: set[int] = set()
        """Partitions whose first write was acknowledged: they are part of the transaction."""
        self._joining: dict[int, list[asyncio.Future[WriteResult]]] = {}
        """The results of each partition's first write, while it is not acknowledged yet."""
        self._results: list[asyncio.Future[WriteResult]] = []
        self._writing = 0
        """Writes under way that have not handed their messages over yet."""
        self._writes_settled = asyncio.Event()
        self._writes_settled.set()
        self._sealed = False
        self._ended: str | None = None
        binding.on_before_commit(self._before_commit)
        binding.on_after_commit(self._after_commit)
        binding.on_before_rollback(self._before_rollback)
        binding.on_after_rollback(self._after_rollback)

    # --- writing -----------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._ended is not None:
            raise self._ended_error()
        if self._sealed:
            raise TransactionEndedError(
                f"the transaction of the keyed writer for {self.path} is committing: nothing more can be written to it"
            )
        self._binding.check_accepting()
        super()._check_usable()

    def _ended_error(self) -> TransactionEndedError:
        return TransactionEndedError(f"the keyed writer for {self.path} stopped: its transaction {self._ended}")

    async def _accept(self, messages: OneMessage | ManyMessages, key: Key, with_results: bool) -> list[_Entry]:
        # Counted until the messages are handed over, so that the before-commit hook also waits
        # for a write that began before it and still waits for the transaction or buffer space.
        self._writing += 1
        self._writes_settled.clear()
        try:
            self._check_usable()
            if self._identity is None:
                self._identity = await self._binding.identity()
                self._check_usable()
            # Every message gets a result: the commit checks each was written into the transaction.
            entries = await super()._accept(messages, key, True)
            self._results.extend(entry.result for entry in entries if entry.result is not None)
            return entries
        finally:
            self._writing -= 1
            if not self._writing:
                self._writes_settled.set()

    def _new_lane_writer(self, settings: WriterSettings, seq_no_base: int | None) -> _LaneWriter:
        writer = super()._new_lane_writer(settings, seq_no_base)
        assert self._identity is not None  # taken before any message is handed over
        writer._sender.tx_identity = self._identity
        return writer

    async def _handed_over(self, lane: _Lane, entries: list[_Entry]) -> None:
        pid = lane.partition_id
        if pid in self._joined:
            return
        # A write that comes while the partition's first write waits for its acknowledgement
        # waits for it too: until then the partition may not be part of the transaction yet.
        first = self._joining.setdefault(pid, [entry.result for entry in entries if entry.result is not None])
        await asyncio.wait(first)
        for future in first:
            error = future.exception()
            if error is not None:
                raise error.with_traceback(None)
        self._joined.add(pid)
        self._joining.pop(pid, None)

    def _lane_failed(self, lane: _Lane) -> None:
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
        if self._ended is None:
            await super().close(timeout)

    # --- transaction hooks -------------------------------------------------------------------

    async def _before_commit(self) -> None:
        self._sealed = True
        try:
            await self._await_acks()
        except BaseException as exc:
            # However the caller reacts, this transaction must never commit without these messages.
            await self._binding.abort(self._context.transport, exc)
            raise

    async def _await_acks(self) -> None:
        if self._ended is not None:
            if self._ended == "committed":
                return
            raise self._ended_error()
        # Writes that began before the commit may still wait for buffer space; no new one can start.
        await self._writes_settled.wait()
        if self._failure is not None:
            raise self._failure.with_traceback(None)
        if not self._closed:
            await super().close()  # waits for every acknowledgement, then closes the streams
        results = list(self._results)
        for future in results:
            if not future.done():
                raise WriterClosedError(f"the keyed writer for {self.path} was closed before its messages were written")
            error = future.exception()
            if error is not None:
                raise error.with_traceback(None)
            check_written_in_tx(self.path, future.result())

    async def _after_commit(self, error: BaseException | None) -> None:
        await self._end("committed" if error is None else f"failed to commit ({error!r})")

    async def _before_rollback(self) -> None:
        await self._end("was rolled back")

    async def _after_rollback(self, error: BaseException | None) -> None:
        await self._end("was rolled back")

    async def _end(self, how: str) -> None:
        if self._ended is None:
            self._ended = how
        if not self._stopping:
            await self._shutdown(TransactionEndedError(f"the transaction {how} before these were acknowledged"))
        results, self._results = self._results, []
        suppress_future_errors(results)

    def __repr__(self) -> str:
        state = f"transaction {self._ended}" if self._ended else "open"
        return f"KeyedTxWriter({self.path!r}, producer_id={self.producer_id!r}, {state})"


__all__ = ["KeyedTxWriter"]
