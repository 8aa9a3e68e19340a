"""Our transactional writer and reader inside transactions of the official ``ydb`` SDK."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest
import ydb

from ydb_topic_async import Driver, InvalidArgumentError, TransactionEndedError, TransportError
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored_data

pytestmark = pytest.mark.timeout(60)


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
            assert stored_data(server, target) == []
            await tx.commit()

    await official_pool.retry_operation_async(publish)
    assert stored_data(server, target) == [b"one", b"two"]
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
    assert stored_data(server, target) == []
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
    assert stored_data(server, target) == []
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
    assert stored_data(server, target) == [b"A", b"B", b"C"]


async def test_official_transactions_are_freed_after_use(
    driver: Driver, server: LocalTopicServer, official_pool: Any, target: str
) -> None:
    alive: list[weakref.ref[Any]] = []

    async def publish(session: Any) -> None:
        async with session.transaction() as tx:
            alive.append(weakref.ref(tx))
            await driver.topic.tx_writer(tx, target).write(b"x")
            await tx.commit()

    for _ in range(20):
        await official_pool.retry_operation_async(publish)
    gc.collect()
    assert len(stored_data(server, target)) == 20
    assert [ref for ref in alive if ref() is not None] == []


async def test_a_failed_hook_rolls_the_official_transaction_back_on_the_server(
    driver: Driver, server: LocalTopicServer, official_pool: Any, target: str
) -> None:
    session = await official_pool.acquire()
    try:
        tx = session.transaction()
        writer = driver.topic.tx_writer(tx, target, producer_id="p")
        await writer.write(b"first")
        assert tx.tx_id in server.query.sessions[session.session_id].transactions
        server.faults.drop_write_streams()
        await writer.write(b"second")
        with pytest.raises(TransportError):
            await tx.commit()
        # Nothing is left open on the pooled session, holding "first".
        assert server.query.sessions[session.session_id].transactions == {}
    finally:
        await official_pool.release(session)
    assert stored_data(server, target) == []


async def test_joining_an_official_transaction_that_is_committing_is_refused(
    driver: Driver, server: LocalTopicServer, official_pool: Any, target: str
) -> None:
    session = await official_pool.acquire()
    try:
        tx = session.transaction()
        first = driver.topic.tx_writer(tx, target)
        await first.write(b"joined before the commit")
        # Hold the commit inside its before-commit callbacks (registered through the same
        # registry the adapter uses, after the adapter's own).
        in_commit, release = asyncio.Event(), asyncio.Event()

        async def hold(*_: Any) -> None:
            in_commit.set()
            await release.wait()

        tx._add_callback("BEFORE_COMMIT", hold, None)
        committing = asyncio.create_task(tx.commit())
        await asyncio.wait_for(in_commit.wait(), 10)
        with pytest.raises(TransactionEndedError, match="nothing more can join it"):
            driver.topic.tx_writer(tx, target)
        release.set()
        await committing
    finally:
        await official_pool.release(session)
    assert server.query.committed_transactions == 1
    assert stored_data(server, target) == [b"joined before the commit"]


async def test_an_incompatible_ydb_transaction_is_refused_when_bound(
    driver: Driver, official_pool: Any, target: str
) -> None:
    session = await official_pool.acquire()
    try:
        tx = session.transaction()
        del tx._tx_state  # the official SDK's private field the adapter relies on: as a release without it
        with pytest.raises(InvalidArgumentError, match="unsupported ydb package version"):
            driver.topic.tx_writer(tx, target)
    finally:
        await official_pool.release(session)
