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
    InvalidArgumentError,
    NotFoundError,
    PartitionSessionClosedError,
    YdbTopicError,
)
from .._retry import RetryPolicy, retry_call, ydb_backoff
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
        """Run ``await fn(tx)`` in a fresh transaction and commit; repeat it while that fails retriably.

        A retry is attempted when the failure guarantees nothing was committed and a repeat may
        succeed: the server aborted the transaction (e.g. a conflicting offset update), the
        session died or was busy, the connection broke before the commit was sent, the server no
        longer knew the transaction (NOT_FOUND), or a transactional read became stale. A commit
        whose outcome is unknown (``tx.outcome_unknown``) is never repeated. ``retry`` defaults
        to the driver's policy. ``fn`` must be safe to repeat.
        """
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError("retry must be a RetryPolicy")
        if not callable(fn):
            raise InvalidArgumentError("retry_tx takes an async function of the transaction")
        tx: Transaction | None = None

        async def attempt() -> T:
            nonlocal tx
            tx = self.transaction()
            async with tx:
                return await fn(tx)

        def classify(error: BaseException) -> Backoff | None:
            if tx is not None and tx.outcome_unknown:
                return None  # the commit may have been applied: repeating could apply it twice
            return _transaction_backoff(error)

        def log_retry(error: BaseException, delay: float) -> None:
            logger.info("transaction attempt failed (%s); retrying in %.3fs", error, delay)

        return await retry_call(attempt, retry or self._context.retry, classify=classify, on_retry=log_retry)

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


def _transaction_backoff(error: BaseException) -> Backoff | None:
    """Whether a failed transaction may be run again (nothing of it was committed), and how soon."""
    if isinstance(error, PartitionSessionClosedError | NotFoundError):
        # A stale transactional read (the reader reads it again), or NOT_FOUND, which inside a
        # transaction means the server already ended it (e.g. aborted it after a failed
        # operation): nothing was committed, and a fresh one may succeed.
        return "fast"
    if isinstance(error, YdbTopicError):
        return ydb_backoff(error, idempotent=False)
    return None
