"""Several nodes, some failing: calls and streams leave a failing node, prefer the client's
location, and discovery runs again at once when most nodes fail.

The nodes are proxies in front of one local topic server (``ydb_topic_async.testing.proxy``),
listed with their locations by a discovery server of the test's own (``tests/_discovery.py``),
so every call and stream really goes over one of them. Refusing a proxy is a node that died:
its connections reset, new ones refused.

What is expected follows the Go SDK's balancer (``internal/balancer``: a node whose calls fail
with transport errors is banned while others are usable; discovery is forced once more than half
are banned; a discovery round unbans what it lists) and the official SDKs' preference for the
local data centre (Go's ``PreferNearestDC``, Python's ``detect_local_dc``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import FlakyProxy

from .._discovery import ListedNode, proxied_nodes
from .._metrics import RetryCount
from .._polling import eventually

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

PAYLOAD = b"n" * 50_000
"""Large enough that the proxy carrying a stream stands out in the byte counts."""


async def _carrier(proxies: list[FlakyProxy], action: Callable[[], Awaitable[Any]]) -> FlakyProxy:
    """The proxy that carried most of the bytes of ``action``."""
    before = [p.forwarded_bytes for p in proxies]
    await action()
    grown = [p.forwarded_bytes - b for p, b in zip(proxies, before, strict=True)]
    return proxies[grown.index(max(grown))]


async def _read_until(reader: yta.TopicReader, data: bytes) -> None:
    for _ in range(10):
        if data in [m.data for m in await reader.receive_batch(timeout=10)]:
            return
    raise AssertionError(f"{data!r} was not read")


def _unused_port() -> int:
    """A port nothing listens on: connections to it are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _grown(proxies: list[FlakyProxy], before: list[int]) -> list[int]:
    return [p.forwarded_bytes - b for p, b in zip(proxies, before, strict=True)]


async def test_unary_calls_leave_a_dead_node_after_its_first_failure(server: LocalTopicServer, topic: str) -> None:
    retries = RetryCount()
    async with proxied_nodes(server, ["dc1"] * 3) as (discovery, proxies), yta.Driver(
        discovery.endpoint, server.database, metrics=retries
    ) as driver:
        await driver.wait_ready(timeout=10)
        assert len(driver.endpoints) == 3
        for _ in range(6):  # every node has a connection
            await driver.topic.describe_topic(topic, timeout=5)
        await proxies[1].refuse()
        for _ in range(9):
            await driver.topic.describe_topic(topic, timeout=5)
        # The first call that went to the dead node failed, was retried on a live one, and
        # no call went there again.
        assert retries.count == 1
        assert driver.failing_endpoints == [proxies[1].endpoint]


@pytest.mark.parametrize("victim", ["writer", "reader"])
async def test_a_stream_whose_node_died_reconnects_to_a_live_node_at_once(
    server: LocalTopicServer, topic: str, victim: str
) -> None:
    async with proxied_nodes(server, ["dc1"] * 3) as (discovery, proxies), yta.Driver(
        discovery.endpoint, server.database
    ) as driver:
        await driver.wait_ready(timeout=10)
        writer = driver.topic.writer(topic, producer_id="p")
        reader = driver.topic.reader(topic, consumer="consumer")
        async with writer:
            writers_node = await _carrier(proxies, lambda: writer.write_with_ack(PAYLOAD))
            async with reader:  # its stream carries the payload to it
                readers_node = await _carrier(proxies, lambda: reader.receive_batch(timeout=10))
                owner: yta.TopicWriter | yta.TopicReader = writer if victim == "writer" else reader
                dead = writers_node if victim == "writer" else readers_node
                reconnects = owner.reconnects
                await dead.refuse()
                await eventually(lambda: owner.reconnects > reconnects, f"the {victim} noticed")
                await asyncio.wait_for(writer.write_with_ack(b"after"), 10)
                await _read_until(reader, b"after")  # what was read and not committed may come first
                # One reconnect: the first new stream went to a live node.
                assert owner.reconnects == reconnects + 1
                assert owner.connection_state is yta.ConnectionState.CONNECTED
                assert driver.failing_endpoints == [dead.endpoint]


async def test_nodes_in_the_clients_location_take_the_traffic(server: LocalTopicServer, topic: str) -> None:
    async with proxied_nodes(server, ["dc2", "dc1", "dc2"]) as (discovery, proxies), yta.Driver(
        discovery.endpoint, server.database, location="dc1"
    ) as driver:
        await driver.wait_ready(timeout=10)
        assert driver.location == "dc1"
        before = [p.forwarded_bytes for p in proxies]
        async with driver.topic.writer(topic, producer_id="p") as writer, driver.topic.reader(
            topic, consumer="consumer"
        ) as reader:
            await writer.write_with_ack(PAYLOAD)
            await reader.receive_batch(timeout=10)
            await driver.topic.describe_topic(topic, timeout=5)
            grown = _grown(proxies, before)
            assert grown[0] == grown[2] == 0 and grown[1] > len(PAYLOAD), grown

            await proxies[1].refuse()  # no healthy node here: the other location's nodes
            await asyncio.wait_for(writer.write_with_ack(PAYLOAD), 10)
            await reader.receive_batch(timeout=10)
            for _ in range(4):
                await driver.topic.describe_topic(topic, timeout=5)
            assert driver.failing_endpoints == [proxies[1].endpoint]
            assert _grown(proxies, before)[0] > 0 and _grown(proxies, before)[2] > 0


async def test_the_location_whose_node_connects_first_is_detected(server: LocalTopicServer, topic: str) -> None:
    async with proxied_nodes(server, ["near"]) as (discovery, proxies):
        discovery.nodes.append(ListedNode("127.0.0.1", _unused_port(), 2, "far"))
        discovery.self_location = "far"  # what discovery says is overruled by the race
        async with yta.Driver(discovery.endpoint, server.database, detect_location=True) as driver:
            await driver.wait_ready(timeout=10)
            assert driver.location == "near"
            before = proxies[0].forwarded_bytes
            for _ in range(4):
                await driver.topic.describe_topic(topic, timeout=5)  # never to the far node
            assert proxies[0].forwarded_bytes > before


async def test_without_a_race_winner_the_location_discovery_reports_is_used(server: LocalTopicServer) -> None:
    async with proxied_nodes(server, ["dc1", "dc2"]) as (discovery, proxies):
        discovery.self_location = "dc2"
        for proxy in proxies:
            await proxy.refuse()
        async with yta.Driver(discovery.endpoint, server.database, detect_location=True) as driver:
            await driver.wait_ready(timeout=10)
            assert driver.location == "dc2"


async def test_most_nodes_failing_makes_discovery_run_at_once(server: LocalTopicServer, topic: str) -> None:
    async with proxied_nodes(server, ["dc1"] * 3) as (discovery, proxies), yta.Driver(
        discovery.endpoint, server.database, discovery_interval=600
    ) as driver:
        await driver.wait_ready(timeout=10)
        await eventually(lambda: driver.transport.discovery_rounds == 1, "the first background discovery")
        rounds = len(discovery.calls)
        # Two nodes die, and the cluster no longer lists them.
        await proxies[0].refuse()
        await proxies[1].refuse()
        survivor = proxies[2]
        discovery.nodes = [node for node in discovery.nodes if node.port == survivor.port]
        for _ in range(6):  # their failures pessimize them: two of three is more than half
            await driver.topic.describe_topic(topic, timeout=5)
        await eventually(lambda: len(discovery.calls) > rounds, "a discovery round long before the interval", timeout=5)
        await eventually(lambda: driver.endpoints == [survivor.endpoint], "the survivor alone", timeout=5)
        assert driver.transport.discovery_rounds == 2
        assert driver.failing_endpoints == []


async def test_a_node_that_returns_is_used_again_from_the_next_discovery(
    server: LocalTopicServer, topic: str
) -> None:
    async with proxied_nodes(server, ["dc1"] * 3) as (discovery, proxies), yta.Driver(
        discovery.endpoint, server.database, discovery_interval=0.5
    ) as driver:
        await driver.wait_ready(timeout=10)
        listed = list(discovery.nodes)
        await proxies[0].refuse()
        discovery.nodes = listed[1:]
        await eventually(lambda: len(driver.endpoints) == 2, "the dead node dropped", timeout=5)
        await proxies[0].restore()
        discovery.nodes = listed
        await eventually(lambda: len(driver.endpoints) == 3, "the node back", timeout=5)
        before = proxies[0].forwarded_bytes
        for _ in range(6):
            await driver.topic.describe_topic(topic, timeout=5)
        assert proxies[0].forwarded_bytes > before


async def test_discovery_asks_a_node_when_the_given_endpoint_is_gone(server: LocalTopicServer) -> None:
    async with proxied_nodes(server, ["dc1"] * 3) as (discovery, proxies):
        # The nodes themselves list the cluster too (the local server answers ListEndpoints).
        server.discovery.nodes = [(n.host, n.port, n.node_id) for n in discovery.nodes]
        async with yta.Driver(discovery.endpoint, server.database, discovery_interval=0.5) as driver:
            await driver.wait_ready(timeout=10)
            await discovery.server.stop(None)
            server.discovery.nodes = server.discovery.nodes[1:]
            await eventually(
                lambda: driver.endpoints == [p.endpoint for p in proxies[1:]], "the node's answer used", timeout=10
            )
