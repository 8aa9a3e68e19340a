"""Positions from the administration side: start and end offsets, offsets by write time.

The counterparts of aiokafka's ``beginning_offsets``, ``end_offsets`` (the next offset to be
written) and ``offsets_for_times`` (the first offset whose time is at or after the given one,
None when there is none), over the local server. Times are the messages' write times, which YDB
keeps in milliseconds.
"""

from __future__ import annotations

import datetime as dt

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

pytestmark = pytest.mark.timeout(30)


def server_now(server: LocalTopicServer) -> dt.datetime:
    return dt.datetime.fromtimestamp(server.clock.now_ns() / 1e9, tz=dt.UTC)


async def write(driver: yta.Driver, topic: str, partition_id: int, *payloads: bytes) -> None:
    async with driver.topic.writer(topic, partition_id=partition_id, producer_id=f"p{partition_id}") as writer:
        await writer.write_with_ack(list(payloads))


async def test_start_and_end_offsets_per_partition(server: LocalTopicServer, driver: yta.Driver) -> None:
    await driver.topic.create_topic("bounds", min_active_partitions=3, retention_period=dt.timedelta(hours=1))
    assert await driver.topic.end_offsets("bounds") == {0: 0, 1: 0, 2: 0}
    await write(driver, "bounds", 0, b"a", b"b", b"c")
    await write(driver, "bounds", 2, b"d")
    assert await driver.topic.start_offsets("bounds") == {0: 0, 1: 0, 2: 0}
    assert await driver.topic.end_offsets("bounds") == {0: 3, 1: 0, 2: 1}
    server.advance_time(2 * 3600)  # retention deletes everything: the start moves up to the end
    await write(driver, "bounds", 0, b"e")
    assert await driver.topic.start_offsets("bounds") == {0: 3, 1: 0, 2: 1}
    assert await driver.topic.end_offsets(f"{driver.database}/bounds") == {0: 4, 1: 0, 2: 1}
    with pytest.raises(yta.SchemeError):
        await driver.topic.end_offsets("missing")


async def test_a_split_partition_keeps_its_offsets(server: LocalTopicServer, driver: yta.Driver) -> None:
    await driver.topic.create_topic(
        "split", auto_partitioning=yta.AutoPartitioningSettings(yta.AutoPartitioningStrategy.SCALE_UP),
        max_active_partitions=3,
    )
    await write(driver, "split", 0, b"a", b"b")
    server.storage.split_partition("split", 0)
    await write(driver, "split", 1, b"c")
    assert await driver.topic.end_offsets("split") == {0: 2, 1: 1, 2: 0}


async def test_offsets_for_time_finds_the_first_message_written_at_or_after(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await driver.topic.create_topic("times", min_active_partitions=3)
    before = server_now(server) - dt.timedelta(seconds=1)
    await write(driver, "times", 0, b"old-0", b"old-1")
    await write(driver, "times", 2, b"old-2")
    server.advance_time(60)
    middle = server_now(server)
    server.advance_time(60)
    await write(driver, "times", 0, b"new-0", b"new-1")
    after = server_now(server) + dt.timedelta(seconds=1)

    assert await driver.topic.offsets_for_time("times", before) == {0: 0, 1: None, 2: 0}
    assert await driver.topic.offsets_for_time("times", middle) == {0: 2, 1: None, 2: None}
    assert await driver.topic.offsets_for_time("times", after) == {0: None, 1: None, 2: None}
    # One time per partition, for some of them; a naive datetime is UTC.
    naive_middle = middle.replace(tzinfo=None)
    assert await driver.topic.offsets_for_time("times", {0: naive_middle, 2: before}, timeout=10) == {0: 2, 2: 0}
    # The message stored at offset 2 has the time the answer promises.
    stored = server.storage.read("times", 0, 2)[0]
    assert stored.written_at_ns >= middle.timestamp() * 1e9 > server.storage.read("times", 0, 1)[0].written_at_ns


async def test_offsets_for_time_refuses_bad_arguments_and_keeps_its_deadline(driver: yta.Driver) -> None:
    await driver.topic.create_topic("strict", min_active_partitions=2)
    with pytest.raises(yta.InvalidArgumentError, match="no partitions \\[5\\]"):
        await driver.topic.offsets_for_time("strict", {5: dt.datetime.now(dt.UTC)})
    with pytest.raises(yta.InvalidArgumentError, match="when must be a datetime"):
        await driver.topic.offsets_for_time("strict", 1_700_000_000)  # type: ignore[arg-type]
    with pytest.raises(yta.InvalidArgumentError, match=r"when\[0\] must be a datetime"):
        await driver.topic.offsets_for_time("strict", {0: 17})  # type: ignore[dict-item]
    with pytest.raises(yta.InvalidArgumentError, match="timeout"):
        await driver.topic.offsets_for_time("strict", dt.datetime.now(dt.UTC), timeout=-1)
    with pytest.raises(yta.OperationTimeoutError, match="did not finish within 0"):
        await driver.topic.offsets_for_time("strict", dt.datetime.now(dt.UTC), timeout=0)
