"""Supervised consumers: the supervision loop (restart with backoff, logging) that ``Consumer``
(at-least-once) and ``TransactionalConsumer`` (exactly-once, ``_transactional``) share, and the
lanes that hand each partition session's messages to the handler in order, ``concurrency`` calls
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Literal, Unpack

import anyio
import anyio.abc

from .. import (
    BackoffSchedule,
    ClosedError,
    Driver,
    InvalidArgumentError,
    MessageBatch,
    PartitionSession,
    PartitionSessionClosedError,
    ReaderOptions,
    ReaderSettings,
    RetryPolicy,
    RetryState,
    TopicMessage,
    TopicReader,
    TopicsArg,
    Transaction,
    retry_call,
)
from ..observability import sdk_logger

logger = sdk_logger("integrations")

Handler = Callable[[TopicMessage], Awaitable[None]]
"""An async function called once per message; the message is committed after it returns."""

BatchHandler = Callable[[MessageBatch], Awaitable[None]]
"""An async function called with each batch (messages of one partition session, in order); the
batch is committed after it returns."""

DEFAULT_MAX_IN_FLIGHT_BYTES = 8 * 1024 * 1024


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

    def _transactions(self, driver: Driver) -> tuple[int, RetryPolicy]:
        """How many transactions a run may hold open at once, and the retry policy of their
        attempts (a transactional consumer's; none for the others)."""
        return 1, driver.retry

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
        open_transactions, policy = consumer._transactions(driver)
        self.open_transactions = asyncio.Semaphore(open_transactions)
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
