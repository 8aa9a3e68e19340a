"""Producer ownership on the local server, as YDB's partition enforces it, over raw gRPC.

YDB gives a (partition, source id) to one write session at a time. Every write session asks for
ownership with ``force`` (``TPartitionWriter::GetOwnership`` sets ``SetForce(true)``,
ydb/core/persqueue/writer/writer.cpp), and the partition changes the owner whenever forced
(``TPartition::ProcessChangeOwnerRequest``: ``NeedResetOwner || ev->Force``), so the newest
session always wins. ``TOwnerInfo::GenerateCookie`` (ydb/core/persqueue/pqtablet/partition/
ownerinfo.cpp, released versions such as commit e9db2ae7) sends the old session, at once, an
error with code BAD_REQUEST and the reason "ownership session is killed by another session with
id <new owner cookie> partition id <N>"; the old write session then closes with "status is not
ok: " and that reason (write_session_actor.ipp, ``Handle(TEvPartitionWriter::TEvWriteResponse)``
and ``CloseSession``), issue code 500000 + 3 (persqueue_utils.cpp ``ConvertOldCode``), and the
gRPC stream finishes OK. A session without a producer id has a random owner of its own
(``SourceId(opts.UseDeduplication ? opts.SourceId : CreateGuidAsString())``) and never conflicts.
"""

from __future__ import annotations

import re

import grpc.aio
import pytest

from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicCluster, LocalTopicServer

from .conftest import LOCAL_POOL, RawWriter, acks, create_topic

pytestmark = pytest.mark.timeout(30)

KILLED = re.compile(
    r"status is not ok: ownership session is killed by another session with id (\S+) partition id (\d+)"
)


async def test_a_new_session_takes_the_producer_over_and_the_old_one_is_killed_at_once(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    await create_topic(channel, "t", partitions=2)
    old = RawWriter(channel)
    assert (await old.init("t", producer_id="p")).status == StatusIds.SUCCESS
    assert [kind for _, kind, _ in acks(await old.write([1, 2]))] == ["written", "written"]

    new = RawWriter(channel)
    init = await new.init("t", producer_id="p")
    # The new session gets an ordinary answer, with the old session's acknowledged writes counted.
    assert (init.status, init.init_response.last_seq_no) == (StatusIds.SUCCESS, 2)
    # The old one is told at once, without writing anything, and its stream finishes cleanly.
    killed = await old.read()
    assert killed.status == StatusIds.BAD_REQUEST
    match = KILLED.fullmatch(killed.issues[0].message)
    assert match is not None, killed.issues
    assert match.groups() == (init.init_response.session_id, str(init.init_response.partition_id))
    assert killed.issues[0].issue_code == 500003
    assert await old.call.read() == grpc.aio.EOF
    assert await old.call.code() == grpc.StatusCode.OK

    assert [kind for _, kind, _ in acks(await new.write([3]))] == ["written"]
    await new.close()
    assert [m.seq_no for m in server.storage.read("t", init.init_response.partition_id)] == [1, 2, 3]


async def test_sessions_without_a_producer_id_never_conflict(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    await create_topic(channel, "t")
    first, second = RawWriter(channel), RawWriter(channel)
    await first.init("t", partition_id=0)
    await second.init("t", partition_id=0)
    assert [kind for _, kind, _ in acks(await first.write([1]))] == ["written"]
    assert [kind for _, kind, _ in acks(await second.write([1]))] == ["written"]
    assert [kind for _, kind, _ in acks(await first.write([2]))] == ["written"]
    await first.close()
    await second.close()
    assert len(server.storage.read("t", 0)) == 3


async def test_other_producers_and_partitions_are_not_affected(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    await create_topic(channel, "t", partitions=2)
    mine = RawWriter(channel)
    await mine.init("t", producer_id="mine", partition_id=0)
    other = RawWriter(channel)
    await other.init("t", producer_id="other", partition_id=0)
    elsewhere = RawWriter(channel)
    await elsewhere.init("t", producer_id="elsewhere", partition_id=1)
    assert [kind for _, kind, _ in acks(await mine.write([1]))] == ["written"]
    for writer in (mine, other, elsewhere):
        await writer.close()


async def test_the_takeover_reaches_a_session_on_another_node() -> None:
    """Ownership is the partition's, wherever the sessions' proxies run (YDB's tablet sends the
    kill to the old session's actor on its own node)."""
    async with LocalTopicCluster(2) as cluster:
        node1, node2 = (n.endpoint.removeprefix("grpc://") for n in cluster.nodes)
        async with (
            grpc.aio.insecure_channel(node1, options=LOCAL_POOL) as first,
            grpc.aio.insecure_channel(node2, options=LOCAL_POOL) as second,
        ):
            await create_topic(first, "t")
            old = RawWriter(first)
            await old.init("t", producer_id="p", partition_id=0)
            new = RawWriter(second)
            assert (await new.init("t", producer_id="p", partition_id=0)).status == StatusIds.SUCCESS
            killed = await old.read()
            assert killed.status == StatusIds.BAD_REQUEST
            assert KILLED.fullmatch(killed.issues[0].message)
            await new.close()
