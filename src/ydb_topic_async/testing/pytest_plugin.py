"""pytest plugin (installed with the package): the ``ydb_topic_server`` fixture.

    async def test_publish(ydb_topic_server):
        async with Driver(ydb_topic_server.endpoint, ydb_topic_server.database) as driver:
            ...

The fixture works with the async test runner the test uses: pytest-asyncio in strict mode (mark
the test ``@pytest.mark.asyncio``) or auto mode, or anyio's pytest plugin (mark the test
``@pytest.mark.anyio``; the asyncio backend, since the server runs on gRPC's asyncio API). The
server runs on the test's own event loop and is stopped after the test.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .server import LocalTopicServer

_NO_RUNNER = (
    "the ydb_topic_server fixture needs an async test runner: install pytest-asyncio (and mark the test"
    " @pytest.mark.asyncio, or set asyncio_mode = auto) or mark the test @pytest.mark.anyio"
)


def _new_server() -> LocalTopicServer:
    # Imported here so that merely having the package installed does not load gRPC into every pytest run.
    from .server import LocalTopicServer

    return LocalTopicServer()


@pytest.fixture
def ydb_topic_server(request: pytest.FixtureRequest) -> LocalTopicServer:
    """A started ``LocalTopicServer`` on a free loopback port (database ``/local``), stopped after the test."""
    if not inspect.iscoroutinefunction(request.function):
        raise pytest.UsageError(
            f"{request.function.__name__} is not async: the ydb_topic_server fixture serves async tests,"
            " on their event loop"
        )
    if "anyio_backend" in request.fixturenames:
        # anyio's plugin runs async fixtures of tests that use its backend fixture.
        server: LocalTopicServer = request.getfixturevalue("_ydb_topic_server_anyio")
        return server
    if _asyncio_fixture is None or not request.config.pluginmanager.has_plugin("asyncio"):
        raise pytest.UsageError(_NO_RUNNER)
    server = request.getfixturevalue("_ydb_topic_server_asyncio")
    return server


@pytest.fixture
async def _ydb_topic_server_anyio() -> AsyncIterator[LocalTopicServer]:
    async with _new_server() as server:
        yield server


_asyncio_fixture: Any
try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - depends on what the user installed
    _asyncio_fixture = None
else:
    # Explicitly pytest-asyncio's, so that strict mode runs it too, not only auto mode.
    @pytest_asyncio.fixture
    async def _ydb_topic_server_asyncio() -> AsyncIterator[LocalTopicServer]:
        async with _new_server() as server:
            yield server

    _asyncio_fixture = _ydb_topic_server_asyncio
