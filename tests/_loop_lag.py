"""How long the event loop was kept from running other tasks while a block ran."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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
