"""Probes for the off-loop codec tests: how much work the event loop did at a stretch, where a
codec ran, and payloads that compress like real ones.

Both are counted in work, not wall time, so that a busy machine (other processes taking the
CPU) cannot fail a test: the loop thread's own CPU time, and the threads a codec ran in.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

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


def use_codec_threads(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """Let the SDK (de)compress in ``count`` threads at once during this test, whatever the
    machine has (one thread on two CPUs). The test's event loop makes its codec limiter at the
    first codec work, from ``CODEC_THREADS``: call this before any."""
    monkeypatch.setattr(_codecs, "CODEC_THREADS", count)
    monkeypatch.setattr(_codecs, "PARALLELISM", count)
    assert _codecs.codec_limiter().total_tokens == count, "the loop did codec work before"


def compressible_payloads(count: int, size: int = 1024, *, seed: int = 7) -> list[bytes]:
    """``count`` payloads of ``size`` bytes, text-like (words from a small vocabulary, so they
    compress as event data does), each ending with its number; the same for the same ``seed``."""
    rng = random.Random(seed)
    words = [b"user", b"click", b"amount", b"page", b"session", b"%d"]
    out = []
    for i in range(count):
        text = b" ".join(rng.choice(words) for _ in range(size // 4)) + b"#%d" % i
        out.append(text[:size])
    return out
