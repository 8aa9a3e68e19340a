"""aiohttp integration: a ``cleanup_ctx`` that owns the driver, writers and consumers.

    app = web.Application()
    app.cleanup_ctx.append(topic_context(endpoint, "/local", writers={"events": {"path": "events"}},
                                         consumers=[Consumer("events", "audit", handle)]))

    async def publish(request):
        await request.app[WRITERS]["events"].write(await request.read())

At start-up the driver opens, then the writers, then the consumers start as supervised tasks.
At shutdown the order is reversed: consumers stop (their readers wait for commit acks), writers
flush every accepted message, and the driver closes last.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from .._credentials import Credentials
from .._driver import Driver
from ..writer import TopicWriter
from ._supervisor import Consumer

DRIVER = web.AppKey("ydb_topic_async.driver", Driver)
WRITERS = web.AppKey("ydb_topic_async.writers", dict[str, TopicWriter])

__all__ = ["DRIVER", "WRITERS", "Consumer", "topic_context"]


def topic_context(
    endpoint: str,
    database: str | None = None,
    credentials: Credentials | None = None,
    *,
    writers: Mapping[str, Mapping[str, Any]] | None = None,
    consumers: Sequence[Consumer] = (),
    driver_options: Mapping[str, Any] | None = None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A ``cleanup_ctx`` entry; ``writers`` maps a name to ``driver.topic.writer`` keyword arguments
    (``path`` included)."""
    specs = {name: dict(options) for name, options in (writers or {}).items()}
    for name, options in specs.items():
        if "path" not in options:
            raise ValueError(f"writer {name!r} needs a 'path'")

    async def context(app: web.Application) -> AsyncIterator[None]:
        async with Driver(endpoint, database, credentials, **(driver_options or {})) as driver:
            app[DRIVER] = driver
            opened: dict[str, TopicWriter] = {}
            app[WRITERS] = opened
            tasks: list[asyncio.Task[None]] = []
            try:
                for name, options in specs.items():
                    options = dict(options)
                    writer = driver.topic.writer(options.pop("path"), **options)
                    await writer.open()
                    opened[name] = writer
                for consumer in consumers:
                    tasks.append(asyncio.create_task(consumer.run(driver), name=f"consumer {consumer.consumer}"))
                yield
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                for writer in opened.values():
                    await writer.close()

    return context
