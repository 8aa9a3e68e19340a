"""The commit observer (``on_commit``) and the per-partition in-flight limit
(``partition_max_in_flight_bytes``), over the local server.

YDB counts a partition's in-flight bytes in its read session (``TInFlightController`` in
ydb/core/persqueue: ``Add(offset, size)`` for each message read, ``Remove(committed offset)``
on each commit, reading paused while the total is at the limit); the reader sends the limit in
``InitRequest.partition_max_in_flight_bytes`` and holds itself to it for what it hands out.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import fill
from .._polling import eventually

pytestmark = pytest.mark.timeout(60)


async def test_on_commit_tells_each_committed_offset_the_server_acknowledged(
    driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    await fill(driver, topic_name, [b"a", b"b", b"c"], partition_id=0)
    await fill(driver, topic_name, [b"d", b"e"], partition_id=1)
    acks: list[yta.CommitAck] = []
    async with driver.topic.reader(topic_name, consumer="consumer", on_commit=acks.append) as reader:
        got: list[yta.TopicMessage] = []
        while len(got) < 5:
            got.extend(await reader.receive_batch(timeout=10))
        by_partition = {p: [m for m in got if m.partition_id == p] for p in (0, 1)}
        await reader.commit_with_ack(by_partition[0][0], timeout=10)
        reader.commit(by_partition[0][1])
        await reader.commit_with_ack(by_partition[0][2], timeout=10)
        reader.commit(by_partition[1][0])
        await reader.commit_with_ack(by_partition[1][1], timeout=10)
    path = by_partition[0][0].topic_path
    assert {ack.topic_path for ack in acks} == {path}
    offsets = {p: [ack.committed_offset for ack in acks if ack.partition_id == p] for p in (0, 1)}
    # One acknowledgement per move of the committed offset, in order (two commits sent
    # together are acknowledged once).
    assert offsets[0][0] == 1 and offsets[0][-1] == 3 and offsets[1][-1] == 2
    assert all(a < b for series in offsets.values() for a, b in itertools.pairwise(series))
    assert all(ack.partition_session is by_partition[ack.partition_id][0].partition_session for ack in acks)


async def test_an_observer_that_raises_is_logged_and_reading_goes_on(
    driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    await fill(driver, topic, [b"a", b"b"])

    def broken(ack: yta.CommitAck) -> None:
        raise RuntimeError("observer bug")

    with caplog.at_level(logging.ERROR, logger="ydb_topic_async.reader"):
        async with driver.topic.reader(topic, consumer="consumer", on_commit=broken) as reader:
            first = await reader.receive_message(timeout=10)
            await reader.commit_with_ack(first, timeout=10)
            second = await reader.receive_message(timeout=10)
            await reader.commit_with_ack(second, timeout=10)
            assert reader.reconnects == 0
    logged = [r for r in caplog.records if "on_commit raised" in r.getMessage()]
    # With secrets registered, the SDK's masking filter turns exc_info into (masked) exc_text.
    assert logged and all("RuntimeError: observer bug" in logging.Formatter().format(r) for r in logged)


def _sizes(batch: yta.MessageBatch) -> int:
    return sum(len(m.data) for m in batch)


async def test_a_partition_over_its_in_flight_limit_waits_for_commits_while_others_go_on(
    driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    await fill(driver, topic_name, [b"x" * 1000] * 20, partition_id=0)  # one response holds them all
    await fill(driver, topic_name, [b"y" * 1000] * 20, partition_id=1)
    limit = 3000
    async with driver.topic.reader(topic_name, consumer="consumer", partition_max_in_flight_bytes=limit) as reader:
        handed: dict[int, list[yta.TopicMessage]] = {0: [], 1: []}
        while True:
            try:
                batch = await reader.receive_batch(max_messages=1, timeout=0.5)
            except yta.OperationTimeoutError:
                break  # both partitions are over the limit: nothing may be handed out
            handed[batch.partition_id].extend(batch)
        # Each partition stopped at the limit (one receive may cross it), the other went on.
        for partition in (0, 1):
            assert limit <= sum(len(m.data) for m in handed[partition]) <= limit + 1000
        # Committing frees room: that partition goes on, by what was freed.
        await reader.commit_with_ack(handed[0][0], timeout=10)
        more = await reader.receive_batch(timeout=10)
        assert more.partition_id == 0 and len(more) == 1
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_batch(timeout=0.3)
        for message in handed[0][1:] + list(more):
            reader.commit(message)
        rest = await reader.receive_batch(timeout=10)
        assert rest.partition_id == 0 and rest[0].offset == more[0].offset + 1


async def test_the_server_sends_no_more_of_a_partition_at_its_in_flight_limit(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, [b"x" * 1000] * 3)
    async with driver.topic.reader(topic, consumer="consumer", partition_max_in_flight_bytes=2000) as reader:
        got: list[yta.TopicMessage] = []
        with pytest.raises(yta.OperationTimeoutError):
            while True:
                got.extend(await reader.receive_batch(timeout=0.5))
        assert [m.offset for m in got] == [0, 1]  # the reader hands out up to its limit, too
        await fill(driver, topic, [b"x" * 1000] * 3)
        await asyncio.sleep(0.3)  # it would have come by now
        assert server.stats.messages_sent == 3  # the first response held three: the server stopped there
        for message in got:
            reader.commit(message)
        await eventually(lambda: server.stats.messages_sent == 6, "the rest sent once the first were committed")
        assert (await reader.receive_batch(timeout=10))[0].offset == 2


async def test_bad_limits_and_observers_fail_at_the_call(driver: yta.Driver, topic: str) -> None:
    for bad in (-1, 1.5, "10"):
        with pytest.raises(yta.InvalidArgumentError, match="partition_max_in_flight_bytes"):
            driver.topic.reader(topic, consumer="consumer", partition_max_in_flight_bytes=bad)  # type: ignore[arg-type]
    with pytest.raises(yta.InvalidArgumentError, match="on_commit"):
        driver.topic.reader(topic, consumer="consumer", on_commit="print")  # type: ignore[arg-type]
    # Nothing is committed without a consumer: the limit would stop the reader for good.
    with pytest.raises(yta.InvalidArgumentError, match="partition_max_in_flight_bytes needs a consumer"):
        driver.topic.reader(yta.TopicSelector(topic, partitions=[0]), consumer=None, partition_max_in_flight_bytes=1000)
