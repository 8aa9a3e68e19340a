"""Client messages of a bidirectional stream, read by one task into a queue.

A stream handler must react to three things at once: a client message, new data in storage, and
the fault injector. Reading the client side in its own task and sharing one wake-up event lets
the handler wait on all three with a single ``await``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import anyio


class Inbox:
    """Reads ``requests`` in the background; ``wakeup`` is set on every arrival and at the end."""

    def __init__(self, requests: AsyncIterator[Any], wakeup: asyncio.Event) -> None:
        self.messages: deque[Any] = deque()
        self.closed = False
        self.error: BaseException | None = None
        self._requests = requests
        self._wakeup = wakeup
        self._task = asyncio.get_running_loop().create_task(self._pump(), name="local-server stream inbox")

    async def _pump(self) -> None:
        try:
            async for message in self._requests:
                self.messages.append(message)
                self._wakeup.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client went away: the handler ends the stream
            self.error = exc
        finally:
            self.closed = True
            self._wakeup.set()

    async def first(self, timeout: float) -> Any | None:
        """The first client message (the handshake), or None when the client sent none in time."""
        with anyio.move_on_after(timeout):
            while not self.messages and not self.closed:
                await self._wakeup.wait()
                self._wakeup.clear()
        return self.messages.popleft() if self.messages else None

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.wait([self._task])
