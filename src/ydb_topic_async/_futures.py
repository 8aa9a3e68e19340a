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
import traceback
from collections.abc import Awaitable
from typing import Any, TypeVar

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


def deadline(timeout: float | None) -> asyncio.Timeout:
    """An asyncio-native deadline for a block (``None``: none): ``async with deadline(5) as d``.

    When it passes, the awaited operation is cancelled and the block raises ``TimeoutError``
    (unless the block catches the cancellation itself: then ``d.expired()`` tells).
    """
    return asyncio.timeout(None if timeout is None else max(0.0, timeout))
