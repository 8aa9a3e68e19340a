"""``TopicRuntime``: what the framework integrations share, a driver, named writers and
supervised consumers.

Start-up order: driver, then writers, then consumers. Shutdown runs in reverse: consumers let
the handler calls in progress finish and their readers wait for commit acknowledgements,
writers flush every accepted message, and the driver closes last.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Unpack

from .. import (
    BackoffSchedule,
    Credentials,
    Driver,
    InvalidArgumentError,
    TopicWriter,
    WriterOptions,
)
from ..observability import sdk_logger
from ._supervisor import Consumer
from ._transactional import TransactionalConsumer

logger = sdk_logger("integrations")

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


SupervisedConsumer = Consumer | TransactionalConsumer
"""What ``TopicRuntime`` supervises."""


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
