"""TopicReader against the local topic server over gRPC."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import threading
import time

import pytest

import ydb_topic_async as yta
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async.reader.commits import merge_ranges
from ydb_topic_async.reader.flow_control import UNMEASURED_RATIO, ReadBuffer
from ydb_topic_async.reader.messages import PartitionSession, PartitionSessionState
from ydb_topic_async.reader.parts import BufferedPart
from ydb_topic_async.reader.settings import ReaderSettings
from ydb_topic_async.reader.wire import _ServerBatchInfo
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.storage import NewMessage

from .._helpers import fill
from .._polling import eventually
from .._streams import record_requests

pytestmark = pytest.mark.timeout(30)


async def _read_n(reader: yta.TopicReader, n: int, *, commit: bool = True) -> list[yta.TopicMessage]:
    out: list[yta.TopicMessage] = []
    while len(out) < n:
        batch = await reader.receive_batch(timeout=10)
        out.extend(batch)
        if commit:
            reader.commit(batch)
    return out


async def _committed(driver: yta.Driver, topic: str, consumer: str = "consumer") -> dict[int, int]:
    desc = await driver.topic.describe_consumer(topic, consumer)
    return {p.partition_id: p.committed_offset for p in desc.partitions}


# --- reading everything --------------------------------------------------------------------


async def test_reads_all_partitions_codecs_and_metadata(driver: yta.Driver, topic_name: str) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=3, consumers=["consumer"])
    codecs = {0: yta.Codec.RAW, 1: yta.Codec.GZIP, 2: yta.LZ4_CODEC}
    big = b"x" * 40_000  # decoded off the loop
    expected: dict[int, list[bytes]] = {}
    for pid, codec in codecs.items():
        expected[pid] = [f"p{pid}-{i}".encode() * 20 for i in range(50)] + [big]
        await fill(driver, topic_name, expected[pid], partition_id=pid, codec=codec, metadata={"k": b"v%d" % pid})
    async with driver.topic.reader(
        topic_name, consumer="consumer", decoders={yta.LZ4_CODEC: yta.lz4_decode}
    ) as reader:
        got = await _read_n(reader, 153)
        assert len(got) == 153
        for pid in codecs:
            mine = [m for m in got if m.partition_id == pid]
            assert [m.data for m in mine] == expected[pid]
            assert [m.offset for m in mine] == list(range(51))
            assert [m.seq_no for m in mine] == list(range(1, 52))
            assert all(m.metadata_items == {"k": b"v%d" % pid} for m in mine)
            assert all(m.producer_id == f"filler-{pid}" for m in mine)
            assert all(m.topic_path == driver.topic.full_path(topic_name) for m in mine)
            assert all(m.written_at >= m.created_at.replace(microsecond=0) for m in mine)
        await reader.commit_with_ack(got[-1])  # last message of one partition; all committed anyway
    assert await _committed(driver, topic_name) == {0: 51, 1: 51, 2: 51}


async def test_unknown_codec_fails_with_its_name(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"a", b"b"], codec=yta.LZ4_CODEC)
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        with pytest.raises(yta.UnsupportedCodecError, match="lz4"):
            await reader.receive_batch(timeout=10)
        with pytest.raises(yta.UnsupportedCodecError):  # every later call raises it too
            await reader.receive_message()


async def test_async_iteration_and_receive_message(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"%d" % i for i in range(20)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await reader.receive_message(timeout=10)
        assert (first.offset, first.data) == (0, b"0")
        seen = [first]
        async for message in reader:
            seen.append(message)
            if len(seen) == 20:
                break
        assert [m.data for m in seen] == [b"%d" % i for i in range(20)]
        # YDB commits are contiguous: every message is committed, and the ack covers them all.
        for message in seen[:-1]:
            reader.commit(message)
        await reader.commit_with_ack(seen[-1])
    assert await _committed(driver, topic) == {0: 20}


async def test_receive_batch_limits(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"y" * 100 for _ in range(10)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        total: list[int] = []
        while len(total) < 10:
            batch = await reader.receive_batch(max_messages=3, max_bytes=250, timeout=10)
            assert 1 <= len(batch) <= 2
            assert batch.end_offset == batch[-1].offset + 1
            total.extend(m.offset for m in batch)
        assert total == list(range(10))
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_batch(timeout=0.2)


# --- commits --------------------------------------------------------------------------------


async def test_commits_out_of_order_ack_only_when_contiguous(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"m%d" % i for i in range(10)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        a = await reader.receive_batch(max_messages=4, timeout=10)
        b = await reader.receive_batch(max_messages=6, timeout=10)
        assert (a.commit_range, b.commit_range) == ((0, 4), (4, 10))
        ack_b = asyncio.ensure_future(reader.commit_with_ack(b))
        await asyncio.sleep(0)  # the commit is recorded; the status request goes out after it
        status = await reader.partition_status(b.partition_session, timeout=10)
        # the server answered the commit before the status: offsets 0..3 are not committed yet
        assert status.committed_offset == 0 and not ack_b.done()
        assert await _committed(driver, topic) == {0: 0}
        await reader.commit_with_ack(a)
        await ack_b
    assert await _committed(driver, topic) == {0: 10}


async def test_offsets_committed_twice_are_sent_once(server: LocalTopicServer, driver: yta.Driver, topic: str) -> None:
    """YDB ends a read session that commits a range overlapping one it sent before and that is
    not committed yet (``TReadSessionActor::Handle(TEvCommitRange)``, ydb/services/persqueue_v1:
    "has already committed offsets, double committing is forbiden"); the local server does too."""
    await fill(driver, topic, [b"m%d" % i for i in range(10)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        batch = await reader.receive_batch(timeout=10)
        reader.commit(batch[7])  # sent, and held by the server behind offsets 0..6
        reader.commit(batch[7])  # the same again
        await asyncio.sleep(0.1)
        reader.commit(batch[7])
        await reader.commit_with_ack(batch, timeout=10)  # [0, 10) over the [7, 8) sent before
        assert reader.reconnects == 0 and reader.connection_state is yta.ConnectionState.CONNECTED
    assert server.storage.committed_offsets(topic, "consumer") == {0: 10}


async def test_commit_range_starts_at_committed_offset(driver: yta.Driver, topic: str) -> None:
    """A read that starts past the committed offset commits the skipped offsets too (gap filling)."""
    await fill(driver, topic, [b"g%d" % i for i in range(10)])
    async with driver.topic.reader(topic, consumer="consumer", on_partition_start=lambda s: 6) as reader:
        batch = await reader.receive_batch(timeout=10)
        assert batch[0].offset == 6
        assert batch.commit_range == (0, 10)
        assert batch[0].commit_range == (0, 7)
        await reader.commit_with_ack(batch)
    assert await _committed(driver, topic) == {0: 10}


def test_merge_ranges() -> None:
    assert merge_ranges([(5, 7), (0, 3), (3, 5), (9, 10), (8, 9)]) == [(0, 7), (8, 10)]
    assert merge_ranges([(0, 5), (1, 3)]) == [(0, 5)]


async def test_commit_after_session_lost(
    server: LocalTopicServer, driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    await fill(driver, topic, [b"s%d" % i for i in range(5)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        old = await reader.receive_batch(timeout=10)
        assert [m.offset for m in old] == [0, 1, 2, 3, 4]
        first_stream = reader.read_session_id
        assert server.faults.drop_read_streams() == 1  # the network stream breaks (UNAVAILABLE)
        again = await reader.receive_batch(timeout=10)  # redelivered in a new session
        assert [m.offset for m in again] == [0, 1, 2, 3, 4]
        assert [m.data for m in again] == [m.data for m in old]
        assert reader.read_session_id != first_stream
        assert old.partition_session.closed and not again.partition_session.closed
        with pytest.raises(yta.PartitionSessionClosedError):
            await reader.commit_with_ack(old)
        with caplog.at_level(logging.WARNING, logger="ydb_topic_async.reader"):
            reader.commit(old[0])
        assert "commit skipped" in caplog.text
        reader.commit(again[0])
        await reader.commit_with_ack(again[1])
    assert await _committed(driver, topic) == {0: 2}  # the old session's commit changed nothing


async def test_at_least_once_across_dropped_streams(
    server: LocalTopicServer, driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    for pid in (0, 1):
        await fill(driver, topic_name, [b"%d-%d" % (pid, i) for i in range(300)], partition_id=pid)
    seen: set[tuple[int, int]] = set()
    deliveries = drops = 0
    finished: set[int] = set()
    async with driver.topic.reader(topic_name, consumer="consumer", buffer_size_bytes=4096) as reader:
        while finished != {0, 1}:
            batch = await reader.receive_batch(max_messages=25, timeout=10)
            deliveries += len(batch)
            seen.update((m.partition_id, m.offset) for m in batch)
            # Break the stream over the network (unless it is between connections right now);
            # this batch is not committed, so it comes again.
            if deliveries % 100 < 25 and drops < 4 and server.faults.drop_read_streams():
                drops += 1
                continue
            if batch.end_offset < 300:
                reader.commit(batch)
                continue
            try:
                await reader.commit_with_ack(batch)
            except yta.PartitionSessionClosedError:
                continue  # a drop overtook the commit: the data is delivered again
            finished.add(batch.partition_id)
    assert drops == 4
    assert seen == {(p, o) for p in (0, 1) for o in range(300)}
    assert deliveries > 600  # uncommitted messages were delivered again
    assert await _committed(driver, topic_name) == {0: 300, 1: 300}


async def test_close_waits_for_commit_acks(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"c%d" % i for i in range(50)])
    reader = driver.topic.reader(topic, consumer="consumer")
    async with reader:
        got = await _read_n(reader, 50, commit=False)
        for message in got:
            reader.commit(message)  # fire and forget
    assert reader.closed
    assert await _committed(driver, topic) == {0: 50}
    with pytest.raises(yta.ReaderClosedError):
        await reader.receive_batch()
    with pytest.raises(yta.ReaderClosedError):
        await reader.receive_message(timeout=1)
    with pytest.raises(yta.ReaderClosedError):
        await reader.__anext__()
    with pytest.raises(yta.ReaderClosedError):
        reader.commit(got[0])
    with pytest.raises(yta.ReaderClosedError):
        await reader.commit_with_ack(got[-1])
    with pytest.raises(yta.ReaderClosedError):
        await reader.partition_status(got[0].partition_session)
    with pytest.raises(yta.ReaderClosedError):
        await reader.open()
    await reader.close()  # a second close is a no-op


async def test_close_after_the_stream_broke_does_not_reconnect(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, [b"b%d" % i for i in range(5)])
    reader = driver.topic.reader(topic, consumer="consumer")
    async with reader:
        batch = await reader.receive_batch(timeout=10)
        assert [m.offset for m in batch] == [0, 1, 2, 3, 4]
        # Every later StreamRead fails: a close that reconnected for the commit would never end.
        server.faults.fail_next("StreamRead", "UNAVAILABLE", times=10_000)
        assert server.faults.drop_read_streams() == 1
        reader.commit(batch)  # lost with the stream (or skipped if the loss was seen already)
        await reader.close(timeout=5)
    assert await _committed(driver, topic) == {0: 0}  # delivered again to the next reader


async def test_cancelled_receive_loses_nothing(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        for _ in range(3):
            waiter = asyncio.ensure_future(reader.receive_batch())
            await asyncio.sleep(0.05)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        await fill(driver, topic, [b"a", b"b", b"c"])
        got = await _read_n(reader, 3)
        assert [m.data for m in got] == [b"a", b"b", b"c"]


# --- flow control ----------------------------------------------------------------------------


async def test_buffered_bytes_stay_bounded(driver: yta.Driver, topic: str) -> None:
    payload = b"f" * 1000
    await fill(driver, topic, [payload] * 400)
    buffer_size = 8 * 1024
    async with driver.topic.reader(topic, consumer="consumer", buffer_size_bytes=buffer_size) as reader:
        got = 0
        while got < 400:
            await asyncio.sleep(0.002)  # a slow consumer: the server could send far more
            batch = await reader.receive_batch(max_messages=3, timeout=10)
            got += len(batch)
            assert reader.buffered_bytes <= buffer_size
        # The server fills the credit and may send one message past it (the one that crosses
        # the limit): the reader keeps room for it, so the buffer fills up to its size and no
        # further; credit comes back only as messages are handed out.
        assert buffer_size - 2 * len(payload) < reader.peak_buffered_bytes <= buffer_size


@pytest.mark.parametrize("direct_read", [False, True], ids=["ordinary", "direct"])
async def test_freed_credit_goes_out_before_the_commit_made_with_it(
    driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch, direct_read: bool
) -> None:
    """A batch taken (its bytes freed) and committed leaves the stream's sender both to write:
    the credit goes first. Each write waits for the one before it to complete, and meanwhile a
    receive may hand out a whole buffered batch without yielding: credit queued behind the commit
    would reach the server that much later, holding back what it may send (reading directly, the
    acknowledgements of direct reads go first too, for the same reason)."""
    await fill(driver, topic, [b"c" * 3000] * 4)
    sent = record_requests(monkeypatch, "read_request", "commit_offset_request")
    async with driver.topic.reader(
        topic, consumer="consumer", buffer_size_bytes=4096, direct_read=direct_read
    ) as reader:
        first = await reader.receive_batch(timeout=10)
        reader.commit(first)
        # The next message arrives and uses up the credit: one message fills this buffer.
        await eventually(lambda: reader.buffered_bytes > 0, "the next message buffered")
        del sent[:]
        second = await reader.receive_batch(timeout=10)  # the buffer is empty: credit to grant
        reader.commit(second)
        rest = [await reader.receive_batch(timeout=10) for _ in range(2)]
    assert [m.offset for batch in (first, second, *rest) for m in batch] == [0, 1, 2, 3]
    kinds = [request.WhichOneof("client_message") for request in sent]
    assert kinds[:2] == ["read_request", "commit_offset_request"], kinds


def _text(size: int, seed: int) -> bytes:
    """Words drawn from a small vocabulary: zstd shrinks it about four times."""
    rng = random.Random(seed)
    words = [b"%x" % rng.getrandbits(24) for _ in range(400)]
    out = b" ".join(rng.choice(words) for _ in range(size // 4))
    return out[:size]


async def test_compressed_payloads_stay_within_the_buffer_once_decoded(driver: yta.Driver, topic: str) -> None:
    """Credit is granted in decoded terms: payloads that decode to several times their size on
    the wire do not bring several buffers' worth of data in (granting the buffer in wire bytes,
    this reader held about five times its buffer here)."""
    payloads = [_text(32 * 1024, i) for i in range(80)]
    await fill(driver, topic, payloads, codec=yta.Codec.ZSTD)
    buffer_size = 128 * 1024
    async with driver.topic.reader(topic, consumer="consumer", buffer_size_bytes=buffer_size) as reader:
        got: list[bytes] = []
        while len(got) < len(payloads):
            await asyncio.sleep(0.002)  # a slow consumer: the server could send far more
            batch = await reader.receive_batch(max_messages=2, timeout=10)
            got.extend(m.data for m in batch)
            assert reader.buffered_bytes <= buffer_size
        assert got == payloads
        assert buffer_size // 2 < reader.peak_buffered_bytes <= buffer_size


def _part(session: PartitionSession, payloads: list[bytes], nbytes: int, codec: int = 1) -> BufferedPart:
    """A part of one server batch of ``payloads`` (lz4-compressed for ``LZ4_CODEC``)."""
    batch = pb.StreamReadMessage.ReadResponse.Batch(producer_id="p", codec=codec)
    for offset, data in enumerate(payloads):
        wire = data if codec == 1 else yta.lz4_encode(data)
        batch.message_data.add(offset=offset, seq_no=offset + 1, data=wire, uncompressed_size=len(data))
    decoder = None if codec == 1 else yta.lz4_decode
    return BufferedPart(session, [_ServerBatchInfo(batch, decoder)], len(payloads), nbytes, 0, decoder is not None)


def _settings(buffer_size: int, release_threshold: int) -> ReaderSettings:
    """A reader's settings with this buffer, returning credit in chunks of ``release_threshold``."""
    fraction = release_threshold / buffer_size
    return ReaderSettings("consumer", buffer_size_bytes=buffer_size, credit_release_fraction=fraction)


def _within_buffer(buf: ReadBuffer) -> bool:
    """What the buffer holds, what the server may still send (charged as the buffer predicts) and
    the room kept for one message past the credit fit in the buffer."""
    return buf.buffered_bytes + buf.server_credit * buf.ratio + buf.reserve <= buf.buffer_size


async def test_credit_lets_in_no_more_than_the_buffer() -> None:
    """Credit is ``(buffer - buffered - reserve) / ratio - outstanding``: before anything was
    measured the first grant assumes payloads decode to ``UNMEASURED_RATIO`` times their wire
    size; raw payloads are charged their wire bytes (ratio 1), and room is kept for the one
    message the server may send past the credit (the largest seen)."""
    wake = asyncio.Event()
    drained: list[PartitionSession] = []
    buf = ReadBuffer(_settings(16000, 1000), drained.append, wake)
    assert buf.reset() == 16000 // UNMEASURED_RATIO == 1000
    session = PartitionSession(1, "/local/t", 0, 0, 0, 10)
    buf.charge(1200)  # one response past the credit: its last message crossed it
    part = _part(session, [b"x"] * 3, 1200)
    buf.push(part)
    buf.measured(1200, part.charge, part.share)
    buf.release(0)
    assert (buf.buffered_bytes, buf.peak_buffered_bytes, buf.server_credit) == (1200, 1200, -200)
    assert (buf.ratio, buf.reserve) == (1.0, 400)  # raw: charged as on the wire; 400 per message
    assert buf.credit_ready and wake.is_set()
    assert buf.take_credit() == 16000 - 1200 - 400 + 200  # the overshoot paid back too
    assert buf.server_credit == 14400 and _within_buffer(buf)
    message = buf.pop_one()
    assert message is not None and message.offset == 0  # frees its share: 1200 // 3
    assert (buf.buffered_bytes, buf.credit_ready) == (800, False)  # 400 is below the release threshold
    rest = buf.pop(None, None)
    assert [m.offset for m in rest] == [1, 2]
    assert (buf.buffered_bytes, buf.credit_ready) == (0, True)
    assert buf.take_credit() == 1200  # all 1200 bytes granted back
    assert buf.server_credit == 16000 - 400 and _within_buffer(buf)
    assert drained == [session] and not buf
    assert buf.reset() == 16000 - 400  # a new stream starts from what was learned


async def test_compressed_payloads_are_charged_as_decoded_and_decoded_as_taken() -> None:
    """The buffer bound counts decoded bytes: a response whose payloads decode to ten times its
    wire size is charged both (the response stays until its last message is taken), credit is
    granted in those terms (so what the server may still send fits once decoded), and a payload
    is decoded only when a receive is about to hand it out."""
    wake = asyncio.Event()
    buf = ReadBuffer(_settings(16000, 1000), lambda session: None, wake)
    assert buf.reset() == 1000
    session = PartitionSession(1, "/local/t", 0, 0, 0, 10)
    payloads = [bytes([i]) * 500 for i in range(4)]
    part = _part(session, payloads, 200, codec=yta.LZ4_CODEC)
    buf.charge(200)
    buf.push(part)  # charged 2000 decoded bytes and the 200 on the wire
    buf.measured(200, part.charge, part.share)
    buf.release(0)
    assert buf.buffered_bytes == part.bytes_left == 2200
    assert (buf.ratio, buf.reserve) == (11.0, 550)
    # What the server still has (800 of the first grant) would be 8800 once decoded: that and the
    # 2200 held and the 550 reserved leave room for 404 more wire bytes.
    assert buf.credit_ready and buf.take_credit() == (16000 - 2200 - 550) // 11 - 800 == 404
    assert _within_buffer(buf)
    assert not buf.front_ready(1, None) and buf.pop_one() is None and not part.decoded
    await buf.decode_front(2, None)
    assert buf.front_ready(2, None) and len(part.decoded) == 2  # only what the take needs
    taken = buf.pop(2, None)
    assert [m.data for m in taken] == payloads[:2]
    assert buf.buffered_bytes == 1100
    # 1100 decoded bytes handed out: 100 more wire bytes.
    assert buf.credit_ready and buf.take_credit() == (16000 - 1100 - 550) // 11 - 1204 == 100
    assert _within_buffer(buf)
    await buf.decode_front(None, None)
    taken = buf.pop(None, None)
    assert [m.data for m in taken] == payloads[2:]
    assert buf.credit_ready and buf.take_credit() == (16000 - 550) // 11 - 1304 == 100
    assert buf.server_credit == 1404 and _within_buffer(buf)


# --- partition sessions and several readers --------------------------------------------------


async def test_two_readers_split_four_partitions_and_rebalance(driver: yta.Driver, topic_name: str) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=4, consumers=["consumer"])
    for pid in range(4):
        await fill(driver, topic_name, [b"%d" % pid] * 5, partition_id=pid)
    stopped: list[int] = []
    first = driver.topic.reader(
        topic_name, consumer="consumer", on_partition_stop=lambda s: stopped.append(s.partition_id)
    )
    second = driver.topic.reader(topic_name, consumer="consumer")
    async with first:
        await first.receive_batch(timeout=10)
        async with second:
            for _ in range(200):
                mine = {s.partition_id for s in first.partition_sessions if not s.closed}
                theirs = {s.partition_id for s in second.partition_sessions if not s.closed}
                if len(mine) == 2 and len(theirs) == 2:
                    break
                # keep the first reader consuming so its graceful stops complete
                try:
                    batch = await first.receive_batch(timeout=0.05)
                    first.commit(batch)
                except yta.OperationTimeoutError:
                    pass
            assert len(mine) == 2 and len(theirs) == 2 and not mine & theirs
            assert sorted(stopped) == sorted({0, 1, 2, 3} - mine)
        await eventually(lambda: len(first.partition_sessions) == 4, "the first reader has every partition again")
        assert {s.partition_id for s in first.partition_sessions} == {0, 1, 2, 3}


async def test_several_topics_in_one_reader(driver: yta.Driver, topic_name: str) -> None:
    other = topic_name + "-b"
    await driver.topic.create_topic(topic_name, consumers=["consumer"])
    await driver.topic.create_topic(other, consumers=["consumer"])
    await fill(driver, topic_name, [b"a"] * 3)
    await fill(driver, other, [b"b"] * 4)
    async with driver.topic.reader([topic_name, yta.TopicSelector(other)], consumer="consumer") as reader:
        got = await _read_n(reader, 7)
    by_topic = sorted((m.topic_path.rsplit("/", 1)[1], m.data) for m in got)
    assert by_topic == sorted([(topic_name, b"a")] * 3 + [(other, b"b")] * 4)


async def test_partition_status(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"p"] * 7)
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        batch = await reader.receive_batch(timeout=10)
        reader.commit(batch.messages[0])
        reader.commit(batch.messages[1])
        await reader.commit_with_ack(batch.messages[2])
        status = await reader.partition_status(batch.partition_session, timeout=10)
        # YDB reports the committed offset as the start of the partition's offsets here.
        assert (status.partition_start_offset, status.partition_end_offset) == (3, 7)
        assert status.committed_offset == 3


# --- without a consumer ----------------------------------------------------------------------


async def test_read_without_consumer_from_offsets(
    server: LocalTopicServer, driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    for pid in (0, 1):
        await fill(driver, topic_name, [b"%d:%d" % (pid, i) for i in range(10)], partition_id=pid)
    selector = yta.TopicSelector(topic_name, start_offsets={0: 7, 1: 3})
    async with driver.topic.reader(selector, consumer=None) as reader:
        got = await _read_n(reader, 3 + 7, commit=False)
        offsets = sorted((m.partition_id, m.offset) for m in got)
        assert offsets == [(0, o) for o in range(7, 10)] + [(1, o) for o in range(3, 10)]
        with pytest.raises(yta.CommitNotAllowedError):
            reader.commit(got[0])
        with pytest.raises(yta.CommitNotAllowedError):
            await reader.commit_with_ack(got[0])
        # after a reconnect it continues after what was handed out
        assert server.faults.drop_read_streams() == 1
        await fill(driver, topic_name, [b"new"], partition_id=0)
        after = await reader.receive_batch(timeout=10)
        assert [(m.partition_id, m.offset, m.data) for m in after] == [(0, 10, b"new")]
    assert await _committed(driver, topic_name) == {0: 0, 1: 0}


async def test_invalid_arguments() -> None:
    async with yta.Driver("grpc://127.0.0.1:1", "/local", discovery=False) as driver:
        with pytest.raises(yta.InvalidArgumentError, match="explicit partitions"):
            driver.topic.reader("t", consumer=None)
        with pytest.raises(yta.InvalidArgumentError):
            driver.topic.reader("t", consumer="c", buffer_size_bytes=10)
        with pytest.raises(yta.InvalidArgumentError):
            yta.TopicSelector("t", partitions=[-1])
        reader = driver.topic.reader("t", consumer="c")
        for limits in ({"max_messages": True}, {"max_bytes": True}, {"max_messages": 0}):
            with pytest.raises(yta.InvalidArgumentError, match="must be a positive int"):
                await reader.receive_batch(**limits)


async def test_children_of_a_split_partition_are_read_after_the_parent(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, [b"parent-%d" % i for i in range(5)])
    left, right = server.storage.split_partition(topic, 0)
    await fill(driver, topic, [b"left-%d" % i for i in range(3)], partition_id=left, producer_id="l")
    await fill(driver, topic, [b"right-%d" % i for i in range(2)], partition_id=right, producer_id="r")
    order: list[tuple[int, bytes]] = []
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        # Only the parent is handed out while it still has uncommitted data.
        batch = await reader.receive_batch(max_messages=2, timeout=10)
        assert {s.partition_id for s in reader.partition_sessions} == {0}
        order.extend((m.partition_id, m.data) for m in batch)
        reader.commit(batch)
        while len(order) < 10:
            batch = await reader.receive_batch(timeout=10)
            order.extend((m.partition_id, m.data) for m in batch)
            await reader.commit_with_ack(batch)
    parent = [data for pid, data in order if pid == 0]
    assert parent == [b"parent-%d" % i for i in range(5)]
    last_parent = max(i for i, (pid, _) in enumerate(order) if pid == 0)
    first_child = min(i for i, (pid, _) in enumerate(order) if pid != 0)
    assert last_parent < first_child  # children only after the parent was consumed and committed
    assert sorted(data for pid, data in order if pid == left) == [b"left-%d" % i for i in range(3)]
    assert sorted(data for pid, data in order if pid == right) == [b"right-%d" % i for i in range(2)]
    assert await _committed(driver, topic) == {0: 5, left: 3, right: 2}


async def test_close_does_not_wait_for_commits_behind_a_gap(
    driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    await fill(driver, topic, [b"g%d" % i for i in range(6)])
    reader = driver.topic.reader(topic, consumer="consumer")
    async with reader:
        got = await _read_n(reader, 6, commit=False)
        reader.commit(got[0])
        reader.commit(got[1])
        reader.commit(got[5])  # offsets 2..4 are never committed: this range cannot be acknowledged
        with caplog.at_level(logging.WARNING, logger="ydb_topic_async.reader"):
            await reader.close(timeout=10)  # returns once offsets 0..1 are acknowledged
    assert "past offset 2 cannot be acknowledged" in caplog.text
    assert await _committed(driver, topic) == {0: 2}


# --- partition session lifecycle -------------------------------------------------------------


def _session(reader: yta.TopicReader, partition_id: int) -> yta.PartitionSession | None:
    return next((s for s in reader.partition_sessions if s.partition_id == partition_id), None)


async def test_graceful_stop_delivers_buffered_messages_then_hands_over(
    driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    for pid in (0, 1):
        await fill(driver, topic_name, [b"%d-%d" % (pid, i) for i in range(10)], partition_id=pid)
    stopped: list[tuple[int, int]] = []
    first = driver.topic.reader(
        topic_name,
        consumer="consumer",
        on_partition_stop=lambda s: stopped.append((s.partition_id, s.committed_offset)),
    )
    # The newcomer can only take partition 1, so that is the one the server moves.
    second = driver.topic.reader(yta.TopicSelector(topic_name, partitions=[1]), consumer="consumer")
    async with first:
        got: list[yta.TopicMessage] = []
        while not any(m.partition_id == 1 for m in got):
            batch = await first.receive_batch(max_messages=1, timeout=10)
            got.extend(batch)
            first.commit(batch)
        moving = got[-1].partition_session
        async with second:
            await eventually(lambda: moving.state is PartitionSessionState.STOPPING, "graceful stop of partition 1")
            # The stop arrived while partition 1 still had messages buffered (the precondition of
            # this test; a partition session does not show its share of the reader's buffer).
            assert moving._bookkeeping.buffered > 0
            while len(got) < 20:
                batch = await first.receive_batch(timeout=10)
                got.extend(batch)
                await first.commit_with_ack(batch)
            assert sorted((m.partition_id, m.offset) for m in got) == [(p, o) for p in (0, 1) for o in range(10)]
            await eventually(lambda: bool(stopped), "stop of partition 1 confirmed")
            assert stopped == [(1, 10)] and moving.closed
            assert {s.partition_id for s in first.partition_sessions} == {0}
            await fill(driver, topic_name, [b"late"], partition_id=1)
            batch = await second.receive_batch(timeout=10)
            # the new owner starts at the committed offset: nothing handed out before is read again
            assert [(m.partition_id, m.offset, m.data) for m in batch] == [(1, 10, b"late")]
            desc = await driver.topic.describe_consumer(topic_name, "consumer")
            owners = {p.partition_id: p.read_session_id for p in desc.partitions}
            assert owners == {0: first.read_session_id, 1: second.read_session_id}
    assert await _committed(driver, topic_name) == {0: 10, 1: 10}


async def test_non_graceful_stop_drops_buffered_messages(topic_name: str) -> None:
    async with (
        LocalTopicServer(graceful_stop_timeout=0.2) as server,
        yta.Driver(server.endpoint, server.database) as driver,
    ):
        await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
        for pid in (0, 1):
            await fill(driver, topic_name, [b"%d-%d" % (pid, i) for i in range(10)], partition_id=pid)
        stopped: list[int] = []
        first = driver.topic.reader(
            topic_name, consumer="consumer", on_partition_stop=lambda s: stopped.append(s.partition_id)
        )
        second = driver.topic.reader(yta.TopicSelector(topic_name, partitions=[1]), consumer="consumer")
        async with first:
            got: list[yta.TopicMessage] = []
            while not any(m.partition_id == 1 for m in got):
                batch = await first.receive_batch(max_messages=1, timeout=10)
                got.extend(batch)
                if batch.partition_id == 0:
                    first.commit(batch)
            lost = got[-1]
            async with second:
                # The first reader does not consume, so it cannot confirm the graceful stop; the
                # server takes the partition away and the first reader drops what it buffered.
                await eventually(lambda: lost.partition_session.closed, "partition 1 taken away")
                assert stopped == [1]
                with pytest.raises(yta.PartitionSessionClosedError):
                    await first.commit_with_ack(lost)
                theirs: list[yta.TopicMessage] = []
                while len(theirs) < 10:
                    batch = await second.receive_batch(timeout=10)
                    theirs.extend(batch)
                    await second.commit_with_ack(batch)
                assert [(m.partition_id, m.offset) for m in theirs] == [(1, o) for o in range(10)]
                ours = [m for m in got if m.partition_id == 0]
                while len(ours) < 10:
                    batch = await first.receive_batch(timeout=10)
                    assert batch.partition_id == 0  # partition 1's buffered messages are gone
                    ours.extend(batch)
                    first.commit(batch)
                await first.commit_with_ack(ours[-1])
                assert [m.offset for m in ours] == list(range(10))
                assert first.buffered_bytes == 0
        assert await _committed(driver, topic_name) == {0: 10, 1: 10}


async def test_start_offsets_from_an_async_callback(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"o%d" % i for i in range(10)])
    started: list[tuple[int, int, int]] = []

    async def on_start(session: yta.PartitionSession) -> yta.StartOffsets:
        started.append((session.partition_id, session.partition_start_offset, session.partition_end_offset))
        return yta.StartOffsets(read_offset=4, commit_offset=4)

    async with driver.topic.reader(topic, consumer="consumer", on_partition_start=on_start) as reader:
        batch = await reader.receive_batch(timeout=10)
        assert [m.offset for m in batch] == list(range(4, 10))
        assert batch.commit_range == (4, 10)
        assert await _committed(driver, topic) == {0: 4}  # the start answer committed 4
        await reader.commit_with_ack(batch)
    assert started == [(0, 0, 10)]
    assert await _committed(driver, topic) == {0: 10}


async def test_selectors_partitions_read_from_and_max_lag(
    server: LocalTopicServer, driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=3, consumers=["consumer"])
    two_hours_ago = time.time_ns() - 2 * 3600 * 10**9
    log = server.storage.topic(topic_name).partition(0)
    for i in range(3):  # old messages, as if written two hours ago
        log.append(NewMessage(seq_no=i + 1, created_at_ns=two_hours_ago, codec=1, data=b"old-%d" % i,
                              uncompressed_size=5, producer_id="old"), written_at_ns=two_hours_ago + i)
    await fill(driver, topic_name, [b"new-3", b"new-4"], partition_id=0)
    await fill(driver, topic_name, [b"a", b"b"], partition_id=1, producer_id="p1")
    await fill(driver, topic_name, [b"c", b"d", b"e"], partition_id=1, producer_id="p1")
    await fill(driver, topic_name, [b"x"], partition_id=2)

    lagging = yta.TopicSelector(topic_name, partitions=[0], max_lag=dt.timedelta(hours=1))
    async with driver.topic.reader(lagging, consumer="consumer") as reader:
        batch = await reader.receive_batch(timeout=10)
        assert [(m.partition_id, m.offset, m.data) for m in batch] == [(0, 3, b"new-3"), (0, 4, b"new-4")]
        assert batch.commit_range == (0, 5)  # the skipped offsets are committed with it
        await reader.commit_with_ack(batch)
        assert {s.partition_id for s in reader.partition_sessions} == {0}

    since = server.storage.read(topic_name, 1)[2].written_at_ns
    read_from = dt.datetime.fromtimestamp(since / 1e9, dt.UTC).replace(microsecond=(since // 1000) % 10**6)
    recent = yta.TopicSelector(topic_name, partitions=[1], read_from=read_from)
    async with driver.topic.reader(recent, consumer="consumer") as reader:
        batch = await reader.receive_batch(timeout=10)
        assert [(m.partition_id, m.offset, m.data) for m in batch] == [(1, 2, b"c"), (1, 3, b"d"), (1, 4, b"e")]
        assert all(m.written_at >= read_from for m in batch)
        await reader.commit_with_ack(batch)
    assert await _committed(driver, topic_name) == {0: 5, 1: 5, 2: 0}


async def test_split_while_reading_ends_the_parent_then_reads_children(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, [b"before-%d" % i for i in range(4)])
    stopped: list[int] = []
    async with driver.topic.reader(
        topic, consumer="consumer", on_partition_stop=lambda s: stopped.append(s.partition_id)
    ) as reader:
        head = await reader.receive_batch(timeout=10)
        assert [m.offset for m in head] == [0, 1, 2, 3]
        parent = head.partition_session
        left, right = server.storage.split_partition(topic, 0)
        await fill(driver, topic, [b"left-%d" % i for i in range(3)], partition_id=left, producer_id="l")
        await fill(driver, topic, [b"right-%d" % i for i in range(2)], partition_id=right, producer_id="r")
        # The parent was read to its end: EndPartitionSession names the children.
        await eventually(lambda: parent.ended, "EndPartitionSession for the parent")
        assert parent.child_partition_ids == (left, right)
        # The server hands out the children at once (auto-partitioning support); the reader holds
        # them back until the parent is consumed and committed.
        await eventually(lambda: len(reader.partition_sessions) == 3, "the children's partition sessions")
        assert not parent.closed and {s.partition_id for s in reader.partition_sessions} == {0, left, right}
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_batch(timeout=0.1)  # the children wait for the parent's commit
        await reader.commit_with_ack(head)
        children: list[yta.TopicMessage] = []
        while len(children) < 5:
            batch = await reader.receive_batch(timeout=10)
            children.extend(batch)
            await reader.commit_with_ack(batch)
        assert stopped == [0] and parent.state is PartitionSessionState.CLOSED
        assert sorted((m.partition_id, m.offset, m.data) for m in children) == sorted(
            [(left, i, b"left-%d" % i) for i in range(3)] + [(right, i, b"right-%d" % i) for i in range(2)]
        )
        assert {s.partition_id for s in reader.partition_sessions} == {left, right}
    assert await _committed(driver, topic) == {0: 4, left: 3, right: 2}


async def test_reread_below_the_committed_offset(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"r%d" % i for i in range(10)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        await reader.commit_with_ack(await reader.receive_batch(timeout=10))
    # YDB refuses to start reading a consumer's partition below its committed offset...
    rewind = yta.TopicSelector(topic, start_offsets={0: 3})
    with pytest.raises(yta.BadRequestError, match="less than committed"):
        async with driver.topic.reader(rewind, consumer="consumer") as reader:
            await reader.receive_batch(timeout=10)
    # ...so re-reading starts by moving the committed offset back.
    await driver.topic.commit_offset(topic, 0, "consumer", 3)
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        again = await reader.receive_batch(timeout=10)
        assert [m.offset for m in again] == list(range(3, 10))
        assert again.commit_range == (3, 10) and again[0].commit_range == (3, 4)
        await reader.commit_with_ack(again)
        await fill(driver, topic, [b"r10", b"r11"])
        fresh = await reader.receive_batch(timeout=10)
        assert [(m.offset, m.data) for m in fresh] == [(10, b"r10"), (11, b"r11")]
        assert fresh.commit_range == (10, 12)
        await reader.commit_with_ack(fresh)
    assert await _committed(driver, topic) == {0: 12}


async def test_large_compressed_batches_are_decoded_off_the_loop(driver: yta.Driver, topic: str) -> None:
    loop_thread = threading.get_ident()
    decoded_in: dict[int, int] = {}

    def decode(data: bytes) -> bytes:
        out = yta.lz4_decode(data)
        decoded_in[len(out)] = threading.get_ident()
        return out

    decoders = {yta.LZ4_CODEC: yta.ThreadSafe(decode)}
    async with driver.topic.reader(topic, consumer="consumer", decoders=decoders) as reader:
        await fill(driver, topic, [b"s" * 100], codec=yta.LZ4_CODEC)
        got = await _read_n(reader, 1)
        await fill(driver, topic, [b"x" * 40_000], codec=yta.LZ4_CODEC)  # a few hundred bytes on the wire
        got += await _read_n(reader, 1)
    assert [(m.offset, m.data) for m in got] == [(0, b"s" * 100), (1, b"x" * 40_000)]
    assert decoded_in[100] == loop_thread
    assert decoded_in[40_000] != loop_thread


async def test_retriable_failures_reconnect_and_fatal_ones_reach_the_user(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, [b"a", b"b"])
    server.faults.fail_next("StreamRead", "UNAVAILABLE", times=2)
    server.faults.fail_next("StreamRead", "OVERLOADED")
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        batch = await reader.receive_batch(timeout=10)  # after three refused handshakes
        assert [m.data for m in batch] == [b"a", b"b"]
        await reader.commit_with_ack(batch)
    assert await _committed(driver, topic) == {0: 2}

    server.faults.fail_next("StreamRead", "SCHEME_ERROR")
    reader = driver.topic.reader(topic, consumer="consumer")
    await reader.open()
    with pytest.raises(yta.SchemeError):
        await reader.receive_batch(timeout=10)
    with pytest.raises(yta.SchemeError):  # the failure stays: no silent recovery
        reader.commit(batch)
    await reader.close()  # the failure was already raised to the user
    with pytest.raises(yta.ReaderClosedError):
        await reader.receive_message(timeout=10)
