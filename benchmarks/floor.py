"""The floor: what a bare ``grpc.aio`` client pays to move the same messages, with no SDK around it.

An SDK cannot cost less per message than the protobuf and gRPC work it cannot avoid; these
clients do only that work, so ``SDK CPU / floor CPU`` is how much the SDK adds. ``write.py`` and
``read.py`` run them in the same process and run as the SDKs they compare, so machine noise hits
all of them alike.

- ``floor_write``: one StreamWrite; builds and serializes the same WriteRequests as this SDK's
  writer (``seq_no``, ``created_at`` stamped per message, ``data``, ``uncompressed_size``, the
  raw codec), ``batch`` messages per request, sends them as fast as gRPC flow control allows and
  waits for every ack (checking each ack's seq_no).
- ``floor_read``: one StreamRead under a consumer; parses each ReadResponse, touches every
  message's ``.data`` and ``.offset``, returns the response's bytes as credit, commits each
  response's offset range (one CommitOffsetRequest per response) and waits for the last commit's
  acknowledgement. Given a ``decode`` function, it also decodes each response's payloads, in one
  worker thread (as ``large.py`` asks of every reader).

Standalone, against a fresh local server: ``python benchmarks/floor.py --messages 100000``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds

Write = pb.StreamWriteMessage
Read = pb.StreamReadMessage
SUCCESS = StatusIds.SUCCESS
_OPTIONS = [
    ("grpc.max_send_message_length", 64_000_000),
    ("grpc.max_receive_message_length", 64_000_000),
    ("grpc.use_local_subchannel_pool", 1),
]


def _target(endpoint: str) -> str:
    return endpoint.removeprefix("grpc://")


def _open(channel: grpc.aio.Channel, method: str, messages: Any, database: str) -> Any:
    """A bidirectional stream call of ``/Ydb.Topic.V1.TopicService/<method>`` (``messages``: its message pair)."""
    return channel.stream_stream(
        f"/Ydb.Topic.V1.TopicService/{method}",
        request_serializer=messages.FromClient.SerializeToString,
        response_deserializer=messages.FromServer.FromString,
    )(metadata=[("x-ydb-database", database)])


async def floor_write(
    endpoint: str, database: str, path: str, payload: bytes, messages: int, batch: int, producer_id: str = "floor"
) -> dict[str, Any]:
    """Write ``messages`` copies of ``payload``, ``batch`` per WriteRequest; returns after the last ack."""
    async with grpc.aio.insecure_channel(_target(endpoint), options=_OPTIONS) as channel:
        call = _open(channel, "StreamWrite", Write, database)
        init = Write.FromClient()
        init.init_request.path = path
        init.init_request.producer_id = producer_id
        init.init_request.message_group_id = producer_id
        init.init_request.get_last_seq_no = True
        await call.write(init)
        reply = await call.read()
        if reply.status != SUCCESS or not reply.HasField("init_response"):
            raise RuntimeError(f"write handshake failed: {reply}")
        first = reply.init_response.last_seq_no + 1
        last = first + messages - 1

        async def send() -> None:
            size = len(payload)
            time_ns = time.time_ns
            seq_no = first
            while seq_no <= last:
                request = Write.FromClient()
                write = request.write_request
                write.codec = 1
                add = write.messages.add
                for _ in range(min(batch, last - seq_no + 1)):
                    message = add()
                    message.seq_no = seq_no
                    created = message.created_at
                    created.seconds, created.nanos = divmod(time_ns(), 1_000_000_000)
                    message.data = payload
                    message.uncompressed_size = size
                    seq_no += 1
                await call.write(request)

        sender = asyncio.ensure_future(send())
        requests = 0
        try:
            expected = first
            while expected <= last:
                response = await call.read()
                if response is grpc.aio.EOF or response.status != SUCCESS:
                    raise RuntimeError(f"write stream failed: {response}")
                requests += 1
                for ack in response.write_response.acks:
                    if ack.seq_no != expected:
                        raise RuntimeError(f"ack for seq_no {ack.seq_no}, expected {expected}")
                    expected += 1
            await sender
        finally:
            sender.cancel()
            call.cancel()
        return {"batch": batch, "write_responses": requests}


async def floor_read(
    endpoint: str,
    database: str,
    path: str,
    consumer: str,
    messages: int,
    buffer: int,
    decode: Callable[[bytes], bytes] | None = None,
) -> dict[str, Any]:
    """Read ``messages`` messages under ``consumer`` (committing them); returns after the last commit ack.

    ``decode``: run on every payload, a response's payloads at a time in a worker thread."""
    async with grpc.aio.insecure_channel(_target(endpoint), options=_OPTIONS) as channel:
        call = _open(channel, "StreamRead", Read, database)
        init = Read.FromClient()
        init.init_request.consumer = consumer
        init.init_request.topics_read_settings.add(path=path)
        await call.write(init)
        reply = await call.read()
        if reply.status != SUCCESS:
            raise RuntimeError(f"read handshake failed: {reply}")
        await call.write(Read.FromClient(read_request=Read.ReadRequest(bytes_size=buffer)))
        got = 0
        touched = 0
        committed: dict[int, int] = {}
        wanted: dict[int, int] = {}
        responses = 0
        try:
            while got < messages or any(committed.get(k, -1) < v for k, v in wanted.items()):
                response = await call.read()
                if response is grpc.aio.EOF or response.status != SUCCESS:
                    raise RuntimeError(f"read stream failed: {response}")
                kind = response.WhichOneof("server_message")
                if kind == "read_response":
                    responses += 1
                    read = response.read_response
                    commit = Read.FromClient()
                    payloads: list[bytes] = []
                    for part in read.partition_data:
                        start = end = -1
                        for batch in part.batches:
                            for message in batch.message_data:
                                data = message.data
                                if decode is None:
                                    touched += len(data)
                                else:
                                    payloads.append(data)
                                end = message.offset
                                if start < 0:
                                    start = end
                                got += 1
                        if start >= 0:
                            commit.commit_offset_request.commit_offsets.add(
                                partition_session_id=part.partition_session_id
                            ).offsets.add(start=start, end=end + 1)
                            wanted[part.partition_session_id] = end + 1
                    if decode is not None:
                        decoded = await asyncio.to_thread(list, map(decode, payloads))
                        touched += sum(map(len, decoded))
                    await call.write(Read.FromClient(read_request=Read.ReadRequest(bytes_size=read.bytes_size)))
                    if commit.HasField("commit_offset_request"):
                        await call.write(commit)
                elif kind == "start_partition_session_request":
                    session = response.start_partition_session_request.partition_session
                    answer = Read.FromClient()
                    answer.start_partition_session_response.partition_session_id = session.partition_session_id
                    await call.write(answer)
                elif kind == "commit_offset_response":
                    for part in response.commit_offset_response.partitions_committed_offsets:
                        committed[part.partition_session_id] = part.committed_offset
        finally:
            call.cancel()
        return {"read_responses": responses, "bytes_touched": touched}


async def _main(args: argparse.Namespace) -> None:
    from _harness import ServerProcess, measure

    import ydb_topic_async as yta

    payload = b"f" * args.size
    with ServerProcess() as server:
        async with yta.Driver(server.endpoint, server.database, discovery=False) as driver:
            await driver.topic.create_topic("floor", consumers=["floor"])
        write = await measure(
            server,
            lambda: floor_write(server.endpoint, server.database, "floor", payload, args.messages, args.batch),
            benchmark="floor", client="floor", label="bare grpc.aio", messages=args.messages, size=args.size,
            mode="write",
        )
        read = await measure(
            server,
            lambda: floor_read(server.endpoint, server.database, "floor", "floor", args.messages, 50 * 1024 * 1024),
            benchmark="floor", client="floor", label="bare grpc.aio", messages=args.messages, size=args.size,
            mode="read",
        )
    for f in (write, read):
        print(
            f"{f.mode:<6} {f.rate:>10,.0f} msg/s  client {f.client_us_per_message:.2f} µs/msg  "
            f"server {f.server_us_per_message:.2f} µs/msg (CPU/wall {f.server_utilisation:.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000, help="messages per WriteRequest (default 1000)")
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
