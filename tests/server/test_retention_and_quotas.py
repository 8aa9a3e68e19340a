"""Retention (by time and by size) and partition write quotas on the local server, over raw gRPC."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .._polling import eventually
from .conftest import LOCAL_POOL, RawReader, RawWriter, acks, address, call, create_topic, offsets, unpack

pytestmark = pytest.mark.timeout(30)

MIB = 1024 * 1024


async def create(channel: grpc.aio.Channel, path: str, **fields: object) -> None:
    request = pb.CreateTopicRequest(path=path, **fields)  # type: ignore[arg-type]
    op = await call(channel, "CreateTopic", request, pb.CreateTopicResponse)
    assert op.status == StatusIds.SUCCESS, op


async def partition_offsets(channel: grpc.aio.Channel, path: str) -> tuple[int, int]:
    request = pb.DescribePartitionRequest(path=path, partition_id=0, include_stats=True)
    op = await call(channel, "DescribePartition", request, pb.DescribePartitionResponse)
    stats = unpack(op, pb.DescribePartitionResult).partition.partition_stats.partition_offsets
    return int(stats.start), int(stats.end)


async def write(
    channel: grpc.aio.Channel, path: str, producer: str, seq_nos: list[int], size: int = 0
) -> list[tuple[int, str, int]]:
    writer = RawWriter(channel)
    assert (await writer.init(path, producer_id=producer)).status == StatusIds.SUCCESS
    result = acks(await writer.write(seq_nos, size=size))
    await writer.close()
    return result


async def test_retention_by_time_moves_the_start_offset(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """Messages older than the topic's retention period are deleted and the partition's start
    offset moves (seed 002: "После истечения времени хранения сообщения автоматически удаляются");
    a reader asked for an offset below the start gets the first message still stored."""
    retention = pb.CreateTopicRequest().retention_period
    retention.FromSeconds(3600)
    await create(channel, "t", retention_period=retention, consumers=[pb.Consumer(name="c")])
    await write(channel, "t", "p", [1, 2, 3])
    server.advance_time(1800)
    await write(channel, "t", "p", [4])
    assert await partition_offsets(channel, "t") == (0, 4)
    server.advance_time(1801)  # the first three are now older than an hour
    assert await partition_offsets(channel, "t") == (3, 4)
    assert [m.seq_no for m in server.storage.read("t", 0)] == [4]

    anonymous = RawReader(channel)
    await anonymous.init("t", partition_ids=(0,))
    start = await anonymous.expect("start_partition_session_request")
    await anonymous.confirm_start(start, read_offset=0)
    await anonymous.credit(10_000)
    assert [offset for _, offset in offsets(await anonymous.expect("read_response"))] == [3]
    await anonymous.close()

    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    request = (await reader.expect("start_partition_session_request")).start_partition_session_request
    assert request.committed_offset == 3  # the consumer resumes at the first message left
    await reader.close()
    # The producer's seq_nos are remembered although its messages are gone.
    assert await write(channel, "t", "p", [3, 5]) == [(3, "skipped", -1), (5, "written", 4)]


async def test_important_consumers_keep_their_unread_data(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """Data an important consumer has not committed is kept past the retention period (seed 002:
    "Исключение составляют данные, которые еще не были прочитаны важным читателем")."""
    retention = pb.CreateTopicRequest().retention_period
    retention.FromSeconds(60)
    await create(channel, "t", retention_period=retention,
                 consumers=[pb.Consumer(name="keeper", important=True), pb.Consumer(name="other")])
    await write(channel, "t", "p", [1, 2, 3, 4])
    commit = pb.CommitOffsetRequest(path="t", partition_id=0, consumer="keeper", offset=2)
    assert (await call(channel, "CommitOffset", commit, pb.CommitOffsetResponse)).status == StatusIds.SUCCESS
    server.advance_time(120)
    assert await partition_offsets(channel, "t") == (2, 4)


async def test_retention_by_size_deletes_the_oldest_messages(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """With ``retention_storage_mb`` a partition keeps at most that much; the oldest messages go."""
    await create(channel, "t", retention_storage_mb=1)
    await write(channel, "t", "p", [1, 2, 3], size=400_000)
    server.advance_time(0)
    assert await partition_offsets(channel, "t") == (1, 3)
    assert sum(len(m.data) for m in server.storage.read("t", 0)) <= MIB


async def test_a_full_partition_answers_overloaded(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """A partition at its size limit whose data an important consumer still needs cannot take
    more: writes answer OVERLOADED (retryable) until the consumer commits."""
    await create(channel, "t", retention_storage_mb=1, consumers=[pb.Consumer(name="keeper", important=True)])
    await write(channel, "t", "p", [1, 2, 3], size=400_000)
    writer = RawWriter(channel)
    await writer.init("t", producer_id="p")
    refused = await writer.write([4], size=400_000)
    assert refused.status == StatusIds.OVERLOADED and "is full" in refused.issues[0].message
    commit = pb.CommitOffsetRequest(path="t", partition_id=0, consumer="keeper", offset=3)
    assert (await call(channel, "CommitOffset", commit, pb.CommitOffsetResponse)).status == StatusIds.SUCCESS
    assert await write(channel, "t", "p", [4], size=400_000) == [(4, "written", 3)]


async def test_a_split_parent_whose_data_expired_hands_over_its_children(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """A split parent emptied by retention has nothing left to read: it is finished, so readers
    get the children straight away, and a reader already on the parent gets its
    EndPartitionSession without reading or committing anything.

    Each step waits for the server state it depends on, never for time to pass: the start is
    confirmed on the server before the split (a confirmation still on its way is the next test's
    case; the server once answered that case with a stop, and this test, which did not wait,
    then timed out whenever a busy machine delayed the confirmation), the first reader's session
    is gone before the second one joins, and the second one's stream has been handled up to a
    status answer before it is checked for a start of the parent."""
    await create_topic(channel, "t", consumers=("c",))
    await write(channel, "t", "p", [1, 2])
    aware = RawReader(channel)
    await aware.init("t", consumer="c", auto_partitioning=True)
    parent = (await aware.start_all(1))[0]
    await aware.sync(parent)
    server.storage.split_partition("t", 0)
    server.advance_time(25 * 3600)
    end = (await aware.expect("end_partition_session")).end_partition_session
    assert (end.partition_session_id, list(end.child_partition_ids)) == (parent, [1, 2])
    assert sorted(await aware.start_all(2)) == [1, 2]
    await aware.close()
    await eventually(lambda: _no_read_sessions(channel, "t", "c"), "the first reader's session is gone")
    later = RawReader(channel)
    await later.init("t", consumer="c")
    children = await later.start_all(2)
    assert sorted(children) == [1, 2]
    await later.sync(children[1])
    assert later.kept("start_partition_session_request") == []  # the parent is finished
    await later.close()


async def _no_read_sessions(channel: grpc.aio.Channel, path: str, consumer: str) -> bool:
    """Whether no read session holds a partition of ``path`` for ``consumer`` (DescribeConsumer)."""
    request = pb.DescribeConsumerRequest(path=path, consumer=consumer, include_stats=True)
    op = await call(channel, "DescribeConsumer", request, pb.DescribeConsumerResponse)
    result = unpack(op, pb.DescribeConsumerResult)
    return not any(p.partition_consumer_stats.read_session_id for p in result.partitions)


async def test_a_parent_finished_before_its_start_was_confirmed_still_ends_with_end_partition_session(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """A start confirmation still on its way when the parent is finished (split, then emptied by
    retention) must not turn the parent's EndPartitionSession into a StopPartitionSession: the
    auto-partitioning reader learns of the children from the end, whenever it confirms."""
    await create_topic(channel, "t", consumers=("c",))
    await write(channel, "t", "p", [1, 2])
    aware = RawReader(channel)
    await aware.init("t", consumer="c", auto_partitioning=True)
    start = await aware.expect("start_partition_session_request")
    server.storage.split_partition("t", 0)
    server.advance_time(25 * 3600)
    await aware.nothing("stop_partition_session_request")
    await aware.confirm_start(start)
    end = (await aware.expect("end_partition_session")).end_partition_session
    parent = start.start_partition_session_request.partition_session.partition_session_id
    assert (end.partition_session_id, list(end.child_partition_ids)) == (parent, [1, 2])
    assert sorted(await aware.start_all(2)) == [1, 2]
    await aware.close()


async def test_retention_runs_on_its_own() -> None:
    """Retention also runs periodically, without ``advance_time``."""
    async with (
        LocalTopicServer(retention_interval=0.05) as srv,
        grpc.aio.insecure_channel(address(srv), options=LOCAL_POOL) as ch,
    ):
        await create_topic(ch, "t")
        await write(ch, "t", "p", [1, 2])
        srv.clock.advance(25 * 3600)  # moves the clock only: the periodic run must notice
        await eventually(lambda: not srv.storage.read("t", 0), "the periodic retention run")
        assert srv.storage.read("t", 0) == []
        assert srv.storage.topic("t").partition(0).start_offset == 2


@pytest.fixture
async def throttled() -> AsyncIterator[tuple[LocalTopicServer, grpc.aio.Channel]]:
    async with (
        LocalTopicServer(write_quotas=True) as srv,
        grpc.aio.insecure_channel(address(srv), options=LOCAL_POOL) as ch,
    ):
        yield srv, ch


async def test_write_quotas_throttle_and_report_the_wait(throttled: tuple[LocalTopicServer, grpc.aio.Channel]) -> None:
    """With write quotas on, a partition takes its burst at once and then its write speed; the
    wait is reported as ``partition_quota_wait_time`` (seed 000: "время, проведённое сообщениями в
    ожидании квоты на партицию")."""
    _, channel = throttled
    await create(channel, "t", partition_write_speed_bytes_per_second=1_000_000,
                 partition_write_burst_bytes=1_000_000)
    writer = RawWriter(channel)
    await writer.init("t", producer_id="p")
    first = await writer.write([1], size=1_000_000)  # the burst
    assert first.write_response.write_statistics.partition_quota_wait_time.ToMilliseconds() < 50
    started = time.monotonic()
    second = await writer.write([2], size=200_000)  # paid for at 1 MB/s
    waited = second.write_response.write_statistics.partition_quota_wait_time.ToMilliseconds()
    assert 150 <= waited <= 400
    assert time.monotonic() - started >= 0.15
    await writer.close()


async def test_too_much_waiting_for_quota_answers_overloaded(
    throttled: tuple[LocalTopicServer, grpc.aio.Channel],
) -> None:
    """More than 30,000,000 bytes waiting for one partition's quota: further writes answer
    OVERLOADED "write inflight limit reached" (YDB's partition, MaxWriteInflightSize)."""
    server, channel = throttled
    await create(channel, "t", partition_write_speed_bytes_per_second=1000, partition_write_burst_bytes=1000)
    slow = RawWriter(channel)
    await slow.init("t", producer_id="slow", partition_id=0)
    await slow.send([1], size=5000)  # waits about four seconds for its quota
    await eventually(lambda: server.storage.topic("t").partition(0).write_quota is not None, "the slow write waiting")
    fast = RawWriter(channel)
    await fast.init("t", producer_id="fast", partition_id=0)
    refused = await fast.write([1], size=30_000_000)
    assert refused.status == StatusIds.OVERLOADED
    assert "write inflight limit reached" in refused.issues[0].message
    await slow.close()
    assert server.storage.read("t", 0) == []


async def test_write_quotas_are_off_by_default(channel: grpc.aio.Channel) -> None:
    """Without ``write_quotas=True`` the local server does not throttle (tests write far faster
    than a partition's default 1 MiB/s)."""
    await create_topic(channel, "t")
    writer = RawWriter(channel)
    await writer.init("t", producer_id="p")
    for seq_no in (1, 2, 3):
        reply = await writer.write([seq_no], size=MIB)
        assert reply.write_response.write_statistics.partition_quota_wait_time.ToNanoseconds() == 0
    await writer.close()
