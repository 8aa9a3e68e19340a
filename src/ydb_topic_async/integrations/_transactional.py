"""``TransactionalConsumer``: the supervised consumer whose batches commit in a transaction with
what the handler wrote in it (exactly-once consume-transform-produce)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Unpack

import anyio

from .. import (
    Driver,
    InvalidArgumentError,
    MessageBatch,
    OperationTimeoutError,
    ReaderOptions,
    RetryPolicy,
    TopicReader,
    TopicsArg,
    Transaction,
    TransactionState,
)
from ..observability import sdk_logger
from ._supervisor import DEFAULT_MAX_IN_FLIGHT_BYTES, _Item, _Lane, _Run, _Supervised

logger = sdk_logger("integrations")

TxHandler = Callable[[MessageBatch, Transaction], Awaitable[None]]
"""``handle(batch, tx)``: an async function called with each batch and the transaction its offsets
commit in; what it writes through ``driver.topic.tx_writer(tx, ...)`` (or ``keyed_tx_writer``)
commits with them."""

DEFAULT_MAX_OPEN_TRANSACTIONS = 8
IDLE_TRANSACTION_SECONDS = 30.0
"""A transactional consumer waiting for messages rolls its waiting transaction back and begins
another after this long, so that no transaction stays open for long with nothing in it."""



class TransactionalConsumer(_Supervised):
    """Read ``topics`` as ``consumer`` and hand each batch to ``handler(batch, tx)`` in a
    transaction that commits the batch's offsets together with what the handler wrote in it:
    exactly-once consume-transform-produce, supervised.

    ``handler`` writes through ``driver.topic.tx_writer(tx, ...)`` or ``keyed_tx_writer`` (the
    driver is the one ``run`` was given, e.g. ``runtime.driver``); when it returns, the
    transaction commits: the messages it wrote become visible and the consumer's offsets move
    past the batch, together, or neither. Partitions are handled as lanes, as by ``Consumer``:
    one per partition session, in offset order, ``concurrency`` handler calls (and their
    commits) at once across the lanes. Each batch received waits for its lane in its own open
    transaction (which holds a query session of the driver's pool); ``max_open_transactions``
    bounds them.

    Failures are the SDK's to handle, not the service's: an attempt that cannot have committed
    (see ``driver.query.retriable``: a broken stream or session, a node going away, a commit
    that never left, or one whose lost answer the consumer offsets show did not commit) is rolled
    back, the reader delivers the same messages again from the committed offsets, and the
    handler gets them in a new transaction, after a backoff of the ``transaction_retry`` policy
    (the driver's ``retry`` by default) while the failures go on; a lost commit the offsets show committed
    counts as committed. Any other failure (the handler's own error, a commit nothing can
    settle, a retry budget spent) is logged with its traceback and the consumer restarts with a
    new reader, like ``Consumer`` (``initial_backoff``, ``max_backoff``), which resumes from the
    committed offsets: nothing is lost or handled into the output twice. Handlers must be safe to
    run again for a batch whose transaction did not commit (what they write in the transaction
    is rolled back with it; other side effects are theirs).

    ``attempts``, ``retries``, ``committed`` and ``settled`` count what happened; each attempt is
    also reported to the driver's metrics (``transaction_attempt``) and each retry logged.

    Parameters:
        topics: A topic path, a ``TopicSelector`` or a list of them, as for ``driver.topic.reader``.
        consumer: The consumer whose offsets commit with the handler's writes.
        handler: ``async def handle(batch, tx)``: a ``MessageBatch`` of one partition and the
            ``Transaction`` its offsets commit in.
        concurrency: Handler calls (with their commits) running at once across the lanes
            (default 1).
        max_in_flight_bytes: The most payload bytes received and not yet handled, across the
            lanes (8 MiB by default); reception waits above it.
        max_batch_messages: A batch's most messages (None: as many as the reader has).
        max_batch_bytes: A batch's most payload bytes (its first message may exceed it).
        batch_window: Seconds a batch is filled for once its first message is there (None: not
            waited for).
        max_open_transactions: Transactions open at once, each holding a query session: one per
            batch received and not yet committed (default 8).
        transaction_retry: The policy of the repeats of attempts that cannot have committed
            (None: the driver's ``retry``).
        initial_backoff: Seconds before the first restart after a failure it cannot handle,
            doubling up to ``max_backoff`` while nothing is handled in between.
        max_backoff: See ``initial_backoff``.
        name: The consumer's name in logs (``consumer@topics`` by default).
        reader_options: The keyword options of ``driver.topic.reader``, checked at this call as
            by ``Consumer`` (``InvalidArgumentError`` for a wrong value, ``TypeError`` for an
            unknown option).
    """

    def __init__(
        self,
        topics: TopicsArg,
        consumer: str,
        handler: TxHandler,
        *,
        concurrency: int = 1,
        max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
        max_batch_messages: int | None = None,
        max_batch_bytes: int | None = None,
        batch_window: float | None = None,
        max_open_transactions: int = DEFAULT_MAX_OPEN_TRANSACTIONS,
        transaction_retry: RetryPolicy | None = None,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
        name: str | None = None,
        **reader_options: Unpack[ReaderOptions],
    ) -> None:
        if not callable(handler):
            raise InvalidArgumentError("the handler must be an async function of (batch, tx)")
        if not isinstance(max_open_transactions, int) or isinstance(max_open_transactions, bool) or (
            max_open_transactions < 1
        ):
            raise InvalidArgumentError(f"max_open_transactions must be a positive int, got {max_open_transactions!r}")
        if transaction_retry is not None and not isinstance(transaction_retry, RetryPolicy):
            raise InvalidArgumentError(f"transaction_retry must be a RetryPolicy or None, got {transaction_retry!r}")
        super().__init__(
            topics,
            consumer,
            concurrency=concurrency,
            max_in_flight_bytes=max_in_flight_bytes,
            max_batch_messages=max_batch_messages,
            max_batch_bytes=max_batch_bytes,
            batch_window=batch_window,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            name=name,
            reader_options=reader_options,
        )
        self.handler = handler
        self.max_open_transactions = max_open_transactions
        self.transaction_retry = transaction_retry
        self.attempts = 0
        """Batches handed to the handler in a transaction (every try counts)."""
        self.retries = 0
        """Attempts that did not commit and whose messages were handled again."""
        self.committed = 0
        """Attempts that committed."""
        self.settled = 0
        """Attempts whose commit answer was lost and was settled from the consumer offsets."""

    def _transactions(self, driver: Driver) -> tuple[int, RetryPolicy]:
        return self.max_open_transactions, self.transaction_retry or driver.retry

    async def _receive(self, run: _Run, reader: TopicReader) -> _Item | None:
        if run.pause_until > time.monotonic():
            await asyncio.sleep(run.pause_until - time.monotonic())  # backing off after failed attempts
        await run.open_transactions.acquire()
        tx = run.driver.query.transaction()
        try:
            # Begun before waiting for messages, and not interrupted by ``halt`` while it is a call
            # in flight (cancelling a gRPC call leaves its end to arrive later); the wait for
            # messages after it is.
            run.interruptible = False
            try:
                await tx.begin()
            finally:
                run.interruptible = True
            if run.halted():
                raise _Halted
            batch = await reader.receive_batch_with_tx(
                tx, self.max_batch_messages, self.max_batch_bytes, IDLE_TRANSACTION_SECONDS, self.batch_window
            )
        except BaseException as exc:
            run.open_transactions.release()
            with anyio.CancelScope(shield=True):
                await _roll_back(tx)
            if isinstance(exc, _Halted) or (isinstance(exc, OperationTimeoutError) and exc.__cause__ is None):
                return None  # halted, or idle: begin a new transaction and wait on
            if not isinstance(exc, Exception) or not run.driver.query.retriable(exc):
                raise
            # Beginning the transaction failed (its session's node went away, say): nothing was
            # read into it. Try again after a backoff, while the retry policy allows.
            delay = run.retry.next_delay(exc)
            if delay is None:
                raise
            run.pause_until = max(run.pause_until, time.monotonic() + delay)
            logger.info("consumer %s: a transaction to read into failed (%r); again in %.3fs", self.name, exc, delay)
            return None
        return _Item(batch, tx)

    async def _discard(self, run: _Run, item: _Item) -> None:
        assert item.tx is not None
        item.free_slot(run)
        with anyio.CancelScope(shield=True):
            await _roll_back(item.tx)

    async def _process(self, run: _Run, reader: TopicReader, lane: _Lane, item: _Item) -> None:
        tx = item.tx
        assert tx is not None
        try:
            async with run.calls:
                if run.halted() or lane.session.closed:
                    await self._discard(run, item)
                    return
                self.attempts += 1
                try:
                    async with tx:
                        await self.handler(item.batch, tx)
                except Exception as exc:
                    self._failed(run, item, exc)
                    return
        finally:
            if tx.ended:
                item.free_slot(run)
            else:  # cancelled before the transaction ended
                await self._discard(run, item)
        settled = tx.commit_settled is not None
        self.committed += 1
        self.settled += settled
        self.handled += len(item.batch)
        run.retry.reset()
        run.driver.metrics.transaction_attempt("committed", settled)
        if settled:
            logger.info("consumer %s: the lost commit of %r was settled as committed", self.name, item.batch)

    def _failed(self, run: _Run, item: _Item, error: Exception) -> None:
        """An attempt failed: repeat the batch (the reader delivers it again) after a backoff, or
        halt the run for a restart."""
        tx = item.tx
        assert tx is not None
        settled = tx.commit_settled is not None
        self.settled += settled
        delay = run.retry.next_delay(error) if run.driver.query.retriable(error) else None
        if delay is None:
            run.driver.metrics.transaction_attempt("failed", settled)
            run.halt(error)
            return
        self.retries += 1
        run.driver.metrics.transaction_attempt("retried", settled)
        run.pause_until = max(run.pause_until, time.monotonic() + delay)
        logger.info(
            "consumer %s: the transaction of %r did not commit (%r)%s; its messages come again, in %.3fs",
            self.name, item.batch, error,
            " (the lost commit was settled from the consumer offsets)" if settled else "", delay,
        )


class _Halted(Exception):
    """The run was halted while a transaction to read into began."""


async def _roll_back(tx: Transaction) -> None:
    """Roll ``tx`` back if it is still open; a failure to do so is logged (the server ends it with
    its session anyway)."""
    if tx.ended or tx.state is TransactionState.ROLLING_BACK:
        return
    try:
        await tx.rollback(timeout=ROLLBACK_TIMEOUT)
    except Exception as exc:
        logger.debug("rolling back %r failed: %r", tx, exc)


ROLLBACK_TIMEOUT = 5.0
