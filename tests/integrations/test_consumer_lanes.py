"""The supervised consumer's lanes: partitions handled concurrently, each in order, over the local server."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator

import pytest

import ydb_topic_async as yta
from ydb_topic_async.integrations import Consumer, Handler, TopicRuntime
from ydb_topic_async.testing import LocalTopicServer

from .._polling import eventually

pytestmark = pytest.mark.timeout(120)


async def _topic(driver: yta.Driver, name: str, partitions: int, per_partition: int, size: int = 0) -> None:
    await driver.topic.create_topic(name, min_active_partitions=partitions, consumers=["group"])
    for partition in range(partitions):
        async with driver.topic.writer(name, producer_id=f"p{partition}", partition_id=partition) as writer:
            await writer.write([f"{partition}:{i}".encode().ljust(size) for i in range(per_partition)])


@contextlib.asynccontextmanager
async def _running(server: LocalTopicServer, *consumers: Consumer) -> AsyncIterator[TopicRuntime]:
    async with TopicRuntime(server.endpoint, server.database, consumers=consumers, shutdown_timeout=20) as runtime:
        yield runtime


class _Calls:
    """Handler calls as they happen: how many ran at once, and what each saw."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.seen: list[tuple[str, int, int, int]] = []
        """(consumer, partition session id, partition, offset) in the order handled."""

    async def call(self, who: str, message: yta.TopicMessage, seconds: float) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(seconds)
            self.seen.append((who, message.partition_session.id, message.partition_id, message.offset))
        finally:
            self.running -= 1

    def handled(self) -> set[tuple[int, int]]:
        return {(partition, offset) for _, _, partition, offset in self.seen}

    def in_order_per_session(self) -> bool:
        last: dict[tuple[str, int], int] = {}
        for who, session, _, offset in self.seen:
            if last.get((who, session), -1) >= offset:
                return False
            last[(who, session)] = offset
        return True


async def test_lanes_handle_partitions_concurrently_each_in_order_within_the_bound(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await _topic(driver, "lanes", 4, 30)
    calls = _Calls()

    async def handle(message: yta.TopicMessage) -> None:
        await calls.call("a", message, 0.01)

    consumer = Consumer("lanes", "group", handle, concurrency=3)
    async with _running(server, consumer):
        await eventually(lambda: len(calls.handled()) == 120, "every message handled", timeout=60)
        await eventually(
            lambda: server.storage.committed_offsets("lanes", "group") == {p: 30 for p in range(4)},
            "every partition committed to its end",
        )
    assert calls.most == 3  # partitions overlapped, never more than the bound
    assert calls.in_order_per_session()
    assert consumer.handled == 120


async def test_the_default_is_one_handler_call_at_a_time(server: LocalTopicServer, driver: yta.Driver) -> None:
    await _topic(driver, "one-at-a-time", 3, 10)
    calls = _Calls()

    async def handle(message: yta.TopicMessage) -> None:
        await calls.call("a", message, 0.005)

    async with _running(server, Consumer("one-at-a-time", "group", handle)):
        await eventually(lambda: len(calls.handled()) == 30, "every message handled", timeout=60)
    assert calls.most == 1 and calls.in_order_per_session()


async def test_a_batch_handler_gets_batches_of_one_partition_and_they_are_committed(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await _topic(driver, "batches", 2, 25)
    batches: list[yta.MessageBatch] = []

    async def handle(batch: yta.MessageBatch) -> None:
        batches.append(batch)

    consumer = Consumer(
        "batches", "group", batch_handler=handle, concurrency=2, max_batch_messages=10, batch_window=0.05
    )
    async with _running(server, consumer):
        await eventually(lambda: sum(len(b) for b in batches) >= 50, "every message handled", timeout=60)
        await eventually(lambda: server.storage.committed_offsets("batches", "group") == {0: 25, 1: 25}, "committed")
    assert all(1 <= len(b) <= 10 and len({m.partition_id for m in b}) == 1 for b in batches)
    for partition in (0, 1):
        offsets = [m.offset for b in batches if b.partition_id == partition for m in b]
        assert offsets == list(range(25))
    assert consumer.handled == 50


async def test_reception_waits_while_the_bytes_in_flight_are_at_the_bound(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await _topic(driver, "bounded", 2, 5)
    release = asyncio.Event()
    seen: list[int] = []

    async def handle(message: yta.TopicMessage) -> None:
        seen.append(message.partition_id)
        await release.wait()

    # One byte: one batch at a time is received; the other partition waits although handlers could run.
    consumer = Consumer("bounded", "group", handle, concurrency=2, max_in_flight_bytes=1)
    async with _running(server, consumer):
        await eventually(lambda: len(seen) == 1, "the first message handled")
        await asyncio.sleep(0.3)  # the other partition's messages would have reached a handler by now
        assert len(seen) == 1
        release.set()
        await eventually(lambda: len(seen) == 10, "every message handled")


async def test_a_failing_handler_lets_the_other_lanes_finish_their_call_then_restarts(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await _topic(driver, "failing", 2, 3)
    finished: list[tuple[int, int]] = []
    failed = False
    other_started = asyncio.Event()

    async def handle(message: yta.TopicMessage) -> None:
        nonlocal failed
        if message.partition_id == 1 and message.offset == 0 and not failed:
            await other_started.wait()
            failed = True
            raise RuntimeError("lane bug")
        if message.partition_id == 0 and message.offset == 0:
            other_started.set()
            await asyncio.sleep(0.3)  # still running when the other lane fails: not cancelled
        finished.append((message.partition_id, message.offset))

    consumer = Consumer("failing", "group", handle, concurrency=2, initial_backoff=0.05, max_backoff=0.1)
    async with _running(server, consumer):
        await eventually(lambda: {(p, o) for p in (0, 1) for o in range(3)} <= set(finished), "all handled")
        await eventually(lambda: server.storage.committed_offsets("failing", "group") == {0: 3, 1: 3}, "committed")
    assert (0, 0) in finished and consumer.restarts == 1
    assert isinstance(consumer.last_error, RuntimeError) and str(consumer.last_error) == "lane bug"


async def test_stop_lets_the_calls_in_progress_finish_and_commit(server: LocalTopicServer, driver: yta.Driver) -> None:
    await _topic(driver, "stopping", 3, 4)
    entered: set[int] = set()
    finished: list[tuple[int, int]] = []
    all_in = asyncio.Event()

    async def handle(message: yta.TopicMessage) -> None:
        entered.add(message.partition_id)
        if len(entered) == 3:
            all_in.set()
        await asyncio.sleep(0.3)
        finished.append((message.partition_id, message.offset))

    consumer = Consumer("stopping", "group", handle, concurrency=3)
    async with _running(server, consumer):
        await asyncio.wait_for(all_in.wait(), 30)
    # The three calls in progress finished and were committed; nothing new started.
    assert sorted(finished) == [(0, 0), (1, 0), (2, 0)]
    assert server.storage.committed_offsets("stopping", "group") == {0: 1, 1: 1, 2: 1}


async def test_two_consumers_share_a_topic_through_a_rebalance_losing_nothing(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    """A second consumer joins midway (the server takes partitions from the first, which hands
    over only after handling and committing what it had received), then the first stops.
    Both keep little ahead (small reader buffers, the consumer's bound and the reader's per
    partition), so most messages are still on the server when partitions change hands."""
    partitions, per_partition = 4, 200
    await _topic(driver, "shared", partitions, per_partition, size=100)
    calls = _Calls()
    everything = {(p, o) for p in range(partitions) for o in range(per_partition)}
    committed_to_the_end = {p: per_partition for p in range(partitions)}

    def handler(who: str) -> Handler:
        async def handle(message: yta.TopicMessage) -> None:
            await calls.call(who, message, 0.005)

        return handle

    def consumer(who: str) -> Consumer:
        return Consumer(
            "shared",
            "group",
            handler(who),
            concurrency=4,
            name=who,
            max_in_flight_bytes=2000,
            buffer_size_bytes=1024,
            partition_max_in_flight_bytes=500,
            graceful_stop_timeout=30.0,
        )

    first, second = consumer("first"), consumer("second")
    first_runtime = TopicRuntime(server.endpoint, server.database, consumers=[first], shutdown_timeout=20)
    second_runtime = TopicRuntime(server.endpoint, server.database, consumers=[second], shutdown_timeout=20)
    await first_runtime.start()
    try:
        await eventually(lambda: len(calls.seen) >= 100, "the first consumer got going")
        await second_runtime.start()
        try:
            await eventually(lambda: any(who == "second" for who, *_ in calls.seen), "the second got partitions")
            joined = len(calls.seen)
            await eventually(lambda: len(calls.seen) >= joined + 200, "both went on")
            assert {who for who, *_ in calls.seen[joined:]} == {"first", "second"}  # sharing the topic
            await first_runtime.close()  # the first stops: the second takes everything
            stopped = len(calls.seen)
            await eventually(lambda: calls.handled() == everything, "every message handled", timeout=60)
            assert {who for who, *_ in calls.seen[stopped:]} == {"second"}
            await eventually(
                lambda: server.storage.committed_offsets("shared", "group") == committed_to_the_end,
                "committed exactly up to the end",
            )
        finally:
            await second_runtime.close()
    finally:
        await first_runtime.close()
    assert calls.in_order_per_session()
    per_partition_handlers: dict[int, set[str]] = defaultdict(set)
    for who, _, partition, _ in calls.seen:
        per_partition_handlers[partition].add(who)
    assert all(whos == {"first", "second"} for whos in per_partition_handlers.values())  # each changed hands


def test_consumer_configuration_mistakes_are_rejected_early() -> None:
    async def handle(message: yta.TopicMessage) -> None:
        pass

    async def handle_batch(batch: yta.MessageBatch) -> None:
        pass

    def rejected(match: str) -> pytest.RaisesExc[yta.InvalidArgumentError]:
        return pytest.raises(yta.InvalidArgumentError, match=match)

    with rejected("either handler"):
        Consumer("t", "c")
    with rejected("either handler"):
        Consumer("t", "c", handle, batch_handler=handle_batch)
    with rejected("concurrency"):
        Consumer("t", "c", handle, concurrency=0)
    with rejected("max_in_flight_bytes"):
        Consumer("t", "c", handle, max_in_flight_bytes=0)
    with rejected("max_batch_messages"):
        Consumer("t", "c", batch_handler=handle_batch, max_batch_messages=0)
    with rejected("batch_window"):
        Consumer("t", "c", batch_handler=handle_batch, batch_window=-1)


async def test_without_auto_commit_the_handler_commits_through_the_consumers_reader(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    """``auto_commit=False``: the consumer commits nothing, the handler commits what it decides
    to through ``consumer.reader``; what it leaves is delivered again after a restart."""
    await _topic(driver, "manual", 1, 5)
    offsets: list[int] = []

    async def handle(message: yta.TopicMessage) -> None:
        offsets.append(message.offset)
        reader = consumer.reader
        assert reader is not None
        if message.offset < 3:
            reader.commit(message)

    consumer = Consumer("manual", "group", handle, auto_commit=False)
    assert consumer.reader is None  # not running
    async with _running(server, consumer):
        await eventually(lambda: len(offsets) == 5, "every message handled")
        await eventually(lambda: server.storage.committed_offsets("manual", "group") == {0: 3}, "three committed")
    assert consumer.reader is None
    async with _running(server, consumer):
        await eventually(lambda: len(offsets) == 7, "the uncommitted ones again")
    assert offsets == [0, 1, 2, 3, 4, 3, 4]
    assert server.storage.committed_offsets("manual", "group") == {0: 3}


async def test_a_consumer_without_a_consumer_name_reads_explicit_partitions_and_commits_nothing(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await _topic(driver, "anonymous", 2, 4)
    with pytest.raises(yta.InvalidArgumentError, match="auto_commit=False"):
        Consumer("anonymous", None, _ignore)
    seen: list[tuple[int, int]] = []

    async def handle(message: yta.TopicMessage) -> None:
        seen.append((message.partition_id, message.offset))

    selector = yta.TopicSelector("anonymous", partitions=[1], start_offsets={1: 2})
    async with _running(server, Consumer(selector, None, handle, auto_commit=False)):
        await eventually(lambda: len(seen) == 2, "partition 1 from offset 2 handled")
    assert seen == [(1, 2), (1, 3)]
    assert server.storage.committed_offsets("anonymous", "group") == {0: 0, 1: 0}


async def _ignore(message: yta.TopicMessage) -> None:
    pass


async def test_redeliver_reads_a_partition_again_from_the_message_while_the_other_lanes_go_on(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    """``redeliver`` from a handler: its lane passes over what it holds, commits nothing from the
    message on, and after the backoff seeks the partition session back; no restart, no other
    lane touched. A batch handler's redelivery starts at the batch's first message."""
    await _topic(driver, "again", 2, 5)
    seen: dict[int, list[int]] = defaultdict(list)
    committed_when_seen_again: list[int] = []
    kept: list[yta.TopicMessage] = []

    async def handle(message: yta.TopicMessage) -> None:
        partition, offset = message.partition_id, message.offset
        if (partition, offset) == (0, 2) and kept:
            committed_when_seen_again.append(server.storage.committed_offsets("again", "group")[0])
        seen[partition].append(offset)
        if (partition, offset) == (0, 2) and not kept:
            kept.append(message)
            assert consumer.redeliver(message) is True

    consumer = Consumer("again", "group", handle, concurrency=2, initial_backoff=0.05, max_backoff=0.1)
    async with _running(server, consumer):
        await eventually(lambda: server.storage.committed_offsets("again", "group") == {0: 5, 1: 5}, "committed")
        assert consumer.restarts == 0
    assert seen == {0: [0, 1, 2, 2, 3, 4], 1: [0, 1, 2, 3, 4]}
    assert committed_when_seen_again == [2]  # nothing from the redelivered message on was committed
    assert consumer.handled == 10  # the redelivered call does not count
    assert consumer.redeliveries == 1
    assert consumer.redeliver(kept[0]) is False  # its run is over
    with pytest.raises(yta.InvalidArgumentError, match="TopicMessage or a MessageBatch"):
        consumer.redeliver("not a message")  # type: ignore[arg-type]

    batches: list[list[int]] = []

    async def handle_batch(batch: yta.MessageBatch) -> None:
        batches.append([m.offset for m in batch])
        if len(batches) == 1:
            batch_consumer.redeliver(batch)

    await _topic(driver, "again-batches", 1, 4)
    batch_consumer = Consumer(
        "again-batches", "group", batch_handler=handle_batch, initial_backoff=0.05, max_backoff=0.1
    )
    async with _running(server, batch_consumer):
        await eventually(lambda: server.storage.committed_offsets("again-batches", "group") == {0: 4}, "committed")
    first = batches[0]
    assert [o for b in batches[1:] for o in b] == list(range(first[0], 4))


async def test_a_partition_taken_away_while_its_lane_waits_to_read_it_again_goes_to_its_new_owner(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    """A rebalance during a redelivery's backoff: the lane ends without seeking, and the new
    owner reads the partition from the committed offset, the redelivered message included.
    Stopping does not wait for a lane's backoff either."""
    await _topic(driver, "moving", 2, 3)
    seen: list[tuple[str, int, int]] = []

    async def refuse(message: yta.TopicMessage) -> None:
        seen.append(("first", message.partition_id, message.offset))
        first.redeliver(message)  # every time: its lanes only wait

    async def take(message: yta.TopicMessage) -> None:
        seen.append(("second", message.partition_id, message.offset))

    def taken_by_second(partition: int) -> list[int]:
        return [offset for who, p, offset in seen if who == "second" and p == partition]

    # A backoff of 10 to 20 s, longer than the test: the first's lanes wait all along.
    first = Consumer(
        "moving", "group", refuse, concurrency=2, initial_backoff=20, max_backoff=20, graceful_stop_timeout=0.2
    )
    second = Consumer("moving", "group", take, concurrency=2)
    first_runtime = TopicRuntime(server.endpoint, server.database, consumers=[first], shutdown_timeout=20)
    await first_runtime.start()
    try:
        await eventually(lambda: len(seen) == 2, "both partitions refused once")
        async with _running(server, second):
            await eventually(lambda: any(taken_by_second(p) for p in (0, 1)), "a partition moved")
            moved = next(p for p in (0, 1) if taken_by_second(p))
            await eventually(lambda: taken_by_second(moved) == [0, 1, 2], "read from its committed offset")
            started = time.monotonic()
            await first_runtime.close()
            assert time.monotonic() - started < 5  # not held by the other lane's backoff
            await eventually(lambda: taken_by_second(1 - moved) == [0, 1, 2], "the other one too, from the start")
            await eventually(lambda: server.storage.committed_offsets("moving", "group") == {0: 3, 1: 3}, "committed")
    finally:
        await first_runtime.close()
    assert sorted((p, o) for who, p, o in seen if who == "first") == [(0, 0), (1, 0)]
    assert first.restarts == 0 and first.last_error is None


async def test_a_handler_that_never_waits_still_lets_the_event_loop_run(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    """A lane handling a long batch with a handler that never awaits anything (CPU work) gives
    the event loop a turn every few milliseconds: other tasks, the reader's own (commits,
    credit) among them, are not held up until the batch ends."""
    await _topic(driver, "busy", 1, 400)
    handled = 0
    turns_at: list[int] = []  # how many messages were handled when the loop ran a callback

    def turn() -> None:
        turns_at.append(handled)
        if handled < 400:
            asyncio.get_running_loop().call_soon(turn)

    async def handle(message: yta.TopicMessage) -> None:
        nonlocal handled
        if handled == 0:
            asyncio.get_running_loop().call_soon(turn)
        time.sleep(0.0005)  # noqa: ASYNC251 - the point: a handler that holds the loop
        handled += 1

    consumer = Consumer("busy", "group", handle)
    async with _running(server, consumer):
        await eventually(lambda: handled == 400, "every message handled")
    # 400 calls of 0.5 ms hold the loop for 200 ms; it ran callbacks in between, many times.
    assert len([at for at in turns_at if at < 400]) >= 10
