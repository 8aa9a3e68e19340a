"""Probes for the off-loop codec tests: how long the event loop stalled, and where a codec ran."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ydb_topic_async import _codecs

_TICK = 0.001


@asynccontextmanager
async def loop_stalls() -> AsyncIterator[list[float]]:
    """Yield a list that fills, while the block runs, with how late each 1 ms sleep woke up."""
    loop = asyncio.get_running_loop()
    stalls: list[float] = []
    done = asyncio.Event()
    running = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            running.set()
            before = loop.time()
            await asyncio.sleep(_TICK)
            stalls.append(loop.time() - before - _TICK)

    probing = asyncio.ensure_future(probe())
    await running.wait()
    try:
        yield stalls
    finally:
        done.set()
        await probing


class RecordingTransform:
    """Wraps an encoder or decoder and records the threads it ran in."""

    def __init__(self, transform: _codecs.Transform) -> None:
        self._transform = transform
        self._lock = threading.Lock()
        self.threads: list[int] = []

    def __call__(self, data: bytes) -> bytes:
        with self._lock:
            self.threads.append(threading.get_ident())
        return self._transform(data)
