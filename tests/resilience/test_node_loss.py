"""The SDK over a multi-node local cluster (``LocalTopicCluster``): discovery, direct write, node loss.

Every node is a real gRPC server; the driver discovers them and spreads its calls and streams
over them. A node that stops takes the streams it served with it and its partitions move to the
live nodes (a new tablet generation), so writers and readers reconnect, and direct writers
locate their partition again. Waits are bounded; the assertions are about what was delivered,
never about how fast (how quickly traffic leaves a dead node is the transport's business).
"""

from __future__ import annotations

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicCluster

pytestmark = pytest.mark.timeout(120)

QUICK = yta.RetryPolicy(
    fast=yta.BackoffSchedule(base=0.01, cap=0.2), slow=yta.BackoffSchedule(base=0.05, cap=0.5)
)
"""Reconnect quickly: a dead node's endpoint stays in the driver's list until rediscovery, so a
reconnect may land on it a few times before it reaches a live node."""


async def test_the_driver_discovers_every_node(ydb_topic_cluster: LocalTopicCluster) -> None:
    async with yta.Driver(ydb_topic_cluster.endpoint, ydb_topic_cluster.database) as driver:
        await driver.wait_ready(timeout=10)
        assert sorted(map(str, driver.endpoints)) == sorted(ydb_topic_cluster.endpoints)
        await driver.topic.create_topic("t", min_active_partitions=3)
        described = await driver.topic.describe_topic("t", include_location=True)
    placed = {p.partition_id: p.location for p in described.partitions}
    assert {location.node_id for location in placed.values() if location} == {1, 2, 3}
    assert all(location and location.generation == 1 for location in placed.values())


async def test_a_direct_writer_follows_its_partition_to_another_node(ydb_topic_cluster: LocalTopicCluster) -> None:
    cluster = ydb_topic_cluster
    async with yta.Driver(cluster.endpoint, cluster.database, retry=QUICK) as driver:
        await driver.wait_ready(timeout=10)
        await driver.topic.create_topic("t", min_active_partitions=3)
        # A partition away from the node the driver was given, so that discovery keeps answering.
        partition = next(pid for pid in range(3) if cluster.node_of("t", pid).node_id != 1)
        home = cluster.node_of("t", partition)
        async with driver.topic.writer(
            "t", producer_id="direct", partition_id=partition, direct_write=True, retry=QUICK
        ) as writer:
            first = await writer.write_with_ack([b"a", b"b"])
            await cluster.stop_node(home.node_id - 1)
            moved_to = cluster.node_of("t", partition)
            assert moved_to is not home
            after = await writer.write_with_ack_future([b"c", b"d"])
            written = [await f for f in after]
            assert writer.reconnects >= 1
        location = (await driver.topic.describe_partition("t", partition, include_location=True)).location
    assert location is not None and (location.node_id, location.generation) == (moved_to.node_id, 2)
    assert [r.offset for r in first + written if isinstance(r, yta.Written)] == [0, 1, 2, 3]
    assert [m.data for m in cluster.storage.read("t", partition)] == [b"a", b"b", b"c", b"d"]
