"""Direct write: the writer connects to the partition's node, with the partition's generation.

A multi-node cluster is simulated with one local server behind several proxies: discovery names
each proxy as a node, and the partition's location names one of them. Bytes counted by each
proxy show which node carried the write stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import FlakyProxy, proxy_to

pytestmark = pytest.mark.timeout(30)

_QUICK = yta.RetryPolicy(max_attempts=10, max_elapsed=10.0, slow=yta.BackoffSchedule(base=0.01, cap=0.05))
PAYLOAD = b"p" * 200_000


@pytest.fixture
async def nodes(server: LocalTopicServer) -> AsyncIterator[list[FlakyProxy]]:
    """Three "nodes" (ids 1, 2, 3), each a proxy in front of the same server."""
    async with contextlib.AsyncExitStack() as stack:
        proxies = [await stack.enter_async_context(proxy_to(server)) for _ in range(3)]
        server.discovery.nodes = [
            ("127.0.0.1", int(p.endpoint.rsplit(":", 1)[1]), node_id) for node_id, p in enumerate(proxies, 1)
        ]
        yield proxies


async def _write_through(server: LocalTopicServer, entry: FlakyProxy, topic: str, count: int) -> list[Any]:
    async with yta.Driver(entry.endpoint, server.database, retry=_QUICK) as driver:
        await driver.wait_ready(timeout=10)  # discovery runs in the background: wait for its answer
        assert len(driver.endpoints) == 3  # discovery named every node
        async with driver.topic.writer(topic, producer_id="direct", partition_id=0, direct_write=True) as writer:
            return [await writer.write_with_ack(PAYLOAD) for _ in range(count)]


@pytest.mark.parametrize("node_id", [2, 3])
async def test_direct_write_connects_to_the_partitions_node(
    server: LocalTopicServer, nodes: list[FlakyProxy], topic: str, node_id: int
) -> None:
    server.storage.topic(topic).partition(0).node_id = node_id
    results = await _write_through(server, nodes[0], topic, 10)
    assert [r.seq_no for r in results] == list(range(1, 11))
    carried = [p.forwarded_bytes for p in nodes]
    # Round-robin would have put the stream on node 1 or 2 for one of the two cases.
    assert carried[node_id - 1] > 10 * len(PAYLOAD), carried
    assert all(c < len(PAYLOAD) for i, c in enumerate(carried) if i != node_id - 1), carried


async def test_direct_write_to_an_unknown_node_uses_any_endpoint(
    server: LocalTopicServer, nodes: list[FlakyProxy], topic: str
) -> None:
    server.storage.topic(topic).partition(0).node_id = 42  # not among the discovered nodes
    results = await _write_through(server, nodes[0], topic, 3)
    assert [r.seq_no for r in results] == [1, 2, 3]
    assert sum(p.forwarded_bytes for p in nodes) > 3 * len(PAYLOAD)
    assert [m.seq_no for m in server.storage.read(topic, 0)] == [1, 2, 3]


async def test_a_generation_change_between_describe_and_connect_is_re_resolved(
    server: LocalTopicServer, driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    partition = server.storage.topic(topic).partition(0)
    real_describe = driver.topic.describe_partition
    generations_seen: list[int] = []
    move_after_next_describe = False

    async def describe_then_move(*args: Any, **kwargs: Any) -> Any:
        nonlocal move_after_next_describe
        info = await real_describe(*args, **kwargs)
        generations_seen.append(info.location.generation)
        if move_after_next_describe:
            # The partition's tablet restarts elsewhere right after the writer located it: its
            # handshake names a stale generation and the server refuses it with UNAVAILABLE.
            move_after_next_describe = False
            partition.generation += 1
        return info

    monkeypatch.setattr(driver.topic, "describe_partition", describe_then_move)
    async with driver.topic.writer(
        topic, producer_id="moving", partition_id=0, direct_write=True, retry=_QUICK
    ) as writer:
        assert await writer.write_with_ack(b"before") == yta.Written(0, 0, 1)
        move_after_next_describe = True
        assert server.faults.drop_write_streams() == 1
        assert await writer.write_with_ack(b"after") == yta.Written(0, 1, 2)
        assert writer.reconnects == 2  # the dropped stream, then the refused handshake
    # Located at 1, re-located after the drop (1, then moved to 2), refused, re-located at 2.
    assert generations_seen[:3] == [1, 1, 2]
    assert [(m.seq_no, m.data) for m in server.storage.read(topic, 0)] == [(1, b"before"), (2, b"after")]


async def test_a_refused_handshake_without_a_generation_change_fails_the_writer(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    async with driver.topic.writer(topic, partition_id=0, direct_write=True, retry=_QUICK) as writer:
        await writer.write_with_ack(b"first")
        server.faults.fail_next("StreamWrite", "BAD_REQUEST")
        server.faults.drop_write_streams()
        with pytest.raises(yta.BadRequestError):
            await writer.write_with_ack(b"refused for good")
        with pytest.raises(yta.BadRequestError):
            await writer.close()
