"""The sync bridge: Spark calls plain functions; the SDK is async.

Each process (a Spark executor's Python worker, the driver-side streaming source, a planning
worker) runs one event loop in a daemon thread. Spark's threads hand coroutines to it and wait
for their results. Drivers are cached on that loop per connection options, so every task and
every planning call of a process shares one driver (one channel, one discovery, one login)
instead of opening its own. At interpreter exit every driver is closed and the thread stopped;
``shutdown()`` does the same on demand. A forked child starts a runtime of its own, since threads
do not survive ``fork``.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import importlib
import os
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from .. import AccessTokenCredentials, Credentials, Driver, InvalidArgumentError, RetryPolicy, StaticCredentials
from ..observability import register_secret, sdk_logger
from ._options import ConnectionOptions

T = TypeVar("T")

logger = sdk_logger("spark")

_CLOSE_TIMEOUT = 10.0
"""Seconds ``shutdown`` waits for the drivers to close."""


def retry_policy(options: ConnectionOptions) -> RetryPolicy:
    """Retry for ``retryTimeout`` seconds in total, however many attempts that takes."""
    return RetryPolicy(max_attempts=None, max_elapsed=options.retry_timeout)


class TokenFileCredentials:
    """The token in a file, read again whenever the file changes (a rotated, mounted secret)."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._token: str | None = None

    async def auth_token(self) -> str | None:
        """The file's content without surrounding whitespace."""
        try:
            stat = self._path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                token = self._path.read_text().strip()
                if not token:
                    raise InvalidArgumentError(f"ydb_topic: token file {str(self._path)!r} is empty")
                register_secret(token)
                self._token, self._stamp = token, stamp
        except OSError as exc:
            raise InvalidArgumentError(f"ydb_topic: token file cannot be read: {exc}") from None
        return self._token

    def __repr__(self) -> str:
        return f"TokenFileCredentials({str(self._path)!r})"


def credentials(options: ConnectionOptions) -> Credentials | None:
    """The credentials the connection options describe (None: anonymous)."""
    if options.token:
        return AccessTokenCredentials(options.token)
    if options.token_file:
        return TokenFileCredentials(options.token_file)
    if options.user:
        return StaticCredentials(options.user, options.password or "")
    if options.credentials_provider:
        module_name, _, attr = options.credentials_provider.partition(":")
        factory: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            factory = getattr(factory, part)
        made = factory()
        if not isinstance(made, Credentials):
            raise InvalidArgumentError(
                f"ydb_topic: credentialsProvider {options.credentials_provider!r} returned {type(made).__name__}, "
                "not credentials (an object with an async auth_token() method)"
            )
        return made
    return None


class Runtime:
    """One process's event loop thread and its drivers, keyed by connection options."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._drivers: dict[ConnectionOptions, asyncio.Task[Driver]] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="ydb-topic-async-spark", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result; an interrupted wait cancels it."""
        if self._closed:
            coro.close()
            raise RuntimeError("ydb_topic: the Spark connection runtime was shut down")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"ydb_topic: the call did not finish within {timeout}s") from None
        except BaseException:
            future.cancel()
            raise

    async def driver(self, options: ConnectionOptions) -> Driver:
        """The process's open driver for ``options`` (call on the loop)."""
        task = self._drivers.get(options)
        if task is not None and task.done() and (task.cancelled() or task.exception() or task.result().closed):
            task = None  # a failed open, or a closed driver: make a new one
        if task is None:
            task = self._loop.create_task(self._open(options), name=f"ydb-topic-async open {options.endpoint}")
            self._drivers[options] = task
        # Shielded: a task whose wait is cancelled must not cancel an open shared with other tasks.
        return await asyncio.shield(task)

    async def _open(self, options: ConnectionOptions) -> Driver:
        started = time.monotonic()
        driver = Driver(
            options.endpoint,
            options.database,
            credentials(options),
            root_certificates=options.root_certificates,
            discovery=options.discovery,
            retry=retry_policy(options),
        )
        await driver.open()
        logger.debug("ydb_topic: connected to %s in %.3fs", options.endpoint, time.monotonic() - started)
        return driver

    @property
    def drivers(self) -> int:
        """How many drivers are open (for tests and diagnostics)."""
        return sum(1 for t in self._drivers.values() if t.done() and not t.cancelled() and not t.exception())

    def shutdown(self) -> None:
        """Close every driver, stop the loop and join its thread (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        if self.pid != os.getpid() or not self._thread.is_alive():
            return  # a forked child's copy: its thread does not exist here
        try:
            asyncio.run_coroutine_threadsafe(self._close_drivers(), self._loop).result(_CLOSE_TIMEOUT)
        except Exception:
            logger.warning("ydb_topic: closing the Spark connections failed", exc_info=True)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_CLOSE_TIMEOUT)
            if not self._thread.is_alive():
                self._loop.close()

    async def _close_drivers(self) -> None:
        tasks, self._drivers = list(self._drivers.values()), {}
        for task in tasks:
            if not task.done():
                task.cancel()
            try:
                driver = await task
            except BaseException:  # an open that failed or was cancelled has nothing to close
                continue
            try:
                await driver.close()
            except Exception:
                logger.warning("ydb_topic: closing a driver failed", exc_info=True)
        # Let the closed calls deliver their last events while the loop still runs.
        await asyncio.sleep(0)
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self._loop.shutdown_asyncgens()
        await self._loop.shutdown_default_executor()


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime, started on first use."""
    global _runtime
    current = _runtime
    if current is not None and current.pid == os.getpid() and not current._closed:
        return current
    with _runtime_lock:
        if _runtime is None or _runtime.pid != os.getpid() or _runtime._closed:
            _runtime = Runtime()
        return _runtime


def shutdown() -> None:
    """Close this process's Spark connections (also done at interpreter exit)."""
    global _runtime
    with _runtime_lock:
        current, _runtime = _runtime, None
    if current is not None:
        current.shutdown()


atexit.register(shutdown)
