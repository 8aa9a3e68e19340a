"""Interop with the official ``ydb`` SDK: its writer and reader against ours, on the local server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ydb
import ydb.aio

import ydb_topic_async as yta

from .._helpers import fill, read_with_official_sdk

pytestmark = pytest.mark.timeout(40)


async def test_our_reader_reads_what_the_official_writer_wrote(
    official: Any, driver: yta.Driver, topic: str
) -> None:
    writer = official.topic_client.writer(topic, producer_id="official", codec=ydb.TopicCodec.GZIP)
    try:
        for i in range(20):
            await writer.write(ydb.TopicWriterMessage(b"official-%d" % i, metadata_items={"i": str(i)}))
        await writer.flush()
    finally:
        await writer.close()
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        got: list[yta.TopicMessage] = []
        while len(got) < 20:
            batch = await reader.receive_batch(timeout=10)
            got.extend(batch)
            await reader.commit_with_ack(batch)
    assert [m.data for m in got] == [b"official-%d" % i for i in range(20)]
    assert [m.metadata_items for m in got] == [{"i": str(i).encode()} for i in range(20)]
    assert {m.producer_id for m in got} == {"official"}
    assert {m.codec for m in got} == {yta.Codec.GZIP}


async def test_official_reader_reads_and_commits_on_our_server(
    official: Any, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, [b"ours-%d" % i for i in range(30)])
    got = [m.data for m in await read_with_official_sdk(official, topic, "consumer", 30)]
    assert got == [b"ours-%d" % i for i in range(30)]
    desc = await driver.topic.describe_consumer(topic, "consumer")
    assert [p.committed_offset for p in desc.partitions] == [30]


# When partitions move to our reader, the official reader leaves a future failed with
# PublicTopicReaderPartitionExpiredError that it never retrieves itself.
@pytest.mark.tolerate_asyncio_reports("PublicTopicReaderPartitionExpiredError")
async def test_official_and_our_reader_split_partitions(
    official: Any, driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=4, consumers=["consumer"])
    for pid in range(4):
        await fill(driver, topic_name, [b"%d" % pid] * 3, partition_id=pid)
    theirs = official.topic_client.reader(topic_name, consumer="consumer")
    try:
        first = await asyncio.wait_for(theirs.receive_batch(), 10)
        theirs.commit(first)
        async with driver.topic.reader(topic_name, consumer="consumer") as ours:
            mine: set[int] = set()
            for _ in range(300):
                mine = {s.partition_id for s in ours.partition_sessions if not s.closed}
                if len(mine) == 2:
                    break
                # keep the official reader consuming so it can release partitions gracefully
                try:
                    batch = await asyncio.wait_for(theirs.receive_batch(), 0.05)
                    theirs.commit(batch)
                except TimeoutError:
                    pass
                except ydb.TopicReaderPartitionExpiredError:
                    pass  # a partition handed to our reader meanwhile: its batch is no longer committable
            assert len(mine) == 2
            # The official reader may have drained its share before letting go: write fresh data.
            for pid in mine:
                await fill(driver, topic_name, [b"late"], partition_id=pid)
            batch = await ours.receive_batch(timeout=10)
            assert batch.partition_id in mine
            desc = await driver.topic.describe_consumer(topic_name, "consumer")
            owners = {p.partition_id: p.read_session_id for p in desc.partitions}
            assert {pid for pid, sid in owners.items() if sid == ours.read_session_id} == mine
            others = {sid for pid, sid in owners.items() if pid not in mine}
            assert len(others) == 1 and "" not in others
    finally:
        await theirs.close()


async def test_official_reader_reads_a_split_partition_on_our_server(
    official: Any, server: Any, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, [b"parent-%d" % i for i in range(4)])
    left, right = server.storage.split_partition(topic, 0)
    await fill(driver, topic, [b"left-%d" % i for i in range(3)], partition_id=left, producer_id="l")
    await fill(driver, topic, [b"right-%d" % i for i in range(2)], partition_id=right, producer_id="r")
    messages = await read_with_official_sdk(official, topic, "consumer", 9)
    got = [(m.partition_id, m.offset, m.data) for m in messages]
    # The parent first (it is read and committed to its end before the children start).
    assert got[:4] == [(0, i, b"parent-%d" % i) for i in range(4)]
    assert sorted(got[4:]) == [(left, i, b"left-%d" % i) for i in range(3)] + [
        (right, i, b"right-%d" % i) for i in range(2)
    ]
    desc = await driver.topic.describe_consumer(topic, "consumer")
    assert {p.partition_id: p.committed_offset for p in desc.partitions} == {0: 4, left: 3, right: 2}
