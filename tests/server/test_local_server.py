"""The local topic server over raw gRPC: handshake, deduplication, partitioning, statuses, faults."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import sys
from pathlib import Path

import grpc
import grpc.aio
import pytest

import ydb_topic_async as yta
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer

from .conftest import LOCAL_POOL, RawWriter, acks


async def test_deduplication_by_producer_and_seq_no(
    server: LocalTopicServer, driver: yta.Driver, channel: grpc.aio.Channel
) -> None:
    await driver.topic.create_topic("dedup")
    first = RawWriter(channel)
    init = await first.init("dedup", producer_id="p1")
    assert init.status == StatusIds.SUCCESS
    assert init.init_response.last_seq_no == 0
    assert acks(await first.write([1, 2, 3])) == [(1, "written", 0), (2, "written", 1), (3, "written", 2)]
    # A resend after a lost ack: old seq_nos are skipped, the new one is stored.
    assert acks(await first.write([2, 3, 4])) == [(2, "skipped", -1), (3, "skipped", -1), (4, "written", 3)]
    await first.close()

    second = RawWriter(channel)
    init = await second.init("/local/dedup", producer_id="p1")
    assert init.init_response.last_seq_no == 4
    assert init.init_response.partition_id == 0
    await second.close()
    stored = server.storage.read("/local/dedup", 0)
    assert [(m.offset, m.seq_no, m.data, m.producer_id) for m in stored] == [
        (0, 1, b"m1", "p1"), (1, 2, b"m2", "p1"), (2, 3, b"m3", "p1"), (3, 4, b"m4", "p1")
    ]
    assert stored[0].created_at_ns == 1_700_000_000 * 10**9


async def test_no_producer_id_means_no_deduplication(
    server: LocalTopicServer, driver: yta.Driver, channel: grpc.aio.Channel
) -> None:
    await driver.topic.create_topic("nodedup")
    raw = RawWriter(channel)
    await raw.init("nodedup")
    assert acks(await raw.write([1])) == [(1, "written", 0)]
    assert acks(await raw.write([1])) == [(1, "written", 1)]
    await raw.close()


async def test_new_producers_are_placed_by_the_md5_of_their_id_and_stay_bound(
    driver: yta.Driver, channel: grpc.aio.Channel
) -> None:
    """YDB places a new producer by the MD5 of its id over the partitions (ydb-platform/ydb,
    ydb/services/persqueue_v1/actors/write_session_actor.ipp: CalculateFirstClassPartition, and
    ydb/services/lib/sharding/sharding.cpp: ShardFromDecimal), not round-robin."""
    await driver.topic.create_topic("rr", min_active_partitions=3)
    slice_size = (2**128 - 1) // 3
    producers = [f"p{i}" for i in range(12)]
    expected = [min(int(hashlib.md5(p.encode()).hexdigest(), 16) // slice_size, 2) for p in producers]
    assert len(set(expected)) > 1  # the ids spread over several partitions
    for _ in range(2):  # a second session of each producer keeps its partition
        chosen = []
        for producer in producers:
            raw = RawWriter(channel)
            chosen.append((await raw.init("rr", producer_id=producer)).init_response.partition_id)
            await raw.close()
        assert chosen == expected


async def test_handshake_errors(driver: yta.Driver, channel: grpc.aio.Channel) -> None:
    await driver.topic.create_topic("strict", supported_codecs=[yta.Codec.ZSTD])
    raw = RawWriter(channel)
    assert (await raw.init("missing")).status == StatusIds.SCHEME_ERROR
    raw = RawWriter(channel)
    reply = await raw.init("strict", partition_id=5)
    assert reply.status == StatusIds.BAD_REQUEST
    assert "no partition 5" in reply.issues[0].message
    raw = RawWriter(channel)
    reply = await raw.init("strict", producer_id="x" * 2049)
    assert reply.status == StatusIds.BAD_REQUEST
    raw = RawWriter(channel)
    await raw.init("strict", producer_id="p")
    reply = await raw.write([1], codec=yta.Codec.GZIP)
    assert reply.status == StatusIds.BAD_REQUEST
    assert "codec 2" in reply.issues[0].message
    assert await raw.call.read() == grpc.aio.EOF  # the server closed the stream
    raw = RawWriter(channel)
    await raw.init("strict", producer_id="p")
    assert acks(await raw.write([1], codec=yta.Codec.ZSTD)) == [(1, "written", 0)]
    await raw.close()


async def test_results_carry_upstream_type_urls(driver: yta.Driver, channel: grpc.aio.Channel) -> None:
    await driver.topic.create_topic("urls")
    describe = channel.unary_unary(
        "/Ydb.Topic.V1.TopicService/DescribeTopic",
        request_serializer=pb.DescribeTopicRequest.SerializeToString,
        response_deserializer=pb.DescribeTopicResponse.FromString,
    )
    response = await describe(pb.DescribeTopicRequest(path="/local/urls"), metadata=[("x-ydb-database", "/local")])
    assert response.operation.ready
    assert response.operation.result.type_url == "type.googleapis.com/Ydb.Topic.DescribeTopicResult"


async def test_auth_guards_streams_too() -> None:
    async with (
        LocalTopicServer(users={"u": "p"}) as srv,
        grpc.aio.insecure_channel(srv.endpoint.removeprefix("grpc://"), options=LOCAL_POOL) as ch,
    ):
        reply = await RawWriter(ch).init("anything", producer_id="p")
        assert reply.status == StatusIds.UNAUTHORIZED
        token = srv.auth.login("u", "p")
        assert token is not None
        reply = await RawWriter(ch, [("x-ydb-auth-ticket", token)]).init("anything")
        assert reply.status == StatusIds.SCHEME_ERROR  # authenticated; the topic just does not exist
        assert srv.auth.login("u", "wrong") is None


async def test_expired_tokens_are_refused() -> None:
    async with LocalTopicServer(users={"u": "p"}, token_ttl=0.05) as srv:
        token = srv.auth.login("u", "p")
        assert token is not None
        assert srv.auth.check_token(token) is None
        await asyncio.sleep(0.1)
        assert srv.auth.check_token(token) == "auth ticket expired"


async def test_injected_statuses(server: LocalTopicServer, driver: yta.Driver, channel: grpc.aio.Channel) -> None:
    server.faults.fail_next("DescribeTopic", "OVERLOADED")
    server.faults.fail_next("CreateTopic", "SCHEME_ERROR")
    with pytest.raises(yta.SchemeError, match="injected"):
        await driver.topic.create_topic("faulty")
    await driver.topic.create_topic("faulty")
    # OVERLOADED is retriable: the driver's retry policy gets through on the second try.
    description = await driver.topic.describe_topic("faulty")
    assert description.path == "/local/faulty"
    server.faults.fail_next("StreamWrite", "UNAVAILABLE")
    assert (await RawWriter(channel).init("faulty")).status == StatusIds.UNAVAILABLE
    assert (await RawWriter(channel).init("faulty")).status == StatusIds.SUCCESS


async def test_write_stream_drop_after_n_messages(
    server: LocalTopicServer, driver: yta.Driver, channel: grpc.aio.Channel
) -> None:
    await driver.topic.create_topic("drop")
    raw = RawWriter(channel)
    await raw.init("drop", producer_id="p")
    server.faults.drop_write_stream_after(3)
    assert acks(await raw.write([1, 2])) == [(1, "written", 0), (2, "written", 1)]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw.write([3, 4])
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    # The batch that crossed the limit was stored; only its ack was lost.
    assert [m.seq_no for m in server.storage.read("/local/drop", 0)] == [1, 2, 3, 4]
    assert server.faults.dropped_streams == 1


async def test_drop_write_streams_breaks_open_streams(
    server: LocalTopicServer, driver: yta.Driver, channel: grpc.aio.Channel
) -> None:
    await driver.topic.create_topic("drop-all")
    raw = RawWriter(channel)
    await raw.init("drop-all")
    assert server.faults.drop_write_streams() == 1
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw.call.read()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_split_partition_makes_children(server: LocalTopicServer, driver: yta.Driver) -> None:
    await driver.topic.create_topic("split", consumers=["c"])
    children = server.storage.split_partition("split", 0)
    assert children == (1, 2)
    description = await driver.topic.describe_topic("split")
    parent = description.partitions[0]
    assert not parent.active and parent.child_partition_ids == (1, 2)
    assert description.active_partition_ids == [1, 2]
    assert description.partitions[1].parent_partition_ids == (0,)


async def test_pytest_fixture(ydb_topic_server: LocalTopicServer) -> None:
    async with yta.Driver(ydb_topic_server.endpoint, ydb_topic_server.database) as driver:
        await driver.topic.create_topic("from-fixture")
        assert (await driver.topic.describe_topic("from-fixture")).partitions[0].active


async def test_standalone_process() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.testing", "--port", "0", "--database", "/standalone",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        connection_string = line.split(": ", 1)[1].strip()
        assert connection_string.endswith("/?database=/standalone")
        async with yta.Driver(connection_string) as driver:
            await driver.topic.create_topic("t", min_active_partitions=2)
            assert (await driver.topic.describe_topic("t")).active_partition_ids == [0, 1]
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0


async def test_standalone_cluster_on_consecutive_ports() -> None:
    """``--nodes 3 --port N`` listens on N, N+1 and N+2; a busy one among them is refused up front."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.testing", "--port", str(base), "--nodes", "3",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 30)).decode() for _ in range(4)]
        assert [line.rsplit(":", 1)[-1].strip() for line in lines[1:]] == [str(base + i) for i in range(3)], lines
        async with yta.Driver(f"grpc://127.0.0.1:{base + 2}", "/local") as driver:
            await driver.wait_ready(timeout=10)
            assert len(driver.endpoints) == 3
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0


async def _standalone_fails(*args: str) -> str:
    """Run ``python -m ydb_topic_async.testing`` expecting it to fail; its stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.testing", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert (proc.returncode, out) == (1, b"")
    text = err.decode()
    assert text.count("\n") == 1 and "Traceback" not in text, text
    return text


async def test_standalone_process_on_a_busy_port_says_so_in_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err = await _standalone_fails("--port", str(port))
    assert err == f"python -m ydb_topic_async.testing: error: cannot serve on 127.0.0.1:{port}: the port is in use\n"


async def test_standalone_process_on_a_data_directory_in_use_says_so_in_one_line(tmp_path: Path) -> None:
    async with LocalTopicServer(data_dir=tmp_path):
        err = await _standalone_fails("--port", "0", "--data-dir", str(tmp_path))
    assert err.startswith("python -m ydb_topic_async.testing: error: ") and str(tmp_path) in err, err


async def test_a_cancelled_wait_closed_leaves_the_server_able_to_stop() -> None:
    """Serving until interrupted (``ydb-topic-async serve`` and Ctrl-C) cancels ``wait_closed``;
    the stop that follows must still shut the server down, not raise CancelledError and leave
    gRPC's server half stopped (which could hang the process at exit)."""
    server = LocalTopicServer()
    await server.start()
    waiter = asyncio.ensure_future(server.wait_closed())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.wait_for(server.stop(), 10)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.wait_for(asyncio.open_connection("127.0.0.1", server.port), 10)
    # Once stopped, waiting for the end returns at once.
    await asyncio.wait_for(server.wait_closed(), 1)
