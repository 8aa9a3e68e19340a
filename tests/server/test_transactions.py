"""Transactions on the local server: query sessions, writes and consumer offsets inside a transaction.

Raw gRPC checks the wire (statuses, acks, what reaches the partition when); the official ``ydb``
SDK checks that a production client's session pool, tx writer and tx reader work unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
import ydb
import ydb.aio

from ydb_topic_async._proto import ydb_query_pb2 as qpb
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored_data, stored_fields
from .._polling import eventually
from .conftest import DB, RawReader, RawWriter, acks, call, create_topic, write_messages

pytestmark = pytest.mark.timeout(40)

QUERY = "Ydb.Query.V1.QueryService"


async def query(channel: grpc.aio.Channel, method: str, request: Any, response_cls: Any) -> Any:
    """One unary QueryService call (its responses carry status and issues directly)."""
    rpc = channel.unary_unary(
        f"/{QUERY}/{method}",
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    return await rpc(request, metadata=DB, timeout=10)


class Session:
    """A query session held open by its AttachSession stream, as an SDK holds one."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.session_id = ""
        self.attach: Any = None

    async def open(self) -> Session:
        created = await query(self.channel, "CreateSession", qpb.CreateSessionRequest(), qpb.CreateSessionResponse)
        assert created.status == StatusIds.SUCCESS, created
        assert created.node_id == 1
        self.session_id = created.session_id
        method = self.channel.unary_stream(
            f"/{QUERY}/AttachSession",
            request_serializer=qpb.AttachSessionRequest.SerializeToString,
            response_deserializer=qpb.SessionState.FromString,
        )
        self.attach = method(qpb.AttachSessionRequest(session_id=self.session_id), metadata=DB)
        state = await self.state()
        assert state.status == StatusIds.SUCCESS, state
        return self

    async def state(self) -> Any:
        return await asyncio.wait_for(self.attach.read(), 10)

    async def begin(self) -> str:
        request = qpb.BeginTransactionRequest(session_id=self.session_id)
        request.tx_settings.serializable_read_write.SetInParent()
        response = await query(self.channel, "BeginTransaction", request, qpb.BeginTransactionResponse)
        assert response.status == StatusIds.SUCCESS, response
        assert response.tx_meta.id
        return str(response.tx_meta.id)

    async def commit(self, tx_id: str) -> Any:
        request = qpb.CommitTransactionRequest(session_id=self.session_id, tx_id=tx_id)
        return await query(self.channel, "CommitTransaction", request, qpb.CommitTransactionResponse)

    async def rollback(self, tx_id: str) -> Any:
        request = qpb.RollbackTransactionRequest(session_id=self.session_id, tx_id=tx_id)
        return await query(self.channel, "RollbackTransaction", request, qpb.RollbackTransactionResponse)

    def identity(self, tx_id: str) -> pb.TransactionIdentity:
        return pb.TransactionIdentity(id=tx_id, session=self.session_id)

    async def update_offsets(
        self, tx_id: str, path: str, consumer: str, ranges: list[tuple[int, int]], partition_id: int = 0
    ) -> Any:
        request = pb.UpdateOffsetsInTransactionRequest(tx=self.identity(tx_id), consumer=consumer)
        part = request.topics.add(path=path).partitions.add(partition_id=partition_id)
        for start, end in ranges:
            part.partition_offsets.add(start=start, end=end)
        return await call(self.channel, "UpdateOffsetsInTransaction", request, pb.UpdateOffsetsInTransactionResponse)

    def close(self) -> None:
        if self.attach is not None:
            self.attach.cancel()


@pytest.fixture
async def session(channel: grpc.aio.Channel) -> AsyncIterator[Session]:
    opened = await Session(channel).open()
    try:
        yield opened
    finally:
        opened.close()


async def tx_write(writer: RawWriter, identity: pb.TransactionIdentity, seq_nos: list[int]) -> Any:
    request = pb.StreamWriteMessage.WriteRequest(codec=1, tx=identity)
    for seq_no in seq_nos:
        data = f"tx{seq_no}".encode()
        request.messages.add(seq_no=seq_no, data=data, uncompressed_size=len(data)).created_at.FromSeconds(1)
    await writer.call.write(pb.StreamWriteMessage.FromClient(write_request=request))
    return await writer.read()


async def test_commit_appends_held_writes_at_consecutive_offsets(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    await create_topic(channel, "out", consumers=("c",))
    await write_messages(channel, "out", 1, producer_id="before")
    reader = RawReader(channel)
    await reader.init("out", consumer="c")
    await reader.confirm_start(await reader.expect("start_partition_session_request"))
    await reader.credit(1 << 20)
    assert len((await reader.expect("read_response")).read_response.partition_data[0].batches[0].message_data) == 1

    tx_id = await session.begin()
    writer = RawWriter(channel)
    assert (await writer.init("out", producer_id="p", partition_id=0)).status == StatusIds.SUCCESS
    reply = await tx_write(writer, session.identity(tx_id), [1, 2, 3])
    assert reply.status == StatusIds.SUCCESS
    assert acks(reply) == [(1, "written_in_tx", -1), (2, "written_in_tx", -1), (3, "written_in_tx", -1)]
    await write_messages(channel, "out", 1, producer_id="meanwhile")
    assert stored_fields(server, "out", "offset", "producer_id", "seq_no") == [(0, "before", 1), (1, "meanwhile", 1)]
    batch = (await reader.expect("read_response")).read_response.partition_data[0].batches[0]
    assert [m.offset for m in batch.message_data] == [1]  # the held messages stay invisible to readers

    committed = await session.commit(tx_id)
    assert committed.status == StatusIds.SUCCESS, committed
    assert stored_fields(server, "out", "offset", "producer_id", "seq_no") == [
        (0, "before", 1), (1, "meanwhile", 1), (2, "p", 1), (3, "p", 2), (4, "p", 3)
    ]
    batches = (await reader.expect("read_response")).read_response.partition_data[0].batches
    assert [(m.offset, m.data) for b in batches for m in b.message_data] == [(2, b"tx1"), (3, b"tx2"), (4, b"tx3")]
    assert (await session.commit(tx_id)).status == StatusIds.NOT_FOUND  # a transaction commits once
    await writer.close()
    await reader.close()


async def test_deduplication_applies_inside_and_at_commit(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    await create_topic(channel, "dedup")
    await write_messages(channel, "dedup", 2, producer_id="p")
    tx_id = await session.begin()
    writer = RawWriter(channel)
    await writer.init("dedup", producer_id="p")
    reply = await tx_write(writer, session.identity(tx_id), [2, 3, 4])
    assert acks(reply) == [(2, "skipped", -1), (3, "written_in_tx", -1), (4, "written_in_tx", -1)]
    assert acks(await tx_write(writer, session.identity(tx_id), [4, 5])) == [(4, "skipped", -1),
                                                                            (5, "written_in_tx", -1)]
    outside = RawWriter(channel)
    await outside.init("dedup", producer_id="p")
    assert acks(await outside.write([3])) == [(3, "written", 2)]  # written outside the transaction meanwhile
    assert (await session.commit(tx_id)).status == StatusIds.SUCCESS
    assert [seq for _, _, seq in stored_fields(server, "dedup", "offset", "producer_id", "seq_no")] == [1, 2, 3, 4, 5]
    await writer.close()
    await outside.close()


async def test_rollback_leaves_no_trace(channel: grpc.aio.Channel, server: LocalTopicServer, session: Session) -> None:
    await create_topic(channel, "rb", consumers=("c",))
    await write_messages(channel, "rb", 2)
    tx_id = await session.begin()
    writer = RawWriter(channel)
    await writer.init("rb", producer_id="p")
    assert acks(await tx_write(writer, session.identity(tx_id), [1]))[0][1] == "written_in_tx"
    assert (await session.update_offsets(tx_id, "rb", "c", [(0, 2)])).status == StatusIds.SUCCESS

    assert (await session.rollback(tx_id)).status == StatusIds.SUCCESS
    assert stored_fields(server, "rb", "offset", "producer_id", "seq_no") == [(0, "", 1), (1, "", 2)]
    assert server.storage.committed_offsets("rb", "c") == {0: 0}
    assert (await session.commit(tx_id)).status == StatusIds.NOT_FOUND
    assert (await session.rollback(tx_id)).status == StatusIds.NOT_FOUND
    reply = await tx_write(writer, session.identity(tx_id), [2])
    assert reply.status == StatusIds.NOT_FOUND
    assert "transaction not found" in reply.issues[0].message
    assert await writer.call.read() == grpc.aio.EOF
    # The producer wrote nothing: a fresh stream still starts from seq_no 0.
    assert (await RawWriter(channel).init("rb", producer_id="p")).init_response.last_seq_no == 0


async def test_killed_session_ends_its_attach_stream_and_aborts_its_transactions(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    await create_topic(channel, "dies", consumers=("c",))
    await write_messages(channel, "dies", 1)
    tx_id = await session.begin()
    writer = RawWriter(channel)
    await writer.init("dies", producer_id="p")
    await tx_write(writer, session.identity(tx_id), [1, 2])
    assert (await session.update_offsets(tx_id, "dies", "c", [(0, 1)])).status == StatusIds.SUCCESS

    assert server.faults.kill_query_session(session.session_id)
    state = await session.state()
    assert state.status == StatusIds.BAD_SESSION
    assert state.issues[0].message == "session killed by fault injection"
    assert await session.state() == grpc.aio.EOF
    assert session.session_id not in server.query.sessions
    assert (await session.commit(tx_id)).status == StatusIds.BAD_SESSION
    begin = qpb.BeginTransactionRequest(session_id=session.session_id)
    begin.tx_settings.serializable_read_write.SetInParent()
    assert (await query(channel, "BeginTransaction", begin, qpb.BeginTransactionResponse)).status == (
        StatusIds.BAD_SESSION
    )
    assert stored_fields(server, "dies", "offset", "producer_id", "seq_no") == [(0, "", 1)]
    assert server.storage.committed_offsets("dies", "c") == {0: 0}
    assert (await tx_write(writer, session.identity(tx_id), [3])).status == StatusIds.BAD_SESSION
    assert not server.faults.kill_query_session(session.session_id)


async def test_delete_session_and_closing_the_attach_stream_end_the_session(
    channel: grpc.aio.Channel, server: LocalTopicServer
) -> None:
    deleted = await Session(channel).open()
    tx_id = await deleted.begin()
    response = await query(channel, "DeleteSession", qpb.DeleteSessionRequest(session_id=deleted.session_id),
                           qpb.DeleteSessionResponse)
    assert response.status == StatusIds.SUCCESS
    assert (await deleted.state()).status == StatusIds.BAD_SESSION
    assert (await deleted.commit(tx_id)).status == StatusIds.BAD_SESSION
    response = await query(channel, "DeleteSession", qpb.DeleteSessionRequest(session_id=deleted.session_id),
                           qpb.DeleteSessionResponse)
    assert response.status == StatusIds.BAD_SESSION

    detached = await Session(channel).open()
    assert detached.session_id in server.query.sessions
    detached.close()
    # The server notices the cancelled stream on its own schedule.
    await eventually(lambda: detached.session_id not in server.query.sessions, "the detached session ended")
    assert detached.session_id not in server.query.sessions

    method = channel.unary_stream(f"/{QUERY}/AttachSession",
                                  request_serializer=qpb.AttachSessionRequest.SerializeToString,
                                  response_deserializer=qpb.SessionState.FromString)
    unknown = method(qpb.AttachSessionRequest(session_id="ydb://session/3?node_id=1&id=nope"), metadata=DB)
    assert (await unknown.read()).status == StatusIds.BAD_SESSION
    assert await unknown.read() == grpc.aio.EOF


async def test_offsets_advance_only_on_commit(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    await create_topic(channel, "src", consumers=("c",))
    await write_messages(channel, "src", 5)
    tx_id = await session.begin()
    assert (await session.update_offsets(tx_id, "src", "c", [(0, 2)])).status == StatusIds.SUCCESS
    assert (await session.update_offsets(tx_id, "/local/src", "c", [(2, 3)])).status == StatusIds.SUCCESS
    assert server.storage.committed_offsets("src", "c") == {0: 0}
    assert (await session.commit(tx_id)).status == StatusIds.SUCCESS
    assert server.storage.committed_offsets("src", "c") == {0: 3}

    # Two transactions over the same messages: the first to commit wins, the second aborts.
    first, second = await session.begin(), await session.begin()
    for tx_id in (first, second):
        assert (await session.update_offsets(tx_id, "src", "c", [(3, 5)])).status == StatusIds.SUCCESS
    assert (await session.commit(first)).status == StatusIds.SUCCESS
    aborted = await session.commit(second)
    assert aborted.status == StatusIds.ABORTED
    assert "expected 5" in aborted.issues[0].message
    assert server.storage.committed_offsets("src", "c") == {0: 5}


async def test_conflicting_offsets_abort_the_commit_with_nothing_applied(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    await create_topic(channel, "in", consumers=("c",))
    await create_topic(channel, "result")
    await write_messages(channel, "in", 4)
    tx_id = await session.begin()
    writer = RawWriter(channel)
    await writer.init("result", producer_id="p")
    assert acks(await tx_write(writer, session.identity(tx_id), [1, 2]))[1][1] == "written_in_tx"
    assert (await session.update_offsets(tx_id, "in", "c", [(0, 2)])).status == StatusIds.SUCCESS
    # Another reader of the consumer commits first, so the transaction's range no longer starts at the committed offset.
    commit = pb.CommitOffsetRequest(path="in", consumer="c", partition_id=0, offset=1)
    assert (await call(channel, "CommitOffset", commit, pb.CommitOffsetResponse)).status == StatusIds.SUCCESS

    aborted = await session.commit(tx_id)
    assert aborted.status == StatusIds.ABORTED
    assert aborted.issues[0].message == (
        "offsets of consumer 'c' in partition 0 of /local/in conflict: the transaction commits from offset 0, "
        "expected 1 (committed offset 1)"
    )
    assert stored_fields(server, "result", "offset", "producer_id", "seq_no") == []
    assert server.storage.committed_offsets("in", "c") == {0: 1}
    assert (await session.commit(tx_id)).status == StatusIds.NOT_FOUND
    assert server.query.aborted_transactions == 1

    # A gap between ranges and a range beyond the partition's end abort as well.
    for ranges in ([(1, 2), (3, 4)], [(1, 9)]):
        tx_id = await session.begin()
        assert (await session.update_offsets(tx_id, "in", "c", ranges)).status == StatusIds.SUCCESS
        assert (await session.commit(tx_id)).status == StatusIds.ABORTED
    assert server.storage.committed_offsets("in", "c") == {0: 1}
    await writer.close()


async def test_bad_offset_updates_are_refused_and_end_the_transaction(
    channel: grpc.aio.Channel, session: Session
) -> None:
    await create_topic(channel, "bad", consumers=("c",))
    tx_id = await session.begin()
    op = await session.update_offsets(tx_id, "bad", "nobody", [(0, 1)])
    assert (op.status, op.issues[0].message) == (StatusIds.BAD_REQUEST, "topic /local/bad has no consumer 'nobody'")
    assert (await session.commit(tx_id)).status == StatusIds.NOT_FOUND
    tx_id = await session.begin()
    assert (await session.update_offsets(tx_id, "bad", "c", [(2, 2)])).status == StatusIds.BAD_REQUEST
    assert (await session.update_offsets("no-such-tx", "bad", "c", [(0, 1)])).status == StatusIds.NOT_FOUND


async def test_read_only_transactions_take_no_topic_writes(channel: grpc.aio.Channel, session: Session) -> None:
    await create_topic(channel, "ro")
    request = qpb.BeginTransactionRequest(session_id=session.session_id)
    request.tx_settings.snapshot_read_only.SetInParent()
    tx_id = (await query(channel, "BeginTransaction", request, qpb.BeginTransactionResponse)).tx_meta.id
    writer = RawWriter(channel)
    await writer.init("ro")
    reply = await tx_write(writer, session.identity(tx_id), [1])
    assert reply.status == StatusIds.BAD_REQUEST
    no_mode = qpb.BeginTransactionRequest(session_id=session.session_id)
    assert (await query(channel, "BeginTransaction", no_mode, qpb.BeginTransactionResponse)).status == (
        StatusIds.BAD_REQUEST
    )


async def test_execute_query_explains_that_yql_is_not_executed(channel: grpc.aio.Channel, session: Session) -> None:
    method = channel.unary_stream(f"/{QUERY}/ExecuteQuery",
                                  request_serializer=qpb.ExecuteQueryRequest.SerializeToString,
                                  response_deserializer=qpb.ExecuteQueryResponsePart.FromString)
    request = qpb.ExecuteQueryRequest(session_id=session.session_id, query_content=qpb.QueryContent(text="SELECT 1"))
    stream = method(request, metadata=DB)
    part = await stream.read()
    assert part.status == StatusIds.UNSUPPORTED
    assert "does not execute YQL" in part.issues[0].message
    assert await stream.read() == grpc.aio.EOF


async def test_injected_failures_reach_query_calls(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    tx_id = await session.begin()
    server.faults.fail_next("CommitTransaction", "UNAVAILABLE")
    assert (await session.commit(tx_id)).status == StatusIds.UNAVAILABLE
    assert (await session.commit(tx_id)).status == StatusIds.SUCCESS


async def test_stopping_the_server_ends_sessions() -> None:
    server = LocalTopicServer()
    await server.start()
    async with grpc.aio.insecure_channel(server.endpoint.removeprefix("grpc://")) as channel:
        opened = await Session(channel).open()
        await server.stop()
        assert server.query.sessions == {}
        opened.close()


# --- the official SDK ---------------------------------------------------------------------------


async def test_official_session_pool_begins_commits_and_rolls_back(
    official_pool: Any, server: LocalTopicServer
) -> None:
    seen: list[str] = []

    async def begin_and_commit(session: Any) -> None:
        tx = session.transaction()
        await tx.begin()
        seen.append(tx.tx_id)
        assert tx.tx_id in server.query.sessions[session.session_id].transactions
        await tx.commit()
        assert server.query.sessions[session.session_id].transactions == {}

    async def begin_and_roll_back(session: Any) -> None:
        tx = session.transaction()
        await tx.begin()
        seen.append(tx.tx_id)
        await tx.rollback()
        assert server.query.sessions[session.session_id].transactions == {}

    await official_pool.retry_operation_async(begin_and_commit)
    await official_pool.retry_operation_async(begin_and_roll_back)
    assert len(set(seen)) == 2
    assert server.query.committed_transactions == 1
    with pytest.raises(ydb.issues.Unsupported, match="does not execute YQL"):
        await official_pool.execute_with_retries("SELECT 1")


async def test_official_tx_writer_and_tx_reader(official: Any, official_pool: Any, server: LocalTopicServer) -> None:
    client = official.topic_client
    await client.create_topic("source", consumers=["c"])
    await client.create_topic("sink")
    async with client.writer("source", producer_id="src") as writer:
        await writer.write_with_ack([ydb.TopicWriterMessage(b"a"), ydb.TopicWriterMessage(b"b")])

    reader = client.reader("source", consumer="c")
    try:
        async def transform(tx: Any) -> None:
            batch = await reader.receive_batch_with_tx(tx)
            tx_writer = client.tx_writer(tx, "sink", producer_id="sink-writer")
            await tx_writer.write([ydb.TopicWriterMessage(m.data.upper()) for m in batch.messages])

        await official_pool.retry_tx_async(transform)
    finally:
        await reader.close()
    assert stored_data(server, "sink") == [b"A", b"B"]
    assert [m.offset for m in server.storage.read("sink", 0)] == [0, 1]
    assert server.storage.committed_offsets("source", "c") == {0: 2}


async def test_a_write_stream_breaks_after_holding_transactional_writes(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    await create_topic(channel, "held")
    tx_id = await session.begin()
    writer = RawWriter(channel)
    assert (await writer.init("held", producer_id="p", partition_id=0)).status == StatusIds.SUCCESS
    server.faults.drop_write_stream_after(2)
    reply = await tx_write(writer, session.identity(tx_id), [1])
    assert acks(reply) == [(1, "written_in_tx", -1)]
    # The second message exhausts the budget: it is held, but its ack is lost with the stream.
    with pytest.raises(grpc.aio.AioRpcError) as broken:
        await tx_write(writer, session.identity(tx_id), [2])
    assert broken.value.code() == grpc.StatusCode.UNAVAILABLE
    assert server.faults.dropped_streams == 1
    held = server.query.sessions[session.session_id].transactions[tx_id].writes.messages
    assert [m.seq_no for _, m in held] == [1, 2]

    # A resend on a new stream is deduplicated inside the transaction, so the commit holds each once.
    again = RawWriter(channel)
    assert (await again.init("held", producer_id="p", partition_id=0)).status == StatusIds.SUCCESS
    assert acks(await tx_write(again, session.identity(tx_id), [2])) == [(2, "skipped", -1)]
    assert (await session.commit(tx_id)).status == StatusIds.SUCCESS
    assert stored_fields(server, "held", "offset", "producer_id", "seq_no") == [(0, "p", 1), (1, "p", 2)]
    await again.close()
    writer.call.cancel()


async def test_overlapping_offset_ranges_are_refused_at_the_call(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    """UpdateOffsetsInTransaction refuses ranges that overlap, inside one call or with a range the
    transaction already holds, at that call (BAD_REQUEST, and the transaction ends), not at commit
    (ydb/services/persqueue_v1/actors/update_offsets_in_transaction_actor.cpp and the KQP topic
    operations that merge the ranges)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 6)
    tx_id = await session.begin()
    op = await session.update_offsets(tx_id, "t", "c", [(0, 2), (1, 3)])
    assert op.status == StatusIds.BAD_REQUEST and "overlaps" in op.issues[0].message
    assert (await session.commit(tx_id)).status == StatusIds.NOT_FOUND
    tx_id = await session.begin()
    assert (await session.update_offsets(tx_id, "t", "c", [(0, 3)])).status == StatusIds.SUCCESS
    assert (await session.update_offsets(tx_id, "t", "c", [(2, 4)])).status == StatusIds.BAD_REQUEST
    assert server.storage.committed_offsets("t", "c") == {0: 0}


async def test_committing_offsets_past_the_partition_end_fails(
    channel: grpc.aio.Channel, server: LocalTopicServer, session: Session
) -> None:
    """Offsets a transaction commits must lie within the partition: a range past its end makes the
    commit fail (ABORTED) with nothing applied (the partition checks the transaction's offsets when
    it commits: ydb/core/persqueue/partition.cpp, TPartition::ExecUserActionOrTransaction)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 3)
    tx_id = await session.begin()
    assert (await session.update_offsets(tx_id, "t", "c", [(0, 5)])).status == StatusIds.SUCCESS
    committed = await session.commit(tx_id)
    assert committed.status == StatusIds.ABORTED and "beyond the partition's end 3" in committed.issues[0].message
    assert server.storage.committed_offsets("t", "c") == {0: 0}
