"""Shared fixtures: a local topic server on loopback, a driver bound to it, fresh topics, a proxy
in front of the server, the official SDK's driver and query session pool.

Every test also fails if it leaves a task pending on the event loop: background work must be
owned and must end when its owner closes.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ydb_topic_async import Driver
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import FlakyProxy, proxy_to

from ._helpers import create_topic_with_consumer

_names = itertools.count()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what importing the tests made (modules, classes, functions of gRPC, protobuf, Spark,
    FastStream) out of the collector's view before any test runs: the leak check's collection
    after each test then walks what tests made, not the whole heap (about 0.1 s less per test).
    Nothing a test makes is ever set aside, so everything it leaves is collected as before."""
    gc.collect()
    gc.freeze()


class _AsyncioComplaints(logging.Handler):
    """Collects what asyncio logs about destroyed pending tasks and exceptions nobody retrieved."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(autouse=True)
async def no_leaked_tasks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fail a test that leaves tasks behind (after everything else was torn down), or whose
    tasks asyncio reports as destroyed while pending or as failing with nobody to see it.

    ``@pytest.mark.tolerate_asyncio_reports("text", ...)`` lets through reports containing one
    of the texts: for the official SDK's own futures in interop tests, which this project cannot fix.
    """
    marker = request.node.get_closest_marker("tolerate_asyncio_reports")
    tolerated: tuple[str, ...] = marker.args if marker is not None else ()
    complaints = _AsyncioComplaints()
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_logger.addHandler(complaints)
    try:
        before = set(asyncio.all_tasks())
        yield
        await _no_pending_tasks(before)
        gc.collect()  # destroyed-while-pending tasks are reported when they are collected
        reports = [m for m in complaints.messages if not any(text in m for text in tolerated)]
        if reports:
            pytest.fail("asyncio reported: " + "; ".join(reports))
    finally:
        asyncio_logger.removeHandler(complaints)


async def _no_pending_tasks(before: set[asyncio.Task[object]]) -> None:
    current = asyncio.current_task()
    leaked: set[asyncio.Task[object]] = set()
    for _ in range(50):
        leaked = {t for t in asyncio.all_tasks() - before if t is not current and not t.done()}
        if not leaked:
            return
        await asyncio.sleep(0.01)
    pytest.fail("tasks left pending: " + ", ".join(sorted(repr(t.get_coro()) for t in leaked)))


@pytest.fixture
async def server() -> AsyncIterator[LocalTopicServer]:
    async with LocalTopicServer() as srv:
        yield srv


@pytest.fixture
async def driver(server: LocalTopicServer) -> AsyncIterator[Driver]:
    async with Driver(server.endpoint, server.database) as drv:
        yield drv


@pytest.fixture
def topic_name() -> str:
    """A unique topic path (relative to the database); the test creates it."""
    return f"topic-{next(_names)}"


@pytest.fixture
async def topic(driver: Driver, topic_name: str) -> str:
    """A fresh topic with one partition and the consumer ``consumer``."""
    return await create_topic_with_consumer(driver, topic_name)


@pytest.fixture
async def proxy(server: LocalTopicServer) -> AsyncIterator[FlakyProxy]:
    """A TCP proxy in front of the server, for faults in the network (``proxied_driver`` makes a
    driver that goes through it)."""
    async with proxy_to(server) as flaky:
        yield flaky


@pytest.fixture
async def official(server: LocalTopicServer) -> AsyncIterator[Any]:
    """The official ``ydb`` SDK's async driver, connected to the same local server."""
    ydb_aio = pytest.importorskip("ydb.aio")
    driver = ydb_aio.Driver(endpoint=server.endpoint, database=server.database)
    await driver.wait(timeout=10)
    try:
        yield driver
    finally:
        await driver.stop()


@pytest.fixture
async def official_pool(official: Any) -> AsyncIterator[Any]:
    """The official ``ydb`` SDK's asyncio query session pool, on the local server."""
    from ydb.aio.query import QuerySessionPool

    pool = QuerySessionPool(official, size=2)
    try:
        yield pool
    finally:
        await pool.stop()  # type: ignore[no-untyped-call]  # the official SDK's pool has no annotations
