"""The SDK over a multi-node local cluster (``LocalTopicCluster``): discovery, direct write, node loss.

Every node is a real gRPC server; the driver discovers them and spreads its calls and streams
over them. A node that stops takes the streams it served with it and its partitions move to the
live nodes (a new tablet generation), so writers and readers reconnect, and direct writers
locate their partition again. Waits are bounded; the assertions are about what was delivered,
never about how fast (how quickly traffic leaves a dead node is the transport's business).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicCluster, StoredMessage

from .._polling import eventually

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

QUICK = yta.RetryPolicy(
    fast=yta.BackoffSchedule(base=0.01, cap=0.2), slow=yta.BackoffSchedule(base=0.05, cap=0.5)
)
"""Reconnect quickly: the first reconnect after a node dies goes to a live node (pessimization),
but the partition's move may still be under way."""


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


SOURCE_ITEMS = 60
EVENTS_PER_WRITER = 150


def _chunks(items: list[bytes], size: int) -> list[list[bytes]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _stored(cluster: LocalTopicCluster, topic: str) -> list[StoredMessage]:
    return list(cluster.storage.iter_all(topic))


async def _all_within(seconds: float, progress: Callable[[], str], **work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` concurrently; fail naming what had not finished (and ``progress()``) when
    ``seconds`` pass, or with the first failure."""
    tasks = {asyncio.create_task(coroutine, name=name): name for name, coroutine in work.items()}
    try:
        done, pending = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # the first failure, as it is
        if pending:
            raise AssertionError(
                f"not finished within {seconds}s: {', '.join(sorted(tasks[t] for t in pending))} ({progress()})"
            )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _committed(driver: yta.Driver, topic: str, consumer: str) -> int:
    described = await driver.topic.describe_consumer(topic, consumer, timeout=20)
    return sum(p.committed_offset for p in described.partitions)


async def test_a_node_stopped_mid_run_loses_nothing_and_stores_nothing_twice(
    ydb_topic_cluster: LocalTopicCluster,
) -> None:
    """A plain, a keyed and a direct writer, a committing reader and a consume-transform-produce
    loop run over a three-node cluster; a node stops in the middle, taking its streams and query
    sessions with it, and its partitions move. Every acknowledged message is stored exactly once,
    the reader never gets again what it had committed (it resumes from committed offsets), every
    transformed message lands exactly once, and every wait is bounded. The driver keeps its
    default discovery interval (60 s): calls and streams leave the dead node by pessimization
    (``tests/resilience/test_cluster_failover.py`` times that)."""
    cluster = ydb_topic_cluster
    async with yta.Driver(cluster.endpoint, cluster.database) as driver:
        await driver.wait_ready(timeout=10)
        await driver.topic.create_topic("events", min_active_partitions=6, consumers=["c"])
        await driver.topic.create_topic("src", min_active_partitions=2, consumers=["tx"])
        await driver.topic.create_topic("dst", min_active_partitions=2)
        source_items = [b"item %d" % i for i in range(SOURCE_ITEMS)]
        async with driver.topic.writer("src", producer_id="source") as source:
            await source.write(source_items)
        # Node 3 stops (not node 1, which the driver rediscovers through); the direct writer's
        # partition lives there.
        victim = cluster.nodes[2]
        direct_partition = next(p for p in range(6) if cluster.node_of("events", p) is victim)

        sent: dict[str, list[bytes]] = {
            name: [b"%s %d" % (name.encode(), i) for i in range(EVENTS_PER_WRITER)]
            for name in ("plain", "keyed", "direct")
        }
        results: dict[str, list[yta.WriteResult]] = {name: [] for name in sent}
        halfway = asyncio.Event()
        writers_done = asyncio.Event()

        def progressed() -> None:
            if min(len(r) for r in results.values()) >= EVENTS_PER_WRITER // 3:
                halfway.set()

        async def plain() -> None:
            async with driver.topic.writer("events", producer_id="plain") as writer:
                for chunk in _chunks(sent["plain"], 5):
                    results["plain"].extend(await writer.write_with_ack(chunk))
                    progressed()

        async def keyed() -> None:
            async with driver.topic.keyed_writer("events", producer_id="keyed") as writer:
                for i, data in enumerate(sent["keyed"]):
                    results["keyed"].append(await writer.write_with_ack(data, key=f"key-{i % 7}"))
                    progressed()

        async def direct() -> None:
            async with driver.topic.writer(
                "events", producer_id="direct", partition_id=direct_partition, direct_write=True
            ) as writer:
                for chunk in _chunks(sent["direct"], 5):
                    results["direct"].extend(await writer.write_with_ack(chunk))
                    progressed()

        async def writers() -> None:
            async with asyncio.TaskGroup() as group:
                for work in (plain, keyed, direct):
                    group.create_task(work())
            writers_done.set()

        committed_once: set[tuple[int, int]] = set()
        delivered_again: list[tuple[int, int]] = []
        partitions_read: dict[str, set[int]] = {"free": set(), "pinned": set()}
        handed_over = asyncio.Event()

        async def committing_reader(through: yta.Driver, name: str) -> None:
            async with through.topic.reader("events", consumer="c") as reader:
                while not (writers_done.is_set() and len(committed_once) >= len(_stored(cluster, "events"))):
                    try:
                        batch = await reader.receive_batch(timeout=0.5)
                    except yta.OperationTimeoutError:
                        continue
                    offsets = [(m.partition_id, m.offset) for m in batch]
                    partitions_read[name].update(p for p, _ in offsets)
                    delivered_again.extend(o for o in offsets if o in committed_once)
                    try:
                        await reader.commit_with_ack(batch, timeout=20)
                    except yta.PartitionSessionClosedError:
                        continue  # the stream broke first: the batch comes again, uncommitted
                    committed_once.update(offsets)

        transactions = 0

        async def transform() -> None:
            nonlocal transactions
            # No restart loop of its own: retry_tx repeats what did not commit and settles a
            # commit whose answer was lost with the node from the consumer offsets.
            async with driver.topic.reader("src", consumer="tx") as reader:

                async def one_batch(tx: yta.Transaction) -> None:
                    batch = await reader.receive_batch_with_tx(tx, max_messages=4, timeout=20)
                    await driver.topic.tx_writer(tx, "dst").write([m.data.upper() for m in batch])

                while await _committed(driver, "src", "tx") < SOURCE_ITEMS:
                    await driver.query.retry_tx(one_batch)
                    transactions += 1

        async def stop_the_node_then_start_it() -> None:
            await halfway.wait()
            await eventually(lambda: bool(partitions_read["pinned"]), "the pinned reader read")
            await cluster.stop_node(victim.node_id - 1)
            assert cluster.node_of("events", direct_partition) is not victim

            def held_by_the_free_reader() -> bool:
                holders = {key[2]: info for key, info in cluster.reads.read_sessions().items() if key[1] == "c"}
                return len(holders) == 6 and all(info.node_id != victim.node_id for info in holders.values())

            await eventually(held_by_the_free_reader, "the other reader took every partition over", timeout=30)
            handed_over.set()
            await writers_done.wait()
            await cluster.start_node(victim.node_id - 1)  # the pinned reader gets back in, if still reading

        # Two readers of one consumer: one anywhere, one pinned to the node that stops. The
        # partitions of the pinned one go to the other, which must resume them from the
        # committed offsets.
        async with yta.Driver(victim.endpoint, cluster.database, discovery=False) as pinned:
            await _all_within(
                100,
                writers=writers(),
                free_reader=committing_reader(driver, "free"),
                pinned_reader=committing_reader(pinned, "pinned"),
                transform=transform(),
                node=stop_the_node_then_start_it(),
                progress=lambda: (
                    f"acks {[len(r) for r in results.values()]}, committed {len(committed_once)} of"
                    f" {len(_stored(cluster, 'events'))}, transactions {transactions}"
                ),
            )

        moved = (await driver.topic.describe_partition("events", direct_partition, include_location=True)).location
        assert moved is not None and moved.generation == 2 and moved.node_id != victim.node_id

    # Every writer's messages are stored exactly once.
    stored = _stored(cluster, "events")
    for name, messages in sent.items():
        assert all(isinstance(r, yta.Written | yta.Skipped) for r in results[name]), name
        mine = [m.data for m in stored if m.producer_id.split("_")[0] == name]
        assert sorted(mine) == sorted(messages), name
    # A key's messages stay in order (each key keeps to one partition).
    keyed_order: dict[int, list[int]] = {}
    for message in sorted((m for m in stored if m.producer_id.startswith("keyed")), key=lambda m: m.offset):
        index = int(message.data.split()[1])
        keyed_order.setdefault(index % 7, []).append(index)
    assert all(order == sorted(order) for order in keyed_order.values()), keyed_order
    assert [m.data for m in cluster.storage.read("events", direct_partition) if m.producer_id == "direct"] == (
        sent["direct"]
    )
    # The other reader took over the pinned one's partitions and resumed from committed offsets:
    # nothing committed came again.
    assert handed_over.is_set()
    assert delivered_again == []
    assert committed_once == {
        (p.partition_id, offset)
        for p in cluster.storage.topic("events").partitions
        for offset in range(p.start_offset, p.end_offset)
    }
    # Every source item was transformed exactly once.
    assert sorted(m.data for m in _stored(cluster, "dst")) == sorted(item.upper() for item in source_items)
    assert sum(cluster.storage.committed_offsets("src", "tx").values()) == SOURCE_ITEMS
    assert transactions >= SOURCE_ITEMS // 4


async def test_a_producer_taken_over_through_another_node(ydb_topic_cluster: LocalTopicCluster) -> None:
    """Pod A writes through node 2; pod B starts with the same producer id through node 3 while A
    still writes. The partition is the owner's, wherever the sessions run: A fails at once with
    ``ProducerTakenOverError``, each of its messages is either acknowledged (and stored) or failed
    with that error (and not stored), and B goes on after A's acknowledged messages."""
    cluster = ydb_topic_cluster
    node2, node3 = cluster.nodes[1], cluster.nodes[2]
    async with (
        yta.Driver(node2.endpoint, cluster.database, discovery=False) as via_node2,
        yta.Driver(node3.endpoint, cluster.database, discovery=False) as via_node3,
    ):
        await via_node2.topic.create_topic("t", min_active_partitions=3)
        old = via_node2.topic.writer("t", producer_id="pod")
        futures: list[asyncio.Future[yta.WriteResult]] = []
        sent: list[bytes] = []
        new_started = asyncio.Event()

        async def keep_writing() -> None:
            while True:  # until the takeover reaches this writer (bounded by the timeout below)
                data = b"a%d" % len(sent)
                try:
                    futures.append(await old.write_with_ack_future(data))
                except yta.ProducerTakenOverError:
                    return
                sent.append(data)
                if len(sent) == 50:
                    await futures[0]  # some are acknowledged, more are on their way
                    new_started.set()
                await asyncio.sleep(0.001)

        async with asyncio.timeout(60):
            writing = asyncio.create_task(keep_writing())
            await new_started.wait()
            async with via_node3.topic.writer("t", producer_id="pod") as new:
                await writing
                with pytest.raises(yta.ProducerTakenOverError):
                    await old.close(timeout=10)
                await asyncio.wait(futures)
                taken_over = [f for f in futures if f.exception() is not None]
                acked = [sent[i] for i, f in enumerate(futures) if f.exception() is None]
                # Messages in flight when the takeover came fail with it; there may be none, when
                # every message A sent was acknowledged before its next write found it taken over.
                assert all(isinstance(f.exception(), yta.ProducerTakenOverError) for f in taken_over)
                assert acked and all(isinstance(f.result(), yta.Written) for f in futures if f.exception() is None)
                b = await new.write_with_ack([b"b1", b"b2"])
                assert [r.seq_no for r in b] == [len(acked) + 1, len(acked) + 2]
    partition = b[0].partition_id
    assert [m.data for m in cluster.storage.read("t", partition)] == [*acked, b"b1", b"b2"]


async def test_logins_go_on_through_the_other_nodes_when_the_given_endpoint_stops() -> None:
    """A user/password driver renews its token through any node: once the endpoint it was given
    stops, the renewals go to the nodes discovery found, and calls go on after the token the
    stopped node issued expired."""
    async with LocalTopicCluster(3, users={"alice": "secret"}, token_ttl=2) as cluster:
        credentials = yta.StaticCredentials("alice", "secret", refresh_interval=1)
        async with yta.Driver(cluster.endpoint, cluster.database, credentials, retry=QUICK) as driver:
            await driver.wait_ready(timeout=10)
            assert len(driver.endpoints) == 3
            await driver.topic.create_topic("logins")
            await cluster.stop_node(0)
            await asyncio.sleep(2.5)  # every token issued before the stop has expired
            for _ in range(3):
                assert (await driver.topic.describe_topic("logins")).path.endswith("logins")
                await asyncio.sleep(1)
