"""``LocalTopicCluster``: several real gRPC nodes over one storage, as YDB's nodes over its tablets.

Raw gRPC against each node: discovery, partition locations, a node stopped and started again,
what write, read and query sessions see when a node goes away, and direct write's locality rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_discovery_pb2
from ydb_topic_async._proto import ydb_query_pb2 as qpb
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicCluster, ServerNode

from .conftest import DB, LOCAL_POOL, RawReader, RawWriter, acks, call, create_topic, offsets, unpack, write_messages

pytestmark = pytest.mark.timeout(60)

DISCOVERY = "Ydb.Discovery.V1.DiscoveryService"


@pytest.fixture
async def cluster() -> AsyncIterator[LocalTopicCluster]:
    async with LocalTopicCluster(3) as started:
        yield started


@pytest.fixture
async def channels(cluster: LocalTopicCluster) -> AsyncIterator[list[grpc.aio.Channel]]:
    """One channel per node, in node order."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(grpc.aio.insecure_channel(f"{n.host}:{n.port}", options=LOCAL_POOL))
            for n in cluster.nodes
        ]


async def list_endpoints(channel: grpc.aio.Channel) -> ydb_discovery_pb2.ListEndpointsResult:
    op = await call(channel, "ListEndpoints", ydb_discovery_pb2.ListEndpointsRequest(database="/local"),
                    ydb_discovery_pb2.ListEndpointsResponse, service=DISCOVERY)
    result: ydb_discovery_pb2.ListEndpointsResult = unpack(op, ydb_discovery_pb2.ListEndpointsResult)
    return result


async def locations(channel: grpc.aio.Channel, path: str) -> list[tuple[int, int]]:
    """(node id, generation) of each partition, as DescribeTopic with include_location reports it."""
    request = pb.DescribeTopicRequest(path=path, include_location=True)
    result = unpack(await call(channel, "DescribeTopic", request, pb.DescribeTopicResponse), pb.DescribeTopicResult)
    return [(p.partition_location.node_id, p.partition_location.generation) for p in result.partitions]


def channel_of(cluster: LocalTopicCluster, channels: list[grpc.aio.Channel], node: ServerNode) -> grpc.aio.Channel:
    return channels[cluster.nodes.index(node)]


async def test_discovery_names_every_live_node_with_its_location(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel]
) -> None:
    """Every node answers ListEndpoints with all live nodes (address, port, node id, location)
    and its own location as ``self_location`` (ydb-api-protos ``ydb_discovery.proto``:
    ``EndpointInfo.location``/``node_id``, ``ListEndpointsResult.self_location``)."""
    expected = [("127.0.0.1", n.port, n.node_id, n.location) for n in cluster.nodes]
    assert [n.location for n in cluster.nodes] == ["dc-1", "dc-2", "dc-3"]
    for node, channel in zip(cluster.nodes, channels, strict=True):
        result = await list_endpoints(channel)
        assert result.self_location == node.location
        assert [(e.address, e.port, e.node_id, e.location) for e in result.endpoints] == expected

    await cluster.stop_node(1)
    result = await list_endpoints(channels[2])
    assert [e.node_id for e in result.endpoints] == [1, 3]
    assert cluster.endpoints == [cluster.nodes[0].endpoint, cluster.nodes[2].endpoint]

    await cluster.start_node(1)
    result = await list_endpoints(channels[0])
    assert [e.node_id for e in result.endpoints] == [1, 2, 3]


async def test_locations_can_be_named() -> None:
    async with (
        LocalTopicCluster(2, locations=["vla", "sas"]) as cluster,
        grpc.aio.insecure_channel(cluster.endpoint.removeprefix("grpc://"), options=LOCAL_POOL) as ch,
    ):
        result = await list_endpoints(ch)
    assert result.self_location == "vla"
    assert [(e.node_id, e.location) for e in result.endpoints] == [(1, "vla"), (2, "sas")]


def test_cluster_options_are_checked() -> None:
    with pytest.raises(ValueError, match="nodes must be a positive int"):
        LocalTopicCluster(0)
    with pytest.raises(ValueError, match="one location per node"):
        LocalTopicCluster(3, locations=["a"])
    with pytest.raises(ValueError, match="one port per node"):
        LocalTopicCluster(2, ports=[0])


async def test_a_stopped_node_refuses_connections_and_starts_again_on_its_port(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel]
) -> None:
    node = cluster.nodes[2]
    port = node.port
    reader = RawReader(channels[2])
    await create_topic(channels[0], "t", consumers=("c",))
    assert (await reader.init("t", consumer="c")).status == StatusIds.SUCCESS

    await cluster.stop_node(2)
    stopped = node.alive
    assert not stopped
    # The stream it served broke: gRPC reports the connection gone.
    with pytest.raises(grpc.aio.AioRpcError) as broken:
        while True:
            await reader.read()
    assert broken.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    await reader.close()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    await cluster.stop_node(2)  # stopping a stopped node does nothing

    await cluster.start_node(2)
    assert node.alive and node.port == port
    result = await list_endpoints(channels[2])  # the same channel reconnects to the same port
    assert result.self_location == "dc-3"


async def test_partitions_are_placed_on_nodes_and_move_with_a_new_generation(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel]
) -> None:
    """A partition's location is its tablet's node and generation (YDB's read balancer reports
    ``TabletPipes[..].NodeId/Generation``, ``read_balancer_partition_location.cpp``); a tablet
    restarted on another node has a higher generation."""
    await create_topic(channels[0], "t", partitions=6)
    before = await locations(channels[1], "t")
    assert {node for node, _ in before} == {1, 2, 3}  # spread over every node
    assert {generation for _, generation in before} == {1}
    request = pb.DescribePartitionRequest(path="t", partition_id=4, include_location=True)
    described = unpack(await call(channels[2], "DescribePartition", request, pb.DescribePartitionResponse),
                       pb.DescribePartitionResult)
    assert (described.partition.partition_location.node_id, described.partition.partition_location.generation) == (
        before[4]
    )

    await cluster.stop_node(1)
    after = await locations(channels[0], "t")
    for (old_node, old_gen), (new_node, new_gen) in zip(before, after, strict=True):
        if old_node == 2:
            assert new_node in (1, 3) and new_gen == old_gen + 1
        else:
            assert (new_node, new_gen) == (old_node, old_gen)  # untouched

    # Back on its port, the node gets no partition back (YDB does not move tablets home), but new ones.
    await cluster.start_node(1)
    assert await locations(channels[1], "t") == after
    await create_topic(channels[0], "u", partitions=6)
    assert {node for node, _ in await locations(channels[0], "u")} == {1, 2, 3}


async def test_write_sessions_of_a_moved_partition_end_with_unavailable(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel]
) -> None:
    """A write session whose partition's tablet went away closes with UNAVAILABLE (YDB's write
    session: ``Handle(TEvPartitionWriter::TEvDisconnected)`` -> "pipe to partition's tablet is
    dead", TABLET_PIPE_DISCONNECTED, ``write_session_actor.ipp``), on whichever node it runs;
    what it stored stays."""
    await create_topic(channels[0], "t", partitions=3)
    home = cluster.node_of("t", 0)
    others = [n for n in cluster.nodes if n is not home]
    writer = RawWriter(channel_of(cluster, channels, others[0]))
    assert (await writer.init("t", producer_id="p", partition_id=0)).status == StatusIds.SUCCESS
    assert [kind for _, kind, _ in acks(await writer.write([1, 2]))] == ["written", "written"]
    bystander = RawWriter(channel_of(cluster, channels, others[0]))
    untouched = next(pid for pid in range(3) if cluster.node_of("t", pid) is not home)
    assert (await bystander.init("t", producer_id="q", partition_id=untouched)).status == StatusIds.SUCCESS

    await cluster.stop_node(cluster.nodes.index(home))
    ended = await writer.read()
    assert ended.status == StatusIds.UNAVAILABLE
    assert ended.issues[0].message == "pipe to partition's tablet is dead"
    await writer.close()
    # A session of a partition that did not move goes on.
    assert [kind for _, kind, _ in acks(await bystander.write([1]))] == ["written"]
    await bystander.close()

    again = RawWriter(channel_of(cluster, channels, others[1]))
    init = await again.init("t", producer_id="p", partition_id=0)
    assert (init.status, init.init_response.last_seq_no) == (StatusIds.SUCCESS, 2)
    assert [kind for _, kind, _ in acks(await again.write([2, 3]))] == ["skipped", "written"]
    await again.close()
    assert [m.seq_no for m in cluster.storage.read("t", 0)] == [1, 2, 3]


async def test_direct_write_needs_the_partitions_node_and_generation(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel]
) -> None:
    """Direct write (``partition_with_generation``) is served only by the node that runs the
    partition's tablet, of that generation: otherwise the partition writer reports
    PartitionNotLocal (``TPartitionWriter::Handle(TEvClientConnected)`` checks ExpectedGeneration
    and the tablet's node, ``ydb/core/persqueue/writer/writer.cpp``) and the session ends with
    UNAVAILABLE, so the client locates the partition again."""
    await create_topic(channels[0], "t")
    home = cluster.node_of("t", 0)
    away = next(n for n in cluster.nodes if n is not home)

    def located(generation: int) -> dict[str, object]:
        return {"partition_with_generation": pb.PartitionWithGeneration(partition_id=0, generation=generation)}

    for node, generation in ((away, 1), (home, 2)):
        refused = await RawWriter(channel_of(cluster, channels, node)).init("t", "p", **located(generation))
        assert refused.status == StatusIds.UNAVAILABLE, (node, generation)
        assert refused.issues[0].message == "pipe to partition's tablet is dead"
    writer = RawWriter(channel_of(cluster, channels, home))
    assert (await writer.init("t", "p", **located(1))).status == StatusIds.SUCCESS
    assert [kind for _, kind, _ in acks(await writer.write([1]))] == ["written"]
    await writer.close()

    await cluster.stop_node(cluster.nodes.index(home))
    new_home = cluster.node_of("t", 0)
    stale = await RawWriter(channel_of(cluster, channels, new_home)).init("t", "p", **located(1))
    assert stale.status == StatusIds.UNAVAILABLE
    moved = RawWriter(channel_of(cluster, channels, new_home))
    init = await moved.init("t", "p", **located(2))
    assert (init.status, init.init_response.last_seq_no) == (StatusIds.SUCCESS, 1)
    await moved.close()


async def test_read_sessions_on_live_nodes_keep_a_moved_partition(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel]
) -> None:
    """A read session served by a live node keeps reading a partition whose tablet moved: YDB's
    read proxy restarts its pipe to the tablet (``TPartitionActor::RestartPipe``,
    ``ydb/services/persqueue_v1/actors/partition_actor.cpp``) without ending the partition session."""
    await create_topic(channels[0], "t", consumers=("c",))
    home = cluster.node_of("t", 0)
    away = [n for n in cluster.nodes if n is not home]
    reader = RawReader(channel_of(cluster, channels, away[0]))
    await reader.init("t", consumer="c")
    sessions = await reader.start_all(1)
    await reader.credit(1_000_000)
    writer = RawWriter(channel_of(cluster, channels, away[1]))
    await writer.init("t", producer_id="p", partition_id=0)
    await writer.write([1])
    assert offsets(await reader.expect("read_response")) == [(sessions[0], 0)]

    await cluster.stop_node(cluster.nodes.index(home))
    assert (await writer.read()).status == StatusIds.UNAVAILABLE  # its partition moved
    await writer.close()
    writer = RawWriter(channel_of(cluster, channels, away[1]))
    await writer.init("t", producer_id="p", partition_id=0)
    await writer.write([2])
    assert offsets(await reader.expect("read_response")) == [(sessions[0], 1)]
    await reader.nothing("stop_partition_session_request")
    await writer.close()
    await reader.close()


async def test_query_sessions_end_with_their_node(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel]
) -> None:
    """A query session lives on the node that created it (its id names the node): when that
    node stops, the session is gone, its transactions abort, and calls naming it through any
    other node answer BAD_SESSION."""
    sessions = []
    for channel in channels[:2]:
        rpc = channel.unary_unary(
            "/Ydb.Query.V1.QueryService/CreateSession",
            request_serializer=qpb.CreateSessionRequest.SerializeToString,
            response_deserializer=qpb.CreateSessionResponse.FromString,
        )
        sessions.append(await rpc(qpb.CreateSessionRequest(), metadata=DB, timeout=10))
    assert [s.node_id for s in sessions] == [1, 2]
    assert "node_id=2" in sessions[1].session_id

    await cluster.stop_node(1)
    begin = channels[2].unary_unary(
        "/Ydb.Query.V1.QueryService/BeginTransaction",
        request_serializer=qpb.BeginTransactionRequest.SerializeToString,
        response_deserializer=qpb.BeginTransactionResponse.FromString,
    )
    settings = qpb.TransactionSettings(serializable_read_write=qpb.SerializableModeSettings())
    lost = await begin(qpb.BeginTransactionRequest(session_id=sessions[1].session_id, tx_settings=settings),
                       metadata=DB, timeout=10)
    assert lost.status == StatusIds.BAD_SESSION
    kept = await begin(qpb.BeginTransactionRequest(session_id=sessions[0].session_id, tx_settings=settings),
                       metadata=DB, timeout=10)
    assert kept.status == StatusIds.SUCCESS


async def test_a_durable_cluster_starts_again_with_its_partitions_where_they_were(tmp_path: pathlib.Path) -> None:
    """Starting the nodes one by one moves nothing: a partition moves only when its node stops."""
    for run in range(2):
        async with (
            LocalTopicCluster(3, data_dir=tmp_path) as cluster,
            grpc.aio.insecure_channel(cluster.endpoint.removeprefix("grpc://"), options=LOCAL_POOL) as ch,
        ):
            if run == 0:
                await create_topic(ch, "t", partitions=6)
                before = await locations(ch, "t")
            else:
                assert await locations(ch, "t") == before


async def test_discovery_leaves_out_a_stopped_node_it_was_told_to_name_elsewhere(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel]
) -> None:
    """Nodes named at other addresses (proxies in front of them) are listed only while the node
    behind each is up, as the cluster's own nodes are."""
    cluster.discovery.nodes = [("127.0.0.1", 40000 + n.node_id, n.node_id) for n in cluster.nodes]
    assert [e.port for e in (await list_endpoints(channels[0])).endpoints] == [40001, 40002, 40003]
    await cluster.stop_node(1)
    assert [(e.port, e.node_id) for e in (await list_endpoints(channels[0])).endpoints] == [(40001, 1), (40003, 3)]


@pytest.mark.parametrize("apply", [True, False])
async def test_a_commit_in_flight_ends_with_the_node_of_its_session(
    cluster: LocalTopicCluster, channels: list[grpc.aio.Channel], apply: bool
) -> None:
    """``faults.hold_next_commit`` holds a CommitTransaction unanswered; ``stop_node_during_commit``
    applies it or not, then stops the node its session lives on. The call sent to that node ends
    without an answer (the node's calls are cancelled, as a node going away does to them), the
    session ends with the node, and the transaction's consumer offset moved exactly when it was
    applied."""
    topic = "/local/held"
    await create_topic(channels[0], topic, consumers=("c",))
    await write_messages(channels[0], topic, 1)
    session = await _call(channels[1], "CreateSession", qpb.CreateSessionRequest(), qpb.CreateSessionResponse)
    settings = qpb.TransactionSettings(serializable_read_write=qpb.SerializableModeSettings())
    began = await _call(channels[1], "BeginTransaction",
                        qpb.BeginTransactionRequest(session_id=session.session_id, tx_settings=settings),
                        qpb.BeginTransactionResponse)
    tx = pb.TransactionIdentity(id=began.tx_meta.id, session=session.session_id)
    offsets = pb.UpdateOffsetsInTransactionRequest(tx=tx, consumer="c")
    offsets.topics.add(path=topic).partitions.add(partition_id=0).partition_offsets.add(start=0, end=1)
    await call(channels[1], "UpdateOffsetsInTransaction", offsets, pb.UpdateOffsetsInTransactionResponse)

    held = cluster.faults.hold_next_commit()
    commit = asyncio.create_task(_call(
        channels[1], "CommitTransaction",
        qpb.CommitTransactionRequest(session_id=session.session_id, tx_id=began.tx_meta.id),
        qpb.CommitTransactionResponse,
    ))
    stopped = await cluster.stop_node_during_commit(held, apply=apply)
    assert stopped is cluster.nodes[1] and not stopped.alive
    with pytest.raises(grpc.aio.AioRpcError) as lost:
        await asyncio.wait_for(commit, 10)
    assert lost.value.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
    assert cluster.storage.committed_offsets(topic, "c") == {0: 1 if apply else 0}
    assert session.session_id not in cluster.query.sessions
    assert cluster.query.committed_transactions == (1 if apply else 0)


async def _call(channel: grpc.aio.Channel, method: str, request: Any, response_cls: Any) -> Any:
    rpc = channel.unary_unary(
        f"/Ydb.Query.V1.QueryService/{method}",
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    response = await rpc(request, metadata=DB, timeout=10)
    assert response.status == StatusIds.SUCCESS or method == "CommitTransaction", response
    return response
