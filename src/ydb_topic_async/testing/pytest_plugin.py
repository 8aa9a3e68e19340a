"""pytest plugin (installed with the package): the ``ydb_topic_server`` fixture.

    async def test_publish(ydb_topic_server):
        async with Driver(ydb_topic_server.endpoint, ydb_topic_server.database) as driver:
            ...

It needs an async test runner such as pytest-asyncio or anyio's pytest plugin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .server import LocalTopicServer


@pytest.fixture
async def ydb_topic_server() -> AsyncIterator[LocalTopicServer]:
    """A started ``LocalTopicServer`` on a free loopback port (database ``/local``), stopped after the test."""
    # Imported here so that merely having the package installed does not load gRPC into every pytest run.
    from .server import LocalTopicServer

    async with LocalTopicServer() as server:
        yield server
