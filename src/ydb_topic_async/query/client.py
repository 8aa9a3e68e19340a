"""``driver.query``: query sessions and transactions (no YQL execution)."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from .._errors import (
    Backoff,
    ClosedError,
    CommitOutcomeUnknownError,
    InvalidArgumentError,
    NotFoundError,
    OperationTimeoutError,
    PartitionSessionClosedError,
)
from .._retry import RetryPolicy, as_ydb_error, retry_call, ydb_backoff
from .session_pool import DEFAULT_POOL_SIZE, SessionPool
from .transaction import Transaction, TransactionState

if TYPE_CHECKING:
    from .._context import ClientContext

logger = logging.getLogger("ydb_topic_async.query")

T = TypeVar("T")


class QueryClient:
    """Transactions over a small pool of query sessions; reached as ``driver.query``.

    ``pool_size`` bounds the sessions held at once (a transaction holds one from its first use
    to its end); ``create_session_timeout`` bounds creating and attaching one. Closing the
    driver rolls back the transactions still open and deletes every session.
    """

    def __init__(
        self, context: ClientContext, *, pool_size: int = DEFAULT_POOL_SIZE, create_session_timeout: float = 10.0
    ) -> None:
        self._context = context
        self._pool = SessionPool(context.transport, pool_size, create_session_timeout)
        self._open: weakref.WeakSet[Transaction] = weakref.WeakSet()
        self._closed = False

    def transaction(self) -> Transaction:
        """A new serializable read-write transaction; it begins on first use.

        Use it as ``async with driver.query.transaction() as tx``: the block's normal end
        commits, an exception rolls back.
        """
        self._check_open()
        return Transaction(self._pool, self._context.transport, self._open)

    async def retry_tx(
        self,
        fn: Callable[[Transaction], Awaitable[T]],
        *,
        retry: RetryPolicy | None = None,
    ) -> T:
        """Run ``await fn(tx)`` in a fresh transaction and commit; repeat it while nothing was
        committed and a repeat may succeed.

        Repeated: every failure inside ``fn`` that a repeat may get past (a transactional read
        or write that failed, an acknowledgement that never came, a session lost with its node,
        a connection broken or refused, CANCELLED / INTERNAL / UNAVAILABLE from a node going
        away, a stale transactional read), a commit the server refused without applying it
        (ABORTED, NOT_FOUND, BAD_SESSION, ...), a commit that never left the client
        (``ConnectFailedError``: no connection could be made), and a commit whose answer was
        lost but which the consumer offsets it carried show did not commit. A commit whose
        answer was lost and which they show committed is not repeated: ``fn``'s result is
        returned. One that nothing can settle raises ``CommitOutcomeUnknownError``. Each attempt
        gets a fresh transaction, on a live session (sessions of a node that went away are
        dropped, and new ones are made on the nodes that answer). ``retry`` (the driver's
        policy by default) bounds the repeats; ``fn`` must be safe to repeat. Each attempt is
        reported to the driver's metrics (``transaction_attempt``) and each repeat is logged.
        """
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError("retry must be a RetryPolicy")
        if not callable(fn):
            raise InvalidArgumentError("retry_tx takes an async function of the transaction")
        tx: Transaction | None = None
        attempts = 0
        metrics = self._context.metrics

        async def attempt() -> T:
            nonlocal tx, attempts
            attempts += 1
            tx = self.transaction()
            async with tx:
                result = await fn(tx)
            metrics.transaction_attempt("committed", tx.commit_settled is not None)
            return result

        def classify(error: BaseException) -> Backoff | None:
            if tx is not None and tx.outcome_unknown:
                return None  # the commit may have been applied: repeating could apply it twice
            return transaction_backoff(error)

        def log_retry(error: BaseException, delay: float) -> None:
            settled = tx is not None and tx.commit_settled is not None
            metrics.transaction_attempt("retried", settled)
            logger.info(
                "transaction attempt %d failed (%r)%s; nothing was committed, retrying in %.3fs",
                attempts, error, "; the lost commit was settled from the consumer offsets" if settled else "", delay,
            )

        try:
            return await retry_call(attempt, retry or self._context.retry, classify=classify, on_retry=log_retry)
        except Exception as exc:
            metrics.transaction_attempt("failed", tx is not None and tx.commit_settled is not None)
            if not isinstance(exc, CommitOutcomeUnknownError) and transaction_backoff(exc) is not None:
                logger.warning("transaction gave up after %d attempts (the retry policy's budget): %r", attempts, exc)
            raise

    def retriable(self, error: BaseException) -> bool:
        """Whether ``retry_tx`` would run again a transaction that failed with ``error``: nothing
        of it was committed and a repeat may succeed (see ``retry_tx``). For loops of one's own
        around ``driver.query.transaction()``."""
        return transaction_backoff(error) is not None

    @property
    def pool(self) -> SessionPool:
        """The session pool (for inspection: ``idle``, ``open_sessions``)."""
        return self._pool

    def _check_open(self) -> None:
        self._context.check_open()
        if self._closed:
            raise ClosedError("the query client is closed")

    async def _close(self, timeout: float | None = None) -> None:
        """Roll back what is still open, then delete every session, within ``timeout`` (each
        rollback within 5 seconds at most)."""
        if self._closed:
            return
        self._closed = True
        ends = None if timeout is None else time.monotonic() + timeout
        try:
            open_txs = [
                tx for tx in self._open if tx.state in (TransactionState.NOT_STARTED, TransactionState.ACTIVE)
            ]
            budget = _ROLLBACK_TIMEOUT if timeout is None else min(_ROLLBACK_TIMEOUT, timeout)
            results = await asyncio.gather(*(tx.rollback(timeout=budget) for tx in open_txs), return_exceptions=True)
            for tx, result in zip(open_txs, results, strict=True):
                if isinstance(result, Exception):
                    logger.warning("rolling back %r at close failed: %s", tx, result)
        finally:
            await self._pool.close(None if ends is None else max(0.0, ends - time.monotonic()))


_ROLLBACK_TIMEOUT = 5.0
"""The most closing the driver waits for the rollback of a transaction still open."""


def transaction_backoff(error: BaseException) -> Backoff | None:
    """Whether a transaction that failed with ``error`` may be run again, and how soon: the
    error says nothing was committed (the transaction's ``commit`` turns every lost answer into
    a settled outcome or ``CommitOutcomeUnknownError``) and a repeat may get past it.

    A repeat of the whole transaction cannot apply anything twice, so every transient failure
    counts, as for an idempotent call. An error that only says the transaction, a writer or a
    reader ended, or that a wait timed out, is judged by its cause.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, CommitOutcomeUnknownError):
            return None
        if isinstance(current, PartitionSessionClosedError | NotFoundError):
            # A stale transactional read (the reader reads it again), or NOT_FOUND, which inside a
            # transaction means the server already ended it (e.g. aborted it after a failed
            # operation): nothing was committed, and a fresh one may succeed.
            return "fast"
        if isinstance(current, ClosedError | OperationTimeoutError):
            current = current.__cause__  # ended or timed out because of this
            continue
        ydb_error = as_ydb_error(current)
        if ydb_error is None:
            return None  # the function's own error
        return ydb_backoff(ydb_error, idempotent=True)
    return None
