"""aiohttp integration: a ``cleanup_ctx`` entry that owns a ``TopicRuntime``, and typed app keys.

    runtime = TopicRuntime(endpoint, "/local", writers={"events": WriterSpec("events", producer_id="api")},
                           consumers=[Consumer("events", "audit", handle)])
    app = web.Application()
    app.cleanup_ctx.append(topic_context(runtime))

    async def publish(request: web.Request) -> web.Response:
        await request.app[WRITERS]["events"].write(await request.read())
        ...

At start-up the driver opens, then the writers, then the consumers start. At cleanup the order
is reversed: consumers finish and wait for their commits, writers flush, the driver closes last.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping

from ..extras import raise_for_missing_extra

try:
    from aiohttp import web
except ImportError as exc:
    raise_for_missing_extra(exc, __name__, "aiohttp", "aiohttp", ("aiohttp",))
    raise

from .. import Driver, TopicWriter
from ._runtime import TopicRuntime, WriterSpec
from ._supervisor import Consumer, Handler
from ._transactional import TransactionalConsumer, TxHandler

__all__ = [
    "DRIVER",
    "RUNTIME",
    "WRITERS",
    "Consumer",
    "Handler",
    "TopicRuntime",
    "TransactionalConsumer",
    "TxHandler",
    "WriterSpec",
    "topic_context",
]

RUNTIME = web.AppKey("ydb_topic_async.runtime", TopicRuntime)
"""The running ``TopicRuntime``."""
DRIVER = web.AppKey("ydb_topic_async.driver", Driver)
"""The runtime's open ``Driver``."""
WRITERS = web.AppKey("ydb_topic_async.writers", Mapping[str, TopicWriter])
"""The runtime's writers by name; a lookup replaces a failed writer (see ``TopicRuntime.writer``)."""


def topic_context(runtime: TopicRuntime) -> Callable[[web.Application], AsyncIterator[None]]:
    """A ``cleanup_ctx`` entry that runs ``runtime`` for the application's lifetime."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        async with runtime:
            app[RUNTIME] = runtime
            app[DRIVER] = runtime.driver
            app[WRITERS] = runtime.writers
            yield

    return context
