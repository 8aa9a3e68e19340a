"""Interop with the official ``ydb`` SDK: its reader reads what we write, and its writer's
messages (and deduplication) land correctly on the local server."""

from __future__ import annotations

import datetime as dt
from typing import Any

import anyio
import pytest
import ydb
import ydb.aio

import ydb_topic_async as yta
from ydb_topic_async import _codecs

from .._helpers import stored

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("codec", [_codecs.Codec.RAW, _codecs.Codec.GZIP])
async def test_official_reader_reads_what_we_write(
    server: Any, driver: yta.Driver, topic: str, official: Any, codec: int
) -> None:
    created = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    metadata: dict[str, str | bytes] = {"kind": "text", "bin": b"\xff"}
    sent = [
        yta.Message(b"plain"),
        yta.Message("текст", metadata=metadata),
        yta.Message(bytes(range(256)) * 200, created_at=created),  # compressed off the loop
    ] + [yta.Message(b"bulk-%d" % i) for i in range(100)]
    async with driver.topic.writer(
        topic, producer_id="ours", codec=codec, session_metadata={"origin": "ours"}
    ) as writer:
        await writer.write_with_ack(sent)

    reader = official.topic_client.reader(f"{server.database}/{topic}", consumer="consumer")
    received: list[Any] = []
    try:
        with anyio.fail_after(20):
            while len(received) < len(sent):
                batch = await reader.receive_batch()
                received.extend(batch.messages)
    finally:
        await reader.close(flush=False)
    assert [m.data for m in received] == [
        m.data if isinstance(m.data, bytes) else m.data.encode() for m in sent
    ]
    assert [m.seqno for m in received] == list(range(1, len(sent) + 1))
    assert [m.offset for m in received] == list(range(len(sent)))
    assert received[1].metadata_items == {"kind": b"text", "bin": b"\xff"}
    assert received[2].created_at == created.replace(tzinfo=None)  # the official SDK gives naive UTC
    assert received[0].producer_id == "ours"
    assert received[0].session_metadata == {"origin": "ours"}


async def test_official_writer_lands_on_our_server_with_dedup(
    server: Any, driver: yta.Driver, topic: str, official: Any
) -> None:
    path = f"{server.database}/{topic}"
    # The stream breaks right after the server stored the first messages, before their acks:
    # the official writer reconnects and resends them, and the server must not store them twice.
    server.faults.drop_write_stream_after(2)
    async with official.topic_client.writer(path, producer_id="theirs", codec=ydb.TopicCodec.RAW) as writer:
        results = await writer.write_with_ack([ydb.TopicWriterMessage(b"%d" % i) for i in range(1, 6)])
    assert server.faults.dropped_streams == 1
    assert sum(isinstance(r, ydb.TopicWriteResult.Skipped) for r in results) >= 1
    async with official.topic_client.writer(path, producer_id="theirs") as writer:
        assert (await writer.wait_init()).last_seqno == 5
    # Our writer with the same producer continues the same numbering.
    async with driver.topic.writer(topic, producer_id="theirs") as ours:
        assert (await ours.wait_init()).last_seq_no == 5
        assert await ours.write_with_ack(b"6") == yta.Written(0, 5, 6)
    messages = stored(server, topic)
    assert [(m.seq_no, m.data, m.offset) for m in messages] == [(i, b"%d" % i, i - 1) for i in range(1, 7)]
    assert {m.producer_id for m in messages} == {"theirs"}
