"""The transactional writer: visibility on commit, nothing on rollback, failures fail the commit."""

from __future__ import annotations

import asyncio

import pytest

from ydb_topic_async import (
    Codec,
    ConnectionState,
    Driver,
    InvalidArgumentError,
    RetryPolicy,
    TopicWriter,
    TransactionEndedError,
    TransactionState,
    TransportError,
    WrittenInTx,
)
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import proxy_to

from .._helpers import proxied_driver, stored, stored_data, stored_fields

pytestmark = pytest.mark.timeout(60)


async def test_commit_makes_writes_visible_at_consecutive_offsets(
    driver: Driver, server: LocalTopicServer, target: str
) -> None:
    async with driver.topic.writer(target) as plain:
        await plain.write(b"before")
    async with driver.query.transaction() as tx:
        writer = driver.topic.tx_writer(tx, target)
        await writer.write([b"a", b"b"])
        result = await writer.write_with_ack(b"c")
        assert isinstance(result, WrittenInTx)
        # Interleaved plain writes land first: transactional ones appear only at the commit.
        async with driver.topic.writer(target) as plain:
            await plain.write(b"during")
        assert stored_fields(server, target, "offset", "data") == [(0, b"before"), (1, b"during")]
        assert tx.tx_id is not None  # the first write began the transaction
    assert tx.state is TransactionState.COMMITTED
    assert stored_fields(server, target, "offset", "data") == [
        (0, b"before"), (1, b"during"), (2, b"a"), (3, b"b"), (4, b"c")
    ]
    assert stored(server, target)[2].producer_id == ""  # no producer id by default
    assert writer.closed


async def test_rollback_leaves_no_trace(driver: Driver, server: LocalTopicServer, target: str) -> None:
    tx = driver.query.transaction()
    writer = driver.topic.tx_writer(tx, target)
    await writer.write([b"x", b"y"])
    await writer.flush()
    await tx.rollback()
    assert stored(server, target) == []
    assert server.query.committed_transactions == 0
    async with driver.topic.writer(target) as plain:
        await plain.write(b"after")
    assert stored_fields(server, target, "offset", "data") == [(0, b"after")]


async def test_an_exception_in_the_block_discards_the_writes(
    driver: Driver, server: LocalTopicServer, target: str
) -> None:
    with pytest.raises(RuntimeError):
        async with driver.query.transaction() as tx:
            writer = driver.topic.tx_writer(tx, target)
            await writer.write(b"lost on purpose")
            raise RuntimeError("abandon")
    assert tx.state is TransactionState.ROLLED_BACK
    assert stored(server, target) == []


async def test_an_error_in_a_hook_fails_the_commit(driver: Driver, server: LocalTopicServer, target: str) -> None:
    tx = driver.query.transaction()
    writer = driver.topic.tx_writer(tx, target)
    await writer.write(b"never published")

    async def veto(t: object) -> None:
        raise PermissionError("vetoed")

    tx.before_commit(veto)
    with pytest.raises(PermissionError, match="vetoed"):
        await tx.commit()
    assert tx.state is TransactionState.FAILED
    assert stored(server, target) == []
    with pytest.raises(TransactionEndedError):
        await writer.write(b"more")


async def test_a_broken_write_stream_fails_the_commit(driver: Driver, server: LocalTopicServer, target: str) -> None:
    tx = driver.query.transaction()
    writer = driver.topic.tx_writer(tx, target)
    await writer.write_with_ack(b"first")
    server.faults.drop_write_streams()
    await writer.write(b"second")
    # No retries inside a transaction: the stream error fails the commit.
    with pytest.raises(TransportError):
        await tx.commit()
    assert tx.state is TransactionState.FAILED
    assert stored(server, target) == []
    assert server.query.committed_transactions == 0


async def test_a_write_after_the_transaction_ended_raises(driver: Driver, target: str) -> None:
    async with driver.query.transaction() as tx:
        committed = driver.topic.tx_writer(tx, target)
        await committed.write(b"one")
    with pytest.raises(TransactionEndedError, match="committed"):
        await committed.write(b"two")
    with pytest.raises(TransactionEndedError):
        await committed.flush()
    with pytest.raises(TransactionEndedError):
        driver.topic.tx_writer(tx, target)

    tx2 = driver.query.transaction()
    rolled = driver.topic.tx_writer(tx2, target)
    await rolled.write(b"one")
    await tx2.rollback()
    with pytest.raises(TransactionEndedError, match="rolled back"):
        await rolled.write(b"two")


async def test_writes_during_the_commit_are_refused(driver: Driver, server: LocalTopicServer, target: str) -> None:
    tx = driver.query.transaction()
    writer = driver.topic.tx_writer(tx, target)
    await writer.write(b"in time")
    refused: list[BaseException] = []

    async def late_write(t: object) -> None:
        try:
            await writer.write(b"too late")
        except TransactionEndedError as exc:
            refused.append(exc)

    tx.before_commit(late_write)
    await tx.commit()
    assert len(refused) == 1 and "committing" in str(refused[0])
    assert stored_fields(server, target, "offset", "data") == [(0, b"in time")]


async def test_several_writers_and_topics_in_one_transaction(
    driver: Driver, server: LocalTopicServer, source: str, target: str
) -> None:
    async with driver.query.transaction() as tx:
        await driver.topic.tx_writer(tx, source).write([b"s1", b"s2"])
        await driver.topic.tx_writer(tx, target).write(b"t1")
        await driver.topic.tx_writer(tx, target).write(b"t2")
    assert stored_data(server, source) == [b"s1", b"s2"]
    assert sorted(stored_data(server, target)) == [b"t1", b"t2"]


async def test_tx_writer_rejects_a_foreign_object(driver: Driver, target: str) -> None:
    with pytest.raises(InvalidArgumentError, match="tx must be a transaction"):
        driver.topic.tx_writer(object(), target)


@pytest.mark.parametrize("waiting_for", ["the transaction", "buffer space"])
async def test_a_write_under_way_joins_the_commit(server: LocalTopicServer, waiting_for: str) -> None:
    """A stalled network holds the write ``c`` back: as the first write of the transaction, it
    waits for the transaction to begin; after ``b``, which fills the buffer, for ``b``'s
    acknowledgement. A commit called after that write began waits for it and publishes it too."""
    async with proxy_to(server) as proxy, proxied_driver(server, proxy) as driver:
        await driver.topic.create_topic("target")
        tx = driver.query.transaction()
        writer = driver.topic.tx_writer(tx, "target", max_buffer_messages=1)
        before = [b"a", b"b"] if waiting_for == "buffer space" else []
        if before:
            await writer.write(b"a")
        proxy.stall()
        if before:
            await writer.write(b"b")  # fills the buffer until acknowledged
        late = asyncio.create_task(writer.write(b"c"))
        commit = asyncio.create_task(tx.commit())  # runs after the write began (tasks start in order)
        await asyncio.sleep(0.05)
        assert not late.done() and not commit.done()
        proxy.resume()
        await asyncio.wait_for(asyncio.gather(late, commit), 10)
        assert tx.state is TransactionState.COMMITTED
        assert stored_data(server, "target") == [*before, b"c"]


async def test_the_first_write_returns_once_acknowledged(
    driver: Driver, server: LocalTopicServer, target: str
) -> None:
    tx = driver.query.transaction()
    writer = driver.topic.tx_writer(tx, target)
    await writer.write(b"first")
    assert writer.buffered_messages == 0
    assert tx.session_id is not None and tx.tx_id is not None
    held = server.query.sessions[tx.session_id].transactions[tx.tx_id].writes.messages
    assert [m.data for _, m in held] == [b"first"]
    await tx.rollback()


async def test_retries_need_a_producer_id(driver: Driver, target: str) -> None:
    tx = driver.query.transaction()
    with pytest.raises(InvalidArgumentError, match="producer id"):
        driver.topic.tx_writer(tx, target, retry=RetryPolicy())
    with pytest.raises(InvalidArgumentError, match="producer id"):
        driver.topic.tx_writer(tx, target, retry=None)
    driver.topic.tx_writer(tx, target, retry=RetryPolicy.no_retries())


async def test_a_retried_write_after_a_lost_ack_is_committed_once(
    driver: Driver, server: LocalTopicServer, target: str
) -> None:
    tx = driver.query.transaction()
    writer = driver.topic.tx_writer(tx, target, producer_id="etl", retry=RetryPolicy(max_attempts=5))
    await writer.write(b"one")
    server.faults.drop_write_stream_after(2)  # held in the transaction, then the stream breaks
    await writer.write([b"two", b"three"])
    await tx.commit()
    assert server.faults.dropped_streams == 1
    assert stored_data(server, target) == [b"one", b"two", b"three"]


async def test_writes_to_two_partitions_in_one_transaction(
    driver: Driver, server: LocalTopicServer, pair: str
) -> None:
    async with driver.query.transaction() as tx:
        for partition in (0, 1):
            writer = driver.topic.tx_writer(tx, pair, partition_id=partition)
            for n in range(3):
                await writer.write([f"p{partition}-{n}a".encode(), f"p{partition}-{n}b".encode()])
        assert stored(server, pair, 0) == [] and stored(server, pair, 1) == []
    for partition in (0, 1):
        got = stored_fields(server, pair, "offset", "data", partition=partition)
        expected = [f"p{partition}-{n}{s}".encode() for n in range(3) for s in "ab"]
        assert got == list(enumerate(expected))


async def test_tx_writer_has_the_members_of_a_topic_writer(
    driver: Driver, server: LocalTopicServer, target: str
) -> None:
    tx = driver.query.transaction()
    writer = driver.topic.tx_writer(tx, target)
    states = [writer.connection_state]
    await writer.open()  # begins the transaction and connects
    info = await writer.wait_init(timeout=10)
    assert writer.init_info == info and writer.session_id == info.session_id
    states.append(writer.connection_state)
    first = await writer.write_with_ack_future(b"first")
    assert first.done() and isinstance(first.result(), WrittenInTx)  # the first write waits for its ack
    more = await writer.write_with_ack_future([b"a", b"bb"])
    assert isinstance(more, list) and len(more) == 2
    await asyncio.wait(more)
    assert (writer.buffered_messages, writer.buffered_bytes) == (0, 0)
    assert writer.last_write_statistics is not None
    assert (writer.reconnects, writer.last_error, writer.failure) == (0, None, None)
    assert (writer.producer_id, writer.message_group_id, writer.codec, writer.selected_codec) == (
        "", None, Codec.RAW, Codec.RAW
    )
    await tx.commit()
    states.append(writer.connection_state)
    assert states == [ConnectionState.CONNECTING, ConnectionState.CONNECTED, ConnectionState.CLOSED]
    assert writer.session_id == info.session_id  # still shown after the transaction ended
    assert stored_fields(server, target, "offset", "data") == [(0, b"first"), (1, b"a"), (2, b"bb")]


async def test_a_tx_writer_is_a_topic_writer_writing_into_its_transaction(
    driver: Driver, server: LocalTopicServer, target: str
) -> None:
    """The transactional writer is a ``TopicWriter`` made with its transaction: code written for a
    topic writer uses it as one, and every request it sends is held in the transaction, which
    its first write began, until the commit."""

    async def produce(writer: TopicWriter) -> None:
        await writer.write([b"a", b"b"])
        await writer.write(b"c")
        await writer.flush(timeout=10)

    tx = driver.query.transaction()
    writer = driver.topic.tx_writer(tx, target, codec="auto")
    assert isinstance(writer, TopicWriter)
    assert (tx.session_id, tx.tx_id) == (None, None)  # made, not begun: the first write begins it
    await produce(writer)
    assert tx.session_id is not None and tx.tx_id is not None
    held = server.query.sessions[tx.session_id].transactions[tx.tx_id].writes.messages
    assert [m.data for _, m in held] == [b"a", b"b", b"c"]
    assert stored(server, target) == []
    await tx.commit()
    assert stored_data(server, target) == [b"a", b"b", b"c"]
    assert writer.closed and writer.connection_state is ConnectionState.CLOSED
