"""The keyed writer's partition writers: closed when idle, shown one by one, summed up.

Idle partition writers are closed after ``idle_timeout``, as the C++ SDK's producer closes its
sub-sessions after ``SubSessionIdleTimeout`` (30 s by default; ydb-platform/ydb:
ydb/public/sdk/cpp/src/client/topic/impl/producer.cpp), and the next write to the partition opens
a new one that goes on with the producer id's numbers.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from ydb_topic_async import (
    ConnectionState,
    Driver,
    InitInfo,
    InvalidArgumentError,
    KeyedTxWriter,
    KeyedWriter,
    OperationTimeoutError,
    PartitionWriterStatus,
    TopicWriter,
    TxWriter,
    Written,
)
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import proxy_to

from .._polling import eventually

pytestmark = pytest.mark.timeout(60)


def state_of(writer: KeyedWriter) -> ConnectionState:
    """The writer's state now (a function, so that a type checker does not narrow it between reads)."""
    return writer.connection_state


def keys_by_partition(writer: object, partitions: int) -> dict[int, str]:
    """One key per partition, as the writer places them."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < partitions:
        key = f"key-{n}"
        found.setdefault(writer.partition_for(key), key)  # type: ignore[attr-defined]
        n += 1
    return found


async def test_an_idle_partition_writer_is_closed_and_reopened_with_its_numbers(
    server: LocalTopicServer, driver: Driver
) -> None:
    await driver.topic.create_topic("idle", min_active_partitions=2)
    async with driver.topic.keyed_writer("idle", producer_id="p", idle_timeout=0.2) as writer:
        await writer.open()
        keys = keys_by_partition(writer, 2)
        first = await writer.write_with_ack([b"a1", b"a2"], key=keys[0])
        assert list(writer.partition_writers) == [0]
        session = writer.partition_writers[0].session_id
        await eventually(lambda: not writer.partition_writers, "the idle partition writer to close", timeout=10)
        # Its stream ends too: no write stream is left open on the server (the probe breaks any).
        await eventually(lambda: server.faults.drop_write_streams() == 0, "the stream to end", timeout=10)
        assert writer.connection_state is ConnectionState.CONNECTED
        again = await writer.write_with_ack(b"a3", key=keys[0])
        assert writer.partition_writers[0].session_id != session
    assert [r.seq_no for r in [*first, again]] == [1, 2, 3]
    assert [(m.producer_id, m.seq_no, m.data) for m in server.storage.read("idle", 0)] == [
        ("p_0", 1, b"a1"), ("p_0", 2, b"a2"), ("p_0", 3, b"a3")
    ]


async def test_a_partition_writer_is_kept_while_it_is_written_to_or_waits_for_acks(server: LocalTopicServer) -> None:
    async with proxy_to(server) as flaky, Driver(flaky.endpoint, server.database, discovery=False) as driver:
        await driver.topic.create_topic("busy")
        async with driver.topic.keyed_writer("busy", producer_id="p", idle_timeout=0.2) as writer:
            await writer.write_with_ack(b"first", key="k")
            session = writer.partition_writers[0].session_id
            deadline = time.monotonic() + 0.8
            while time.monotonic() < deadline:  # written to more often than idle_timeout
                await writer.write(b"more", key="k")
                await asyncio.sleep(0.05)
            await writer.flush(timeout=10)
            assert writer.partition_writers[0].session_id == session
            flaky.stall()  # acknowledgements stop coming
            await writer.write(b"unacknowledged", key="k")
            await asyncio.sleep(0.8)
            assert writer.buffered_messages == 1
            assert writer.partition_writers[0].buffered_messages == 1  # still open: it holds a message
            flaky.resume()
            await writer.flush(timeout=10)
            assert writer.buffered_messages == 0
    assert [m.seq_no for m in server.storage.read("busy", 0)][-1] == len(server.storage.read("busy", 0))


async def test_keyed_writer_members_sum_up_its_partition_writers(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("members", min_active_partitions=3)
    writer = driver.topic.keyed_writer("members", producer_id="m", idle_timeout=None)
    assert state_of(writer) is ConnectionState.CONNECTING
    assert await writer.wait_init(timeout=10) == {}  # nothing written yet: no partition writer
    keys = keys_by_partition(writer, 3)
    futures = [await writer.write_with_ack_future(b"x", key=keys[pid]) for pid in (0, 2)]
    many = await writer.write_with_ack_future([b"y", b"z"], key=keys[2])
    assert writer.buffered_messages + len([f for f in futures + many if f.done()]) == 4
    infos = await writer.wait_init(timeout=10)
    assert set(infos) == {0, 2} and all(isinstance(i, InitInfo) for i in infos.values())
    assert writer.init_info == infos
    results = [await f for f in futures + many]
    assert [type(r) for r in results] == [Written] * 4
    assert (writer.buffered_messages, writer.buffered_bytes) == (0, 0)
    await writer.write(b"four", key=keys[0])
    assert writer.buffered_bytes in (0, 4)
    await writer.flush(timeout=10)
    assert state_of(writer) is ConnectionState.CONNECTED
    status = writer.partition_writers
    assert set(status) == {0, 2}
    assert isinstance(status[2], PartitionWriterStatus)
    assert (status[2].producer_id, status[2].connection_state, status[2].buffered_messages) == (
        "m_2", ConnectionState.CONNECTED, 0
    )
    assert status[0].session_id and status[0].session_id != status[2].session_id
    assert (writer.codec, status[0].selected_codec) == (1, 1)
    assert status[0].last_write_statistics is not None and status[0].last_write_statistics.partition_id == 0
    assert writer.last_write_statistics is not None and writer.last_write_statistics.partition_id == 0
    assert (writer.reconnects, writer.last_error, writer.failure) == (0, None, None)

    server.faults.drop_write_streams()  # both partition writers reconnect
    await writer.write_with_ack(b"after", key=keys[2])
    await writer.write_with_ack(b"after", key=keys[0])
    assert writer.reconnects == 2 and writer.last_error is not None
    await writer.close()
    assert state_of(writer) is ConnectionState.CLOSED


async def test_idle_timeout_is_checked_and_waits_are_bounded(server: LocalTopicServer) -> None:
    async with proxy_to(server) as flaky, Driver(flaky.endpoint, server.database, discovery=False) as driver:
        await driver.topic.create_topic("bounded")
        for bad in (0, -1, "soon"):
            with pytest.raises(InvalidArgumentError, match="idle_timeout"):
                driver.topic.keyed_writer("bounded", idle_timeout=bad)  # type: ignore[arg-type]
        async with driver.topic.keyed_writer("bounded", producer_id="p") as writer:
            await flaky.refuse()
            await writer.write(b"x", key="k")  # buffered: its partition writer connects meanwhile
            with pytest.raises(OperationTimeoutError, match=r"did not connect within 0\.2s"):
                await writer.wait_init(timeout=0.2)
            assert writer.connection_state in (ConnectionState.CONNECTING, ConnectionState.RECONNECTING)
            await flaky.restore()
            await writer.flush(timeout=10)


def test_the_keyed_and_transactional_writers_have_the_members_of_a_topic_writer() -> None:
    """What a ``TopicWriter`` offers, the other writers offer too; a keyed writer has a session
    and a codec per partition, in ``partition_writers``."""
    members = {name for name in dir(TopicWriter) if not name.startswith("_")}
    assert members - set(dir(KeyedWriter)) == {"session_id", "selected_codec"}
    assert {"session_id", "selected_codec"} <= set(PartitionWriterStatus.__dataclass_fields__)
    assert members - set(dir(KeyedTxWriter)) == {"session_id", "selected_codec"}
    assert members - set(dir(TxWriter)) == set()
