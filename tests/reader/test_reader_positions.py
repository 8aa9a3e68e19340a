"""Moving a partition session's position while reading (``seek``), over the local server.

YDB's read protocol has no seek message, and a read session with a consumer may start no lower
than the consumer's committed offset: ``TPartitionActor::InitStartReading``
(ydb/services/persqueue_v1/actors/partition_actor.cpp) refuses a read offset below it
("trying to read from position that is less than committed"). A commit range that overlaps one
sent before in the same partition session ends the session (``TReadSessionActor::Handle
(TEvCommitRange)``: "has already committed offsets, double committing is forbiden"), so a
message read again after a backward seek must not send its range twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import fill
from .._polling import eventually

pytestmark = pytest.mark.timeout(60)


def _payloads(start: int, stop: int) -> list[bytes]:
    return [f"m{i}".encode() for i in range(start, stop)]


async def _take(reader: yta.TopicReader, n: int, partition_id: int | None = None) -> list[yta.TopicMessage]:
    """The next ``n`` messages (of ``partition_id`` only, when given: others are dropped)."""
    out: list[yta.TopicMessage] = []
    while len(out) < n:
        batch = await reader.receive_batch(max_messages=n - len(out), timeout=10)
        out.extend(m for m in batch if partition_id is None or m.partition_id == partition_id)
    return out


async def _commit_through(reader: yta.TopicReader, messages: list[yta.TopicMessage]) -> None:
    """Commit each of ``messages`` and wait until the last one is acknowledged."""
    for message in messages:
        reader.commit(message)
    await reader.commit_with_ack(messages[-1], timeout=10)


def _offsets(messages: list[yta.TopicMessage]) -> list[int]:
    return [m.offset for m in messages]


async def test_a_forward_seek_passes_over_buffered_messages_and_commits_nothing(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, _payloads(0, 20))
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await _take(reader, 5)
        assert _offsets(first) == [0, 1, 2, 3, 4]
        session = first[0].partition_session
        skipped = await reader.seek(session, 12)
        assert skipped is not None and skipped.commit_range == (5, 12) and skipped.partition_session is session
        after = await _take(reader, 8)
        assert _offsets(after) == list(range(12, 20))
        assert after[0].commit_range == (12, 13)  # the passed-over offsets are not in it
        assert server.storage.committed_offsets(topic, "consumer") == {0: 0}  # a seek commits nothing
        # Messages received before the seek still commit; after it, the skipped offsets hold
        # the committed offset back until they are committed themselves.
        for message in first:
            reader.commit(message)
        await reader.commit_with_ack(first[-1], timeout=10)
        for message in after:
            reader.commit(message)
        await asyncio.sleep(0.2)
        assert server.storage.committed_offsets(topic, "consumer") == {0: 5}
        await reader.commit_with_ack(skipped, timeout=10)
        await eventually(lambda: server.storage.committed_offsets(topic, "consumer") == {0: 20}, "committed to the end")
        assert reader.reconnects == 0


async def test_a_forward_seek_past_what_was_received_drops_what_arrives_below_it(
    driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, _payloads(0, 10))
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        got = await _take(reader, 10)
        session = got[0].partition_session
        await fill(driver, topic, _payloads(10, 40))
        skipped = await reader.seek(session, 33)  # past the end the session was started with
        assert skipped is not None and skipped.commit_range == (10, 33)
        assert _offsets(await _take(reader, 7)) == list(range(33, 40))
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_batch(timeout=0.3)
        assert reader.reconnects == 0


async def _collect(reader: yta.TopicReader, counts: dict[int, int]) -> dict[int, list[yta.TopicMessage]]:
    """Receive until each partition in ``counts`` has at least that many messages."""
    got: dict[int, list[yta.TopicMessage]] = {partition: [] for partition in counts}
    while any(len(got[p]) < n for p, n in counts.items()):
        batch = await reader.receive_batch(timeout=10)
        got.setdefault(batch.partition_id, []).extend(batch)
    return got


async def test_a_backward_seek_reads_messages_again_and_leaves_other_partitions_and_the_stream_alone(
    server: LocalTopicServer, driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    await fill(driver, topic_name, _payloads(0, 10), partition_id=0)
    await fill(driver, topic_name, _payloads(0, 10), partition_id=1)
    async with driver.topic.reader(topic_name, consumer="consumer") as reader:
        before = await _collect(reader, {0: 10, 1: 10})
        zero = before[0]
        await _commit_through(reader, zero[:3])  # committed offset 3
        session_id = reader.read_session_id
        assert await reader.seek(zero[0].partition_session, 5) is None
        await fill(driver, topic_name, _payloads(10, 13), partition_id=0)
        await fill(driver, topic_name, _payloads(10, 11), partition_id=1)
        after = await _collect(reader, {0: 8, 1: 1})
        # Read again from offset 5, then the partition's own stream goes on: nothing twice.
        assert _offsets(after[0]) == list(range(5, 13))
        assert [m.data for m in after[0][:5]] == [m.data for m in zero[5:]]
        assert after[0][0].commit_range == (5, 6) and after[0][0].partition_session is zero[0].partition_session
        # The other partition was not disturbed, nor was the stream.
        assert _offsets(after[1]) == [10]
        assert reader.read_session_id == session_id and reader.reconnects == 0
        # Everything commits through the one partition session, up to the end.
        reader.commit(zero[3])
        reader.commit(zero[4])
        for message in before[1]:
            reader.commit(message)
        for message in after[0] + after[1]:
            reader.commit(message)
        await reader.commit_with_ack(after[0][-1], timeout=10)
        await reader.commit_with_ack(after[1][-1], timeout=10)
    assert server.storage.committed_offsets(topic_name, "consumer") == {0: 13, 1: 11}


async def test_messages_committed_before_a_backward_seek_can_be_committed_again_after_it(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, _payloads(0, 10))
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await _take(reader, 10)
        reader.commit(first[7])  # waits behind offsets 0..6 on the server
        await asyncio.sleep(0.1)  # sent
        await reader.seek(first[0].partition_session, 0)
        again = await _take(reader, 10)
        assert _offsets(again) == list(range(10))
        # The batch's range overlaps the one sent before: only the rest is sent, the session lives.
        for message in again:
            reader.commit(message)
        await reader.commit_with_ack(again[-1], timeout=10)
        assert reader.reconnects == 0
    assert server.storage.committed_offsets(topic, "consumer") == {0: 10}


async def test_seeking_to_a_time_finds_the_first_message_written_then(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, _payloads(0, 5))
    await asyncio.sleep(0.05)  # write times are kept in milliseconds
    middle = dt.datetime.now(dt.UTC)
    await asyncio.sleep(0.05)
    await fill(driver, topic, _payloads(5, 10))
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        everything = await _take(reader, 10)
        session = everything[0].partition_session
        assert all(m.written_at < middle for m in everything[:5])
        assert all(m.written_at >= middle for m in everything[5:])
        assert await reader.seek(session, middle) is None  # back to offset 5
        assert _offsets(await _take(reader, 5)) == [5, 6, 7, 8, 9]
        # A time after every message: the end (the next message written comes next).
        skipped = await reader.seek(session, dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), timeout=10)
        assert skipped is None  # the position already was the end
        await reader.seek(session, middle.replace(tzinfo=None))  # naive: UTC
        assert _offsets(await _take(reader, 5)) == [5, 6, 7, 8, 9]


async def test_seek_to_beginning_and_to_end(server: LocalTopicServer, driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, _payloads(0, 10))
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        got = await _take(reader, 4)
        session = got[0].partition_session
        await _commit_through(reader, got[:2])  # committed offset 2
        skipped = await reader.seek_to_end(session, timeout=10)
        assert skipped is not None and skipped.commit_range == (4, 10)
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_batch(timeout=0.3)
        await reader.seek_to_beginning(session, timeout=10)  # YDB reads no lower than the committed offset
        assert _offsets(await _take(reader, 8)) == list(range(2, 10))
    assert server.storage.committed_offsets(topic, "consumer") == {0: 2}


async def test_a_reader_without_consumer_seeks_anywhere_in_its_partitions(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, _payloads(0, 10))
    selector = yta.TopicSelector(topic, start_offsets={0: 6})
    async with driver.topic.reader(selector, consumer=None) as reader:
        got = await _take(reader, 4)
        assert _offsets(got) == [6, 7, 8, 9]
        await reader.seek(got[0].partition_session, 1)
        assert _offsets(await _take(reader, 9)) == list(range(1, 10))


async def test_bad_seeks_fail_at_the_call(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, _payloads(0, 10))
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        got = await _take(reader, 10)
        session = got[0].partition_session
        await _commit_through(reader, got[:4])
        with pytest.raises(yta.InvalidArgumentError, match="below the committed offset 4"):
            await reader.seek(session, 2)
        with pytest.raises(yta.InvalidArgumentError, match="past the partition's end offset 10"):
            await reader.seek(session, 11, timeout=10)
        for bad in (-1, 1.5, "3", True, None):
            with pytest.raises(yta.InvalidArgumentError, match="position must be"):
                await reader.seek(session, bad)  # type: ignore[arg-type]
    with pytest.raises(yta.ClosedError):
        await reader.seek(session, 5)


async def test_a_seek_on_a_session_that_ended_fails_and_a_backward_seek_ends_with_its_session(
    driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    for partition in (0, 1):
        await fill(driver, topic_name, _payloads(0, 5), partition_id=partition)
    stopped: list[yta.PartitionSession] = []
    first = driver.topic.reader(
        topic_name, consumer="consumer", on_partition_stop=stopped.append, graceful_stop_timeout=0.5
    )
    async with first:
        got = await _take(first, 10)
        sessions = {m.partition_id: m.partition_session for m in got}
        await first.seek(sessions[0], 0)
        await first.seek(sessions[1], 0)  # both read again (and handed over as a second reader joins)
        async with driver.topic.reader(topic_name, consumer="consumer") as second:

            async def handed_over() -> bool:
                # The partition being stopped hands out what it holds (read again) first.
                with contextlib.suppress(yta.OperationTimeoutError):
                    await first.receive_batch(timeout=0.05)
                return len(second.partition_sessions) == 1

            await eventually(handed_over, "the second reader got a partition")
            gone = stopped[0]
            assert gone.closed and gone._bookkeeping.replay is None
            with pytest.raises(yta.PartitionSessionClosedError):
                await first.seek(gone, 0)
            # The partition moved with its committed offset (0): the second reader reads all of it.
            assert _offsets(await _take(second, 5)) == [0, 1, 2, 3, 4]
            kept = first.partition_sessions[0]
            assert kept.partition_id != gone.partition_id
            await first.seek(kept, 0)
            assert _offsets(await _take(first, 5)) == [0, 1, 2, 3, 4]


async def test_a_long_backward_seek_is_read_again_within_the_buffer(driver: yta.Driver, topic: str) -> None:
    payloads = [bytes([i % 251]) * 2000 for i in range(200)]  # 400 kB, the buffer holds 64 kB
    await fill(driver, topic, payloads)
    buffer = 64 * 1024
    async with driver.topic.reader(topic, consumer="consumer", buffer_size_bytes=buffer) as reader:
        first = await _take(reader, 200)
        await reader.seek(first[0].partition_session, 0)
        again = await _take(reader, 200)
        assert _offsets(again) == list(range(200)) and [m.data for m in again] == payloads
        # What was read again came a window at a time (its stream's credit is the buffer's size).
        assert reader.peak_buffered_bytes <= 2 * buffer + 64 * 1024


async def test_a_backward_seek_at_the_in_flight_limit_is_not_held_by_what_it_reads_again(
    driver: yta.Driver, topic: str
) -> None:
    """``partition_max_in_flight_bytes`` counts what was handed out and not committed. What a
    backward seek passes back over is handed out again, and counted then: counted twice, it would
    hold the partition over its limit for good, as none of it can be committed before it is read
    again. And a commit that frees room wakes a receive already waiting for what is read again."""
    await fill(driver, topic, [b"x" * 1000] * 10)
    async with driver.topic.reader(topic, consumer="consumer", partition_max_in_flight_bytes=3000) as reader:
        first = [(await reader.receive_batch(max_messages=1, timeout=10))[0] for _ in range(3)]
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_batch(timeout=0.3)  # at the limit: nothing more until commits
        await reader.seek(first[0].partition_session, 1)
        again = await _take(reader, 2)
        assert _offsets(again) == [1, 2]
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_batch(timeout=0.3)  # counted again: at the limit once more
        for message in (first[0], *again):
            reader.commit(message)
        assert _offsets(await _take(reader, 2)) == [3, 4]


async def test_when_reading_again_fails_everything_uncommitted_is_delivered_again(
    server: LocalTopicServer, driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    await fill(driver, topic, _payloads(0, 10))
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await _take(reader, 10)
        await _commit_through(reader, first[:2])  # committed offset 2
        before = reader.read_session_id
        server.faults.fail_next("StreamRead", "UNAVAILABLE")  # the stream the seek opens
        await reader.seek(first[0].partition_session, 6)
        again = await _take(reader, 8)
        # A new read stream: the partition starts over at its committed offset (a superset of the seek).
        assert _offsets(again) == list(range(2, 10))
        assert reader.read_session_id != before and first[0].partition_session.closed
    assert any("after a seek failed" in r.getMessage() for r in caplog.records)


async def test_a_partition_stop_while_reading_again_is_not_taken_for_its_end(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """The stream reading again for a backward seek is stopped by the server part-way (the
    protocol lets the server stop any partition session): the rest of the range is not passed
    over, everything uncommitted is delivered again."""
    payloads = [bytes([i % 251]) * 2000 for i in range(200)]
    await fill(driver, topic, payloads)
    async with driver.topic.reader(topic, consumer="consumer", buffer_size_bytes=64 * 1024) as reader:
        first = await _take(reader, 200)
        await reader.seek(first[0].partition_session, 0)
        again = await _take(reader, 10)  # the side stream now waits for room in its window
        assert server.faults.stop_partition_sessions_without_consumer() >= 2
        while again[-1].offset != 199:
            again.extend(await _take(reader, 1))
        assert set(_offsets(again)) == set(range(200))


async def test_a_seek_that_replaces_one_still_connecting_leaves_the_stream_alone(
    server: LocalTopicServer, driver: yta.Driver, topic_name: str
) -> None:
    """A backward seek made while the previous one's stream to read again is still waiting for the
    server (here: a handshake the server never answers) stops that one and reads again from the
    new position; the reader's own stream and its other partitions go on undisturbed.

    Stopping the waiting read cancels an awaited gRPC call, which ends with a CancelledError of
    gRPC's own: taken for a cancellation of the whole stream, it ended every partition session of
    the reader and made it reconnect."""
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    await fill(driver, topic_name, _payloads(0, 10), partition_id=0)
    await fill(driver, topic_name, _payloads(0, 10), partition_id=1)
    async with driver.topic.reader(topic_name, consumer="consumer") as reader:
        before = await _collect(reader, {0: 10, 1: 10})
        session = before[0][0].partition_session
        session_id = reader.read_session_id
        server.faults.hang_next("StreamRead")  # the stream the first seek opens never answers
        assert await reader.seek(session, 2) is None
        # Long enough for the first seek's stream to open and wait for its answer (on loopback a
        # matter of milliseconds; the wait lasts until the reader's init_timeout).
        await asyncio.sleep(0.3)
        assert await reader.seek(session, 4) is None
        after = await _collect(reader, {0: 6})
        assert _offsets(after[0]) == list(range(4, 10))
        assert not session.closed and not before[1][0].partition_session.closed
        assert reader.read_session_id == session_id and reader.reconnects == 0
