"""What the framework integrations share: the runtime that owns a driver, named writers and
supervised consumers (``Consumer``, at-least-once; ``TransactionalConsumer``, exactly-once through
transactions), and the supervision loop itself (restart with backoff, logging).

Start-up order: driver, then writers, then consumers. Shutdown runs in reverse: consumers let
the handler calls in progress finish and their readers wait for commit acknowledgements,
writers flush every accepted message, and the driver closes last.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Literal, Unpack

import anyio
import anyio.abc

from .. import (
    BackoffSchedule,
    ClosedError,
    Credentials,
    Driver,
    InvalidArgumentError,
    MessageBatch,
    OperationTimeoutError,
    PartitionSession,
    PartitionSessionClosedError,
    ReaderOptions,
    ReaderSettings,
    RetryPolicy,
    RetryState,
    TopicMessage,
    TopicReader,
    TopicsArg,
    TopicWriter,
    Transaction,
    TransactionState,
    WriterOptions,
    retry_call,
)
from ..observability import sdk_logger

logger = sdk_logger("integrations")

Handler = Callable[[TopicMessage], Awaitable[None]]
"""An async function called once per message; the message is committed after it returns."""

WRITER_REPLACEMENT_BACKOFF = BackoffSchedule(base=0.5, cap=30.0)
"""How long a writer whose replacement failed too is left failed before the next replacement."""


class WriterSpec:
    """How to open one named writer: ``WriterSpec("events", producer_id="api", codec=Codec.ZSTD)``.

    The keyword arguments are those of ``driver.topic.writer``.
    """

    def __init__(self, path: str, **options: Unpack[WriterOptions]) -> None:
        self.path = path
        self.options = options

    def __repr__(self) -> str:
        return f"WriterSpec({self.path!r}, **{self.options!r})"


BatchHandler = Callable[[MessageBatch], Awaitable[None]]
"""An async function called with each batch (messages of one partition session, in order); the
batch is committed after it returns."""

TxHandler = Callable[[MessageBatch, Transaction], Awaitable[None]]
"""``handle(batch, tx)``: an async function called with each batch and the transaction its offsets
commit in; what it writes through ``driver.topic.tx_writer(tx, ...)`` (or ``keyed_tx_writer``)
commits with them."""

DEFAULT_MAX_IN_FLIGHT_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_OPEN_TRANSACTIONS = 8
IDLE_TRANSACTION_SECONDS = 30.0
"""A transactional consumer waiting for messages rolls its waiting transaction back and begins
another after this long, so that no transaction stays open for long with nothing in it."""


class _Supervised:
    """What ``Consumer`` and ``TransactionalConsumer`` share: the options of reading and
    batching, the lanes (one per partition session, in order, ``concurrency`` calls at once),
    and the supervision that restarts the reader after a failure."""

    def __init__(
        self,
        topics: TopicsArg,
        consumer: str | None,
        *,
        concurrency: int,
        max_in_flight_bytes: int,
        max_batch_messages: int | None,
        max_batch_bytes: int | None,
        batch_window: float | None,
        initial_backoff: float,
        max_backoff: float,
        name: str | None,
        reader_options: ReaderOptions,
    ) -> None:
        for value, what in ((initial_backoff, "initial_backoff"), (max_backoff, "max_backoff")):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise InvalidArgumentError(f"{what} must be a number of seconds, got {value!r}")
        if not 0 < initial_backoff <= max_backoff:
            raise InvalidArgumentError(
                f"need 0 < initial_backoff <= max_backoff, got {initial_backoff!r} and {max_backoff!r}"
            )
        for value, what, minimum in (
            (concurrency, "concurrency", 1),
            (max_in_flight_bytes, "max_in_flight_bytes", 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise InvalidArgumentError(f"{what} must be a positive int, got {value!r}")
        for limit, what in ((max_batch_messages, "max_batch_messages"), (max_batch_bytes, "max_batch_bytes")):
            if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
                raise InvalidArgumentError(f"{what} must be a positive int or None, got {limit!r}")
        if batch_window is not None and (
            not isinstance(batch_window, (int, float)) or isinstance(batch_window, bool) or batch_window < 0
        ):
            raise InvalidArgumentError(f"batch_window must be None or a number of seconds >= 0, got {batch_window!r}")
        self.topics = topics
        self.consumer = consumer
        self.concurrency = concurrency
        self.max_in_flight_bytes = max_in_flight_bytes
        self.max_batch_messages = max_batch_messages
        self.max_batch_bytes = max_batch_bytes
        self.batch_window = batch_window
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.backoff = BackoffSchedule(initial_backoff, max_backoff, floor=0.5)
        """The delays of restarts, and of a lane's messages delivered again (``Consumer.redeliver``)."""
        self.name = name or f"{consumer or '(no consumer)'}@{topics if isinstance(topics, str) else '...'}"
        self.reader_settings = ReaderSettings(consumer, **reader_options)
        """The reader's options, checked; each reader it runs gets them with its own ``on_partition_stop``."""
        self.restarts = 0
        """How many times this consumer was restarted after a failure."""
        self.handled = 0
        """How many messages the handler finished (and that were then committed)."""
        self.last_error: BaseException | None = None
        """The most recent failure, kept for health checks."""
        self._run: _Run | None = None
        self._stopping = False

    @property
    def reader(self) -> TopicReader | None:
        """The reader of the current run, which commits what it handed out; None between runs
        (backing off after a failure, or not running)."""
        run = self._run
        return run.reader if run is not None else None

    def stopping(self) -> bool:
        """True once ``stop`` was called (until the next ``run``)."""
        return self._stopping

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, restarts={self.restarts}, handled={self.handled})"

    async def run(self, driver: Driver) -> None:
        """Consume until ``stop`` or cancellation; failures restart the reader after a backoff."""
        schedule = self.backoff
        # Every failure is worth a restart (a handler's bug included): only the delay grows.
        retry = RetryState(RetryPolicy(None, None, fast=schedule, slow=schedule), classify=lambda _: "fast")
        self._stopping = False

        async def attempt() -> None:
            if self.stopping():
                return
            handled_before = self.handled
            try:
                await self._consume(driver)
            except Exception as exc:
                if self.stopping() and isinstance(exc, ClosedError):
                    return
                if self.handled != handled_before:
                    # Progress since the previous failure: this is a new problem, start the backoff over.
                    retry.reset()
                raise

        def restarting(error: BaseException, delay: float) -> None:
            self.restarts += 1
            self.last_error = error
            logger.error(
                "consumer %s failed; restarting in %.2fs (restart %d)", self.name, delay, self.restarts, exc_info=error
            )

        await retry_call(attempt, retry, on_retry=restarting)

    async def _consume(self, driver: Driver) -> None:
        run = _Run(self, driver)
        options = self.reader_settings.replace(on_partition_stop=run.partition_stopped).options()
        reader = driver.topic.reader(self.topics, consumer=self.consumer, **options)
        run.reader = reader
        self._run = run
        try:
            async with reader:
                await run.dispatch()
        finally:
            self._run = None

    async def stop(self, task: asyncio.Task[None], timeout: float) -> None:
        """Let the handler calls in progress finish (nothing new starts), wait for their commits'
        acknowledgements (up to ``timeout`` in all), end ``task``."""
        self._stopping = True
        run = self._run
        if run is None:
            task.cancel()  # between readers (backing off): nothing is in hand, nothing to commit
        else:
            run.halt()
        done, _ = await asyncio.wait([task], timeout=timeout)
        if not done:
            logger.warning("consumer %s did not stop within %.1fs; cancelling it", self.name, timeout)
            task.cancel()
            await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            logger.error("consumer %s failed while stopping", self.name, exc_info=task.exception())

    # --- what a kind of consumer does with a batch ---------------------------------------------

    async def _receive(self, run: _Run, reader: TopicReader) -> _Item | None:
        """The next batch to deal to a lane, with what it carries (None: nothing yet, ask again)."""
        raise NotImplementedError

    async def _process(self, run: _Run, reader: TopicReader, lane: _Lane, item: _Item) -> None:
        """Handle one batch of a live lane; raising halts the run (the consumer restarts)."""
        raise NotImplementedError

    async def _discard(self, run: _Run, item: _Item) -> None:
        """A batch received and not handled (halted, or its partition session ended): it will be
        delivered again; let go of what it carries."""


class _Item:
    """A batch dealt to a lane: its payload bytes (counted against ``max_in_flight_bytes``) and,
    for a transactional consumer, the transaction its offsets were recorded in."""

    __slots__ = ("batch", "generation", "nbytes", "tx", "tx_slot")

    def __init__(self, batch: MessageBatch, tx: Transaction | None = None) -> None:
        self.batch = batch
        self.nbytes = sum(len(message.data) for message in batch.messages)
        self.generation = 0
        """Its lane's ``generation`` when it was received: an older one was received before the
        lane's latest rewind, from the position the rewind left."""
        self.tx = tx
        self.tx_slot = tx is not None
        """Whether it still counts against ``max_open_transactions``."""

    def free_slot(self, run: _Run) -> None:
        if self.tx_slot:
            self.tx_slot = False
            run.open_transactions.release()


class Consumer(_Supervised):
    """Read ``topics`` as ``consumer`` and pass each message (or batch) to a handler, committing after it.

    Partitions are handled as lanes: one per partition session, whose messages go to the handler
    one call at a time and in offset order, each committed once its handler call returns (in
    order: at-least-once). ``concurrency`` bounds the handler calls running at once across the
    lanes. The default, 1, is one call at a time for the whole consumer (handlers written for
    that need no locks); raise it to handle partitions concurrently. A lane gives the event loop
    a turn at least every ``LANE_SLICE`` seconds, even with a handler that never awaits. The
    handler is either ``handler(message)`` or ``batch_handler(batch)`` (a ``MessageBatch`` of
    one partition session: ``max_batch_messages``, ``max_batch_bytes`` and ``batch_window``, the
    seconds a batch is filled for once its first message is there, shape it).

    ``max_in_flight_bytes`` bounds the payload bytes received and not yet handled across the
    lanes: reception waits above it. For a bound per partition, pass the reader option
    ``partition_max_in_flight_bytes`` (messages handed out and not committed, which here is
    received and not handled). When the server takes a partition away (a rebalance), its lane
    handles what it already received and commits it before the partition is released, within
    the reader's ``graceful_stop_timeout``; what is left then is delivered to the new owner.

    A failure of a handler or of the reader is logged with its traceback and the consumer
    restarts with a new reader after a jittered backoff that doubles from ``initial_backoff`` up
    to ``max_backoff`` seconds (and starts over once a message was handled since the previous
    failure). Handler calls already running in other lanes finish first; none starts after a
    failure. Messages that were not committed are delivered again after a restart: handlers
    must tolerate duplicates (at-least-once). ``reader_options`` are the keyword arguments of
    ``driver.topic.reader`` (an ``on_partition_stop`` given there is called too); they are
    checked here, with ``consumer``, into ``reader_settings``: a wrong value raises
    ``InvalidArgumentError`` and an unknown option ``TypeError`` at this call, not in the
    supervised loop. For
    exactly-once processing, see ``TransactionalConsumer``.

    ``auto_commit=False`` leaves committing to the handler, through ``consumer.reader`` (the
    current run's reader); ``consumer=None`` reads without a consumer (nothing can be
    committed, so it needs ``auto_commit=False``). ``redeliver(message)`` has a message, and
    what follows it in its partition, delivered again after a backoff without a restart: the
    other lanes go on.
    """

    def __init__(
        self,
        topics: TopicsArg,
        consumer: str | None,
        handler: Handler | None = None,
        *,
        batch_handler: BatchHandler | None = None,
        concurrency: int = 1,
        auto_commit: bool = True,
        max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
        max_batch_messages: int | None = None,
        max_batch_bytes: int | None = None,
        batch_window: float | None = None,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
        name: str | None = None,
        **reader_options: Unpack[ReaderOptions],
    ) -> None:
        if (handler is None) == (batch_handler is None):
            raise InvalidArgumentError("give either handler (called per message) or batch_handler (per batch)")
        if not callable(handler if handler is not None else batch_handler):
            raise InvalidArgumentError("the handler must be an async function")
        if not isinstance(auto_commit, bool):
            raise InvalidArgumentError(f"auto_commit must be a bool, got {auto_commit!r}")
        if consumer is None and auto_commit:
            raise InvalidArgumentError("reading without a consumer commits nothing: pass auto_commit=False")
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
        self.batch_handler = batch_handler
        self.auto_commit = auto_commit
        self.redeliveries = 0
        """How many times ``redeliver`` had a partition read again (a health check's hint of a
        message that keeps failing)."""

    def redeliver(self, message: TopicMessage | MessageBatch) -> bool:
        """Have ``message`` (a batch: from its first message on), and every message after it in
        its partition, delivered again in order, after a backoff; the other partitions' lanes
        go on undisturbed. For a handler that cannot handle a message now (FastStream's
        ``nack``); a handler that raises restarts the whole consumer instead.

        The lane of the message's partition session stops: a handler call in progress in it
        finishes, nothing the lane received after the message is handed to the handler or
        committed (the message itself neither, when this is called from its own handler call),
        and no new call starts in it. After a backoff (from ``initial_backoff``, doubling up to
        ``max_backoff`` while the lane handles nothing in between), the reader seeks the
        partition session back to the message's offset (``TopicReader.seek``, no lower than the
        committed offset) and the lane goes on from there. So a message that always fails is
        retried more and more slowly and holds its partition; its commits wait behind it.

        Returns False, doing nothing, when the message's partition session has ended or is not
        one of this run's: whoever reads the partition next starts at the committed offset,
        which is not past the message unless it was committed.

        Raises:
            InvalidArgumentError: ``message`` is neither a ``TopicMessage`` nor a ``MessageBatch``.
        """
        if isinstance(message, TopicMessage):
            offset = message.offset
        elif isinstance(message, MessageBatch):
            offset = message.messages[0].offset
        else:
            raise InvalidArgumentError(f"expected a TopicMessage or a MessageBatch, got {message!r}")
        run = self._run
        if run is None or not run.rewind(message.partition_session, offset):
            return False
        self.redeliveries += 1
        return True

    async def _receive(self, run: _Run, reader: TopicReader) -> _Item | None:
        batch = await reader.receive_batch(self.max_batch_messages, self.max_batch_bytes, max_wait=self.batch_window)
        return _Item(batch)

    async def _process(self, run: _Run, reader: TopicReader, lane: _Lane, item: _Item) -> None:
        batch = item.batch
        if self.batch_handler is not None:
            async with run.calls:
                if run.halted():
                    return
                await self.batch_handler(batch)
            if item.generation != lane.generation:
                return  # redelivered: not committed, not handled
            lane.rewinds = 0
            if self.auto_commit:
                reader.commit(batch)
            self.handled += len(batch)
            return
        handler = self.handler
        assert handler is not None
        calls, session, generation = run.calls, lane.session, item.generation
        commit = reader.commit if self.auto_commit else None
        loop = asyncio.get_running_loop()
        # One slot for the batch's calls, passed on between two of them when another lane waits
        # for one; the event loop gets a turn at least every ``LANE_SLICE`` seconds, also for a
        # handler that never waits.
        await calls.acquire()
        try:
            slice_ends = loop.time() + LANE_SLICE
            for count, message in enumerate(batch.messages, 1):
                if run.halted() or session.closed or generation != lane.generation:
                    break
                await handler(message)
                if generation != lane.generation:
                    break  # redelivered: neither it nor the rest of the batch is committed
                lane.rewinds = 0
                if commit is not None:
                    commit(message)
                self.handled += 1
                if calls.contended:
                    calls.release()
                    await calls.acquire()
                    slice_ends = loop.time() + LANE_SLICE
                elif not count % 16 and loop.time() >= slice_ends:
                    await asyncio.sleep(0)
                    slice_ends = loop.time() + LANE_SLICE
        finally:
            calls.release()


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
    ``reader_options`` are those of ``driver.topic.reader``, checked at this call as by ``Consumer``.
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


SupervisedConsumer = Consumer | TransactionalConsumer
"""What ``TopicRuntime`` supervises."""


LANE_SLICE = 0.01
"""Seconds a lane handles messages in a row, without waiting, before it lets the event loop run."""


class _CallSlots:
    """The ``concurrency`` handler calls that may run at once across the lanes, handed out in
    the order asked for (``async with slots`` around a call, or ``acquire``/``release``)."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, count: int) -> None:
        self._free = count
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def contended(self) -> bool:
        """Whether a lane waits for a slot."""
        return bool(self._waiters)

    async def acquire(self) -> None:
        if self._free and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # given a slot as it was cancelled: pass it on
            else:
                waiter.cancel()
                with contextlib.suppress(ValueError):  # a release may have passed over it already
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to it
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


REWIND: Final = "rewind"
"""Put in a lane's queue to wake it for a rewind (``None`` ends the lane)."""


class _Lane:
    """One partition session's batches, handled one after another in the order received."""

    def __init__(self, session: PartitionSession) -> None:
        self.session = session
        self.queue: asyncio.Queue[_Item | Literal["rewind"] | None] = asyncio.Queue()
        self.generation = 0
        """Bumped by a rewind, when it is asked for and when the reader has sought: the items
        received before (``_Item.generation``) are passed over, to be received again."""
        self.rewind_to: int | None = None
        """The offset to seek the session back to once the backoff has passed (``Consumer.redeliver``)."""
        self.rewinds = 0
        """Rewinds since the lane last handled a message: the backoff's attempt."""
        self.ending = asyncio.Event()
        """Set when the lane is to end (halted, or its partition session stopped)."""

    def end(self) -> None:
        self.ending.set()
        self.queue.put_nowait(None)


class _Run:
    """One reader's life in a supervised consumer: the loop that receives and deals batches to
    the lanes, the lanes (tasks of one task group), and what stops them."""

    def __init__(self, consumer: _Supervised, driver: Driver) -> None:
        self._consumer = consumer
        self.driver = driver
        self.reader: TopicReader | None = None
        self._lanes: dict[PartitionSession, _Lane] = {}
        self.calls = _CallSlots(consumer.concurrency)
        self._in_flight = 0
        self._room = asyncio.Event()
        self._room.set()
        self._halted = False
        self._failure: BaseException | None = None
        self._receiving: asyncio.Task[_Item | None] | None = None
        self.interruptible = True
        """Whether ``halt`` may cancel the receiving now (not while it begins a transaction)."""
        # A transactional consumer's: its open transactions, and the backoff of failed attempts.
        policy = driver.retry
        self.open_transactions = asyncio.Semaphore(1)
        if isinstance(consumer, TransactionalConsumer):
            self.open_transactions = asyncio.Semaphore(consumer.max_open_transactions)
            policy = consumer.transaction_retry or policy
        self.retry = RetryState(policy, classify=lambda _: "fast")
        self.pause_until = 0.0

    def halted(self) -> bool:
        """Whether nothing new may start (``halt``)."""
        return self._halted

    def halt(self, failure: BaseException | None = None) -> None:
        """Stop receiving and starting handler calls (those running finish); ``failure`` is raised
        once every lane is done."""
        if failure is not None and self._failure is None:
            self._failure = failure
        self._halted = True
        if self._receiving is not None and self.interruptible:
            self._receiving.cancel()
        self._room.set()
        for lane in self._lanes.values():
            lane.end()

    async def partition_stopped(self, session: PartitionSession) -> None:
        """The reader ended ``session`` (after a graceful stop: once what it handed out was
        committed, or its ``graceful_stop_timeout`` passed): its lane ends after its current call."""
        lane = self._lanes.pop(session, None)
        if lane is not None:
            lane.end()
        callback = self._consumer.reader_settings.on_partition_stop
        if callback is not None:
            result = callback(session)
            if inspect.isawaitable(result):
                await result

    async def dispatch(self) -> None:
        """Receive and deal batches to the lanes until halted; then let the lanes finish, and
        raise the failure that halted them, if any."""
        async with anyio.create_task_group() as lanes:
            try:
                await self._deal(lanes)
            except Exception as exc:
                self.halt(exc)  # the lanes finish the calls they are in, then end
        if self._failure is not None:
            raise self._failure

    async def _next(self, reader: TopicReader) -> _Item | None:
        """Wait for room under ``max_in_flight_bytes``, then receive the next batch."""
        consumer = self._consumer
        while self._in_flight >= consumer.max_in_flight_bytes and not self.halted():
            self._room.clear()
            await self._room.wait()
        if self.halted():
            return None
        item = await consumer._receive(self, reader)
        if item is not None:
            # Stamped at once: no seek can come between the reader handing it out and this.
            lane = self._lanes.get(item.batch.partition_session)
            if lane is not None:
                item.generation = lane.generation
        return item

    def rewind(self, session: PartitionSession, offset: int) -> bool:
        """Have ``session``'s lane pass over what it holds and, after its backoff, seek the
        reader back to ``offset`` (see ``Consumer.redeliver``); False if the lane is gone."""
        lane = self._lanes.get(session)
        if lane is None or session.closed or self.halted():
            return False
        # What the lane holds is received again after the seek: let go of it (and of its room
        # under ``max_in_flight_bytes``, which the other lanes use meanwhile) now. A plain
        # consumer's batches carry nothing to let go of besides (``_discard`` does nothing).
        queue = lane.queue
        ending = False
        while not queue.empty():
            left = queue.get_nowait()
            if isinstance(left, _Item):
                self._in_flight -= left.nbytes
            ending = ending or left is None
        self._room.set()
        if lane.rewind_to is None:
            lane.rewinds += 1
        lane.rewind_to = offset if lane.rewind_to is None else min(lane.rewind_to, offset)
        lane.generation += 1
        queue.put_nowait(None if ending else REWIND)  # wakes a lane waiting for its next batch
        return True

    async def _rewind(self, lane: _Lane) -> None:
        """Wait out the lane's backoff, then seek its session back (unless it is ending)."""
        consumer = self._consumer
        delay = consumer.backoff.delay(lane.rewinds - 1)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await lane.ending.wait()
        if self.halted() or lane.session.closed or lane.rewind_to is None:
            return
        reader = self.reader
        assert reader is not None
        offset = lane.rewind_to
        if consumer.consumer is not None:
            offset = max(offset, lane.session.committed_offset)  # YDB reads no lower
        logger.info(
            "consumer %s: partition %d of %s is read again from offset %d (after %.2fs)",
            consumer.name, lane.session.partition_id, lane.session.topic_path, offset, delay,
        )
        try:
            await reader.seek(lane.session, offset)
        except PartitionSessionClosedError:
            # Being taken away: its next reader starts at the committed offset. The lane passes
            # over what still comes until it ends.
            await lane.ending.wait()
            return
        # Whatever was received before the seek is from the old position.
        lane.generation += 1
        lane.rewind_to = None

    async def _deal(self, lanes: anyio.abc.TaskGroup) -> None:
        reader = self.reader
        assert reader is not None
        consumer = self._consumer
        while not self.halted():
            # Receiving runs as a task of its own that ``halt`` cancels: an asyncio cancellation
            # of the one task, not a cancel scope around calls that may await gRPC.
            receiving = asyncio.get_running_loop().create_task(self._next(reader), name="ydb-topic consumer receive")
            self._receiving = receiving
            try:
                await asyncio.wait([receiving])
            except BaseException:
                receiving.cancel()
                await asyncio.wait([receiving])
                raise
            finally:
                self._receiving = None
            item = None if receiving.cancelled() else receiving.result()
            if item is None:
                continue  # nothing yet (or halted while waiting: a batch taken is delivered again)
            session = item.batch.partition_session
            if self.halted() or session.closed:
                # Halted, or its partition was taken away: delivered again (to the new owner).
                await consumer._discard(self, item)
                continue
            lane = self._lanes.get(session)
            if lane is None:
                lane = self._lanes[session] = _Lane(session)
                lanes.start_soon(self._handle, lane, name=f"ydb-topic consumer lane {session.partition_id}")
            elif lane.rewind_to is not None or item.generation != lane.generation:
                await consumer._discard(self, item)  # after a rewind's offset: received again later
                continue
            self._in_flight += item.nbytes
            lane.queue.put_nowait(item)

    async def _handle(self, lane: _Lane) -> None:
        reader = self.reader
        assert reader is not None
        consumer = self._consumer
        while True:
            if lane.rewind_to is not None and not self.halted():
                try:
                    await self._rewind(lane)
                except Exception as exc:
                    self.halt(exc)
            item = await lane.queue.get()
            if item is None:
                break
            if isinstance(item, str):
                continue  # REWIND: the loop's top does it
            try:
                if not self.halted() and not lane.session.closed and item.generation == lane.generation:
                    await consumer._process(self, reader, lane, item)
                else:
                    await consumer._discard(self, item)
            except Exception as exc:
                self.halt(exc)
            finally:
                self._in_flight -= item.nbytes
                self._room.set()
        # Whatever is still queued will be delivered again: give its room back.
        while not lane.queue.empty():
            left = lane.queue.get_nowait()
            if isinstance(left, _Item):
                self._in_flight -= left.nbytes
                await consumer._discard(self, left)
        self._room.set()


class TopicRuntime:
    """One driver, named long-lived writers and supervised consumers for a web application.

    ``async with TopicRuntime(endpoint, database, writers={"events": WriterSpec("events")},
    consumers=[Consumer("events", "audit", handle)]) as runtime`` opens everything in order;
    leaving the block closes it in reverse (see the module docstring). ``shutdown_timeout``
    bounds each step of the shutdown. ``wait_ready`` (seconds) makes start-up fail fast when the
    database does not answer; ``None`` skips the check. A writer that fails for good is replaced
    on its next access (see ``writer``); ``writer_backoff`` spaces out the replacements of a
    writer whose replacements keep failing.
    """

    def __init__(
        self,
        endpoint: str,
        database: str | None = None,
        credentials: Credentials | None = None,
        *,
        writers: Mapping[str, WriterSpec] | None = None,
        consumers: Sequence[SupervisedConsumer] = (),
        driver_options: Mapping[str, Any] | None = None,
        wait_ready: float | None = 10.0,
        shutdown_timeout: float = 10.0,
        writer_backoff: BackoffSchedule = WRITER_REPLACEMENT_BACKOFF,
    ) -> None:
        self._writer_specs = dict(writers or {})
        for name, spec in self._writer_specs.items():
            if not isinstance(spec, WriterSpec):
                raise InvalidArgumentError(f"writer {name!r} must be a WriterSpec, got {type(spec).__name__}")
        self.consumers = tuple(consumers)
        for consumer in self.consumers:
            if not isinstance(consumer, Consumer | TransactionalConsumer):
                raise InvalidArgumentError(
                    f"consumers must be Consumer or TransactionalConsumer objects, got {type(consumer).__name__}"
                )
        names = [c.name for c in self.consumers]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"consumer names must be unique, got {names}")
        if wait_ready is not None and not (isinstance(wait_ready, (int, float)) and wait_ready > 0):
            raise InvalidArgumentError(f"wait_ready must be a positive number of seconds or None, got {wait_ready!r}")
        if not (isinstance(shutdown_timeout, (int, float)) and shutdown_timeout > 0):
            raise InvalidArgumentError(
                f"shutdown_timeout must be a positive number of seconds, got {shutdown_timeout!r}"
            )
        if not isinstance(writer_backoff, BackoffSchedule) or not 0 < writer_backoff.base <= writer_backoff.cap:
            raise InvalidArgumentError(
                f"writer_backoff must be a BackoffSchedule with 0 < base <= cap, got {writer_backoff!r}"
            )
        self._writer_backoff = writer_backoff
        self._endpoint = endpoint
        self._database = database
        self._credentials = credentials
        self._driver_options = dict(driver_options or {})
        self._wait_ready = wait_ready
        self.shutdown_timeout = shutdown_timeout
        self._driver: Driver | None = None
        self._writers: dict[str, TopicWriter] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        """Closing writers that failed and were replaced; awaited by ``close``."""
        self._tasks: dict[SupervisedConsumer, asyncio.Task[None]] = {}
        self._unproven: set[str] = set()
        """Names whose current writer is a replacement not yet judged (see ``writer``)."""
        self._failed_replacements: dict[str, int] = {}
        """Consecutive replacements of a writer that failed without ever connecting."""
        self._replace_after: dict[str, float] = {}
        """``time.monotonic()`` before which a writer's failure is raised instead of replaced."""

    @property
    def driver(self) -> Driver:
        """The open driver (``RuntimeError`` outside the runtime's lifetime)."""
        if self._driver is None:
            raise RuntimeError("the topic runtime is not running (is the lifespan / cleanup context installed?)")
        return self._driver

    @property
    def writers(self) -> Mapping[str, TopicWriter]:
        """The writers by name: a live view whose lookups go through ``writer`` (and so recover)."""
        return _WriterView(self)

    def current_writer(self, name: str) -> TopicWriter:
        """The writer called ``name`` as it is now, even one that has failed (``writer`` would
        replace that): for a health check that must not open a new writer."""
        try:
            return self._writers[name]
        except KeyError:
            raise KeyError(f"no writer named {name!r}; configured: {sorted(self._writer_specs)}") from None

    def writer(self, name: str) -> TopicWriter:
        """The writer called ``name``; one that has failed for good is replaced first.

        A writer fails for good on an error no retry can fix, or when its retry budget runs out
        (writers reconnect for as long as they are open unless their ``WriterSpec`` gives one,
        e.g. ``retry=RetryPolicy(max_elapsed=60)``). The next access then opens a new writer
        with the same ``WriterSpec``, logs the replacement at WARNING with the cause and closes
        the failed writer in the background. Messages the failed writer had accepted but not
        acknowledged are lost: their futures failed with the cause, so ``write_with_ack`` (and
        ``flush``) raised it, while a fire-and-forget ``write`` that already returned cannot
        tell. Use ``write_with_ack`` where a message must not be lost silently. Every caller gets the same new writer.

        When the replacement fails too without ever connecting (a missing topic, a codec the
        topic refuses, missing rights: something a new stream will not fix), its failure is
        raised to the callers, without opening another writer, until a backoff has passed; the
        backoff doubles from ``writer_backoff.base`` up to ``writer_backoff.cap`` seconds with
        each such replacement and starts over once a replacement connects.
        """
        driver = self.driver
        writer = self.current_writer(name)
        failure = writer.failure
        if failure is None:
            return writer
        now = time.monotonic()
        if name in self._unproven:
            self._unproven.discard(name)
            if writer.init_info is None:
                # A replacement that failed before its first handshake: a new one would fail the same way.
                attempt = self._failed_replacements.get(name, 0)
                self._failed_replacements[name] = attempt + 1
                delay = self._writer_backoff.delay(attempt, rand=lambda: random.uniform(0.5, 1.0))
                self._replace_after[name] = now + delay
                logger.warning(
                    "the replacement of writer %r for %s failed too (%s: %s); replacing it again in %.1fs",
                    name, self._writer_specs[name].path, type(failure).__name__, failure, delay,
                )
            else:
                self._failed_replacements.pop(name, None)
        if now < self._replace_after.get(name, 0.0):
            raise failure.with_traceback(None)  # the same error for every call; do not grow its traceback
        # No await between the check and the swap: concurrent callers all see the one new writer.
        spec = self._writer_specs[name]
        replacement = driver.topic.writer(spec.path, **spec.options)
        self._writers[name] = replacement
        self._unproven.add(name)
        logger.warning(
            "writer %r for %s failed (%s: %s); replaced it with a new writer (its unacknowledged messages are lost)",
            name, spec.path, type(failure).__name__, failure,
        )
        task = asyncio.get_running_loop().create_task(
            self._close_failed(name, writer), name=f"ydb-topic close failed writer {name}"
        )
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
        return replacement

    async def _close_failed(self, name: str, writer: TopicWriter) -> None:
        try:
            await writer.close(self.shutdown_timeout)
        except Exception as exc:
            if exc is not writer.failure:
                logger.warning("closing the failed writer %r also failed: %r", name, exc)

    async def __aenter__(self) -> TopicRuntime:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the driver and writers and start the consumers; on failure close what was opened."""
        if self._driver is not None:
            raise RuntimeError("the topic runtime is already running")
        driver = Driver(self._endpoint, self._database, self._credentials, **self._driver_options)
        await driver.open()
        self._driver = driver
        try:
            if self._wait_ready is not None:
                await driver.wait_ready(self._wait_ready)
            for name, spec in self._writer_specs.items():
                writer = driver.topic.writer(spec.path, **spec.options)
                await writer.open()
                self._writers[name] = writer
            for consumer in self.consumers:
                # Owned here and always awaited in ``close``.
                self._tasks[consumer] = asyncio.get_running_loop().create_task(
                    consumer.run(driver), name=f"ydb-topic consumer {consumer.name}"
                )
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop consumers, flush and close writers, close the driver; raise the first failure after all."""
        first: BaseException | None = None
        tasks, self._tasks = self._tasks, {}
        await asyncio.gather(*(c.stop(t, self.shutdown_timeout) for c, t in tasks.items()))
        if self._retiring:
            await asyncio.wait(list(self._retiring))
        writers, self._writers = self._writers, {}
        for name, writer in writers.items():
            try:
                await writer.close(self.shutdown_timeout)
            except Exception as exc:
                logger.error("closing writer %r failed: %s", name, exc)
                first = first or exc
        driver, self._driver = self._driver, None
        if driver is not None:
            try:
                await driver.close()
            except Exception as exc:
                logger.error("closing the driver failed: %s", exc)
                first = first or exc
        if first is not None:
            raise first


class _WriterView(Mapping[str, TopicWriter]):
    """The runtime's writers by name; a lookup replaces a failed writer (``TopicRuntime.writer``)."""

    def __init__(self, runtime: TopicRuntime) -> None:
        self._runtime = runtime

    def __getitem__(self, name: str) -> TopicWriter:
        return self._runtime.writer(name)

    def __contains__(self, name: object) -> bool:
        return name in self._runtime._writers

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._runtime._writers))

    def __len__(self) -> int:
        return len(self._runtime._writers)

    def __repr__(self) -> str:
        return f"<writers {sorted(self._runtime._writers)}>"
