"""asyncio helpers: deadlines that stay timeouts, and quiet internal futures.

Deadlines around awaited ``grpc.aio`` calls are asyncio-native on purpose. When a task awaiting
a gRPC call is cancelled, grpc.aio cancels the call and raises a *new* ``CancelledError``; anyio's
cancel scopes recognise their own cancellation by the original one, so ``anyio.fail_after``
there lets a bare ``CancelledError`` escape instead of a timeout (and the task that ran it ends
"cancelled", with no error to report). asyncio's own deadlines count cancellations per task and
turn any of them into ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import traceback
from collections.abc import Awaitable
from types import TracebackType
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


def suppress_future_errors(futures: list[asyncio.Future[Any]]) -> None:
    """Mark the failures of ``futures`` as retrieved, so asyncio does not log them when they are
    collected: their owner reports the error by other means."""
    for future in futures:
        if future.done() and not future.cancelled():
            with contextlib.suppress(BaseException):
                future.exception()


def release_frames(error: BaseException) -> None:
    """Clear the locals of the finished frames ``error`` was raised through (below the frame
    handling it), so that what they held is freed now rather than by the garbage collector.

    For a cancelled ``grpc.aio`` call: its ``CancelledError`` runs through gRPC's own frames,
    which hold the call, and the cancellation is often kept in a reference cycle (task groups
    keep their children's errors). A call freed only by the collector, after ``asyncio.run``
    returned, hands its last events to a closed event loop.
    """
    tb = error.__traceback__
    if tb is not None:
        traceback.clear_frames(tb.tb_next)  # frames still running (this one) are left alone


async def wait_within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``await awaitable`` for at most ``timeout`` seconds (``None``: no limit); on expiry the
    awaitable is cancelled and ``TimeoutError`` raised. A negative ``timeout`` counts as 0.

    Runs in the calling task (unlike ``asyncio.wait_for`` before Python 3.12, which can swallow
    a cancellation of the caller that arrives just as the awaitable finishes)."""
    if timeout is None:
        return await awaitable
    async with deadline(timeout):
        return await awaitable


async def run_within(awaitable: Awaitable[object], timeout: float) -> bool:
    """``await awaitable`` for at most ``timeout`` seconds, for cleanup that must not hang:
    False (the awaitable cancelled) when the time ran out."""
    try:
        await wait_within(awaitable, timeout)
    except TimeoutError:
        return False
    return True


class Deadline(Protocol):
    """An ``async with`` block with a deadline; ``expired()`` tells whether it cut the block."""

    async def __aenter__(self) -> Deadline: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None: ...

    def expired(self) -> bool: ...


class _Deadline310:
    """``asyncio.timeout`` for Python 3.10, which lacks it: cancels the task at the deadline and
    turns the resulting ``CancelledError`` into ``TimeoutError``."""

    def __init__(self, timeout: float | None) -> None:
        self._timeout = timeout
        self._handle: asyncio.TimerHandle | None = None
        self._expired = False

    async def __aenter__(self) -> _Deadline310:
        if self._timeout is not None:
            task = asyncio.current_task()
            assert task is not None
            self._handle = asyncio.get_running_loop().call_later(max(0.0, self._timeout), self._expire, task)
        return self

    def _expire(self, task: asyncio.Task[Any]) -> None:
        self._expired = True
        task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if self._handle is not None:
            self._handle.cancel()
        if self._expired and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc
        return None

    def expired(self) -> bool:
        return self._expired


def deadline(timeout: float | None) -> Deadline:
    """An asyncio-native deadline for a block (``None``: none): ``async with deadline(5) as d``.

    When it passes, the awaited operation is cancelled and the block raises ``TimeoutError``
    (unless the block catches the cancellation itself: then ``d.expired()`` tells).
    """
    if sys.version_info >= (3, 11):
        return asyncio.timeout(None if timeout is None else max(0.0, timeout))  # type: ignore[return-value,unused-ignore]
    return _Deadline310(timeout)
