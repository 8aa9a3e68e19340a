"""pytest plugin (installed with the package): the ``ydb_topic_server`` and ``ydb_topic_cluster`` fixtures.

    async def test_publish(ydb_topic_server):
        async with Driver(ydb_topic_server.endpoint, ydb_topic_server.database) as driver:
            ...

``ydb_topic_cluster`` is a ``LocalTopicCluster`` of three nodes, for tests of node loss:

    async def test_node_loss(ydb_topic_cluster):
        async with Driver(ydb_topic_cluster.endpoint, ydb_topic_cluster.database) as driver:
            ...
            await ydb_topic_cluster.stop_node(1)

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
    from .cluster import LocalTopicCluster
    from .server import LocalTopicServer

CLUSTER_NODES = 3
"""How many nodes the ``ydb_topic_cluster`` fixture runs."""

_NO_RUNNER = (
    "the {fixture} fixture needs an async test runner: install pytest-asyncio (and mark the test"
    " @pytest.mark.asyncio, or set asyncio_mode = auto) or mark the test @pytest.mark.anyio"
)


def _new_server() -> LocalTopicServer:
    # Imported here so that merely having the package installed does not load gRPC into every pytest run.
    from .server import LocalTopicServer

    return LocalTopicServer()


def _new_cluster() -> LocalTopicCluster:
    from .cluster import LocalTopicCluster

    return LocalTopicCluster(CLUSTER_NODES)


def _started(request: pytest.FixtureRequest, fixture: str) -> Any:
    """The started server of ``fixture`` from the async fixture of the test's runner."""
    if not inspect.iscoroutinefunction(request.function):
        raise pytest.UsageError(
            f"{request.function.__name__} is not async: the {fixture} fixture serves async tests, on their event loop"
        )
    if "anyio_backend" in request.fixturenames:
        # anyio's plugin runs async fixtures of tests that use its backend fixture.
        return request.getfixturevalue(f"_{fixture}_anyio")
    if _asyncio_fixture is None or not request.config.pluginmanager.has_plugin("asyncio"):
        raise pytest.UsageError(_NO_RUNNER.format(fixture=fixture))
    return request.getfixturevalue(f"_{fixture}_asyncio")


@pytest.fixture
def ydb_topic_server(request: pytest.FixtureRequest) -> LocalTopicServer:
    """A started ``LocalTopicServer`` on a free loopback port (database ``/local``), stopped after the test."""
    server: LocalTopicServer = _started(request, "ydb_topic_server")
    return server


@pytest.fixture
def ydb_topic_cluster(request: pytest.FixtureRequest) -> LocalTopicCluster:
    """A started three-node ``LocalTopicCluster`` on free loopback ports (database ``/local``),
    stopped after the test."""
    cluster: LocalTopicCluster = _started(request, "ydb_topic_cluster")
    return cluster


@pytest.fixture
async def _ydb_topic_server_anyio() -> AsyncIterator[LocalTopicServer]:
    async with _new_server() as server:
        yield server


@pytest.fixture
async def _ydb_topic_cluster_anyio() -> AsyncIterator[LocalTopicCluster]:
    async with _new_cluster() as cluster:
        yield cluster


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

    @pytest_asyncio.fixture
    async def _ydb_topic_cluster_asyncio() -> AsyncIterator[LocalTopicCluster]:
        async with _new_cluster() as cluster:
            yield cluster

    _asyncio_fixture = _ydb_topic_server_asyncio
