"""Raw gRPC helpers for local server tests: unary calls and bare write/read streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

LOCAL_POOL = [("grpc.use_local_subchannel_pool", 1)]
"""Each test's channel gets its own connections, never one left over from an earlier server."""
DB = [("x-ydb-database", "/local")]

WriteFromClient = pb.StreamWriteMessage.FromClient
WriteFromServer = pb.StreamWriteMessage.FromServer
ReadFromClient = pb.StreamReadMessage.FromClient
ReadFromServer = pb.StreamReadMessage.FromServer
ReadMsg = pb.StreamReadMessage
DirectMsg = pb.StreamDirectReadMessage


def address(server: LocalTopicServer) -> str:
    return server.endpoint.removeprefix("grpc://")


@pytest.fixture
async def channel(server: LocalTopicServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(address(server), options=LOCAL_POOL) as ch:
        yield ch


async def call(
    channel: grpc.aio.Channel,
    method: str,
    request: Any,
    response_cls: Any,
    *,
    service: str = "Ydb.Topic.V1.TopicService",
    metadata: list[tuple[str, str]] | None = None,
) -> Any:
    """One unary call; returns the Operation of the response."""
    rpc = channel.unary_unary(
        f"/{service}/{method}",
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    response = await rpc(request, metadata=DB if metadata is None else metadata, timeout=10)
    assert response.operation.ready
    return response.operation


def unpack(operation: Any, result_cls: Any) -> Any:
    """The operation's result, after checking it succeeded."""
    assert operation.status == StatusIds.SUCCESS, (StatusIds.StatusCode.Name(operation.status), operation.issues)
    upstream = "Ydb." + result_cls.DESCRIPTOR.full_name.removeprefix("YdbTopicAsync.")
    assert operation.result.type_url == f"type.googleapis.com/{upstream}"
    return result_cls.FromString(operation.result.value)


async def answer(channel: grpc.aio.Channel, method: str, request: Any) -> tuple[str, str]:
    """One unary topic call; its status's name and its first issue's message ("" without issues)."""
    op = await call(channel, method, request, getattr(pb, f"{method}Response"))
    return StatusIds.StatusCode.Name(op.status), op.issues[0].message if op.issues else ""


async def describe(
    channel: grpc.aio.Channel, path: str, *, include_stats: bool = False, include_location: bool = False
) -> pb.DescribeTopicResult:
    """DescribeTopic's result, after checking it succeeded."""
    request = pb.DescribeTopicRequest(path=path, include_stats=include_stats, include_location=include_location)
    result: pb.DescribeTopicResult = unpack(await call(channel, "DescribeTopic", request, pb.DescribeTopicResponse),
                                            pb.DescribeTopicResult)
    return result


async def create_topic(
    channel: grpc.aio.Channel, path: str, partitions: int = 1, consumers: tuple[str, ...] = ()
) -> None:
    request = pb.CreateTopicRequest(path=path)
    request.partitioning_settings.min_active_partitions = partitions
    for name in consumers:
        request.consumers.add(name=name)
    unpack(await call(channel, "CreateTopic", request, pb.CreateTopicResponse), pb.CreateTopicResult)


class RawWriter:
    """A bare StreamWrite call: send FromClient messages, read FromServer ones."""

    def __init__(self, channel: grpc.aio.Channel, metadata: list[tuple[str, str]] | None = None) -> None:
        method = channel.stream_stream(
            "/Ydb.Topic.V1.TopicService/StreamWrite",
            request_serializer=WriteFromClient.SerializeToString,
            response_deserializer=WriteFromServer.FromString,
        )
        self.call: Any = method(metadata=DB if metadata is None else metadata)

    async def init(self, path: str, producer_id: str = "", **partitioning: Any) -> Any:
        await self.call.write(WriteFromClient(init_request=pb.StreamWriteMessage.InitRequest(
            path=path, producer_id=producer_id, get_last_seq_no=True, **partitioning
        )))
        return await self.read()

    async def send(self, seq_nos: list[int], codec: int = 1, size: int = 0, producer: str = "") -> None:
        request = pb.StreamWriteMessage.WriteRequest(codec=codec)
        for seq_no in seq_nos:
            data = f"m{seq_no}".encode().ljust(size, b".")
            m = request.messages.add(seq_no=seq_no, data=data, uncompressed_size=len(data))
            m.created_at.FromSeconds(1_700_000_000)
        await self.call.write(WriteFromClient(write_request=request))

    async def write(self, seq_nos: list[int], codec: int = 1, size: int = 0) -> Any:
        await self.send(seq_nos, codec, size)
        return await self.read()

    async def read(self) -> Any:
        return await asyncio.wait_for(self.call.read(), 10)

    async def close(self) -> None:
        await self.call.done_writing()
        self.call.cancel()


def acks(response: Any) -> list[tuple[int, str, int]]:
    out = []
    for ack in response.write_response.acks:
        kind = ack.WhichOneof("message_write_status")
        out.append((ack.seq_no, kind, ack.written.offset if kind == "written" else -1))
    return out


async def write_messages(
    channel: grpc.aio.Channel, path: str, count: int, *, partition_id: int = 0, producer_id: str = "", size: int = 0
) -> None:
    """Store ``count`` messages (seq_no 1..count) in one partition through StreamWrite."""
    writer = RawWriter(channel)
    init = await writer.init(path, producer_id=producer_id, partition_id=partition_id)
    assert init.status == StatusIds.SUCCESS, init
    response = await writer.write(list(range(1, count + 1)), size=size)
    assert [kind for _, kind, _ in acks(response)] == ["written"] * count
    await writer.close()


class RawReader:
    """A bare StreamRead call with helpers to wait for a given kind of server message.

    Server messages are read by a background task into a queue: cancelling a pending
    ``call.read()`` would cancel the whole call, so waits with a timeout wait on the queue.
    """

    def __init__(self, channel: grpc.aio.Channel, metadata: list[tuple[str, str]] | None = None) -> None:
        method = channel.stream_stream(
            "/Ydb.Topic.V1.TopicService/StreamRead",
            request_serializer=ReadFromClient.SerializeToString,
            response_deserializer=ReadFromServer.FromString,
        )
        self.call: Any = method(metadata=DB if metadata is None else metadata)
        self.pending: list[Any] = []
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._pump = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            async for message in self.call:
                self._queue.put_nowait(message)
        except BaseException as exc:  # handed to the test through read()
            self._queue.put_nowait(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            self._queue.put_nowait(grpc.aio.EOF)

    async def _next(self, timeout: float) -> Any:
        item = await asyncio.wait_for(self._queue.get(), timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    async def init(
        self,
        path: str,
        consumer: str = "",
        partition_ids: tuple[int, ...] = (),
        auto_partitioning: bool = False,
        reader_name: str = "",
        *,
        direct_read: bool = False,
        more_paths: tuple[str, ...] = (),
    ) -> Any:
        init = ReadMsg.InitRequest(consumer=consumer, reader_name=reader_name,
                                   auto_partitioning_support=auto_partitioning, direct_read=direct_read)
        init.topics_read_settings.add(path=path, partition_ids=partition_ids)
        for more in more_paths:
            init.topics_read_settings.add(path=more)
        await self.call.write(ReadFromClient(init_request=init))
        return await self.read()

    async def send(self, **kwargs: Any) -> None:
        await self.call.write(ReadFromClient(**kwargs))

    async def credit(self, size: int) -> None:
        await self.send(read_request=ReadMsg.ReadRequest(bytes_size=size))

    async def confirm_start(self, start: Any, read_offset: int | None = None) -> None:
        response = ReadMsg.StartPartitionSessionResponse(
            partition_session_id=start.start_partition_session_request.partition_session.partition_session_id
        )
        if read_offset is not None:
            response.read_offset = read_offset
        await self.send(start_partition_session_response=response)

    async def commit(self, partition_session_id: int, start: int, end: int) -> None:
        request = ReadMsg.CommitOffsetRequest()
        part = request.commit_offsets.add(partition_session_id=partition_session_id)
        part.offsets.add(start=start, end=end)
        await self.send(commit_offset_request=request)

    async def read(self, timeout: float = 10) -> Any:
        if self.pending:
            return self.pending.pop(0)
        return await self._next(timeout)

    async def expect(self, kind: str, timeout: float = 10) -> Any:
        """The next server message of ``kind``; messages of other kinds are kept for later."""
        for i, message in enumerate(self.pending):
            if message.WhichOneof("server_message") == kind:
                return self.pending.pop(i)
        while True:
            message = await self._next(timeout)
            assert message is not grpc.aio.EOF, f"the stream ended while waiting for {kind}"
            assert message.status == StatusIds.SUCCESS, message
            if message.WhichOneof("server_message") == kind:
                return message
            self.pending.append(message)

    async def nothing(self, kind: str, wait: float = 0.2) -> None:
        """Assert no server message of ``kind`` arrives within ``wait`` seconds."""
        assert all(m.WhichOneof("server_message") != kind for m in self.pending)
        try:
            message = await self._next(wait)
        except TimeoutError:
            return
        assert message.WhichOneof("server_message") != kind, message
        self.pending.append(message)

    async def sync(self, partition_session_id: int) -> None:
        """Wait until the server has handled everything sent on this stream so far: it handles a
        stream's messages in order, and answers a status request in its turn (other messages
        meanwhile are kept for later)."""
        await self.send(
            partition_session_status_request=ReadMsg.PartitionSessionStatusRequest(
                partition_session_id=partition_session_id
            )
        )
        while True:
            status = await self.expect("partition_session_status_response")
            if status.partition_session_status_response.partition_session_id == partition_session_id:
                return

    def kept(self, kind: str) -> list[Any]:
        """The messages of ``kind`` received and not handed out yet."""
        return [m for m in self.pending if m.WhichOneof("server_message") == kind]

    async def start_all(self, count: int) -> dict[int, int]:
        """Accept ``count`` partition sessions; returns partition id -> partition session id."""
        out = {}
        for _ in range(count):
            start = await self.expect("start_partition_session_request")
            await self.confirm_start(start)
            session = start.start_partition_session_request.partition_session
            out[session.partition_id] = session.partition_session_id
        return out

    async def close(self) -> None:
        self.call.cancel()
        done, _ = await asyncio.wait([self._pump], timeout=10)
        assert done, "the read stream did not end after it was cancelled"


class RawDirectReader(RawReader):
    """A bare StreamDirectRead call (the same queueing of server messages as ``RawReader``)."""

    def __init__(self, channel: grpc.aio.Channel, metadata: list[tuple[str, str]] | None = None) -> None:
        method = channel.stream_stream(
            "/Ydb.Topic.V1.TopicService/StreamDirectRead",
            request_serializer=DirectMsg.FromClient.SerializeToString,
            response_deserializer=DirectMsg.FromServer.FromString,
        )
        self.call = method(metadata=DB if metadata is None else metadata)
        self.pending = []
        self._queue = asyncio.Queue()
        self._pump = asyncio.get_running_loop().create_task(self._run())

    async def init(  # type: ignore[override]
        self, path: str, consumer: str = "", *, session_id: str, more_paths: tuple[str, ...] = ()
    ) -> Any:
        init = DirectMsg.InitRequest(consumer=consumer, session_id=session_id)
        for topic in (path, *more_paths):
            init.topics_read_settings.add(path=topic)
        await self.call.write(DirectMsg.FromClient(init_request=init))
        return await self.read()

    async def init_within(
        self, timeout: float, path: str, consumer: str = "", *, session_id: str
    ) -> Any:
        """``init``, waiting at most ``timeout`` seconds for the answer (TimeoutError)."""
        init = DirectMsg.InitRequest(consumer=consumer, session_id=session_id)
        init.topics_read_settings.add(path=path)
        await self.call.write(DirectMsg.FromClient(init_request=init))
        return await self.read(timeout)

    async def send(self, **kwargs: Any) -> None:
        await self.call.write(DirectMsg.FromClient(**kwargs))

    async def start(self, partition_session_id: int, generation: int, last_direct_read_id: int = 0) -> None:
        await self.send(start_direct_read_partition_session_request=DirectMsg.StartDirectReadPartitionSessionRequest(
            partition_session_id=partition_session_id, generation=generation, last_direct_read_id=last_direct_read_id
        ))


async def direct_ack(reader: RawReader, partition_session_id: int, direct_read_id: int) -> None:
    """DirectReadAck on the control stream."""
    await reader.send(direct_read_ack=ReadMsg.DirectReadAck(
        partition_session_id=partition_session_id, direct_read_id=direct_read_id
    ))


def direct_offsets(message: Any) -> list[tuple[int, int, int]]:
    """(partition session id, direct read id, offset) of every message of a DirectReadResponse."""
    read = message.direct_read_response
    return [
        (read.partition_session_id, read.direct_read_id, m.offset)
        for batch in read.partition_data.batches
        for m in batch.message_data
    ]


def offsets(read: Any) -> list[tuple[int, int]]:
    """(partition session id, offset) of every message in a ReadResponse."""
    return [
        (data.partition_session_id, m.offset)
        for data in read.read_response.partition_data
        for batch in data.batches
        for m in batch.message_data
    ]
