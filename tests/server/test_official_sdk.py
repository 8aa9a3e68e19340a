"""The official ``ydb`` SDK against the local server, unchanged: administration, writer, reader."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest
import ydb
import ydb.aio

from ydb_topic_async.testing import LocalTopicServer

from .._helpers import read_with_official_sdk, stored_data
from .._polling import eventually

pytestmark = pytest.mark.timeout(40)


async def test_topic_administration(official: Any, server: LocalTopicServer) -> None:
    client = official.topic_client
    await client.create_topic(
        "admin", min_active_partitions=2, consumers=["c1"], retention_period=dt.timedelta(hours=2),
        supported_codecs=[ydb.TopicCodec.RAW, ydb.TopicCodec.GZIP],
    )
    # Creating it again succeeds and changes nothing, as on YDB.
    await client.create_topic("/local/admin", min_active_partitions=5)
    description = await client.describe_topic("/local/admin", include_stats=True)
    assert [p.partition_id for p in description.partitions] == [0, 1]
    assert [c.name for c in description.consumers] == ["c1"]
    assert description.retention_period == dt.timedelta(hours=2)
    assert description.supported_codecs == [ydb.TopicCodec.RAW, ydb.TopicCodec.GZIP]

    await client.alter_topic("admin", add_consumers=["c2"], drop_consumers=["c1"], set_min_active_partitions=3)
    description = await client.describe_topic("admin")
    assert [c.name for c in description.consumers] == ["c2"]
    assert [p.partition_id for p in description.partitions] == [0, 1, 2]
    consumer = await client.describe_consumer("admin", "c2")
    assert [p.partition_id for p in consumer.partitions] == [0, 1, 2]
    with pytest.raises(ydb.issues.NotFound, match="no such consumer"):
        await client.alter_topic("admin", drop_consumers=["c1"])

    await client.drop_topic("admin")
    assert server.storage.topics == {}
    with pytest.raises(ydb.issues.SchemeError):
        await client.describe_topic("admin")


async def test_writer_continues_seq_no_across_sessions(official: Any, server: LocalTopicServer) -> None:
    await official.topic_client.create_topic("w")
    writer = official.topic_client.writer("w", producer_id="p")
    try:
        assert (await writer.wait_init()).last_seqno == 0
        for i in range(3):
            await writer.write(ydb.TopicWriterMessage(b"x%d" % i, metadata_items={"k": b"v"}))
        await writer.flush()
    finally:
        await writer.close()
    writer = official.topic_client.writer("w", producer_id="p")
    try:
        assert (await writer.wait_init()).last_seqno == 3
        result = await writer.write_with_ack(ydb.TopicWriterMessage(b"x3"))
        assert result == ydb.TopicWriteResult.Written(offset=3)
    finally:
        await writer.close()
    stored = server.storage.read("w", 0)
    assert [(m.offset, m.seq_no, m.data, m.producer_id) for m in stored] == [
        (0, 1, b"x0", "p"), (1, 2, b"x1", "p"), (2, 3, b"x2", "p"), (3, 4, b"x3", "p")
    ]
    assert stored[0].metadata == (("k", b"v"),)


async def test_explicit_seq_nos_already_written_are_skipped(official: Any, server: LocalTopicServer) -> None:
    await official.topic_client.create_topic("skip")
    raw = ydb.TopicCodec.RAW
    writer = official.topic_client.writer("skip", producer_id="p", auto_seqno=False, codec=raw)
    try:
        for seq_no in (1, 2, 3):
            await writer.write_with_ack(ydb.TopicWriterMessage(b"%d" % seq_no, seqno=seq_no))
    finally:
        await writer.close()
    writer = official.topic_client.writer("skip", producer_id="p", auto_seqno=False, codec=raw)
    try:
        results = await writer.write_with_ack(
            [ydb.TopicWriterMessage(b"again-%d" % s, seqno=s) for s in (2, 3)] + [ydb.TopicWriterMessage(b"4", seqno=4)]
        )
    finally:
        await writer.close()
    assert results == [ydb.TopicWriteResult.Skipped(), ydb.TopicWriteResult.Skipped(),
                       ydb.TopicWriteResult.Written(offset=3)]
    assert stored_data(server, "skip") == [b"1", b"2", b"3", b"4"]


async def test_writer_reconnects_and_server_deduplicates_the_resend(
    official: Any, server: LocalTopicServer
) -> None:
    await official.topic_client.create_topic("resend")
    writer = official.topic_client.writer("resend", producer_id="p")
    try:
        await writer.wait_init()
        # The stream breaks after storing the 5th message, before its ack: the writer
        # reconnects and sends the unacknowledged messages again.
        server.faults.drop_write_stream_after(5)
        for i in range(10):
            await writer.write(ydb.TopicWriterMessage(b"m%d" % i))
        await writer.flush()
    finally:
        await writer.close()
    assert server.faults.dropped_streams == 1
    stored = server.storage.read("resend", 0)
    assert [(m.offset, m.seq_no, m.data) for m in stored] == [(i, i + 1, b"m%d" % i) for i in range(10)]


async def test_reader_reads_and_commits(official: Any, server: LocalTopicServer) -> None:
    await official.topic_client.create_topic("r", consumers=["c"])
    writer = official.topic_client.writer("r", producer_id="p", codec=ydb.TopicCodec.GZIP)
    try:
        for i in range(20):
            await writer.write(ydb.TopicWriterMessage(b"r%d" % i))
        await writer.flush()
    finally:
        await writer.close()
    assert {m.codec for m in server.storage.read("r", 0)} == {ydb.TopicCodec.GZIP}
    got = [m.data for m in await read_with_official_sdk(official, "r", "c", 20)]
    assert got == [b"r%d" % i for i in range(20)]
    assert server.storage.committed_offsets("r", "c") == {0: 20}
    consumer = await official.topic_client.describe_consumer("r", "c", include_stats=True)
    assert consumer.partitions[0].partition_consumer_stats.committed_offset == 20


async def test_two_readers_split_partitions_and_rebalance(official: Any, server: LocalTopicServer) -> None:
    await official.topic_client.create_topic("shared", min_active_partitions=4, consumers=["c"])

    def owners() -> dict[int, str]:
        sessions = server.reads.read_sessions()
        return {pid: info.read_session_id for (_, _, pid), info in sessions.items()}

    first = official.topic_client.reader("shared", consumer="c")
    second = None
    try:
        await eventually(lambda: len(owners()) == 4)
        second = official.topic_client.reader("shared", consumer="c")
        await eventually(lambda: sorted(list(owners().values()).count(s) for s in set(owners().values())) == [2, 2])
        split = owners()
        await second.close()
        second = None
        await eventually(lambda: len(set(owners().values())) == 1 and len(owners()) == 4)
        assert set(owners().values()) < set(split.values())

        writer = official.topic_client.writer("shared", producer_id="p")
        try:
            for i in range(8):
                await writer.write(ydb.TopicWriterMessage(b"s%d" % i))
            await writer.flush()
        finally:
            await writer.close()
        got: list[bytes] = []
        while len(got) < 8:
            batch = await asyncio.wait_for(first.receive_batch(), 10)
            got.extend(m.data for m in batch.messages)
        assert sorted(got) == sorted(b"s%d" % i for i in range(8))
    finally:
        if second is not None:
            await second.close()
        await first.close()
