"""Keyed writes inside a transaction: every partition's messages are published at the commit.

The commit waits for every partition writer's acknowledgements, as ``TxWriter``'s before-commit
hook does; a split partition fails the transaction (YDB aborts a transaction whose partition
split: the local server's ``PendingWrites.check``, after ydb/core/persqueue's partition
transaction checks), so the keyed writer does not move messages inside one.
"""

from __future__ import annotations

import asyncio

import pytest

from ydb_topic_async import (
    Driver,
    InvalidArgumentError,
    KeyedTxWriter,
    TransactionEndedError,
    TransactionState,
    WrittenInTx,
)
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import proxy_to

pytestmark = pytest.mark.timeout(60)


def stored(server: LocalTopicServer, topic: str) -> dict[int, list[bytes]]:
    t = server.storage.topic(topic)
    return {p.partition_id: [m.data for m in p.messages] for p in t.partitions}


async def test_keyed_writes_are_published_at_the_commit_in_every_partition(
    driver: Driver, server: LocalTopicServer
) -> None:
    await driver.topic.create_topic("orders", min_active_partitions=3)
    keys = [f"customer-{i}" for i in range(12)]
    async with driver.query.transaction() as tx:
        writer = driver.topic.keyed_tx_writer(tx, "orders", producer_id="shop")
        assert isinstance(writer, KeyedTxWriter)
        for key in keys:
            await writer.write(f"{key}:1".encode(), key=key)
        result = await writer.write_with_ack(b"customer-0:2", key="customer-0")
        assert isinstance(result, WrittenInTx)
        assert len(writer.partition_writers) == 3
        # Nothing is visible before the commit.
        assert stored(server, "orders") == {0: [], 1: [], 2: []}
    assert tx.state is TransactionState.COMMITTED
    placed = stored(server, "orders")
    assert sorted(d for messages in placed.values() for d in messages) == sorted(
        [f"{k}:1".encode() for k in keys] + [b"customer-0:2"]
    )
    for pid, messages in placed.items():
        assert {m.producer_id for m in server.storage.read("orders", pid)} == {f"shop_{pid}"}
        keyed = [d.split(b":")[0] for d in messages]
        assert all(writer.partition_for(k.decode()) == pid for k in keyed)
    first = placed[writer.partition_for("customer-0")]
    assert first.index(b"customer-0:1") < first.index(b"customer-0:2")  # one key's order holds
    assert writer.closed and not writer.partition_writers
    with pytest.raises(TransactionEndedError, match="committed"):
        await writer.write(b"late", key="k")


async def test_a_rollback_publishes_nothing(driver: Driver, server: LocalTopicServer) -> None:
    await driver.topic.create_topic("rolled", min_active_partitions=2)
    tx = driver.query.transaction()
    writer = driver.topic.keyed_tx_writer(tx, "rolled", producer_id="p")
    await writer.write([b"a", b"b"], key="one")
    await writer.write(b"c", key="two")
    await writer.flush(timeout=10)
    await tx.rollback()
    assert stored(server, "rolled") == {0: [], 1: []}
    with pytest.raises(TransactionEndedError, match="rolled back"):
        await writer.write(b"d", key="one")


async def test_the_first_write_to_each_partition_returns_once_acknowledged(
    driver: Driver, server: LocalTopicServer
) -> None:
    await driver.topic.create_topic("joined", min_active_partitions=2)
    tx = driver.query.transaction()
    writer = driver.topic.keyed_tx_writer(tx, "joined", producer_id="p")
    await writer.open()
    keys = {writer.partition_for(f"k{i}"): f"k{i}" for i in range(20)}
    for pid in (0, 1):
        await writer.write(b"first", key=keys[pid])
        assert writer.buffered_messages == 0  # acknowledged: the partition is part of the transaction
    assert tx.session_id is not None and tx.tx_id is not None
    held = server.query.sessions[tx.session_id].transactions[tx.tx_id].writes.messages
    assert sorted(p.partition_id for p, _ in held) == [0, 1]
    await tx.rollback()


async def test_a_partition_split_during_the_transaction_fails_the_commit(
    driver: Driver, server: LocalTopicServer
) -> None:
    from ydb_topic_async import AutoPartitioningSettings, AutoPartitioningStrategy

    await driver.topic.create_topic(
        "splitting", auto_partitioning=AutoPartitioningSettings(AutoPartitioningStrategy.SCALE_UP),
        max_active_partitions=4,
    )
    tx = driver.query.transaction()
    writer = driver.topic.keyed_tx_writer(tx, "splitting", producer_id="p")
    await writer.write(b"before the split", key="k")
    server.storage.split_partition("splitting", 0)
    server.faults.drop_write_streams()  # the partition writer reconnects: its partition is inactive now
    with pytest.raises(TransactionEndedError, match="failed inside the transaction"):
        await writer.write_with_ack(b"after the split", key="k")
    with pytest.raises(TransactionEndedError):
        await tx.commit()
    assert tx.state is TransactionState.FAILED
    assert [m.data for m in server.storage.iter_all("splitting")] == []


async def test_mistakes_are_refused_at_the_call(driver: Driver) -> None:
    await driver.topic.create_topic("strict", min_active_partitions=2)
    with pytest.raises(InvalidArgumentError, match="tx must be a transaction"):
        driver.topic.keyed_tx_writer(object(), "strict")
    async with driver.query.transaction() as tx:
        with pytest.raises(InvalidArgumentError, match="partition_id"):
            driver.topic.keyed_tx_writer(tx, "strict", partition_id=0)  # type: ignore[call-arg]
        writer = driver.topic.keyed_tx_writer(tx, "strict", producer_id="p")
        with pytest.raises(InvalidArgumentError, match="key must be str or bytes"):
            await writer.write(b"x", key=17)  # type: ignore[arg-type]
        await writer.write(b"fine", key="k")
    assert tx.state is TransactionState.COMMITTED


async def test_a_write_racing_a_partitions_first_write_also_waits_for_its_acknowledgement(
    server: LocalTopicServer,
) -> None:
    """Two writes to a partition new to the transaction, the second before the first was
    acknowledged: neither returns before the partition is part of the transaction, so a query
    run after either cannot race the attach."""
    async with proxy_to(server) as proxy, Driver(proxy.endpoint, server.database, discovery=False) as driver:
        await driver.topic.create_topic("racing", min_active_partitions=2)
        tx = driver.query.transaction()
        writer = driver.topic.keyed_tx_writer(tx, "racing", producer_id="p")
        await writer.open()
        keys = {writer.partition_for(f"k{i}"): f"k{i}" for i in range(20)}
        await writer.write(b"first", key=keys[0])  # the transaction has begun
        proxy.stall()
        racing = [asyncio.ensure_future(writer.write(data, key=keys[1])) for data in (b"a", b"b")]
        await asyncio.sleep(0.5)
        assert [t.done() for t in racing] == [False, False]
        proxy.resume()
        await asyncio.wait_for(asyncio.gather(*racing), 10)
        assert tx.session_id is not None and tx.tx_id is not None
        held = server.query.sessions[tx.session_id].transactions[tx.tx_id].writes.messages
        assert 1 in {p.partition_id for p, _ in held}
        await tx.rollback()
