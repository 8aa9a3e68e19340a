"""FastAPI integration: a lifespan that owns a ``TopicRuntime`` and typed dependencies.

    runtime = TopicRuntime(endpoint, "/local", writers={"events": WriterSpec("events", producer_id="api")},
                           consumers=[Consumer("events", "audit", handle)])
    app = FastAPI(lifespan=topic_lifespan(runtime))
    EventsWriter = Annotated[TopicWriter, Depends(writer_dependency("events"))]

    @app.post("/events")
    async def publish(body: bytes = Body(), writer: EventsWriter) -> None:
        await writer.write(body)

The runtime opens before the application serves requests and closes after the last one:
consumers finish and wait for their commits, writers flush, the driver closes last.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated

from ..extras import raise_for_missing_extra

try:
    from fastapi import Depends, FastAPI, Request
except ImportError as exc:
    raise_for_missing_extra(exc, __name__, "FastAPI", "fastapi", ("fastapi", "starlette", "pydantic"))
    raise

from .. import Driver, TopicWriter
from ._runtime import TopicRuntime, WriterSpec
from ._supervisor import Consumer, Handler
from ._transactional import TransactionalConsumer, TxHandler

__all__ = [
    "Consumer",
    "Handler",
    "TopicDriver",
    "TopicRuntime",
    "TopicRuntimeDep",
    "TransactionalConsumer",
    "TxHandler",
    "WriterSpec",
    "get_driver",
    "get_runtime",
    "topic_lifespan",
    "writer_dependency",
]

_STATE_KEY = "ydb_topic_async"

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def topic_lifespan(runtime: TopicRuntime, inner: Lifespan | None = None) -> Lifespan:
    """A ``lifespan`` for ``FastAPI(lifespan=...)`` that runs ``runtime`` around the application.

    ``inner`` is the application's own lifespan, if any: it starts after the runtime (so it can
    use the driver and writers) and ends before the runtime closes.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with runtime:
            setattr(app.state, _STATE_KEY, runtime)
            try:
                if inner is None:
                    yield
                else:
                    async with inner(app):
                        yield
            finally:
                delattr(app.state, _STATE_KEY)

    return lifespan


def get_runtime(request: Request) -> TopicRuntime:
    """Dependency: the application's running ``TopicRuntime``."""
    runtime = getattr(request.app.state, _STATE_KEY, None)
    if not isinstance(runtime, TopicRuntime):
        raise RuntimeError("no topic runtime on this application: create it with FastAPI(lifespan=topic_lifespan(...))")
    return runtime


def get_driver(request: Request) -> Driver:
    """Dependency: the runtime's open ``Driver``."""
    return get_runtime(request).driver


def writer_dependency(name: str) -> Callable[[Request], Awaitable[TopicWriter]]:
    """A dependency that hands the runtime's writer ``name`` to a route.

    Use it through an alias: ``EventsWriter = Annotated[TopicWriter, Depends(writer_dependency("events"))]``.
    A writer that failed for good is replaced by a new one first (see ``TopicRuntime.writer``).
    """

    # A coroutine, so FastAPI runs it on the event loop rather than in its thread pool: the
    # runtime's writers belong to the loop, and a failed writer is replaced without a race.
    async def dependency(request: Request) -> TopicWriter:
        return get_runtime(request).writer(name)

    dependency.__name__ = f"topic_writer_{name}"
    return dependency


TopicRuntimeDep = Annotated[TopicRuntime, Depends(get_runtime)]
"""A route parameter annotated with this receives the running ``TopicRuntime``."""

TopicDriver = Annotated[Driver, Depends(get_driver)]
"""A route parameter annotated with this receives the runtime's ``Driver``."""
