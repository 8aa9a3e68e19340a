"""Direct read on the local server over raw gRPC: a read session with ``direct_read`` (StreamRead,
the control stream) and StreamDirectRead on the node hosting each partition.

The behaviour follows YDB's read session actor
(``ydb/services/persqueue_v1/actors/read_session_actor.cpp``), its direct read actor
(``direct_read_actor.cpp``), the node-local cache (``ydb/core/persqueue/dread_cache_service/
caching_service.cpp``) and YDB's own tests of them (``ydb/services/persqueue_v1/persqueue_ut.cpp``:
``UpdatePartitionLocation``, ``DirectReadNotCached``, ``DirectReadBadCases``, ``DirectReadStop``,
``DirectReadCleanCache``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicCluster, LocalTopicServer, ServerNode
from ydb_topic_async.testing import read_session as read_session_module

from .conftest import (
    LOCAL_POOL,
    RawDirectReader,
    RawReader,
    ReadMsg,
    create_topic,
    direct_ack,
    direct_offsets,
    write_messages,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def cluster() -> AsyncIterator[LocalTopicCluster]:
    async with LocalTopicCluster(3) as started:
        yield started


@pytest.fixture
async def channels(cluster: LocalTopicCluster) -> AsyncIterator[dict[int, grpc.aio.Channel]]:
    """One channel per node, by node id."""
    async with contextlib.AsyncExitStack() as stack:
        yield {
            n.node_id: await stack.enter_async_context(
                grpc.aio.insecure_channel(f"{n.host}:{n.port}", options=LOCAL_POOL)
            )
            for n in cluster.nodes
        }


def stop_of(message: pb.StreamDirectReadMessage.FromServer) -> tuple[int, str, str]:
    """(partition session id, status name, first issue) of a StopDirectReadPartitionSession."""
    stop = message.stop_direct_read_partition_session
    return stop.partition_session_id, StatusIds.StatusCode.Name(stop.status), stop.issues[0].message


def failed(message: pb.StreamDirectReadMessage.FromServer) -> tuple[str, str]:
    return StatusIds.StatusCode.Name(message.status), message.issues[0].message


async def start_direct(reader: RawReader, paths: dict[int, str] | None = None) -> tuple[int, int, int]:
    """Accept the next partition session; (partition session id, node id, generation). ``paths``
    learns the topic of the partition session."""
    start = await reader.expect("start_partition_session_request")
    await reader.confirm_start(start)
    request = start.start_partition_session_request
    assert request.HasField("partition_location")
    location = request.partition_location
    if paths is not None:
        paths[request.partition_session.partition_session_id] = request.partition_session.path
    return request.partition_session.partition_session_id, location.node_id, location.generation


async def one_by_one(
    control: RawReader, direct: RawDirectReader, count: int
) -> list[pb.StreamDirectReadMessage.FromServer]:
    """``count`` direct reads of one message each: each grant brings the credit back to 1 byte.
    The credit is left below zero."""
    reads = []
    owed = 1
    for _ in range(count):
        await control.credit(owed)
        read = await direct.expect("direct_read_response")
        reads.append(read)
        owed = read.direct_read_response.bytes_size
    return reads


async def test_data_comes_from_the_partitions_node_and_is_acknowledged_on_the_control_stream(
    cluster: LocalTopicCluster, channels: dict[int, grpc.aio.Channel]
) -> None:
    """With ``direct_read`` the control stream carries no data: each start names the partition's
    node and tablet generation (``partition_location``, filled only then), the node hosting the
    partition serves the reads on StreamDirectRead, numbered from 1, each charged to the control
    stream's credit by its ``bytes_size`` (``TReadSessionActor::ProcessAnswer``: no ReadResponse
    written for a direct read, ``ReadSizeBudget -= sizeEstimation``; ``DirectReadNotCached``: no
    more reads until more credit). Nothing crosses nodes, where the ordinary path sends all of it
    from the node serving the stream."""
    await create_topic(channels[1], "t", consumers=("c",))
    home = cluster.node_of("t", 0)
    away = next(n for n in cluster.nodes if n is not home)
    await write_messages(channels[1], "t", 4, producer_id="p", size=100)

    control = RawReader(channels[away.node_id])
    init = await control.init("t", consumer="c", direct_read=True)
    psid, node_id, generation = await start_direct(control)
    assert (node_id, generation) == (home.node_id, 1)
    await control.credit(150)
    await control.nothing("read_response")

    direct = RawDirectReader(channels[home.node_id])
    assert (await direct.init("t", "c", session_id=init.init_response.session_id)).HasField("init_response")
    await direct.start(psid, generation)
    started = (await direct.expect("start_direct_read_partition_session_response"))
    assert (started.start_direct_read_partition_session_response.partition_session_id,
            started.start_direct_read_partition_session_response.generation) == (psid, 1)
    first = await direct.expect("direct_read_response")
    # As a ReadResponse: the credit (150) is overshot by one message, then nothing until more credit.
    assert direct_offsets(first) == [(psid, 1, 0), (psid, 1, 1)]
    assert first.direct_read_response.bytes_size == first.ByteSize() - 3  # the whole message but its own field
    batch = first.direct_read_response.partition_data.batches[0]
    assert (batch.producer_id, batch.message_data[0].data) == ("p", b"m1".ljust(100, b"."))
    await direct.nothing("direct_read_response")
    await control.credit(first.direct_read_response.bytes_size)
    second = await direct.expect("direct_read_response")
    assert direct_offsets(second) == [(psid, 2, 2), (psid, 2, 3)]
    await direct_ack(control, psid, 1)
    await direct_ack(control, psid, 2)
    await control.sync(psid)  # the acks were accepted: the session lives on
    await direct.send(update_token_request=pb.UpdateTokenRequest(token="any"))
    await direct.expect("update_token_response")
    await control.nothing("read_response")
    assert cluster.stats.read_bytes_from_other_nodes == 0
    direct_bytes = cluster.stats.read_bytes_sent
    assert direct_bytes == first.ByteSize() + second.ByteSize()
    await direct.close()
    await control.close()

    # The ordinary path, on the same node: no location in the start, all the data from a node that
    # does not host the partition.
    ordinary = RawReader(channels[away.node_id])
    await ordinary.init("t", consumer="c")
    start = await ordinary.expect("start_partition_session_request")
    assert not start.start_partition_session_request.HasField("partition_location")
    await ordinary.confirm_start(start)
    await ordinary.credit(10_000)
    read = await ordinary.expect("read_response")
    assert cluster.stats.read_bytes_from_other_nodes == cluster.stats.read_bytes_sent - direct_bytes == read.ByteSize()
    await ordinary.close()


async def test_the_direct_stream_answers_with_ydbs_statuses(
    server: LocalTopicServer, channel: grpc.aio.Channel
) -> None:
    """The direct stream's handshake checks (``TDirectReadSessionActor::Handle(TEvInitDirectRead)``:
    BAD_REQUEST for no topics, no session id, an empty path, a second init; SCHEME_ERROR for a topic
    that does not exist, as ``DirectReadBadCases`` expects), the InitResponse given before any
    session id is checked, and the cache's answers to starts (``HandleCreateClientSession``): an
    entry the node does not hold ends the whole stream with BAD_REQUEST "Unknown session", another
    generation is refused for the partition alone (ERROR -> UNAVAILABLE "Generation mismatch")."""
    await create_topic(channel, "t", consumers=("c",))
    control = RawReader(channel)
    session_id = (await control.init("t", consumer="c", direct_read=True)).init_response.session_id
    psid, _, generation = await start_direct(control)

    async def refused(init: pb.StreamDirectReadMessage.InitRequest) -> tuple[str, str]:
        direct = RawDirectReader(channel)
        await direct.send(init_request=init)
        answer = failed(await direct.read())
        await direct.close()
        return answer

    Init = pb.StreamDirectReadMessage.InitRequest
    assert await refused(Init(session_id=session_id)) == ("BAD_REQUEST", "no topics in init request")
    assert await refused(Init(topics_read_settings=[{"path": "t"}])) == (
        "BAD_REQUEST", "no session id in init request"
    )
    assert await refused(Init(session_id=session_id, topics_read_settings=[{"path": ""}])) == (
        "BAD_REQUEST", "empty topic in init request"
    )
    assert await refused(Init(session_id=session_id, topics_read_settings=[{"path": "missing"}])) == (
        "SCHEME_ERROR", "path /local/missing does not exist"
    )
    server.faults.fail_next("StreamDirectRead", "OVERLOADED")
    assert (await refused(Init(session_id=session_id, topics_read_settings=[{"path": "t"}])))[0] == "OVERLOADED"

    twice = RawDirectReader(channel)
    await twice.init("t", "c", session_id=session_id)
    await twice.send(init_request=Init(session_id=session_id, topics_read_settings=[{"path": "t"}]))
    assert failed(await twice.read()) == ("BAD_REQUEST", "got second init request")
    await twice.close()

    direct = RawDirectReader(channel)
    await direct.init("t", "c", session_id=session_id)
    await direct.start(psid, generation + 1)
    assert stop_of(await direct.read()) == (psid, "UNAVAILABLE", "Generation mismatch")
    await direct.start(psid, generation)  # the stream went on
    await direct.expect("start_direct_read_partition_session_response")
    await direct.start(psid + 100, generation)
    assert failed(await direct.read()) == ("BAD_REQUEST", "Unknown session")
    assert await direct.read() is grpc.aio.EOF
    await direct.close()

    stranger = RawDirectReader(channel)
    assert (await stranger.init("t", "c", session_id="bad-session")).status == StatusIds.SUCCESS
    await stranger.start(psid, generation)
    assert failed(await stranger.read()) == ("BAD_REQUEST", "Unknown session")
    await stranger.close()
    await control.close()


async def test_acknowledgements_must_name_formed_reads_in_order(channel: grpc.aio.Channel) -> None:
    """DirectReadAck: reads are confirmed strictly in order, and only reads formed and not confirmed
    yet; anything else ends the session with BAD_REQUEST (``TReadSessionActor::Handle(TEvDirectReadAck)``).
    A session that does not read directly has no direct reads to confirm."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 2, size=100)

    async def two_reads() -> tuple[RawReader, int]:
        control = RawReader(channel)
        await control.init("t", consumer="c", direct_read=True)
        psid, _, _ = await start_direct(control)
        await control.credit(1)
        await control.credit(1_000)  # one message per read: 1 byte of credit, then the rest
        await control.sync(psid)
        return control, psid

    control, psid = await two_reads()
    await direct_ack(control, psid, 2)
    assert failed(await control.read()) == (
        "BAD_REQUEST", "direct reads must be confirmed in strict order - expecting 1 but got 2"
    )
    await control.close()

    control, psid = await two_reads()
    await direct_ack(control, psid, 1)
    await direct_ack(control, psid, 1)
    assert failed(await control.read()) == ("BAD_REQUEST", "unknown direct read in Ack: 1")
    await control.close()

    control, psid = await two_reads()
    await direct_ack(control, psid, 3)
    assert failed(await control.read()) == ("BAD_REQUEST", "unknown direct read in Ack: 3")
    await control.close()

    ordinary = RawReader(channel)
    await ordinary.init("t", consumer="c")
    psid = (await ordinary.start_all(1))[0]
    await direct_ack(ordinary, psid, 1)
    assert failed(await ordinary.read()) == ("BAD_REQUEST", "unknown direct read in Ack: 1")
    await ordinary.close()


async def test_unacknowledged_reads_are_sent_again_after_the_id_a_start_names(
    server: LocalTopicServer, channel: grpc.aio.Channel
) -> None:
    """The node keeps each read until it is acknowledged; a start naming ``last_direct_read_id`` L
    gets the kept reads after L (the direct read actor asks the cache from ``L + 1``, which sends its
    kept reads from there: ``SendNextReadToClient``), so a client that lost its direct stream loses
    nothing. An acknowledged read is forgotten (``CmdForgetRead``)."""
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 3, size=100)
    control = RawReader(channel)
    session_id = (await control.init("t", consumer="c", direct_read=True)).init_response.session_id
    psid, _, generation = await start_direct(control)
    direct = RawDirectReader(channel)
    await direct.init("t", "c", session_id=session_id)
    await direct.start(psid, generation)
    await direct.expect("start_direct_read_partition_session_response")
    received = await one_by_one(control, direct, 3)
    assert [direct_offsets(m) for m in received] == [[(psid, 1, 0)], [(psid, 2, 1)], [(psid, 3, 2)]]
    await direct_ack(control, psid, 1)
    await control.sync(psid)

    assert server.faults.drop_direct_read_streams() == 1
    with pytest.raises(grpc.aio.AioRpcError) as broken:
        await direct.read()
    assert broken.value.code() == grpc.StatusCode.UNAVAILABLE
    await direct.close()

    again = RawDirectReader(channel)
    await again.init("t", "c", session_id=session_id)
    await again.start(psid, generation, last_direct_read_id=1)
    await again.expect("start_direct_read_partition_session_response")
    assert [await again.expect("direct_read_response") for _ in range(2)] == received[1:]
    await again.nothing("direct_read_response")
    await again.close()

    # Read 2 acknowledged meanwhile: a start naming nothing received (0) gets only what is still kept.
    await direct_ack(control, psid, 2)
    await control.sync(psid)
    third = RawDirectReader(channel)
    await third.init("t", "c", session_id=session_id)
    await third.start(psid, generation, last_direct_read_id=0)
    await third.expect("start_direct_read_partition_session_response")
    assert await third.expect("direct_read_response") == received[2]
    await third.nothing("direct_read_response")
    await third.close()
    await control.close()


async def test_unacknowledged_reads_hold_the_session_back(
    channel: grpc.aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads formed and not acknowledged count against the session's in-flight bytes (YDB's
    ``BytesInflight_``, capped by ``MAX_INFLY_BYTES``, 25 MB; here lowered to keep the test small):
    no more reads are formed, whatever the credit, until acknowledgements free room."""
    monkeypatch.setattr(read_session_module, "MAX_DIRECT_BYTES_IN_FLIGHT", 1_000)
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 6, size=300)
    control = RawReader(channel)
    session_id = (await control.init("t", consumer="c", direct_read=True)).init_response.session_id
    psid, _, generation = await start_direct(control)
    direct = RawDirectReader(channel)
    await direct.init("t", "c", session_id=session_id)
    await direct.start(psid, generation)
    await direct.expect("start_direct_read_partition_session_response")
    reads = await one_by_one(control, direct, 3)  # ~360 bytes each: 1000 reached
    assert [m.direct_read_response.direct_read_id for m in reads] == [1, 2, 3]
    await control.credit(reads[-1].direct_read_response.bytes_size)  # credit left: 1 byte
    await direct.nothing("direct_read_response")
    await direct_ack(control, psid, 1)
    fourth = await direct.expect("direct_read_response")
    assert direct_offsets(fourth) == [(psid, 4, 3)]
    await control.credit(fourth.direct_read_response.bytes_size)
    await direct.nothing("direct_read_response")
    await direct.close()
    await control.close()


async def test_each_read_goes_out_while_the_next_ones_are_formed(
    server: LocalTopicServer, channel: grpc.aio.Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A direct read goes to its node's stream as soon as it is formed, not once every read the
    credit allows is formed: YDB's node cache sends a published read to the attached stream at
    once (``caching_service.cpp``: ``HandlePublish`` ends in ``SendNextReadToClient``), while the
    read session goes on issuing reads. A task that runs on every turn of the server's event loop
    sees a read sent while later ones are still to be formed."""
    monkeypatch.setattr(read_session_module, "MAX_RESPONSE_MESSAGES", 1)  # a read per message
    await create_topic(channel, "t", consumers=("c",))
    await write_messages(channel, "t", 5, size=100)
    control = RawReader(channel)
    session_id = (await control.init("t", consumer="c", direct_read=True)).init_response.session_id
    psid, _, generation = await start_direct(control)
    direct = RawDirectReader(channel)
    await direct.init("t", "c", session_id=session_id)
    await direct.start(psid, generation)
    await direct.expect("start_direct_read_partition_session_response")
    stats = server.stats
    sent_before = stats.read_bytes_sent
    seen: list[tuple[int, int]] = []  # (reads formed, read bytes sent) at each turn of the loop

    async def watch() -> None:
        while True:
            seen.append((stats.direct_read_responses, stats.read_bytes_sent))
            await asyncio.sleep(0)

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        await control.credit(1_000_000)  # room for all five at once
        reads = [await direct.expect("direct_read_response") for _ in range(5)]
    finally:
        watcher.cancel()
        await asyncio.wait([watcher])
    assert [read.direct_read_response.direct_read_id for read in reads] == [1, 2, 3, 4, 5]
    assert any(formed < 5 and sent > sent_before for formed, sent in seen), seen[-3:]
    await direct.close()
    await control.close()


async def test_a_graceful_stop_takes_two_answers_and_gives_unread_bytes_back(channel: grpc.aio.Channel) -> None:
    """Reading directly, a graceful stop names the last read formed (``last_direct_read_id``); the
    client's graceful answer is followed by a non-graceful stop, and the partition goes to another
    reader only once that is answered too (``DirectReadStop``; ``TReadSessionActor::Handle(TEvReleased)``).
    The direct stream then learns the partition session is gone (SESSION_EXPIRED "Closed by
    server", the cache's ``DestroyServerSession``), and the bytes of its unacknowledged read go
    back to the session's credit (``DropPartition``): another partition's data follows."""
    await create_topic(channel, "t", partitions=2, consumers=("c",))
    await create_topic(channel, "u", consumers=("c",))
    await write_messages(channel, "t", 1, partition_id=0, size=100)
    await write_messages(channel, "t", 1, partition_id=1, size=100)
    first = RawReader(channel)
    session_id = (await first.init("t", consumer="c", direct_read=True, more_paths=("u",))).init_response.session_id
    paths: dict[int, str] = {}
    started = [await start_direct(first, paths) for _ in range(3)]
    generations = {psid: generation for psid, _, generation in started}
    direct = RawDirectReader(channel)
    await direct.init("t", "c", session_id=session_id, more_paths=("u",))
    for psid, generation in generations.items():
        await direct.start(psid, generation)
        await direct.expect("start_direct_read_partition_session_response")
    await first.credit(1)
    size = (await direct.expect("direct_read_response")).direct_read_response.bytes_size
    await first.credit(size)  # credit 1 again: the second partition's read leaves it below zero
    await direct.expect("direct_read_response")
    await write_messages(channel, "u", 1, size=100)
    await direct.nothing("direct_read_response")

    second = RawReader(channel)
    await second.init("t", consumer="c", direct_read=True)
    stop = (await first.expect("stop_partition_session_request")).stop_partition_session_request
    assert (stop.graceful, stop.last_direct_read_id) == (True, 1)
    await first.send(stop_partition_session_response=ReadMsg.StopPartitionSessionResponse(
        partition_session_id=stop.partition_session_id, graceful=True
    ))
    final = (await first.expect("stop_partition_session_request")).stop_partition_session_request
    assert (final.partition_session_id, final.graceful, final.last_direct_read_id) == (
        stop.partition_session_id, False, 1
    )
    await second.nothing("start_partition_session_request")
    await direct.nothing("stop_direct_read_partition_session")
    await first.send(stop_partition_session_response=ReadMsg.StopPartitionSessionResponse(
        partition_session_id=stop.partition_session_id, graceful=False
    ))
    await second.expect("start_partition_session_request")
    assert stop_of(await direct.expect("stop_direct_read_partition_session")) == (
        stop.partition_session_id, "SESSION_EXPIRED", "Closed by server"
    )
    given_back = await direct.expect("direct_read_response")  # u's message, on the credit given back
    [(psid, _, offset)] = direct_offsets(given_back)
    assert (paths[psid], offset) == ("/local/u", 0)
    await direct.close()
    await second.close()
    await first.close()


async def test_a_non_graceful_release_must_have_been_asked_for(channel: grpc.aio.Channel) -> None:
    """Reading directly, a non-graceful StopPartitionSessionResponse nobody asked for is
    BAD_REQUEST ("release of partition that is not requested", ``Handle(TEvReleased)``)."""
    await create_topic(channel, "t", consumers=("c",))
    control = RawReader(channel)
    await control.init("t", consumer="c", direct_read=True)
    psid, _, _ = await start_direct(control)
    await control.send(stop_partition_session_response=ReadMsg.StopPartitionSessionResponse(
        partition_session_id=psid, graceful=False
    ))
    assert failed(await control.read()) == (
        "BAD_REQUEST", "release of partition that is not requested is forbidden for partition 0 of /local/t"
    )
    await control.close()


async def test_a_timed_out_stop_hands_the_partition_on_and_still_takes_the_answer() -> None:
    """A graceful stop not confirmed in time becomes a non-graceful one and the partition goes to the
    other reader; reading directly, the old session still answers it (``ProcessBalancerDead``: in
    direct read mode the release waits for the client), and that late answer takes nothing from
    the new owner."""
    async with (
        LocalTopicServer(graceful_stop_timeout=0.2) as server,
        grpc.aio.insecure_channel(server.endpoint.removeprefix("grpc://"), options=LOCAL_POOL) as channel,
    ):
        await create_topic(channel, "t", partitions=2, consumers=("c",))
        first = RawReader(channel)
        await first.init("t", consumer="c", direct_read=True)
        kept = {(await start_direct(first))[0] for _ in range(2)}
        second = RawReader(channel)
        await second.init("t", consumer="c", direct_read=True)
        stop = (await first.expect("stop_partition_session_request")).stop_partition_session_request
        assert stop.graceful
        final = (await first.expect("stop_partition_session_request")).stop_partition_session_request
        assert (final.partition_session_id, final.graceful) == (stop.partition_session_id, False)
        taken, _, _ = await start_direct(second)
        await first.send(stop_partition_session_response=ReadMsg.StopPartitionSessionResponse(
            partition_session_id=stop.partition_session_id, graceful=False
        ))
        await first.sync(next(iter(kept - {stop.partition_session_id})))  # the late answer was accepted
        await second.sync(taken)  # still its own
        await write_messages(channel, "t", 1)  # wakes every stream: the balancer runs again
        for reader in (first, second):
            await reader.nothing("start_partition_session_request")  # nobody got the partition again
            await reader.nothing("stop_partition_session_request")
        await first.close()
        await second.close()


async def test_direct_partition_sessions_end_with_their_read_session(channel: grpc.aio.Channel) -> None:
    """When the control stream ends, its partition sessions leave the nodes' caches: the direct
    stream is told (SESSION_EXPIRED "Closed by server") and a later start is BAD_REQUEST
    "Unknown session" (``DirectReadBadCases``: no control session)."""
    await create_topic(channel, "t", consumers=("c",))
    control = RawReader(channel)
    session_id = (await control.init("t", consumer="c", direct_read=True)).init_response.session_id
    psid, _, generation = await start_direct(control)
    direct = RawDirectReader(channel)
    await direct.init("t", "c", session_id=session_id)
    await direct.start(psid, generation)
    await direct.expect("start_direct_read_partition_session_response")
    await control.close()
    assert stop_of(await direct.read()) == (psid, "SESSION_EXPIRED", "Closed by server")
    await direct.start(psid, generation)
    assert failed(await direct.read()) == ("BAD_REQUEST", "Unknown session")
    await direct.close()


async def test_a_moved_partition_is_updated_and_served_by_its_new_node(
    cluster: LocalTopicCluster, channels: dict[int, grpc.aio.Channel]
) -> None:
    """A directly read partition whose node stops moves with a new generation; the read session on a
    live node keeps it and sends UpdatePartitionSession with the new node and generation
    (``UpdatePartitionLocation``; ``TReadSessionActor::Handle(TEvUpdateSession)``). The partition
    actor restored its unacknowledged reads under their ids, so a start on the new node naming the
    last read received gets what followed it, then new data. Only the new node serves it, and
    only under the new generation."""
    await create_topic(channels[1], "t", consumers=("c",))
    home = cluster.node_of("t", 0)
    control_node, spare = [n for n in cluster.nodes if n is not home]
    await write_messages(channels[control_node.node_id], "t", 2, size=100)
    control = RawReader(channels[control_node.node_id])
    session_id = (await control.init("t", consumer="c", direct_read=True)).init_response.session_id
    psid, node_id, generation = await start_direct(control)
    assert node_id == home.node_id
    direct = RawDirectReader(channels[home.node_id])
    await direct.init("t", "c", session_id=session_id)
    await direct.start(psid, generation)
    await direct.expect("start_direct_read_partition_session_response")
    received = await one_by_one(control, direct, 2)
    await direct_ack(control, psid, 1)
    await control.sync(psid)

    await cluster.stop_node(cluster.nodes.index(home))
    with pytest.raises(grpc.aio.AioRpcError):
        await direct.read()
    await direct.close()
    update = (await control.expect("update_partition_session")).update_partition_session
    new_home: ServerNode = cluster.node_of("t", 0)
    assert new_home is not home
    assert (update.partition_session_id, update.partition_location.node_id, update.partition_location.generation) == (
        psid, new_home.node_id, generation + 1
    )

    elsewhere = next(n for n in (control_node, spare) if n is not new_home)
    wrong = RawDirectReader(channels[elsewhere.node_id])
    await wrong.init("t", "c", session_id=session_id)
    await wrong.start(psid, generation + 1)
    assert failed(await wrong.read()) == ("BAD_REQUEST", "Unknown session")
    await wrong.close()

    moved = RawDirectReader(channels[new_home.node_id])
    await moved.init("t", "c", session_id=session_id)
    await moved.start(psid, generation)
    assert stop_of(await moved.read()) == (psid, "UNAVAILABLE", "Generation mismatch")
    await moved.start(psid, generation + 1, last_direct_read_id=1)
    await moved.expect("start_direct_read_partition_session_response")
    assert await moved.expect("direct_read_response") == received[1]
    await write_messages(channels[control_node.node_id], "t", 1, size=100)
    await control.credit(received[1].direct_read_response.bytes_size)
    assert direct_offsets(await moved.expect("direct_read_response")) == [(psid, 3, 2)]
    await direct_ack(control, psid, 2)
    await direct_ack(control, psid, 3)
    await control.sync(psid)
    assert cluster.stats.read_bytes_from_other_nodes == 0
    await moved.close()
    await control.close()


async def test_a_server_without_direct_read_ignores_the_flag_and_has_no_direct_stream() -> None:
    """``direct_read=False`` serves as a YDB whose protocol has no direct read: the InitRequest's
    ``direct_read`` is an unknown field to it (data on the read stream, starts without a
    location), and StreamDirectRead is a method it does not have (gRPC UNIMPLEMENTED)."""
    async with (
        LocalTopicServer(direct_read=False) as server,
        grpc.aio.insecure_channel(server.endpoint.removeprefix("grpc://"), options=LOCAL_POOL) as channel,
    ):
        await create_topic(channel, "t", consumers=("c",))
        await write_messages(channel, "t", 1)
        control = RawReader(channel)
        session_id = (await control.init("t", consumer="c", direct_read=True)).init_response.session_id
        start = await control.expect("start_partition_session_request")
        assert not start.start_partition_session_request.HasField("partition_location")
        await control.confirm_start(start)
        await control.credit(1_000)
        assert (await control.expect("read_response")).read_response.bytes_size > 0
        direct = RawDirectReader(channel)
        await direct.send(init_request=pb.StreamDirectReadMessage.InitRequest(
            session_id=session_id, topics_read_settings=[{"path": "t"}]
        ))
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await direct.read()
        assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED
        await direct.close()
        await control.close()


async def test_stream_handshakes_can_be_aborted_or_left_unanswered(
    server: LocalTopicServer, channel: grpc.aio.Channel
) -> None:
    """The fault hooks ``abort_next`` (a gRPC status instead of an answer) and ``hang_next`` (no
    answer at all) apply to the next handshakes of the named stream method only."""
    await create_topic(channel, "t", consumers=("c",))
    control = RawReader(channel)
    session_id = (await control.init("t", consumer="c", direct_read=True)).init_response.session_id
    server.faults.abort_next("StreamDirectRead", "UNIMPLEMENTED")
    server.faults.hang_next("StreamDirectRead")
    aborted = RawDirectReader(channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await aborted.init("t", "c", session_id=session_id)
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    await aborted.close()
    hanging = RawDirectReader(channel)
    with pytest.raises(TimeoutError):
        await hanging.init_within(0.3, "t", "c", session_id=session_id)
    await hanging.close()
    answered = RawDirectReader(channel)
    assert (await answered.init("t", "c", session_id=session_id)).HasField("init_response")
    await answered.close()
    await control.close()
