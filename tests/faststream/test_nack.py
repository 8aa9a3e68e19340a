"""``nack`` acts on its own partition, against the local server: the nacked message and what
follows it in its partition are read again (the subscriber's lane seeks its partition session
back after a backoff), while the other partitions' lanes go on; nothing after the nacked offset
is committed before it is handled again. The committed offsets checked are the server's own.

YDB has no per-message negative acknowledgement and reads no lower than a consumer's committed
offset (``TPartitionActor::InitStartReading`` in ydb/services/persqueue_v1/actors/
partition_actor.cpp refuses a read offset below it): a nacked message, never committed, is
always at or above it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from typing import Any

import pytest
from faststream import AckPolicy
from faststream.exceptions import NackMessage

import ydb_topic_async as yta
from ydb_topic_async.faststream import YdbMessage
from ydb_topic_async.testing import LocalTopicServer

from .._polling import eventually
from ._brokers import Seen, broker_for, running

pytestmark = pytest.mark.timeout(60)


def committed(server: LocalTopicServer, topic: str = "t") -> dict[int, int]:
    return dict(server.storage.committed_offsets(topic, "c"))


async def test_a_nack_reads_its_partition_again_from_the_message_while_the_other_partitions_go_on(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await driver.topic.create_topic("t", min_active_partitions=3, consumers=["c"])
    broker = broker_for(server)
    handled: dict[int, list[int]] = defaultdict(list)
    sessions: dict[int, set[int]] = defaultdict(set)
    nacked = asyncio.Event()
    committed_when_handled_again: list[int] = []

    # A backoff of 1.5 to 3 s: long enough to see the other partitions go on meanwhile.
    @broker.subscriber("t", consumer="c", max_workers=3, initial_backoff=3.0, max_backoff=3.0)
    async def handle(body: str, msg: YdbMessage) -> None:
        sessions[msg.partition_id].add(msg.raw_message.partition_session.id)
        if (msg.partition_id, msg.offset) == (1, 3) and nacked.is_set():
            committed_when_handled_again.append(committed(server)[1])
        handled[msg.partition_id].append(msg.offset)
        if (msg.partition_id, msg.offset) == (1, 3) and not nacked.is_set():
            nacked.set()
            raise NackMessage()

    async with running(broker) as br:
        for partition in range(3):
            await br.publish_batch(*(f"{partition}:{i}" for i in range(6)), topic="t", partition=partition)
        await asyncio.wait_for(nacked.wait(), 10)
        nacked_at = time.monotonic()
        # While partition 1 waits out its backoff, the others take new messages.
        for partition in (0, 2):
            await br.publish_batch(*(f"{partition}:{i}" for i in range(6, 10)), topic="t", partition=partition)
        await eventually(lambda: len(handled[0]) == len(handled[2]) == 10, "the other partitions handled")
        if time.monotonic() - nacked_at < 1.5:  # the shortest backoff has not passed
            assert handled[1] == [0, 1, 2, 3]
        await eventually(lambda: committed(server) == {0: 10, 1: 6, 2: 10}, "every partition committed to its end")
        subscriber: Any = broker.subscribers[0]
        consumer, reader = subscriber.consumer, subscriber.reader
        assert consumer.restarts == 0 and reader.reconnects == 0 and consumer.redeliveries == 1
    # The nacked message and those after it, again and in order; the rest exactly once.
    assert handled[1] == [0, 1, 2, 3, 3, 4, 5]
    assert handled[0] == handled[2] == list(range(10))
    # Nothing after the nacked offset was committed before it was handled again.
    assert committed_when_handled_again == [3]
    # Each partition was read by one partition session: no lane started over.
    assert all(len(ids) == 1 for ids in sessions.values())


async def test_a_message_nacked_again_and_again_is_read_again_after_a_growing_backoff(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    attempts: list[float] = []
    seen = Seen()

    @broker.subscriber("t", consumer="c", initial_backoff=0.1, max_backoff=0.4)
    async def handle(body: str, msg: YdbMessage) -> None:
        if body == "poison" and len(attempts) < 4:
            attempts.append(time.monotonic())
            raise NackMessage()
        seen.add(body)

    async with running(broker) as br:
        await br.publish_batch("poison", "next", topic="t")
        await seen.wait_for(2)
        await eventually(lambda: committed(server) == {0: 2}, "both committed")
        subscriber: Any = broker.subscribers[0]
        assert subscriber.consumer.restarts == 0 and subscriber.consumer.redeliveries == 4
    assert seen.items == ["poison", "next"]  # "next" waited behind it
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    # Each delay is at least half of 0.1, 0.2, 0.4 s (jitter), doubling up to max_backoff.
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2


async def test_a_batch_nack_reads_the_batch_again(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    batches: list[list[int]] = []

    @broker.subscriber("t", consumer="c", batch=True, max_messages=3, initial_backoff=0.05, max_backoff=0.1)
    async def handle(bodies: list[str], msg: YdbMessage) -> None:
        offsets = [m.offset for m in msg.raw_message]
        batches.append(offsets)
        if len(batches) == 2:  # the second batch, once
            raise NackMessage()

    async with running(broker) as br:
        await br.publish_batch(*(str(i) for i in range(7)), topic="t")
        await eventually(lambda: committed(server) == {0: 7}, "all committed")
        subscriber: Any = broker.subscribers[0]
        assert subscriber.consumer.restarts == 0
    flat = [offset for batch in batches for offset in batch]
    nacked = batches[1]
    # Up to the nacked batch once; from its first message on, again and in order.
    assert flat[: nacked[-1] + 1] == list(range(nacked[-1] + 1))
    assert flat[nacked[-1] + 1 :] == list(range(nacked[0], 7))


async def test_a_manual_nack_reads_the_message_again_and_an_ack_commits_it(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    seen = Seen()

    @broker.subscriber("t", consumer="c", ack_policy=AckPolicy.MANUAL, initial_backoff=0.05, max_backoff=0.1)
    async def handle(body: str, msg: YdbMessage) -> None:
        seen.add(body)
        if body == "b" and seen.items.count("b") == 1:
            await msg.nack()
        else:
            await msg.ack()

    async with running(broker) as br:
        await br.publish_batch("a", "b", "c", topic="t")
        await eventually(lambda: committed(server) == {0: 3}, "all committed")
        subscriber: Any = broker.subscribers[0]
        assert subscriber.consumer.restarts == 0
    assert seen.items == ["a", "b", "b", "c"]


async def test_without_a_consumer_a_nack_reads_the_message_again(server: LocalTopicServer, driver: yta.Driver) -> None:
    await driver.topic.create_topic("t")
    async with driver.topic.writer("t", producer_id="fill") as writer:
        await writer.write([b"a", b"b", b"c"])
    broker = broker_for(server)
    seen = Seen()
    selector = yta.TopicSelector("t", partitions=[0], start_offsets={0: 0})

    @broker.subscriber(selector, initial_backoff=0.05, max_backoff=0.1)
    async def handle(body: str) -> None:
        seen.add(body)
        if body == "b" and seen.items.count("b") == 1:
            raise NackMessage()

    async with running(broker):
        await seen.wait_for(4)
        await asyncio.sleep(0.2)  # nothing more comes
        subscriber: Any = broker.subscribers[0]
        assert subscriber.consumer.restarts == 0
    assert seen.items == ["a", "b", "b", "c"]


async def test_get_one_after_a_nack_returns_the_message_again(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    subscriber = broker.subscriber("t", consumer="c")
    async with running(broker) as br:
        await br.publish_batch("a", "b", topic="t")
        first = await subscriber.get_one(timeout=10)
        assert first is not None and first.body == b"a"
        await first.nack()
        again = await subscriber.get_one(timeout=10)
        assert again is not None and (again.body, again.offset) == (b"a", 0)
        await again.ack()
        last = await subscriber.get_one(timeout=10)
        assert last is not None and last.body == b"b"
        await last.ack()
        await eventually(lambda: committed(server) == {0: 2}, "both committed")
