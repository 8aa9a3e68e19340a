"""The keyed writer: partitions by key, order per key, exactly-once, autopartitioning splits.

Routing follows YDB's own key-partitioned producers: a key's place is its partition key (the
8-byte big-endian MurmurHash64A of its bytes, checked against reference vectors in
``test_key_placement.py``), compared byte by byte with the partitions' ``from_bound``; a topic's
initial ranges split the 128-bit space evenly (ydb-platform/ydb:
ydb/public/sdk/cpp/src/client/topic/impl/producer.cpp TBoundPartitionChooser,
ydb/core/tx/schemeshard/schemeshard__operation_create_pq.cpp with RangeFromShardNumber). One
producer id per partition, ``{producer_id}_{partition_id}``, as the official SDKs' keyed writers
do (ydb-platform/ydb-go-sdk: internal/topic/topicmultiwriter; the C++ SDK's TProducer).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from functools import partial

import pytest

from ydb_topic_async import (
    PARTITION_KEY_METADATA,
    AutoPartitioningSettings,
    AutoPartitioningStrategy,
    BufferFullTimeoutError,
    Codec,
    ConnectionState,
    Driver,
    InvalidArgumentError,
    KeyedWriter,
    Message,
    OperationTimeoutError,
    RetryPolicy,
    Skipped,
    WriterClosedError,
    Written,
)
from ydb_topic_async.testing import LocalTopicServer, StoredMessage
from ydb_topic_async.testing.proxy import proxy_to
from ydb_topic_async.writer.partitioning import partition_key

from .._helpers import proxied_driver, stored_by_partition, stored_data
from .._polling import eventually

pytestmark = pytest.mark.timeout(60)

AUTO = AutoPartitioningSettings(strategy=AutoPartitioningStrategy.SCALE_UP)


def expected_partition(key: str, partitions: int) -> int:
    """The partition whose range holds the key's partition key, independent of the SDK's router:
    n ranges whose lower bounds are ``i * ((2**128 - 1) // n) - 1`` as 16 bytes (none for the
    first), compared with the 8-byte partition key as raw bytes."""
    position = partition_key(key.encode())
    slice_ = (2**128 - 1) // partitions
    lower = [b""] + [(i * slice_ - 1).to_bytes(16, "big") for i in range(1, partitions)]
    return max(i for i in range(partitions) if position >= lower[i])


def by_key(messages: dict[int, list[StoredMessage]]) -> dict[str, list[tuple[int, str]]]:
    """key -> [(partition, payload)] in storage order, with the key taken from the payload 'key:n'."""
    result: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for pid in sorted(messages):
        for m in messages[pid]:
            text = m.data.decode()
            result[text.split(":")[0]].append((pid, text))
    return result


async def test_keys_go_to_stable_partitions_in_order(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("orders", min_active_partitions=4)
    keys = [f"customer-{i}" for i in range(40)]
    async with driver.topic.keyed_writer("orders", producer_id="shop") as writer:
        for n in range(5):
            for key in keys:
                await writer.write(f"{key}:{n}".encode(), key=key)
        assert {key: writer.partition_for(key) for key in keys} == {key: expected_partition(key, 4) for key in keys}
    placed = by_key(stored_by_partition(server, "orders"))
    for key in keys:
        assert placed[key] == [(expected_partition(key, 4), f"{key}:{n}") for n in range(5)], key
    assert len({expected_partition(key, 4) for key in keys}) == 4  # the keys spread over every partition
    for pid, messages in stored_by_partition(server, "orders").items():
        assert {m.producer_id for m in messages} == {f"shop_{pid}"}
        assert [m.seq_no for m in messages] == list(range(1, len(messages) + 1))


async def test_the_same_key_lands_in_the_same_partition_from_another_process_run(
    server: LocalTopicServer, driver: Driver
) -> None:
    await driver.topic.create_topic("stable", min_active_partitions=3)
    async with driver.topic.keyed_writer("stable", producer_id="a") as first:
        placed = [(await first.write_with_ack(b"x", key=f"k{i}")).partition_id for i in range(12)]
    async with driver.topic.keyed_writer("stable", producer_id="b") as second:
        again = [(await second.write_with_ack(b"y", key=f"k{i}")).partition_id for i in range(12)]
    assert placed == again == [expected_partition(f"k{i}", 3) for i in range(12)]


async def test_write_with_ack_and_lists(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("acks", min_active_partitions=2)
    async with driver.topic.keyed_writer("acks", producer_id="p", codec=Codec.ZSTD) as writer:
        one = await writer.write_with_ack("single", key=b"bytes-key")
        many = await writer.write_with_ack([b"a", Message("b", metadata={"m": "1"})], key="str-key")
    assert isinstance(one, Written) and one.partition_id == expected_partition("bytes-key", 2)
    assert [type(r) for r in many] == [Written, Written]
    assert {r.partition_id for r in many} == {expected_partition("str-key", 2)}
    assert many[1].offset == many[0].offset + 1  # type: ignore[union-attr]
    second = stored_by_partition(server, "acks")[expected_partition("str-key", 2)][-1]
    assert second.metadata == (("m", b"1"), (PARTITION_KEY_METADATA, partition_key(b"str-key")))
    assert second.codec == Codec.ZSTD


async def test_resends_after_lost_acks_are_stored_once(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("once", min_active_partitions=3)
    server.faults.drop_write_stream_after(7)
    async with driver.topic.keyed_writer("once", producer_id="p") as writer:
        for n in range(30):
            await writer.write(f"k{n % 6}:{n}".encode(), key=f"k{n % 6}")
    assert server.faults.dropped_streams == 1
    placed = by_key(stored_by_partition(server, "once"))
    assert sum(len(v) for v in placed.values()) == 30
    for k in range(6):
        assert [text for _, text in placed[f"k{k}"]] == [f"k{k}:{n}" for n in range(k, 30, 6)]


@pytest.mark.parametrize("direct_write", [False, True], ids=["via-any-node", "direct-write"])
async def test_keys_follow_a_split_and_keep_their_order(
    server: LocalTopicServer, driver: Driver, direct_write: bool, caplog: pytest.LogCaptureFixture
) -> None:
    await driver.topic.create_topic("auto", min_active_partitions=2, auto_partitioning=AUTO)
    keys = [f"user-{i}" for i in range(24)]
    async with driver.topic.keyed_writer("auto", producer_id="p", direct_write=direct_write) as writer:
        for key in keys:
            await writer.write_with_ack(f"{key}:0", key=key)
        children = server.storage.split_partition("auto", 0)
        for n in (1, 2):
            for key in keys:
                await writer.write(f"{key}:{n}", key=key)
        await writer.flush()
        moved = {key: writer.partition_for(key) for key in keys}
    described = await driver.topic.describe_topic("auto")
    ranges = {p.partition_id: (p.from_bound, p.to_bound) for p in described.partitions}
    assert ranges[children[0]][1] == ranges[children[1]][0]  # the parent's range, cut in two
    placed = by_key(stored_by_partition(server, "auto"))
    for key in keys:
        first = expected_partition(key, 2)
        texts = [text for _, text in placed[key]]
        assert texts == [f"{key}:0", f"{key}:1", f"{key}:2"], key
        if first == 0:
            position = partition_key(key.encode())
            child = children[0] if position < (ranges[children[0]][1] or b"") else children[1]
            assert moved[key] == child
            assert [pid for pid, _ in placed[key]] == [0, child, child]
        else:
            assert [pid for pid, _ in placed[key]] == [1, 1, 1]
    assert {moved[key] for key in keys} == {1, *children}
    for child in children:
        assert {m.producer_id for m in stored_by_partition(server, "auto")[child]} <= {f"p_{child}"}
    # The split partition's writer ended, but nothing was lost: no ERROR says otherwise.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_unacknowledged_messages_of_a_split_partition_are_stored_once(
    server: LocalTopicServer, driver: Driver, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream breaks after storing some of 5 messages (their acks lost), and the partition splits
    before the writer reconnects: those stay where they are (and resolve as Skipped), the others
    go to a child, after them."""
    await driver.topic.create_topic("split", min_active_partitions=1, auto_partitioning=AUTO)
    patient = RetryPolicy(max_attempts=None, max_elapsed=None)
    writer = driver.topic.keyed_writer("split", producer_id="p", retry=patient)
    await writer.write_with_ack(b"k:0", key="k")
    server.faults.drop_write_stream_after(2)
    server.faults.fail_next("StreamWrite", "UNAVAILABLE", times=1000)
    results = []
    for n in range(1, 6):  # one request each, mostly: the stream breaks after the second
        results.append(asyncio.ensure_future(writer.write_with_ack(f"k:{n}", key="k")))
        await asyncio.sleep(0.05)
    try:
        await eventually(lambda: server.faults.dropped_streams == 1, "the stream broken")
        children = server.storage.split_partition("split", 0)
    finally:
        server.faults.clear()
    done = await asyncio.wait_for(asyncio.gather(*results), 20)
    await writer.close(timeout=10)
    kept = len(server.storage.read("split", 0)) - 1
    assert 2 <= kept < 5
    # Stored before the split: acknowledged then (Written) or with the ack lost (Skipped).
    assert isinstance(done[kept - 1], Skipped)
    assert all(isinstance(r, Written) for r in done[kept:])
    child = writer_child(done[-1])
    assert child in children
    assert [r.partition_id for r in done] == [0] * kept + [child] * (5 - kept)
    texts = [m.data.decode() for m in server.storage.read("split", 0)] + [
        m.data.decode() for m in server.storage.read("split", child)
    ]
    assert texts == [f"k:{n}" for n in range(6)]
    other = next(c for c in children if c != child)
    assert server.storage.read("split", other) == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def writer_child(result: object) -> int:
    assert isinstance(result, Written)
    return result.partition_id


async def test_a_splits_recovery_outlasts_the_drivers_retry_budget(server: LocalTopicServer) -> None:
    """The recovery of a split reads the topic's partitions again. When the server cannot answer
    that for longer than the driver's budget for one call, the recovery goes on retrying under the
    keyed writer's own policy (for as long as it is open, as its partitions' writers do) instead of
    failing the keyed writer and every message it holds."""
    short = RetryPolicy(max_attempts=2)  # each describe_topic call gives up after two tries
    async with Driver(server.endpoint, server.database, discovery=False, retry=short) as driver:
        await driver.topic.create_topic("patient", min_active_partitions=1, auto_partitioning=AUTO)
        async with driver.topic.keyed_writer("patient", producer_id="p", retry=RetryPolicy.forever()) as writer:
            await writer.write_with_ack("k:0", key="k")
            server.faults.fail_next("DescribeTopic", "UNAVAILABLE", times=8)  # four calls' worth
            children = server.storage.split_partition("patient", 0)
            await writer.write("k:1", key="k")
            await writer.flush(timeout=30)
            assert server.faults.take_status("DescribeTopic") is None  # every injected failure was met
            assert writer.partition_for("k") in children
    placed = stored_by_partition(server, "patient")
    assert [m.data for m in placed[0]] == [b"k:0"]
    assert [m.data for pid in children for m in placed[pid]] == [b"k:1"]


async def test_an_overloaded_partition_is_retried_not_rerouted(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("busy", min_active_partitions=2)
    async with driver.topic.keyed_writer("busy", producer_id="p") as writer:
        await writer.write_with_ack(b"first", key="k")
        server.faults.drop_write_streams()
        server.faults.fail_next("StreamWrite", "OVERLOADED")
        result = await asyncio.wait_for(writer.write_with_ack(b"second", key="k"), 30)
    assert isinstance(result, Written) and result.partition_id == expected_partition("k", 2)
    assert stored_data(server, "busy", result.partition_id) == [b"first", b"second"]


@pytest.mark.parametrize("fault", ["outage", "silence"])
async def test_a_first_write_to_a_partition_is_buffered_during_an_outage(server: LocalTopicServer, fault: str) -> None:
    """Writing to a partition the keyed writer has not used yet returns at once while the server
    cannot be reached (refused connections, or connections accepted and never answered), as
    ``TopicWriter.write`` does: its writer connects in the background. The messages are
    numbered before the handshake tells the producer's stored seq_no, and follow it once told:
    nothing is taken for a duplicate of what an earlier run stored."""
    keys = {expected_partition(f"k{i}", 4): f"k{i}" for i in range(40)}
    first, later = keys[0], keys[1]
    async with Driver(server.endpoint, server.database) as plain:
        await plain.topic.create_topic("down", min_active_partitions=4)
        async with plain.topic.keyed_writer("down", producer_id="p") as earlier_run:
            await earlier_run.write([f"{later}:old{n}" for n in range(3)], key=later)
    async with (
        proxy_to(server) as proxy,
        proxied_driver(server, proxy, keepalive_interval=1, keepalive_timeout=1) as driver,
    ):
        writer = driver.topic.keyed_writer("down", producer_id="p", init_timeout=1)
        await writer.write_with_ack(f"{first}:0", key=first)
        if fault == "outage":
            await proxy.refuse()
        else:
            proxy.silence()
        async with asyncio.timeout(2):  # no connection needed: buffered
            await writer.write([f"{later}:new{n}" for n in range(3)], key=later)
            await writer.write(f"{first}:1", key=first)
        with pytest.raises(OperationTimeoutError):
            await writer.flush(timeout=0.5)
        if fault == "outage":
            await proxy.restore()
        else:
            proxy.unsilence()
        await writer.flush(timeout=30)
        results = await writer.write_with_ack([f"{later}:new3"], key=later)
        await writer.close(timeout=10)
    placed = stored_by_partition(server, "down")
    assert [(m.data.decode(), m.seq_no) for m in placed[1]] == [
        *((f"{later}:old{n}", n + 1) for n in range(3)), *((f"{later}:new{n}", n + 4) for n in range(4))
    ]
    assert [m.data.decode() for m in placed[0]] == [f"{first}:0", f"{first}:1"]
    assert results == [Written(1, 6, 7)]


async def test_a_partition_overloaded_at_its_first_handshake_continues_the_producers_numbers(
    server: LocalTopicServer, driver: Driver
) -> None:
    """The first handshake of a partition's writer answers OVERLOADED, so nothing is sent and its
    replacement still has to learn the producer's stored seq_no: the messages follow it."""
    await driver.topic.create_topic("fresh", min_active_partitions=2)
    async with driver.topic.keyed_writer("fresh", producer_id="p") as earlier_run:
        await earlier_run.write([b"old1", b"old2"], key="k")
    server.faults.fail_next("StreamWrite", "OVERLOADED")
    async with driver.topic.keyed_writer("fresh", producer_id="p") as writer:
        results = await asyncio.wait_for(writer.write_with_ack([b"new1", b"new2"], key="k"), 30)
    pid = expected_partition("k", 2)
    assert results == [Written(pid, 2, 3), Written(pid, 3, 4)]
    assert [(m.data, m.seq_no) for m in stored_by_partition(server, "fresh")[pid]] == [
        (b"old1", 1), (b"old2", 2), (b"new1", 3), (b"new2", 4)
    ]


async def test_close_flushes_and_later_writes_fail(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("closing", min_active_partitions=2)
    writer = driver.topic.keyed_writer("closing", producer_id="p")
    for n in range(50):
        await writer.write(b"m%d" % n, key=str(n))
    await writer.close()
    assert sum(len(v) for v in stored_by_partition(server, "closing").values()) == 50
    with pytest.raises(WriterClosedError):
        await writer.write(b"late", key="k")
    await writer.close()  # a second close does nothing


async def test_closing_the_driver_closes_its_keyed_writers(server: LocalTopicServer) -> None:
    async with Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("owned", min_active_partitions=2)
        writer = driver.topic.keyed_writer("owned", producer_id="p")
        await writer.write(b"kept", key="k")
    assert writer.closed
    assert [m.data for p in stored_by_partition(server, "owned").values() for m in p] == [b"kept"]


async def test_mistakes_are_refused_at_the_call(driver: Driver) -> None:
    await driver.topic.create_topic("strict", min_active_partitions=2)
    with pytest.raises(InvalidArgumentError, match="max_buffer_messages"):
        driver.topic.keyed_writer("strict", max_buffer_messages=0)
    async with driver.topic.keyed_writer("strict", producer_id="p") as writer:
        with pytest.raises(InvalidArgumentError, match="key must be str or bytes"):
            await writer.write(b"x", key=17)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="numbers messages itself"):
            await writer.write(Message(b"x", seq_no=5), key="k")
        with pytest.raises(InvalidArgumentError, match="not valid Unicode"):
            await writer.write("lone \udc80 surrogate", key="k")
        with pytest.raises(InvalidArgumentError, match=r"Message\.data must be bytes or str"):
            await writer.write(Message(17), key="k")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await writer.write(b"x")  # type: ignore[call-arg]
        await writer.write_with_ack(b"fine", key="k")
    assert isinstance(writer, KeyedWriter)


async def test_a_topic_grown_after_creation_is_refused_by_the_default_partitioner(
    server: LocalTopicServer, driver: Driver
) -> None:
    """A partition added to a topic created with several gets no key range (YDB's scheme shard:
    ydb/core/tx/schemeshard/schemeshard__operation_alter_pq.cpp adds it without one), so the
    default partitioner cannot tell which keys it holds and refuses, as the C++ producer's
    TBoundPartitionChooser does ("Unbounded partition is not supported"). Kafka's partitioner
    needs no ranges; a topic created with one partition and grown is laid out as a new one."""
    await driver.topic.create_topic("grown", min_active_partitions=2)
    await driver.topic.alter_topic("grown", set_min_active_partitions=3)
    writer = driver.topic.keyed_writer("grown", producer_id="p")
    with pytest.raises(InvalidArgumentError, match=r"partitions without \(\[2\]"):
        await writer.open()
    await writer.close()
    async with driver.topic.keyed_writer("grown", producer_id="k", partitioner="kafka") as kafka:
        assert isinstance(await kafka.write_with_ack(b"x", key="a"), Written)
    await driver.topic.create_topic("grown-from-one")
    await driver.topic.alter_topic("grown-from-one", set_min_active_partitions=3)
    async with driver.topic.keyed_writer("grown-from-one", producer_id="p") as writer:
        result = await writer.write_with_ack(b"x", key="customer-17")
    assert isinstance(result, Written) and result.partition_id == expected_partition("customer-17", 3)


def _reconnecting(writer: KeyedWriter) -> bool:
    return writer.connection_state is ConnectionState.RECONNECTING


async def test_a_write_waiting_for_a_splits_recovery_is_bounded_and_ends_with_close(server: LocalTopicServer) -> None:
    """While a split partition's messages are being placed again (here the server cannot
    describe the topic), a write to that key waits at most ``buffer_wait_timeout``, as a write
    to a full buffer does, and accepts nothing; a write still waiting when the keyed writer is
    closed fails at once with ``WriterClosedError`` instead of waiting for a recovery that will
    not finish."""
    async with Driver(server.endpoint, server.database, discovery=False) as driver:
        await driver.topic.create_topic("stuck", min_active_partitions=1, auto_partitioning=AUTO)
        forever = RetryPolicy.forever()
        bounded = driver.topic.keyed_writer("stuck", producer_id="p", retry=forever, buffer_wait_timeout=0.5)
        unbounded = driver.topic.keyed_writer("stuck", producer_id="q", retry=forever)
        for writer in (bounded, unbounded):
            await writer.write_with_ack("k:0", key="k")
        server.faults.fail_next("DescribeTopic", "UNAVAILABLE", times=1000)
        server.storage.split_partition("stuck", 0)
        pending = []
        for writer in (bounded, unbounded):
            pending.append(await writer.write_with_ack_future("k:1", key="k"))  # the split partition's writer takes it
        for writer in (bounded, unbounded):
            await eventually(partial(_reconnecting, writer), "the split noticed")
        await asyncio.sleep(0.1)  # the failed acks' callbacks start the recoveries

        waited = asyncio.get_running_loop().time()
        with pytest.raises(BufferFullTimeoutError, match="nothing from this call was accepted"):
            await asyncio.wait_for(bounded.write("k:2", key="k"), 20)
        assert asyncio.get_running_loop().time() - waited < 15  # the 0.5 s bound, not the 20 s guard

        stuck_write = asyncio.ensure_future(unbounded.write("k:2", key="k"))
        await asyncio.sleep(0.5)
        assert not stuck_write.done()  # waiting for the recovery
        for writer in (bounded, unbounded):
            with pytest.raises(OperationTimeoutError):
                await writer.close(timeout=0.5)
        with pytest.raises(WriterClosedError):
            await asyncio.wait_for(stuck_write, 10)
        for future in pending:
            with pytest.raises(OperationTimeoutError):
                await future
        server.faults.clear()
    assert [m.data for m in stored_by_partition(server, "stuck")[0]] == [b"k:0", b"k:0"]
