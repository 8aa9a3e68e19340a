"""The durable mode: ``LocalTopicServer(data_dir=...)`` keeps what it acknowledged across restarts
and across a SIGKILL of its process."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.journal import JOURNAL_NAME, JournalLockedError

from .conftest import DB, LOCAL_POOL, RawWriter, acks, address, call, create_topic, unpack
from .test_transactions import Session, tx_write

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def standalone(data_dir: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, grpc.aio.Channel]]:
    """``python -m ydb_topic_async.testing --data-dir`` in a child process, and a channel to it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.testing", "--port", "0", "--data-dir", str(data_dir),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        target = line.split("grpc://", 1)[1].split("/", 1)[0]
        async with grpc.aio.insecure_channel(target, options=LOCAL_POOL) as channel:
            yield proc, channel
    finally:
        if proc.returncode is None:
            proc.kill()
        await asyncio.wait_for(proc.wait(), 30)


async def describe_consumer(channel: grpc.aio.Channel, path: str, consumer: str) -> Any:
    request = pb.DescribeConsumerRequest(path=path, consumer=consumer, include_stats=True)
    return unpack(await call(channel, "DescribeConsumer", request, pb.DescribeConsumerResponse),
                  pb.DescribeConsumerResult)


async def test_acknowledged_state_survives_a_sigkill(tmp_path: Path) -> None:
    """Everything acknowledged before a SIGKILL is there after a restart on the same directory:
    topics with their settings and consumers, messages with their seq_nos (so resends are still
    deduplicated), producer bindings, committed offsets and a committed transaction's effects."""
    async with standalone(tmp_path) as (proc, channel):
        create = pb.CreateTopicRequest(path="t", supported_codecs=pb.SupportedCodecs(codecs=[1, 2]))
        create.partitioning_settings.min_active_partitions = 3
        create.retention_period.FromSeconds(7200)
        create.consumers.add(name="c")
        assert (await call(channel, "CreateTopic", create, pb.CreateTopicResponse)).status == StatusIds.SUCCESS
        writer = RawWriter(channel)
        partition = (await writer.init("t", producer_id="p")).init_response.partition_id
        assert acks(await writer.write([1, 2, 3])) == [(1, "written", 0), (2, "written", 1), (3, "written", 2)]
        commit = pb.CommitOffsetRequest(path="t", partition_id=partition, consumer="c", offset=2)
        assert (await call(channel, "CommitOffset", commit, pb.CommitOffsetResponse)).status == StatusIds.SUCCESS
        alter = pb.AlterTopicRequest(path="t")
        alter.add_consumers.add(name="d")
        assert (await call(channel, "AlterTopic", alter, pb.AlterTopicResponse)).status == StatusIds.SUCCESS
        session = await Session(channel).open()
        tx_id = await session.begin()
        in_tx = RawWriter(channel)
        await in_tx.init("t", producer_id="p", partition_id=partition)
        assert acks(await tx_write(in_tx, session.identity(tx_id), [4])) == [(4, "written_in_tx", -1)]
        update = await session.update_offsets(tx_id, "t", "d", [(0, 3)], partition_id=partition)
        assert update.status == StatusIds.SUCCESS
        assert (await session.commit(tx_id)).status == StatusIds.SUCCESS
        proc.send_signal(signal.SIGKILL)  # no chance to flush or close anything
        assert await asyncio.wait_for(proc.wait(), 30) == -signal.SIGKILL
        session.close()
        await writer.close()
        await in_tx.close()

    async with standalone(tmp_path) as (_, channel):
        op = await call(channel, "DescribeTopic", pb.DescribeTopicRequest(path="t"), pb.DescribeTopicResponse)
        topic = unpack(op, pb.DescribeTopicResult)
        assert [p.partition_id for p in topic.partitions] == [0, 1, 2]
        assert (topic.retention_period.seconds, list(topic.supported_codecs.codecs)) == (7200, [1, 2])
        assert [c.name for c in topic.consumers] == ["c", "d"]
        writer = RawWriter(channel)
        init = await writer.init("t", producer_id="p")
        assert (init.init_response.partition_id, init.init_response.last_seq_no) == (partition, 4)
        assert acks(await writer.write([4, 5])) == [(4, "skipped", -1), (5, "written", 4)]
        await writer.close()
        offsets = {name: (await describe_consumer(channel, "t", name)).partitions[partition]
                   .partition_consumer_stats.committed_offset for name in ("c", "d")}
        assert offsets == {"c": 2, "d": 3}


async def test_a_durable_server_continues_after_a_restart(tmp_path: Path) -> None:
    """Stopping and starting servers on one directory keeps splits, retention's deletions,
    dropped and recreated topics, and producers' partitions (in-process, no kill)."""
    first = LocalTopicServer(data_dir=tmp_path)
    await first.start()
    async with grpc.aio.insecure_channel(address(first), options=LOCAL_POOL) as channel:
        await create_topic(channel, "split", consumers=("c",))
        await create_topic(channel, "gone")
        writer = RawWriter(channel)
        await writer.init("split", producer_id="p")
        assert acks(await writer.write([1, 2])) == [(1, "written", 0), (2, "written", 1)]
        await writer.close()
        first.storage.split_partition("split", 0)
        first.advance_time(25 * 3600)  # the parent's messages expire
        writer = RawWriter(channel)
        moved = (await writer.init("split", producer_id="p")).init_response.partition_id
        assert acks(await writer.write([3])) == [(3, "written", 0)]
        await writer.close()
        drop = await call(channel, "DropTopic", pb.DropTopicRequest(path="gone"), pb.DropTopicResponse)
        assert drop.status == StatusIds.SUCCESS
        await create_topic(channel, "gone", partitions=2)
    await first.stop()

    async with LocalTopicServer(data_dir=tmp_path) as second:
        split = second.storage.topic("split")
        parent = split.partition(0)
        assert (parent.active, parent.child_ids, parent.start_offset, parent.end_offset) == (False, [1, 2], 2, 2)
        assert [m.seq_no for m in split.partition(moved).messages] == [3]
        assert [p.partition_id for p in second.storage.topic("gone").partitions] == [0, 1]
        async with grpc.aio.insecure_channel(address(second), options=LOCAL_POOL) as channel:
            writer = RawWriter(channel)
            init = await writer.init("split", producer_id="p")
            assert (init.init_response.partition_id, init.init_response.last_seq_no) == (moved, 3)
            await writer.close()


async def test_a_torn_last_record_is_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A record cut short (as a machine crash may leave it) fails its checksum: it and anything
    after it are dropped, and the server starts with everything before it."""
    async with (
        LocalTopicServer(data_dir=tmp_path) as server,
        grpc.aio.insecure_channel(address(server), options=LOCAL_POOL) as channel,
    ):
        await create_topic(channel, "t")
    journal = tmp_path / JOURNAL_NAME
    good = journal.stat().st_size
    with journal.open("ab") as tail:
        tail.write(b"\x40\x00\x00\x00\x00\x00\x00\x00half a record")
    with caplog.at_level(logging.WARNING, "ydb_topic_async.testing"):
        async with LocalTopicServer(data_dir=tmp_path) as server:
            assert list(server.storage.topics) == ["/local/t"]
    assert "incomplete record" in caplog.text
    assert journal.stat().st_size == good


async def test_a_data_directory_serves_one_server_at_a_time(tmp_path: Path) -> None:
    """Two servers writing one journal would corrupt it: the second is refused."""
    async with LocalTopicServer(data_dir=tmp_path):
        with pytest.raises(JournalLockedError):
            await LocalTopicServer(data_dir=tmp_path).start()


async def test_without_a_data_directory_nothing_is_written(tmp_path: Path, channel: grpc.aio.Channel,
                                                          server: LocalTopicServer) -> None:
    """The default in-memory server keeps no journal (and pays nothing for one)."""
    assert server.storage.journal is None
    await create_topic(channel, "t")
    writer = RawWriter(channel, DB)
    await writer.init("t", producer_id="p")
    assert acks(await writer.write([1])) == [(1, "written", 0)]
    await writer.close()
    assert server.storage.journal is None
