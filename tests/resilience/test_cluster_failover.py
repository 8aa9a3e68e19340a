"""Node loss on a multi-node local cluster (``LocalTopicCluster``): traffic leaves a stopped node
after its first failure, and a node's return is noticed at the next discovery.

Every node is a real gRPC server; discovery lists the live ones. A stopped node's connections
reset and its port refuses, so the first call or stream that meets it fails with UNAVAILABLE and
the driver stops choosing it (as the Go SDK's balancer bans a node after a transport error,
``internal/balancer``); its partitions move to live nodes, whose write sessions of them end with
UNAVAILABLE, so writers of those partitions reconnect too.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicCluster

from .._metrics import RetryCount
from .._polling import eventually

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


async def _read_until(reader: yta.TopicReader, wanted: set[bytes]) -> None:
    """Receive and commit until every message of ``wanted`` came (bounded by the callers)."""
    seen: set[bytes] = set()
    while not wanted <= seen:
        batch = await reader.receive_batch(timeout=10)
        seen.update(m.data for m in batch)
        with contextlib.suppress(yta.PartitionSessionClosedError):
            await reader.commit_with_ack(batch, timeout=10)


async def test_writers_readers_and_calls_leave_a_stopped_node_after_its_first_failure(
    ydb_topic_cluster: LocalTopicCluster,
) -> None:
    cluster = ydb_topic_cluster
    retries = RetryCount()
    async with yta.Driver(cluster.endpoint, cluster.database, metrics=retries) as driver:
        await driver.wait_ready(timeout=10)
        await driver.topic.create_topic("t", min_active_partitions=3, consumers=["c0", "c1", "c2"])
        writers = [driver.topic.writer("t", producer_id=f"w{i}", partition_id=i % 3) for i in range(6)]
        readers = [driver.topic.reader("t", consumer=f"c{i}") for i in range(3)]
        async with contextlib.AsyncExitStack() as stack:
            for writer in writers:
                await stack.enter_async_context(writer)
            for reader in readers:
                await stack.enter_async_context(reader)
            for i, writer in enumerate(writers):
                await writer.write_with_ack(b"before %d" % i)
            await asyncio.wait_for(
                asyncio.gather(*(_read_until(r, {b"before %d" % i for i in range(6)}) for r in readers)), 30
            )
            for _ in range(6):  # a connection to every node
                await driver.topic.describe_topic("t", timeout=5)
            reconnects = [w.reconnects for w in writers]
            victim = cluster.nodes[1]

            await cluster.stop_node(1)
            for _ in range(9):
                await driver.topic.describe_topic("t", timeout=5)
            acks = (w.write_with_ack(b"after %d" % i) for i, w in enumerate(writers))
            await asyncio.wait_for(asyncio.gather(*acks), 10)
            await asyncio.wait_for(
                asyncio.gather(*(_read_until(r, {b"after %d" % i for i in range(6)}) for r in readers)), 10
            )

        # The first unary call that met the stopped node was retried on a live one; none went there again.
        assert retries.count <= 1, retries.operations
        assert victim.endpoint in driver.failing_endpoints
        moved = [w.reconnects - r for w, r in zip(writers, reconnects, strict=True)]
        assert sum(moved) >= 2, moved  # at least the writers of the partition that moved
        assert max(moved) <= 2, moved  # none kept trying the dead node


async def test_most_nodes_stopping_makes_discovery_run_at_once(ydb_topic_cluster: LocalTopicCluster) -> None:
    cluster = ydb_topic_cluster
    async with yta.Driver(cluster.endpoint, cluster.database, discovery_interval=600) as driver:
        await driver.wait_ready(timeout=10)
        await eventually(lambda: driver.transport.discovery_rounds == 1, "the first background discovery")
        assert len(driver.endpoints) == 3
        await cluster.stop_node(1)
        await cluster.stop_node(2)
        for _ in range(6):  # their failures leave two of three nodes pessimized
            await _any_call(driver)
        await eventually(lambda: driver.endpoints == [cluster.nodes[0].endpoint], "only the live node", timeout=5)
        assert driver.transport.discovery_rounds == 2
        assert driver.failing_endpoints == []


async def _any_call(driver: yta.Driver) -> None:
    with contextlib.suppress(yta.SchemeError):
        await driver.topic.describe_topic("missing", timeout=5)


async def test_a_node_that_returns_is_used_from_the_next_discovery(ydb_topic_cluster: LocalTopicCluster) -> None:
    cluster = ydb_topic_cluster
    node = cluster.nodes[2]
    async with yta.Driver(cluster.endpoint, cluster.database, discovery_interval=0.5) as driver:
        await driver.wait_ready(timeout=10)
        await cluster.stop_node(2)
        await eventually(lambda: node.endpoint not in driver.endpoints, "the stopped node dropped", timeout=5)
        await cluster.start_node(2)
        await eventually(lambda: node.endpoint in driver.endpoints, "the node back", timeout=5)
        assert driver.failing_endpoints == []
        assert any(str(e) == node.endpoint for e in driver.transport.balancer.choices)


async def test_discovery_goes_on_when_the_given_node_stops(ydb_topic_cluster: LocalTopicCluster) -> None:
    """The driver was given node 1's endpoint; without it, another node answers discovery."""
    cluster = ydb_topic_cluster
    seed, *others = cluster.nodes
    async with yta.Driver(cluster.endpoint, cluster.database, discovery_interval=0.5) as driver:
        await driver.wait_ready(timeout=10)
        await cluster.stop_node(0)
        await eventually(
            lambda: sorted(driver.endpoints) == sorted(n.endpoint for n in others), "the live nodes", timeout=10
        )
        await _any_call(driver)
        await cluster.start_node(0)
        await eventually(lambda: seed.endpoint in driver.endpoints, "the given node back", timeout=10)


async def test_the_clients_location_takes_the_traffic(ydb_topic_cluster: LocalTopicCluster) -> None:
    cluster = ydb_topic_cluster
    home = next(n for n in cluster.nodes if n.location == "dc-2")
    async with yta.Driver(cluster.endpoint, cluster.database, location="dc-2") as driver:
        await driver.wait_ready(timeout=10)
        assert [str(e) for e in driver.transport.balancer.choices] == [home.endpoint]
        await cluster.stop_node(cluster.nodes.index(home))
        await _any_call(driver)  # fails there once, then goes to the other locations
        assert sorted(str(e) for e in driver.transport.balancer.choices) == sorted(
            n.endpoint for n in cluster.nodes if n is not home
        )
