"""StreamRead on the local server over raw gRPC: sessions, credit, commits, balancing, splits."""

from __future__ import annotations

import asyncio
import time

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .conftest import (
    LOCAL_POOL,
    RawReader,
    RawWriter,
    ReadFromClient,
    ReadMsg,
    address,
    call,
    create_topic,
    offsets,
    unpack,
    write_messages,
)

pytestmark = pytest.mark.timeout(30)


async def test_start_read_and_byte_credit(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 5, producer_id="p", size=100)
    reader = RawReader(channel)
    init = await reader.init("t", consumer="c")
    assert init.status == StatusIds.SUCCESS and init.init_response.session_id
    start = (await reader.expect("start_partition_session_request")).start_partition_session_request
    assert (start.partition_session.path, start.partition_session.partition_id) == ("/local/t", 0)
    assert start.committed_offset == 0
    assert (start.partition_offsets.start, start.partition_offsets.end) == (0, 5)
    await reader.confirm_start(pb.StreamReadMessage.FromServer(start_partition_session_request=start))
    psid = start.partition_session.partition_session_id

    await reader.nothing("read_response")  # no credit yet
    await reader.credit(150)
    first = await reader.expect("read_response")
    # The server may overshoot the credit by one message: 100 < 150, so a second one follows.
    assert offsets(first) == [(psid, 0), (psid, 1)]
    assert first.read_response.bytes_size == first.ByteSize() - 3  # the whole response, bytes_size field aside
    await reader.nothing("read_response")  # the credit is spent (below zero)
    await reader.credit(first.read_response.bytes_size - 150 + 150)
    assert offsets(await reader.expect("read_response")) == [(psid, 2), (psid, 3)]
    await reader.credit(10_000)
    last = await reader.expect("read_response")
    assert offsets(last) == [(psid, 4)]
    batch = last.read_response.partition_data[0].batches[0]
    assert (batch.producer_id, batch.codec) == ("p", 1)
    assert batch.written_at.seconds > 0
    message = batch.message_data[0]
    assert (message.seq_no, message.data, message.uncompressed_size, message.message_group_id) == (
        5, b"m5".ljust(100, b"."), 100, "p"
    )
    assert message.created_at.seconds == 1_700_000_000

    # Data written while the reader waits is pushed as soon as it is stored.
    await reader.credit(1000)
    await write_messages(channel, "t", 2, producer_id="q")
    pushed = await reader.expect("read_response")
    assert offsets(pushed) == [(psid, 5), (psid, 6)]
    assert pushed.read_response.partition_data[0].batches[0].producer_id == "q"
    await reader.close()


async def test_commits_move_forward_contiguously(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 5)
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    psid = (await reader.start_all(1))[0]

    async def committed() -> int:
        reply = (await reader.expect("commit_offset_response")).commit_offset_response
        [part] = reply.partitions_committed_offsets
        assert part.partition_session_id == psid
        return int(part.committed_offset)

    await reader.commit(psid, 0, 2)
    assert await committed() == 2
    await reader.commit(psid, 3, 4)
    await reader.nothing("commit_offset_response")  # a gap: held, unanswered, until [2, 3) arrives
    await reader.commit(psid, 2, 3)
    assert await committed() == 4
    await reader.commit(psid, 4, 5)
    assert await committed() == 5

    await reader.send(partition_session_status_request=ReadMsg.PartitionSessionStatusRequest(
        partition_session_id=psid))
    status = (await reader.expect("partition_session_status_response")).partition_session_status_response
    assert (status.partition_offsets.start, status.partition_offsets.end, status.committed_offset) == (5, 5, 5)
    assert status.write_time_high_watermark.seconds > 0
    await reader.close()

    again = RawReader(channel)
    await again.init("t", consumer="c")
    start = (await again.expect("start_partition_session_request")).start_partition_session_request
    assert start.committed_offset == 5
    await again.confirm_start(pb.StreamReadMessage.FromServer(start_partition_session_request=start))
    await again.commit(start.partition_session.partition_session_id, 5, 9)
    refused = await again.read()
    assert refused.status == StatusIds.BAD_REQUEST
    assert refused.issues[0].message == "commit range [5, 9) is invalid for partition 0 with end offset 5"
    await again.close()


async def test_handshake_errors(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "t", consumers=("c",))
    reply = await RawReader(channel).init("missing", consumer="c")
    assert (reply.status, reply.issues[0].message) == (StatusIds.SCHEME_ERROR, "path /local/missing does not exist")
    reply = await RawReader(channel).init("t", consumer="nobody")
    assert (reply.status, reply.issues[0].message) == (
        StatusIds.BAD_REQUEST, "no read rule provided for consumer 'nobody' in topic '/local/t' in current cluster ''"
    )
    server.faults.fail_next("StreamRead", "OVERLOADED")
    assert (await RawReader(channel).init("t", consumer="c")).status == StatusIds.OVERLOADED
    assert (await RawReader(channel).init("t", consumer="c")).status == StatusIds.SUCCESS


async def test_reading_without_consumer_from_a_client_offset(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "t", partitions=2)
    await write_messages(channel, "t", 5, partition_id=1)
    reader = RawReader(channel)
    await reader.init("t", partition_ids=(1,))
    start = await reader.expect("start_partition_session_request")
    assert start.start_partition_session_request.partition_session.partition_id == 1
    await reader.confirm_start(start, read_offset=3)
    psid = start.start_partition_session_request.partition_session.partition_session_id
    await reader.credit(10_000)
    assert offsets(await reader.expect("read_response")) == [(psid, 3), (psid, 4)]
    await reader.nothing("start_partition_session_request")  # partition 0 was not asked for
    await reader.commit(psid, 3, 5)
    refused = await reader.read()
    assert (refused.status, refused.issues[0].message) == (
        StatusIds.BAD_REQUEST, "can't commit when reading without a consumer"
    )
    await reader.close()


async def test_read_from_and_max_lag(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 2)
    await asyncio.sleep(0.05)
    since = time.time_ns()
    await write_messages(channel, "t", 2, producer_id="late")

    async def first_offsets(**settings: object) -> list[int]:
        reader = RawReader(channel)
        init = ReadMsg.InitRequest(consumer="c")
        init.topics_read_settings.add(path="t", **settings)  # type: ignore[arg-type]
        await reader.call.write(ReadFromClient(init_request=init))
        await reader.read()
        await reader.start_all(1)
        await reader.credit(10_000)
        got = [offset for _, offset in offsets(await reader.expect("read_response"))]
        await reader.close()
        return got

    read_from = pb.StreamReadMessage.InitRequest.TopicReadSettings().read_from
    read_from.FromNanoseconds(since)
    assert await first_offsets(read_from=read_from) == [2, 3]
    max_lag = pb.StreamReadMessage.InitRequest.TopicReadSettings().max_lag
    max_lag.FromNanoseconds(time.time_ns() - since + 20_000_000)
    assert await first_offsets(max_lag=max_lag) == [2, 3]
    assert await first_offsets() == [0, 1, 2, 3]


async def test_one_batch_per_producer_run(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "t", consumers=("c",))
    for producer in ("a", "b"):
        await write_messages(channel, "t", 2, producer_id=producer)
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    await reader.start_all(1)
    await reader.credit(10_000)
    data = (await reader.expect("read_response")).read_response.partition_data
    assert [(b.producer_id, [m.offset for m in b.message_data]) for d in data for b in d.batches] == [
        ("a", [0, 1]), ("b", [2, 3])
    ]
    await reader.close()


async def test_readers_of_one_consumer_share_partitions(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "t", partitions=4, consumers=("c",))
    await write_messages(channel, "t", 3, partition_id=0)
    first = RawReader(channel)
    await first.init("t", consumer="c", reader_name="first")
    first_sessions = await first.start_all(4)
    assert sorted(first_sessions) == [0, 1, 2, 3]
    await first.commit(first_sessions[0], 0, 2)
    await first.expect("commit_offset_response")

    second = RawReader(channel)
    await second.init("t", consumer="c", reader_name="second")
    stops = [(await first.expect("stop_partition_session_request")).stop_partition_session_request
             for _ in range(2)]
    assert all(s.graceful for s in stops)
    by_session = {psid: pid for pid, psid in first_sessions.items()}
    moved = sorted(by_session[s.partition_session_id] for s in stops)
    for s in stops:
        expected = 2 if by_session[s.partition_session_id] == 0 else 0
        assert s.committed_offset == expected
    # The new reader gets the partitions only once the old owner let them go.
    await second.nothing("start_partition_session_request")
    for s in stops:
        await first.send(stop_partition_session_response=ReadMsg.StopPartitionSessionResponse(
            partition_session_id=s.partition_session_id, graceful=True))
    second_sessions = await second.start_all(2)
    assert sorted(second_sessions) == moved

    op = await call(channel, "DescribeConsumer", pb.DescribeConsumerRequest(path="t", consumer="c", include_stats=True),
                    pb.DescribeConsumerResponse)
    owners = {p.partition_id: p.partition_consumer_stats.reader_name
              for p in unpack(op, pb.DescribeConsumerResult).partitions}
    assert sorted(pid for pid, name in owners.items() if name == "second") == moved
    assert sorted(pid for pid, name in owners.items() if name == "first") == sorted(set(range(4)) - set(moved))

    await second.close()
    back = await first.start_all(2)
    assert sorted(back) == moved
    await first.close()


async def test_unconfirmed_graceful_stop_times_out() -> None:
    async with (
        LocalTopicServer(graceful_stop_timeout=0.2) as srv,
        grpc.aio.insecure_channel(address(srv), options=LOCAL_POOL) as ch,
    ):
        await create_topic(ch, "t", partitions=2, consumers=("c",))
        first = RawReader(ch)
        await first.init("t", consumer="c")
        await first.start_all(2)
        second = RawReader(ch)
        await second.init("t", consumer="c")
        graceful = (await first.expect("stop_partition_session_request")).stop_partition_session_request
        assert graceful.graceful
        # The first reader never answers: the partition is taken away after the timeout.
        forced = (await first.expect("stop_partition_session_request")).stop_partition_session_request
        assert (forced.partition_session_id, forced.graceful) == (graceful.partition_session_id, False)
        assert len(await second.start_all(1)) == 1
        await first.close()
        await second.close()


async def test_drop_read_streams(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "t", consumers=("c",))
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    await reader.start_all(1)
    assert server.faults.drop_read_streams() == 1
    with pytest.raises(grpc.aio.AioRpcError) as info:
        while True:
            await reader.read()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert server.faults.drop_read_streams() == 0
    writer = RawWriter(channel)
    assert (await writer.init("t")).status == StatusIds.SUCCESS  # writers were left alone
    await writer.close()
