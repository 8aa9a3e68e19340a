"""The sync bridge: Spark calls plain functions; the SDK is async.

Every Spark task (and every driver-side call) gets a private event loop that lives only as long
as the task: nothing is shared between tasks of one Python worker, and when the task ends the
loop cancels what is left, joins its default executor (compression threads) and closes, so no
thread or stream outlives the task.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from .._credentials import AccessTokenCredentials, Credentials, StaticCredentials
from .._driver import Driver
from ._options import SourceOptions

T = TypeVar("T")


class TaskLoop:
    """A private event loop driven step by step with ``run`` (so a generator can yield between steps)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    @property
    def closed(self) -> bool:
        return self._loop.is_closed()

    def close(self) -> None:
        loop = self._loop
        if loop.is_closed():
            return
        try:
            # gRPC's completion queue is process-wide and hands events to the loop a call was
            # made on: release the closed channels and let their last events arrive while this
            # loop still runs, or they land on a closed loop (Python workers are reused).
            gc.collect()
            loop.run_until_complete(asyncio.sleep(0.01))
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def __enter__(self) -> TaskLoop:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def credentials(options: SourceOptions) -> Credentials | None:
    if options.token:
        return AccessTokenCredentials(options.token)
    if options.user:
        return StaticCredentials(options.user, options.password or "")
    return None


async def open_driver(options: SourceOptions) -> Driver:
    """A driver for the options' database (call inside the task's loop; close it there too)."""
    driver = Driver(options.endpoint, options.database, credentials(options))
    await driver.open()
    return driver


def run_with_driver(options: SourceOptions, fn: Callable[[Driver], Awaitable[T]]) -> T:
    """Run ``fn(driver)`` to completion on a private loop with a fresh driver; close both."""

    async def main() -> T:
        async with Driver(options.endpoint, options.database, credentials(options)) as driver:
            return await fn(driver)

    with TaskLoop() as loop:
        return loop.run(main())
