"""StreamRead is as strict as YDB's read session: one test per rule, over raw gRPC.

Sources are files of github.com/ydb-platform/ydb: "read session actor" is
ydb/services/persqueue_v1/actors/read_session_actor.cpp, "partition actor" is
ydb/services/persqueue_v1/actors/partition_actor.cpp.
"""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .conftest import RawReader, ReadFromClient, ReadMsg, call, create_topic, offsets, unpack, write_messages

pytestmark = pytest.mark.timeout(30)


async def refusal(reader: RawReader) -> tuple[int, str]:
    """The failure that ends the session (skipping messages the server sent before it)."""
    while True:
        message = await reader.read()
        assert message is not grpc.aio.EOF, "the session ended without a status"
        if message.status != StatusIds.SUCCESS:
            return message.status, message.issues[0].message


async def started(channel: grpc.aio.Channel, path: str = "t", consumer: str = "c") -> tuple[RawReader, int]:
    reader = RawReader(channel)
    await reader.init(path, consumer=consumer)
    return reader, (await reader.start_all(1))[0]


async def test_bad_commit_ranges_end_the_session(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """read session actor, Handle(TEvCommitRange): a range that is empty (``b >= e``), overlaps a
    pending one, or starts below the committed offset is BAD_REQUEST ("double committing is
    forbidden"); a CommitOffsetRequest without ranges is BAD_REQUEST ("can't commit without offsets")."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 6)

    async def refused_commit(*ranges: tuple[int, int], commit_first: tuple[int, int] | None = None) -> str:
        reader, psid = await started(channel)
        if commit_first is not None:
            await reader.commit(psid, *commit_first)
        request = ReadMsg.CommitOffsetRequest()
        if ranges:
            part = request.commit_offsets.add(partition_session_id=psid)
            for start, end in ranges:
                part.offsets.add(start=start, end=end)
        await reader.send(commit_offset_request=request)
        status, message = await refusal(reader)
        assert status == StatusIds.BAD_REQUEST
        await reader.close()
        return message

    assert "[2, 2) has already committed offsets" in await refused_commit((2, 2))
    assert "[3, 5) has already committed offsets" in await refused_commit((3, 4), (3, 5))  # overlaps pending [3, 4)
    server.storage.topic("t").consumer("c").commit(server.storage.topic("t").partition(0), 2)
    assert "[1, 3) has already committed offsets" in await refused_commit((1, 3))  # below the committed 2
    assert await refused_commit() == "can't commit without offsets"
    assert server.storage.committed_offsets("t", "c") == {0: 2}


async def test_a_commit_after_a_gap_is_answered_once_the_gap_is_filled(channel: grpc.aio.Channel) -> None:
    """The partition commits only contiguous offsets; the read session answers a commit when the
    committed offset moves, with the new committed offset (read session actor, Handle(TEvCommitDone))."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 6)
    reader, psid = await started(channel)
    await reader.commit(psid, 2, 4)
    await reader.commit(psid, 4, 5)
    await reader.nothing("commit_offset_response")
    await reader.commit(psid, 0, 2)
    reply = (await reader.expect("commit_offset_response")).commit_offset_response
    assert [(p.partition_session_id, p.committed_offset) for p in reply.partitions_committed_offsets] == [(psid, 5)]
    await reader.close()


async def test_start_offsets_below_the_committed_offset(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """partition actor, InitStartReading: a ``read_offset`` below the committed offset is
    BAD_REQUEST; a ``commit_offset`` below it is ignored; data below the committed offset is
    never served; a ``commit_offset`` above it moves it (up to the read position)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 6)
    commit = pb.CommitOffsetRequest(path="t", partition_id=0, consumer="c", offset=3)
    assert (await call(channel, "CommitOffset", commit, pb.CommitOffsetResponse)).status == StatusIds.SUCCESS

    async def start(**response: int) -> RawReader:
        reader = RawReader(channel)
        await reader.init("t", consumer="c")
        request = (await reader.expect("start_partition_session_request")).start_partition_session_request
        await reader.send(start_partition_session_response=ReadMsg.StartPartitionSessionResponse(
            partition_session_id=request.partition_session.partition_session_id, **response))
        return reader

    reader = await start(read_offset=1)
    assert await refusal(reader) == (
        StatusIds.BAD_REQUEST, "trying to read from position that is less than committed: read 1 committed 3"
    )
    await reader.close()

    reader = await start(commit_offset=1)
    await reader.credit(10_000)
    assert [offset for _, offset in offsets(await reader.expect("read_response"))] == [3, 4, 5]
    await reader.close()
    assert server.storage.committed_offsets("t", "c") == {0: 3}

    reader = await start(read_offset=5, commit_offset=5)
    await reader.credit(10_000)
    assert [offset for _, offset in offsets(await reader.expect("read_response"))] == [5]
    await reader.close()
    assert server.storage.committed_offsets("t", "c") == {0: 5}

    reader = await start(commit_offset=6)  # above the read position (the committed 5)
    assert (await refusal(reader))[0] == StatusIds.BAD_REQUEST
    await reader.close()


async def test_an_unsolicited_stop_partition_session_response_is_refused(channel: grpc.aio.Channel) -> None:
    """read session actor, Handle(TEvReleased): "graceful release of partition that is not
    requested for release is forbidden" (BAD_REQUEST); one for an unknown partition session is ignored."""
    await create_topic(channel, "t", consumers=("c",))
    reader, psid = await started(channel)
    await reader.send(stop_partition_session_response=ReadMsg.StopPartitionSessionResponse(
        partition_session_id=psid + 100, graceful=True))
    await reader.send(partition_session_status_request=ReadMsg.PartitionSessionStatusRequest(
        partition_session_id=psid))
    await reader.expect("partition_session_status_response")  # still alive: the unknown id was ignored
    await reader.send(stop_partition_session_response=ReadMsg.StopPartitionSessionResponse(
        partition_session_id=psid, graceful=True))
    status, message = await refusal(reader)
    assert status == StatusIds.BAD_REQUEST
    assert message.startswith("graceful release of partition that is not requested for release is forbidden")
    await reader.close()


async def test_read_responses_carry_one_partition_and_charge_their_serialized_size(
    channel: grpc.aio.Channel,
) -> None:
    """read session actor, ProcessAnswer: ``bytes_size`` is the serialized size of the whole
    response (``Response.ByteSize()``) and is what the client's read budget pays; a response
    carries the data of one partition."""
    await create_topic(channel, "t", partitions=2, consumers=("c",))
    for pid in (0, 1):
        await write_messages(channel, "t", 3, partition_id=pid, size=50)
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    sessions = await reader.start_all(2)

    def charged(response: Any) -> int:
        [_] = response.read_response.partition_data  # one partition per response
        without = pb.StreamReadMessage.FromServer()
        without.CopyFrom(response)
        without.read_response.bytes_size = 0
        assert response.read_response.bytes_size == without.ByteSize() > 50
        return int(response.read_response.bytes_size)

    await reader.credit(1)
    first = await reader.expect("read_response")
    await reader.credit(charged(first) - 1)  # brings the budget back to exactly zero
    await reader.nothing("read_response")
    await reader.credit(1)
    second = await reader.expect("read_response")
    charged(second)
    served = {r.read_response.partition_data[0].partition_session_id for r in (first, second)}
    assert served == set(sessions.values())
    await reader.close()


async def test_partition_offsets_start_is_the_committed_offset(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """partition actor: StartPartitionSessionRequest and PartitionSessionStatusResponse report the
    consumer's committed offset as ``partition_offsets.start`` (and as ``committed_offset``)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 5)
    server.storage.topic("t").consumer("c").commit(server.storage.topic("t").partition(0), 2)
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    start = (await reader.expect("start_partition_session_request")).start_partition_session_request
    assert (start.committed_offset, start.partition_offsets.start, start.partition_offsets.end) == (2, 2, 5)
    psid = start.partition_session.partition_session_id
    await reader.confirm_start(pb.StreamReadMessage.FromServer(start_partition_session_request=start))
    await reader.commit(psid, 2, 4)
    await reader.expect("commit_offset_response")
    await reader.send(partition_session_status_request=ReadMsg.PartitionSessionStatusRequest(
        partition_session_id=psid))
    status = (await reader.expect("partition_session_status_response")).partition_session_status_response
    assert (status.committed_offset, status.partition_offsets.start, status.partition_offsets.end) == (4, 4, 5)
    await reader.close()


async def test_read_handshake_checks_consumers_and_tolerates_some_missing_topics(
    channel: grpc.aio.Channel,
) -> None:
    """read init auth actor (ydb/services/persqueue_v1/actors/read_init_auth_actor.cpp): an unknown
    consumer is BAD_REQUEST; a topic that does not exist is left out when another one resolves.
    Without a consumer and partition ids the init response comes first, then BAD_REQUEST."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 1)
    reply = await RawReader(channel).init("t", consumer="nobody")
    assert (reply.status, reply.issues[0].message) == (
        StatusIds.BAD_REQUEST, "no read rule provided for consumer 'nobody' in topic '/local/t' in current cluster ''"
    )

    reader = RawReader(channel)
    init = ReadMsg.InitRequest(consumer="c")
    init.topics_read_settings.add(path="missing")
    init.topics_read_settings.add(path="t")
    await reader.call.write(ReadFromClient(init_request=init))
    assert (await reader.read()).status == StatusIds.SUCCESS
    [(pid, _)] = (await reader.start_all(1)).items()
    assert pid == 0
    await reader.close()

    only_missing = await RawReader(channel).init("missing", consumer="c")
    assert only_missing.status == StatusIds.SCHEME_ERROR

    anonymous = RawReader(channel)
    first = await anonymous.init("t")
    assert first.status == StatusIds.SUCCESS and first.init_response.session_id
    assert (await refusal(anonymous)) == (
        StatusIds.BAD_REQUEST, "reading without a consumer requires explicit partition ids"
    )
    await anonymous.close()


async def test_an_autopartitioning_reader_gets_the_children_once_the_parent_is_read(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """A reader with ``auto_partitioning_support`` gets EndPartitionSession (children, no adjacent
    partitions after a split) when it read the parent to its end, and the children at once, on
    the same session, before it commits anything (ydb/core/persqueue/ut/ut_with_sdk/autoscaling_ut.cpp:
    PartitionSplit_AutoscaleAwareSDK "new SDK is not wait commit"). Once the parent is committed
    to its end, its session is stopped."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 2)
    reader = RawReader(channel)
    await reader.init("t", consumer="c", auto_partitioning=True)
    psid = (await reader.start_all(1))[0]
    assert server.storage.split_partition("t", 0) == (1, 2)
    await reader.nothing("start_partition_session_request")  # the parent is not read yet
    await reader.credit(10_000)
    assert offsets(await reader.expect("read_response")) == [(psid, 0), (psid, 1)]
    end = (await reader.expect("end_partition_session")).end_partition_session
    assert (end.partition_session_id, list(end.child_partition_ids), list(end.adjacent_partition_ids)) == (
        psid, [1, 2], []
    )
    assert sorted(await reader.start_all(2)) == [1, 2]  # before any commit
    await reader.commit(psid, 0, 2)
    stop = (await reader.expect("stop_partition_session_request")).stop_partition_session_request
    assert (stop.partition_session_id, stop.graceful, stop.committed_offset) == (psid, False, 2)
    await reader.close()


async def test_a_reader_without_autopartitioning_support_gets_children_after_the_parent_is_committed(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """For a reader without ``auto_partitioning_support`` the children become readable only once
    the parent is committed to its end, and it gets no EndPartitionSession
    (ydb/core/persqueue/ut/ut_with_sdk/autoscaling_ut.cpp: PartitionSplit_BeforeAutoscaleAwareSDK
    "We are reading only one partition because offset is not commited")."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 2)
    reader = RawReader(channel)
    await reader.init("t", consumer="c")
    psid = (await reader.start_all(1))[0]
    server.storage.split_partition("t", 0)
    await reader.credit(10_000)
    assert offsets(await reader.expect("read_response")) == [(psid, 0), (psid, 1)]
    await reader.nothing("start_partition_session_request")  # read to its end, but not committed
    await reader.nothing("end_partition_session")
    await reader.commit(psid, 0, 2)
    stop = (await reader.expect("stop_partition_session_request")).stop_partition_session_request
    assert (stop.partition_session_id, stop.graceful) == (psid, False)
    assert sorted(await reader.start_all(2)) == [1, 2]
    await reader.close()


async def test_read_from_counts_in_whole_milliseconds(channel: grpc.aio.Channel, server: LocalTopicServer) -> None:
    """A message written in the same millisecond as ``read_from``, after it, is read: YDB keeps
    write times in milliseconds and turns ``read_from`` into milliseconds too, truncating
    (read session actor: ``ReadTimestampMs`` from ``TimeUtil::TimestampToMilliseconds``, handed to
    the partition actor, which compares it with the write timestamps in ms)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 1)
    written = server.storage.read("t", 0)[0].written_at_ns  # whole milliseconds
    reader = RawReader(channel)
    init = ReadMsg.InitRequest(consumer="c")
    init.topics_read_settings.add(path="t").read_from.FromNanoseconds(written + 999_000)
    await reader.call.write(ReadFromClient(init_request=init))
    await reader.read()
    await reader.start_all(1)
    await reader.credit(10_000)
    assert [offset for _, offset in offsets(await reader.expect("read_response"))] == [0]
    await reader.close()


async def test_describe_consumer_shows_the_reader_of_each_partition(channel: grpc.aio.Channel) -> None:
    """DescribeConsumer with stats names the read session of each partition (protocol:
    DescribeConsumerResult.PartitionConsumerStats.read_session_id)."""
    await create_topic(channel, "t", consumers=("c",))
    reader = RawReader(channel)
    init: Any = await reader.init("t", consumer="c", reader_name="mine")
    await reader.start_all(1)
    request = pb.DescribeConsumerRequest(path="t", consumer="c", include_stats=True)
    result = unpack(await call(channel, "DescribeConsumer", request, pb.DescribeConsumerResponse),
                    pb.DescribeConsumerResult)
    stats = result.partitions[0].partition_consumer_stats
    assert (stats.read_session_id, stats.reader_name) == (init.init_response.session_id, "mine")
    await reader.close()


async def commit_offset(channel: grpc.aio.Channel, offset: int, read_session_id: str = "") -> tuple[int, str]:
    request = pb.CommitOffsetRequest(path="t", partition_id=0, consumer="c", offset=offset,
                                     read_session_id=read_session_id)
    op = await call(channel, "CommitOffset", request, pb.CommitOffsetResponse)
    return op.status, op.issues[0].message if op.issues else ""


async def held(channel: grpc.aio.Channel) -> tuple[RawReader, str, int]:
    """A reader holding partition 0 of "t" for "c": the reader, its read session id, its partition session id."""
    reader = RawReader(channel)
    init = await reader.init("t", consumer="c")
    return reader, init.init_response.session_id, (await reader.start_all(1))[0]


async def test_commit_offset_without_a_session_id_ends_the_live_read_session(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """CommitOffset without ``read_session_id`` is applied (going back too: "reset mode"), and
    the partition forgets the consumer's read session (``Session = ""``: ydb/core/persqueue
    partition ``ProcessUserAct``). The read session's next read fails with READ_ERROR_NO_SESSION,
    which its partition actor turns into ``TEvCloseSession("status is not ok: no such session
    ...")`` (partition_actor.cpp), and the whole stream closes with SESSION_EXPIRED. Its reader
    reconnects and starts at the new committed offset (YDB test
    ``DistributedTxCommit_CheckSessionResetAfterCommit``; the official SDK's
    ``test_reader_reconnect_after_commit_offset``)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 5)
    reader, session_id, _ = await held(channel)
    assert await commit_offset(channel, 3) == (StatusIds.SUCCESS, "")
    assert await refusal(reader) == (StatusIds.SESSION_EXPIRED, f"status is not ok: no such session '{session_id}'")
    assert await reader.read() is grpc.aio.EOF
    await reader.close()
    assert server.storage.committed_offsets("t", "c") == {0: 3}

    again = RawReader(channel)
    await again.init("t", consumer="c")
    start = await again.expect("start_partition_session_request")
    assert start.start_partition_session_request.committed_offset == 3
    await again.close()
    assert await commit_offset(channel, 1) == (StatusIds.SUCCESS, "")  # back, with nobody reading
    assert server.storage.committed_offsets("t", "c") == {0: 1}


async def test_commit_offset_with_another_session_id_is_refused_and_leaves_the_live_session_alone(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """A ``read_session_id`` that is not the session holding the partition (or with nobody
    holding it): the partition answers WRONG_COOKIE "set offset in already dead session <given>
    actual is <current>", CommitOffset fails with SESSION_EXPIRED, nothing changes (YDB test
    ``Commit_Flat_WithWrongSession``)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 5)
    assert await commit_offset(channel, 2, "nobody-reads") == (
        StatusIds.SESSION_EXPIRED, "set offset in already dead session nobody-reads actual is "
    )
    reader, session_id, partition_session = await held(channel)
    assert await commit_offset(channel, 2, "stale-session") == (
        StatusIds.SESSION_EXPIRED, f"set offset in already dead session stale-session actual is {session_id}"
    )
    assert server.storage.committed_offsets("t", "c") == {0: 0}
    await reader.sync(partition_session)  # still served
    await reader.credit(1_000_000)
    read = await reader.expect("read_response")
    assert offsets(read)[0] == (partition_session, 0)
    await reader.close()


async def test_commit_offset_with_the_live_session_id_commits_and_the_session_goes_on(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    """With the holding session's id the commit is applied and the session goes on (the official
    SDK's ``test_commit_offset_with_session_id_works``); an offset at or below the committed one
    answers OK and changes nothing (a stale request)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 5)
    reader, session_id, partition_session = await held(channel)
    assert await commit_offset(channel, 2, session_id) == (StatusIds.SUCCESS, "")
    assert await commit_offset(channel, 1, session_id) == (StatusIds.SUCCESS, "")
    assert server.storage.committed_offsets("t", "c") == {0: 2}
    # The reader's own commit of what it read before does not move the offset back.
    await reader.commit(partition_session, 0, 1)
    await reader.sync(partition_session)
    assert server.storage.committed_offsets("t", "c") == {0: 2}
    await reader.credit(1_000_000)
    assert offsets(await reader.expect("read_response"))[0] == (partition_session, 0)
    await reader.close()
