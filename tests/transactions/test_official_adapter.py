"""Our transactional writer and reader inside transactions of the official ``ydb`` SDK."""

from __future__ import annotations

from typing import Any

import pytest
import ydb

from ydb_topic_async import Driver, TransactionEndedError, TransportError
from ydb_topic_async.testing import LocalTopicServer

pytestmark = pytest.mark.timeout(60)


def data(server: LocalTopicServer, topic: str) -> list[bytes]:
    return [m.data for m in server.storage.read(topic, 0)]


async def test_tx_writer_in_an_official_transaction(
    driver: Driver, server: LocalTopicServer, official_pool: Any, target: str
) -> None:
    writers: list[Any] = []

    async def publish(session: Any) -> None:
        async with session.transaction() as tx:
            writer = driver.topic.tx_writer(tx, target)
            writers.append(writer)
            await writer.write([b"one", b"two"])  # begins the official transaction
            assert tx.tx_id in server.query.sessions[session.session_id].transactions
            assert data(server, target) == []
            await tx.commit()

    await official_pool.retry_operation_async(publish)
    assert data(server, target) == [b"one", b"two"]
    with pytest.raises(TransactionEndedError):
        await writers[0].write(b"three")


async def test_official_rollback_discards_our_writes(
    driver: Driver, server: LocalTopicServer, official_pool: Any, target: str
) -> None:
    async def abandon(session: Any) -> None:
        tx = session.transaction()
        writer = driver.topic.tx_writer(tx, target)
        await writer.write(b"discarded")
        await writer.flush()
        await tx.rollback()
        with pytest.raises(TransactionEndedError):
            await writer.write(b"more")

    await official_pool.retry_operation_async(abandon)
    assert data(server, target) == []
    assert server.query.committed_transactions == 0


async def test_a_failed_write_fails_the_official_commit(
    driver: Driver, server: LocalTopicServer, official_pool: Any, target: str
) -> None:
    session = await official_pool.acquire()
    try:
        tx = session.transaction()
        writer = driver.topic.tx_writer(tx, target)
        await writer.write_with_ack(b"first")
        server.faults.drop_write_streams()
        await writer.write(b"second")
        with pytest.raises(TransportError):  # no retries inside a transaction
            await tx.commit()
        # The transaction can never commit "first" alone: a repeated commit is refused too.
        with pytest.raises(ydb.issues.ClientInternalError):
            await tx.commit()
    finally:
        await official_pool.release(session)
    assert data(server, target) == []
    assert server.query.committed_transactions == 0


async def test_receive_batch_with_an_official_transaction(
    driver: Driver, server: LocalTopicServer, official_pool: Any, source: str, target: str
) -> None:
    async with driver.topic.writer(source) as writer:
        await writer.write([b"a", b"b", b"c"])
    async with driver.topic.reader(source, consumer="consumer") as reader:
        # A rolled-back official transaction: offsets stay, the batch comes again.
        session = await official_pool.acquire()
        try:
            tx = session.transaction()
            batch = await reader.receive_batch_with_tx(tx, timeout=5)
            assert [m.data for m in batch] == [b"a", b"b", b"c"]
            await tx.rollback()
            assert server.storage.committed_offsets(source, "consumer") == {0: 0}

            tx = session.transaction()
            batch = await reader.receive_batch_with_tx(tx, timeout=5)
            assert [m.offset for m in batch] == [0, 1, 2]
            await driver.topic.tx_writer(tx, target).write([m.data.upper() for m in batch])
            await tx.commit()
        finally:
            await official_pool.release(session)
    assert server.storage.committed_offsets(source, "consumer") == {0: 3}
    assert data(server, target) == [b"A", b"B", b"C"]
