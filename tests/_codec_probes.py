"""Probes for the off-loop codec tests: how much work the event loop did at a stretch, and where
a codec ran.

Both are counted in work, not wall time, so that a busy machine (other processes taking the
CPU) cannot fail a test: the loop thread's own CPU time, and the threads a codec ran in.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ydb_topic_async import _codecs

_TICK = 0.001


@asynccontextmanager
async def loop_slices() -> AsyncIterator[list[float]]:
    """Yield a list that fills, while the block runs, with the CPU time the event loop's thread
    spent between two wake-ups of a 1 ms ticker: the work it did at a stretch, whatever else ran
    on the machine (a process that takes the CPU away delays the ticker, not the thread's clock).
    Work done in other threads (a codec's) does not count."""
    stalls: list[float] = []
    done = asyncio.Event()
    running = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            running.set()
            before = time.thread_time()
            await asyncio.sleep(_TICK)
            stalls.append(time.thread_time() - before)

    probing = asyncio.ensure_future(probe())
    await running.wait()
    try:
        yield stalls
    finally:
        done.set()
        await probing


def thread_cpu(fn: Callable[[], object]) -> float:
    """The CPU time ``fn()`` takes in the calling thread."""
    started = time.thread_time()
    fn()
    return time.thread_time() - started


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
