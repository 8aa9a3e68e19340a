"""``receive_batch(max_wait=...)``: a batch filled over a window, over the local server.

The assertions are about which messages a batch holds, never about how long it took: the
window is only ever made long (a batch that fills returns before it ends) or the test does not
depend on its length.
"""

from __future__ import annotations

import asyncio

import pytest

import ydb_topic_async as yta

from .._helpers import fill

pytestmark = pytest.mark.timeout(60)


async def test_without_a_window_a_batch_is_what_arrived_with_its_first_message(
    driver: yta.Driver, topic: str
) -> None:
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        await fill(driver, topic, [b"a"])
        assert [m.data for m in await reader.receive_batch(max_messages=5, timeout=10)] == [b"a"]


async def test_a_window_fills_a_batch_from_messages_that_arrive_one_by_one(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        await fill(driver, topic, [b"warm-up"])
        reader.commit(await reader.receive_batch(timeout=10))  # connected, and idle from here on
        await fill(driver, topic, [b"1"])
        receive = asyncio.create_task(reader.receive_batch(max_messages=5, max_wait=60, timeout=10))
        for i in range(2, 8):
            await asyncio.sleep(0.02)
            await fill(driver, topic, [str(i).encode()])  # each arrives in a response of its own
        batch = await asyncio.wait_for(receive, 30)  # full at five: long before the window ends
        assert [m.offset for m in batch] == [1, 2, 3, 4, 5]
        assert batch.commit_range == (1, 6)
        rest = await reader.receive_batch(max_messages=10, max_wait=0.5, timeout=10)
        assert [m.offset for m in rest] == [6, 7]
        reader.commit(batch)
        await reader.commit_with_ack(rest, timeout=10)


async def test_a_window_that_ends_returns_what_it_gathered_and_never_an_empty_batch(
    driver: yta.Driver, topic: str
) -> None:
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        with pytest.raises(yta.OperationTimeoutError):
            await reader.receive_batch(max_wait=0.05, timeout=0.3)  # the window starts at the first message
        await fill(driver, topic, [b"a", b"b"])
        batch = await reader.receive_batch(max_messages=100, max_wait=0.2, timeout=10)
        assert [m.data for m in batch] == [b"a", b"b"]


async def test_a_window_gathers_one_partition_session_and_respects_max_bytes(
    driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=2, consumers=["consumer"])
    async with driver.topic.reader(topic_name, consumer="consumer") as reader:
        for _ in range(4):
            await fill(driver, topic_name, [b"x" * 100], partition_id=0)
            await fill(driver, topic_name, [b"y" * 100], partition_id=1)
        seen: dict[int, list[int]] = {0: [], 1: []}
        while len(seen[0]) < 4 or len(seen[1]) < 4:
            batch = await reader.receive_batch(max_bytes=250, max_wait=0.3, timeout=10)
            assert len({m.partition_id for m in batch}) == 1
            assert sum(len(m.data) for m in batch) <= 250
            seen[batch.partition_id].extend(m.offset for m in batch)
        assert seen == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}


async def test_a_window_merges_compressed_batches_decoded_before_they_are_taken(
    driver: yta.Driver, topic: str
) -> None:
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        payloads = [bytes([i]) * 5000 for i in range(6)]
        for payload in payloads[:3]:
            await fill(driver, topic, [payload], codec=yta.Codec.GZIP)
        await fill(driver, topic, payloads[3:], codec=yta.Codec.ZSTD)
        got: list[bytes] = []
        while len(got) < 6:
            got.extend(m.data for m in await reader.receive_batch(max_messages=6, max_wait=0.5, timeout=10))
        assert got == payloads


async def test_bad_windows_fail_at_the_call(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        for bad in (-1, "1", True):
            with pytest.raises(yta.InvalidArgumentError, match="max_wait"):
                await reader.receive_batch(max_wait=bad, timeout=1)  # type: ignore[arg-type]
