"""The one polling helper of the test suite, for state that has no event to await."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]],
    what: str = "the condition",
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
) -> None:
    """Wait until ``condition()`` (a function or a coroutine function) is true, checking every
    ``interval`` seconds (0: at every turn of the event loop). Fails the test with an
    ``AssertionError`` naming ``what`` when ``timeout`` seconds pass first.

    For what the server or a background task changes with no event to wait on (stored messages,
    a connection state, a counter); never a timing assertion.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"not reached within {timeout}s: {what}")
        await asyncio.sleep(interval)
