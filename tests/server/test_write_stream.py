"""StreamWrite details and server lifecycle: partition choice, generations, tx, stop with open streams."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .._polling import eventually
from .conftest import LOCAL_POOL, RawReader, RawWriter, acks, address, create_topic

pytestmark = pytest.mark.timeout(30)


async def test_message_groups_bind_to_partitions(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "groups", partitions=2)
    chosen = []
    for group in ("g1", "g2", "g1", "g2"):
        writer = RawWriter(channel)
        reply = await writer.init("groups", message_group_id=group)
        chosen.append(reply.init_response.partition_id)
        await writer.close()
    assert chosen[:2] in ([0, 1], [1, 0])
    assert chosen[2:] == chosen[:2]
    writer = RawWriter(channel)
    reply = await writer.init("groups", producer_id="p", message_group_id="other")
    assert (reply.status, reply.issues[0].message) == (
        StatusIds.BAD_REQUEST, "message_group_id must equal producer_id when both are set"
    )


async def test_partition_with_generation(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """A generation other than the partition tablet's is refused as YDB's partition writer refuses
    it (PartitionNotLocal, ``TPartitionWriter::Handle(TEvClientConnected)`` in
    ``ydb/core/persqueue/writer/writer.cpp``): the session ends with UNAVAILABLE, retriable."""
    await create_topic(channel, "gen")
    ok = RawWriter(channel)
    reply = await ok.init("gen", partition_with_generation=pb.PartitionWithGeneration(partition_id=0, generation=1))
    assert (reply.status, reply.init_response.partition_id) == (StatusIds.SUCCESS, 0)
    await ok.close()
    stale = RawWriter(channel)
    reply = await stale.init("gen", partition_with_generation=pb.PartitionWithGeneration(partition_id=0, generation=7))
    assert (reply.status, reply.issues[0].message) == (StatusIds.UNAVAILABLE, "pipe to partition's tablet is dead")


async def test_producer_moves_to_a_child_after_a_split(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "moving")
    writer = RawWriter(channel)
    await writer.init("moving", producer_id="p")
    assert acks(await writer.write([1, 2])) == [(1, "written", 0), (2, "written", 1)]
    await writer.close()
    server.storage.split_partition("moving", 0)
    writer = RawWriter(channel)
    reply = await writer.init("moving", producer_id="p")
    # The producer's seq_no history follows it, so its resends stay deduplicated.
    assert reply.init_response.partition_id in (1, 2)
    assert reply.init_response.last_seq_no == 2
    assert acks(await writer.write([2, 3])) == [(2, "skipped", -1), (3, "written", 0)]
    await writer.close()
    explicit = RawWriter(channel)
    reply = await explicit.init("moving", partition_id=0)
    assert reply.status == StatusIds.OVERLOADED
    assert reply.issues[0].message == "partition 0 is inactive; it was split"


async def test_writes_in_an_unknown_session_are_refused(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    await create_topic(channel, "tx")
    writer = RawWriter(channel)
    await writer.init("tx", producer_id="p")
    request = pb.StreamWriteMessage.WriteRequest(codec=1, tx=pb.TransactionIdentity(id="tx-1", session="s"))
    request.messages.add(seq_no=1, data=b"x", uncompressed_size=1)
    await writer.call.write(pb.StreamWriteMessage.FromClient(write_request=request))
    reply = await writer.read()
    assert reply.status == StatusIds.BAD_SESSION
    assert await writer.call.read() == grpc.aio.EOF
    assert server.storage.read("tx", 0) == []


async def test_write_statistics_and_session_ids(channel: grpc.aio.Channel) -> None:
    await create_topic(channel, "stats")
    first, second = RawWriter(channel), RawWriter(channel)
    ids = {(await w.init("stats")).init_response.session_id for w in (first, second)}
    assert len(ids) == 2
    reply = await first.write([1])
    stats = reply.write_response.write_statistics
    assert reply.write_response.partition_id == 0
    # YDB reports the time in whole milliseconds; storing one message takes far less than a second.
    assert stats.HasField("persisting_time") and stats.persisting_time.nanos % 1_000_000 == 0
    assert stats.persisting_time.seconds == 0
    for w in (first, second):
        await w.close()


async def test_stop_ends_open_streams_and_leaves_no_tasks() -> None:
    server = LocalTopicServer()
    await server.start()
    async with grpc.aio.insecure_channel(address(server), options=LOCAL_POOL) as ch:
        await create_topic(ch, "t", consumers=("c",))
        writer = RawWriter(ch)
        await writer.init("t", producer_id="p")
        reader = RawReader(ch)
        await reader.init("t", consumer="c")
        await reader.start_all(1)
        await server.stop()
        with pytest.raises(grpc.aio.AioRpcError):
            await writer.read()
        with pytest.raises(grpc.aio.AioRpcError):
            await reader.expect("read_response")
        await reader.close()
    await eventually(
        lambda: not [t for t in asyncio.all_tasks() if t.get_name() == "local-server stream inbox"],
        "the streams' inbox tasks ended",
    )
    assert server.reads.groups == {}
