"""Transactional reading: offsets move only with the commit; a failed transaction re-reads."""

from __future__ import annotations

import pytest

from ydb_topic_async import (
    AbortedError,
    CommitNotAllowedError,
    Driver,
    PartitionSessionClosedError,
    TopicSelector,
    TransactionEndedError,
)
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import fill, stored, stored_data

pytestmark = pytest.mark.timeout(60)


async def test_offsets_advance_only_when_the_transaction_commits(
    driver: Driver, server: LocalTopicServer, source: str
) -> None:
    await fill(driver, source, [b"m%d" % i for i in range(5)])
    async with driver.topic.reader(source, consumer="consumer") as reader:
        async with driver.query.transaction() as tx:
            batch = await reader.receive_batch_with_tx(tx, max_messages=3, timeout=5)
            assert [m.offset for m in batch] == [0, 1, 2]
            assert tx.tx_id is not None
            assert server.storage.committed_offsets(source, "consumer") == {0: 0}
        assert server.storage.committed_offsets(source, "consumer") == {0: 3}
        assert batch.partition_session.committed_offset == 3
        # Two batches in one transaction commit together.
        async with driver.query.transaction() as tx:
            first = await reader.receive_batch_with_tx(tx, max_messages=1, timeout=5)
            second = await reader.receive_batch_with_tx(tx, max_messages=1, timeout=5)
            assert (first[0].offset, second[0].offset) == (3, 4)
        assert server.storage.committed_offsets(source, "consumer") == {0: 5}
    # close() waited for nothing: the transaction's commit is the acknowledgement.
    assert server.storage.committed_offsets(source, "consumer") == {0: 5}


async def test_a_rolled_back_read_is_delivered_again(driver: Driver, server: LocalTopicServer, source: str) -> None:
    await fill(driver, source, [b"m%d" % i for i in range(4)])
    async with driver.topic.reader(source, consumer="consumer") as reader:
        tx = driver.query.transaction()
        batch = await reader.receive_batch_with_tx(tx, timeout=5)
        assert [m.data for m in batch] == [b"m0", b"m1", b"m2", b"m3"]
        await tx.rollback()
        assert server.storage.committed_offsets(source, "consumer") == {0: 0}
        again = await reader.receive_batch_with_tx(tx2 := driver.query.transaction(), timeout=5)
        assert [m.offset for m in again] == [0, 1, 2, 3]
        await tx2.commit()
    assert server.storage.committed_offsets(source, "consumer") == {0: 4}


async def test_a_failed_commit_is_read_again_and_nothing_is_lost(
    driver: Driver, server: LocalTopicServer, source: str, target: str
) -> None:
    await fill(driver, source, [b"m%d" % i for i in range(3)])
    async with driver.topic.reader(source, consumer="consumer") as reader:
        tx = driver.query.transaction()
        batch = await reader.receive_batch_with_tx(tx, timeout=5)
        await driver.topic.tx_writer(tx, target).write([m.data for m in batch])
        server.faults.fail_next("CommitTransaction", "ABORTED")
        with pytest.raises(AbortedError):
            await tx.commit()
        assert server.storage.committed_offsets(source, "consumer") == {0: 0}
        assert stored(server, target) == []
        async with driver.query.transaction() as tx2:
            again = await reader.receive_batch_with_tx(tx2, timeout=5)
            await driver.topic.tx_writer(tx2, target).write([m.data for m in again])
    assert stored_data(server, target) == [b"m0", b"m1", b"m2"]
    assert server.storage.committed_offsets(source, "consumer") == {0: 3}


async def test_a_conflicting_offset_update_aborts(driver: Driver, server: LocalTopicServer, source: str) -> None:
    await fill(driver, source, [b"m%d" % i for i in range(6)])
    async with driver.topic.reader(source, consumer="consumer") as reader:
        tx = driver.query.transaction()
        batch = await reader.receive_batch_with_tx(tx, max_messages=3, timeout=5)
        assert batch.commit_range == (0, 3)
        # The consumer moves on meanwhile: the transaction's offsets no longer fit. The commit names
        # the read session, which goes on (without it YDB ends the session holding the partition,
        # and the reader may see its batch's session closed before the server sees the conflict).
        await driver.topic.commit_offset(source, 0, "consumer", 2, read_session_id=reader.read_session_id)
        with pytest.raises(AbortedError):
            await tx.commit()
        assert server.storage.committed_offsets(source, "consumer") == {0: 2}
        # The reader starts over from the committed offset.
        async with driver.query.transaction() as tx2:
            again = await reader.receive_batch_with_tx(tx2, timeout=5)
            assert again[0].offset == 2
    assert server.storage.committed_offsets(source, "consumer") == {0: 6}


async def test_a_stale_partition_session_fails_the_commit(
    driver: Driver, server: LocalTopicServer, source: str
) -> None:
    await fill(driver, source, [b"m%d" % i for i in range(2)])
    async with driver.topic.reader(source, consumer="consumer") as reader:
        tx = driver.query.transaction()
        await reader.receive_batch_with_tx(tx, timeout=5)
        server.faults.drop_read_streams()  # the reader reconnects: its partition session ends
        again = await reader.receive_batch(timeout=5)
        assert [m.offset for m in again] == [0, 1]
        with pytest.raises(PartitionSessionClosedError):
            await tx.commit()
        assert server.storage.committed_offsets(source, "consumer") == {0: 0}
        reader.commit(again)


async def test_session_death_aborts_and_the_batch_is_read_again(
    driver: Driver, server: LocalTopicServer, source: str, target: str
) -> None:
    await fill(driver, source, [b"m%d" % i for i in range(2)])
    async with driver.topic.reader(source, consumer="consumer") as reader:
        tx = driver.query.transaction()
        batch = await reader.receive_batch_with_tx(tx, timeout=5)
        await driver.topic.tx_writer(tx, target).write_with_ack([m.data for m in batch])
        assert tx.session_id is not None
        server.faults.kill_query_session(tx.session_id)
        with pytest.raises(Exception, match="BAD_SESSION"):
            await tx.commit()
        assert stored(server, target) == []
        assert server.storage.committed_offsets(source, "consumer") == {0: 0}
        again = await reader.receive_batch(timeout=5)
        assert [m.offset for m in again] == [0, 1]


async def test_receive_with_an_ended_transaction_or_without_consumer_raises(
    driver: Driver, source: str
) -> None:
    await fill(driver, source, [b"m%d" % i for i in range(1)])
    tx = driver.query.transaction()
    await tx.begin()
    await tx.commit()
    async with driver.topic.reader(source, consumer="consumer") as reader:
        with pytest.raises(TransactionEndedError):
            await reader.receive_batch_with_tx(tx, timeout=5)
        # Nothing was taken: the message is still there.
        assert (await reader.receive_batch(timeout=5))[0].offset == 0
    selector = TopicSelector(source, partitions=[0], start_offsets={0: 0})
    async with driver.topic.reader(selector, consumer=None) as plain:
        with pytest.raises(CommitNotAllowedError):
            await plain.receive_batch_with_tx(driver.query.transaction(), timeout=5)


async def test_reading_right_after_a_rollback_gets_the_same_offsets_again(
    driver: Driver, server: LocalTopicServer, source: str
) -> None:
    await fill(driver, source, [b"m%d" % i for i in range(4)])
    async with driver.topic.reader(source, consumer="consumer") as reader:
        tx = driver.query.transaction()
        tx2 = await driver.query.transaction().begin()  # so that nothing waits between the two reads
        first = await reader.receive_batch_with_tx(tx, max_messages=2, timeout=5)
        assert [m.offset for m in first] == [0, 1]
        await tx.rollback()
        # At once: offsets 2 and 3 of the replaced stream must not be handed out any more.
        offsets: list[int] = []
        while len(offsets) < 4:
            batch = await reader.receive_batch_with_tx(tx2, timeout=5)
            offsets.extend(m.offset for m in batch)
        assert offsets == [0, 1, 2, 3]
        await tx2.commit()
    assert server.storage.committed_offsets(source, "consumer") == {0: 4}


async def test_several_batches_per_partition_of_two_partitions_in_one_transaction(
    driver: Driver, server: LocalTopicServer, pair: str, target: str
) -> None:
    for partition in (0, 1):
        async with driver.topic.writer(pair, partition_id=partition) as writer:
            for n in range(3):
                await writer.write_with_ack(f"p{partition}-{n}".encode())
    async with driver.topic.reader(pair, consumer="consumer") as reader, driver.query.transaction() as tx:
        seen: dict[int, list[int]] = {0: [], 1: []}
        batches = 0
        while sum(map(len, seen.values())) < 6:
            batch = await reader.receive_batch_with_tx(tx, max_messages=1, timeout=5)
            seen[batch.partition_id].extend(m.offset for m in batch)
            batches += 1
            await driver.topic.tx_writer(tx, target).write([m.data.upper() for m in batch])
        assert seen == {0: [0, 1, 2], 1: [0, 1, 2]} and batches == 6
        assert server.storage.committed_offsets(pair, "consumer") == {0: 0, 1: 0}
    assert server.storage.committed_offsets(pair, "consumer") == {0: 3, 1: 3}
    assert sorted(stored_data(server, target)) == sorted(
        f"P{p}-{n}".encode() for p in (0, 1) for n in range(3)
    )
