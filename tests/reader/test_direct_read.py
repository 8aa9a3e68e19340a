"""Direct read as a user turns it on: ``driver.topic.reader(..., direct_read=True)``.

On a local cluster every partition's data comes from the node hosting it (the cluster counts the
read bytes a node sent of partitions another node hosts); a node lost mid-read moves its
partitions and the reader follows them without losing or repeating anything; a direct stream
that breaks resumes after the last read received; a server without direct read (or whose direct
stream cannot be opened) is read the ordinary way, said once in the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

import ydb_topic_async as yta
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async.testing import LocalTopicCluster, LocalTopicServer

from .._helpers import QUICK_RETRY, fill
from .._polling import eventually
from .._streams import record_requests

pytestmark = pytest.mark.timeout(60)

FALLBACK = "does not offer direct read"
"""Words of the one log line saying the reader reads the ordinary way instead."""


async def read_counted(
    reader: yta.TopicReader, count: int, seen: Counter[tuple[int, int]], timeout: float = 20
) -> None:
    """Receive until ``count`` distinct messages were seen, committing every batch."""
    while len(seen) < count:
        batch = await reader.receive_batch(timeout=timeout)
        for message in batch:
            seen[(message.partition_id, message.offset)] += 1
        reader.commit(batch)


async def test_every_partition_is_read_from_its_own_node(
    ydb_topic_cluster: LocalTopicCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Six partitions over three nodes: the reader's one read stream carries no data (no
    ReadResponse at all), every message comes from the node hosting its partition, once, and the
    commits (on the read stream) land. The reader starts on a new driver whose first discovery
    failed: it asks for the nodes it was named rather than give up on them."""
    cluster = ydb_topic_cluster
    async with yta.Driver(cluster.endpoint, cluster.database) as driver:
        await driver.topic.create_topic("t", min_active_partitions=6, consumers=["c"])
        for partition in range(6):
            await fill(driver, "t", [b"m%d" % i for i in range(20)], partition_id=partition)
    before = cluster.stats.snapshot()
    seen: Counter[tuple[int, int]] = Counter()
    cluster.faults.fail_next("ListEndpoints", "UNAVAILABLE")  # the new driver's first discovery fails
    with caplog.at_level(logging.INFO, logger="ydb_topic_async.reader"):
        async with (
            yta.Driver(cluster.endpoint, cluster.database) as driver,
            driver.topic.reader("t", consumer="c", direct_read=True) as reader,
        ):
            await read_counted(reader, 120, seen)
    after = cluster.stats.snapshot()
    assert not [r for r in caplog.records if FALLBACK in r.getMessage()]
    assert set(seen) == {(p, o) for p in range(6) for o in range(20)} and set(seen.values()) == {1}
    assert after["read_responses"] == before["read_responses"]
    assert after["direct_read_responses"] > before["direct_read_responses"]
    assert after["read_bytes_sent"] > before["read_bytes_sent"]
    assert after["read_bytes_from_other_nodes"] == before["read_bytes_from_other_nodes"]
    assert cluster.storage.committed_offsets("t", "c") == dict.fromkeys(range(6), 20)


async def test_a_node_lost_mid_read_loses_nothing_and_repeats_nothing(ydb_topic_cluster: LocalTopicCluster) -> None:
    """Messages are written and read (committing each batch) while the node hosting one of the
    partitions stops. The partition moves; the read stream, on another node, keeps its partition
    session and is told where it went (UpdatePartitionSession), and the reader goes on reading it
    there from the last read it received: every message arrives, none twice, and the reader's read
    stream never reconnected."""
    cluster = ydb_topic_cluster
    per_partition = 150
    async with yta.Driver(cluster.endpoint, cluster.database, retry=QUICK_RETRY) as driver:
        await driver.wait_ready(timeout=10)
        await driver.topic.create_topic("t", min_active_partitions=3, consumers=["c"])
        assert {cluster.node_of("t", p).node_id for p in range(3)} == {1, 2, 3}
        seen: Counter[tuple[int, int]] = Counter()
        committed: dict[int, int] = {}
        repeated_committed: list[tuple[int, int]] = []
        halfway = asyncio.Event()

        def on_commit(ack: yta.CommitAck) -> None:
            committed[ack.partition_id] = max(committed.get(ack.partition_id, 0), ack.committed_offset)

        async def write(partition: int) -> None:
            async with driver.topic.writer(
                "t", producer_id=f"w{partition}", partition_id=partition, retry=QUICK_RETRY
            ) as writer:
                for i in range(0, per_partition, 5):
                    await writer.write_with_ack([b"%d-%d" % (partition, n) for n in range(i, i + 5)])
                    if i == per_partition // 3:
                        await halfway.wait()

        async with driver.topic.reader(
            "t", consumer="c", direct_read=True, retry=QUICK_RETRY, on_commit=on_commit
        ) as reader:
            writers = [asyncio.create_task(write(p)) for p in range(3)]
            try:
                while len(seen) < per_partition:
                    batch = await reader.receive_batch(timeout=20)
                    for message in batch:
                        key = (message.partition_id, message.offset)
                        if seen[key] and message.offset < committed.get(message.partition_id, 0):
                            repeated_committed.append(key)
                        seen[key] += 1
                    reader.commit(batch)
                described = await driver.topic.describe_consumer("t", "c", include_stats=True)
                control = {p.connection_node_id for p in described.partitions}
                assert len(control) == 1
                # Not the read stream's node, nor node 1 (the driver's discovery endpoint).
                victim = next(n for n in cluster.nodes if n.node_id not in control | {1})
                moved = next(p for p in range(3) if cluster.node_of("t", p) is victim)
                await cluster.stop_node(cluster.nodes.index(victim))
                halfway.set()
                while len(seen) < 3 * per_partition:
                    batch = await reader.receive_batch(timeout=20)
                    for message in batch:
                        key = (message.partition_id, message.offset)
                        if seen[key] and message.offset < committed.get(message.partition_id, 0):
                            repeated_committed.append(key)
                        seen[key] += 1
                    reader.commit(batch)
                await asyncio.gather(*writers)
            finally:
                for task in writers:
                    task.cancel()
                await asyncio.gather(*writers, return_exceptions=True)
            assert reader.reconnects == 0
    assert cluster.node_of("t", moved) is not victim
    assert set(seen) == {(p, o) for p in range(3) for o in range(per_partition)}
    assert not repeated_committed
    assert [key for key, times in seen.items() if times > 1] == []
    assert cluster.stats.read_bytes_from_other_nodes == 0
    assert cluster.storage.committed_offsets("t", "c") == dict.fromkeys(range(3), per_partition)


async def test_a_broken_direct_stream_resumes_after_the_last_read_received(server: LocalTopicServer) -> None:
    """The direct stream breaks (the read stream stays): the reader opens it again and starts its
    partition sessions from the last read received, so nothing is lost or delivered twice, and
    the read stream (``reconnects``) never noticed."""
    async with yta.Driver(server.endpoint, server.database, retry=QUICK_RETRY) as driver:
        await driver.topic.create_topic("t", consumers=["c"])
        await fill(driver, "t", [b"a%d" % i for i in range(30)])
        seen: Counter[tuple[int, int]] = Counter()
        async with driver.topic.reader("t", consumer="c", direct_read=True, retry=QUICK_RETRY) as reader:
            await read_counted(reader, 30, seen)
            assert server.faults.drop_direct_read_streams() == 1
            await fill(driver, "t", [b"b%d" % i for i in range(30)])
            await read_counted(reader, 60, seen)
            assert reader.reconnects == 0
    assert set(seen) == {(0, o) for o in range(60)} and set(seen.values()) == {1}
    assert server.stats.read_responses == 0


async def test_readers_sharing_a_consumer_hand_partitions_over(server: LocalTopicServer) -> None:
    """A second direct reader of the consumer takes one of the first one's partitions: the first
    confirms the graceful stop and answers the one that follows (the partition is released only
    then); every message is read, and none twice once committed."""
    async with yta.Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("t", min_active_partitions=2, consumers=["c"])
        for partition in range(2):
            await fill(driver, "t", [b"x%d" % i for i in range(10)], partition_id=partition)
        first_seen: Counter[tuple[int, int]] = Counter()
        second_seen: Counter[tuple[int, int]] = Counter()
        async with driver.topic.reader("t", consumer="c", direct_read=True) as first:
            await read_counted(first, 20, first_seen)
            async with driver.topic.reader("t", consumer="c", direct_read=True) as second:
                await eventually(
                    lambda: len(second.partition_sessions) == 1 and len(first.partition_sessions) == 1,
                    "one partition each",
                )
                for partition in range(2):
                    await fill(driver, "t", [b"y%d" % i for i in range(10)], partition_id=partition)
                taken = second.partition_sessions[0].partition_id
                kept = 1 - taken

                async def drain(reader: yta.TopicReader, seen: Counter[tuple[int, int]], partition: int) -> None:
                    while len([k for k in seen if k[0] == partition and k[1] >= 10]) < 10:
                        batch = await reader.receive_batch(timeout=20)
                        for message in batch:
                            seen[(message.partition_id, message.offset)] += 1
                        reader.commit(batch)

                await asyncio.gather(drain(first, first_seen, kept), drain(second, second_seen, taken))
                assert first.reconnects == second.reconnects == 0
    assert {k for k in second_seen} == {(taken, o) for o in range(10, 20)}
    assert set(first_seen.values()) == set(second_seen.values()) == {1}
    assert server.storage.committed_offsets("t", "c") == {0: 20, 1: 20}


async def test_a_server_without_direct_read_is_read_the_ordinary_way(caplog: pytest.LogCaptureFixture) -> None:
    """A server that ignores ``direct_read`` (starts without a partition location, data on the read
    stream) is read as usual; the reader says so once, and asks no more after reconnecting."""
    async with (
        LocalTopicServer(direct_read=False) as server,
        yta.Driver(server.endpoint, server.database, retry=QUICK_RETRY) as driver,
    ):
        await driver.topic.create_topic("t", consumers=["c"])
        await fill(driver, "t", [b"m%d" % i for i in range(10)])
        seen: Counter[tuple[int, int]] = Counter()
        with caplog.at_level(logging.INFO, logger="ydb_topic_async.reader"):
            async with driver.topic.reader("t", consumer="c", direct_read=True, retry=QUICK_RETRY) as reader:
                await read_counted(reader, 10, seen)
                server.faults.drop_read_streams()
                await fill(driver, "t", [b"n%d" % i for i in range(10)])
                await read_counted(reader, 20, seen)
                assert reader.reconnects >= 1
    assert set(seen) == {(0, o) for o in range(20)}
    assert len([r for r in caplog.records if FALLBACK in r.getMessage()]) == 1


@pytest.mark.parametrize("fault", ["unimplemented", "unanswered"])
async def test_a_direct_stream_the_server_does_not_open_falls_back(
    server: LocalTopicServer, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    """When the first direct stream is refused with UNIMPLEMENTED (the server lacks the method) or
    its handshake is not answered within ``init_timeout`` (an early version's protocol), the
    reader opens its read stream again without ``direct_read`` and reads the ordinary way: every
    message arrives, none from a direct stream, and the log says so once."""
    if fault == "unimplemented":
        server.faults.abort_next("StreamDirectRead", "UNIMPLEMENTED")
    else:
        server.faults.hang_next("StreamDirectRead")
    async with yta.Driver(server.endpoint, server.database, retry=QUICK_RETRY) as driver:
        await driver.topic.create_topic("t", consumers=["c"])
        await fill(driver, "t", [b"m%d" % i for i in range(10)])
        seen: Counter[tuple[int, int]] = Counter()
        with caplog.at_level(logging.INFO, logger="ydb_topic_async.reader"):
            async with driver.topic.reader(
                "t", consumer="c", direct_read=True, retry=QUICK_RETRY, init_timeout=0.5
            ) as reader:
                await read_counted(reader, 10, seen)
    # A direct read may have been formed on the first stream; none was sent on a direct stream.
    assert set(seen) == {(0, o) for o in range(10)} and set(seen.values()) == {1}
    assert server.stats.read_responses > 0
    assert len([r for r in caplog.records if FALLBACK in r.getMessage()]) == 1


async def test_new_tokens_go_in_band_on_the_direct_streams_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token that changes is sent on each direct read stream as well (UpdateTokenRequest, which
    the node answers), not only on the read stream, so a long-lived direct stream keeps a valid one."""
    tokens = iter(f"token-{i}" for i in range(1000))
    accepted = {f"token-{i}": "reader" for i in range(1000)}

    async def provide() -> str:
        return next(tokens)

    sent = record_requests(monkeypatch, "update_token_request")
    async with (
        LocalTopicServer(tokens=accepted) as server,
        yta.Driver(server.endpoint, server.database, yta.TokenProviderCredentials(provide)) as driver,
    ):
        await driver.topic.create_topic("t", consumers=["c"])
        await fill(driver, "t", [b"m"])
        async with driver.topic.reader("t", consumer="c", direct_read=True, token_refresh_interval=0.05) as reader:
            message = await reader.receive_message(timeout=10)
            await eventually(
                lambda: any(isinstance(r, pb.StreamDirectReadMessage.FromClient) for r in sent),
                "a token sent on the direct stream",
            )
            await fill(driver, "t", [b"n"])
            assert (await reader.receive_message(timeout=10)).offset == message.offset + 1
            assert reader.reconnects == 0
    assert server.stats.token_updates >= 2


def test_direct_read_must_be_a_bool(driver: yta.Driver) -> None:
    with pytest.raises(yta.InvalidArgumentError, match="direct_read"):
        driver.topic.reader("t", consumer="c", direct_read="yes")  # type: ignore[arg-type]
