"""A service on a three-node ``LocalTopicCluster`` for about a minute of faults: exactly once,
and nothing raised to the service.

Every node sits behind a TCP proxy that discovery names in its place, so that a node can also
be black-holed (its connections stay open and carry nothing, new ones are never answered) or
slowed down, besides being stopped. In one process, over one driver:

- three writers with producer ids and a keyed writer write ``input`` (acknowledged writes);
- a consumer group: two readers of consumer ``group`` commit what they read (one of them is
  replaced every 15 seconds);
- a consume-transform-produce loop runs ``driver.query.retry_tx`` (read a batch in the
  transaction, write it to ``out-pipe`` with ``tx_writer``, commit), with no restart loop of
  its own;
- a ``TransactionalConsumer`` does the same into ``out-txc``.

Meanwhile: read and write streams broken, one node stopped, every query session killed, a
partition added, a node black-holed, a node slowed down, commits in flight when the node
holding their session stops (applied first, and not), another partition added, the node the
driver was given stopped, broken streams and killed sessions again, and last two nodes stopped
at once. Then the writers stop and everything drains. Nothing may raise to the caller; every
acknowledged input is stored once; each output topic holds every input exactly once; every
consumer's committed offsets reach the partitions' ends. What was measured (attempts, retries,
settled commits, time to recover after the last fault, the longest stall) is printed, and kept
in ``docs/reliability.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

import ydb_topic_async as yta
from ydb_topic_async.integrations import TransactionalConsumer
from ydb_topic_async.testing import LocalTopicCluster
from ydb_topic_async.testing.proxy import FlakyProxy, proxy_to

from .._polling import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

POLICY = yta.RetryPolicy(
    max_elapsed=30.0, fast=yta.BackoffSchedule(base=0.01, cap=0.5), slow=yta.BackoffSchedule(base=0.05, cap=1.0)
)
"""Every call and every transaction's streak of failures is bounded by 30 seconds."""
WRITING = 57.0
"""Seconds the writers write; the faults happen meanwhile."""
INPUT_PARTITIONS = 3


class Measured(yta.NoopMetrics):
    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()
        self.settled = 0

    def transaction_attempt(self, outcome: str, settled: bool) -> None:
        self.attempts[outcome] += 1
        self.settled += settled


@contextlib.asynccontextmanager
async def _behind_proxies(cluster: LocalTopicCluster) -> AsyncIterator[list[FlakyProxy]]:
    async with contextlib.AsyncExitStack() as stack:
        proxies = [await stack.enter_async_context(proxy_to(node.endpoint)) for node in cluster.nodes]
        cluster.discovery.nodes = [
            ("127.0.0.1", proxy.port, node.node_id) for proxy, node in zip(proxies, cluster.nodes, strict=True)
        ]
        yield proxies


async def test_a_minute_of_faults_loses_nothing_duplicates_nothing_and_raises_nothing() -> None:
    started = time.monotonic()
    async with LocalTopicCluster(3) as cluster, _behind_proxies(cluster) as proxies:
        metrics = Measured()
        async with yta.Driver(
            proxies[0].endpoint,
            cluster.database,
            retry=POLICY,
            metrics=metrics,
            keepalive_interval=1.0,
            keepalive_timeout=1.0,
        ) as driver:
            await driver.wait_ready(timeout=10)
            await eventually(lambda: len(driver.endpoints) == 3, "every node discovered")
            await driver.topic.create_topic(
                "input", min_active_partitions=INPUT_PARTITIONS, consumers=["group", "pipe", "txc"]
            )
            await driver.topic.create_topic("out-pipe")
            await driver.topic.create_topic("out-txc")
            await _run_the_service(cluster, driver, proxies, metrics, started)


async def _run_the_service(
    cluster: LocalTopicCluster,
    driver: yta.Driver,
    proxies: list[FlakyProxy],
    metrics: Measured,
    started: float,
) -> None:
    acked: dict[str, list[bytes]] = {}
    progress: dict[str, list[float]] = {}
    stop_writing = asyncio.Event()
    inputs_done = asyncio.Event()
    drained = asyncio.Event()

    def made_progress(component: str) -> None:
        progress.setdefault(component, []).append(time.monotonic())

    # --- the service ---------------------------------------------------------------------------

    async def plain_writer(name: str) -> None:
        async with driver.topic.writer("input", producer_id=name) as writer:
            mine = acked.setdefault(name, [])
            number = 0
            while not stop_writing.is_set():
                chunk = [b"%s %d" % (name.encode(), number + i) for i in range(5)]
                number += 5
                results = await writer.write_with_ack(chunk)
                assert all(isinstance(r, yta.Written | yta.Skipped) for r in results)
                mine.extend(chunk)
                made_progress("writers")
                await asyncio.sleep(0.04)

    async def keyed_writer() -> None:
        async with driver.topic.keyed_writer("input", producer_id="keyed") as writer:
            mine = acked.setdefault("keyed", [])
            number = 0
            while not stop_writing.is_set():
                data = b"keyed %d" % number
                await writer.write_with_ack(data, key=f"key-{number % 11}")
                number += 1
                mine.append(data)
                made_progress("writers")
                await asyncio.sleep(0.01)

    async def writers() -> None:
        async with asyncio.TaskGroup() as group:
            for name in ("w1", "w2", "w3"):
                group.create_task(plain_writer(name))
            group.create_task(keyed_writer())
        inputs_done.set()

    group_seen: set[tuple[int, int]] = set()

    async def group_reader(replaced_every: float | None) -> None:
        while not drained.is_set():
            async with driver.topic.reader("input", consumer="group") as reader:
                until = None if replaced_every is None else time.monotonic() + replaced_every
                while not drained.is_set() and (until is None or time.monotonic() < until):
                    try:
                        batch = await reader.receive_batch(timeout=0.5)
                    except yta.OperationTimeoutError:
                        continue  # idle (our own timeout)
                    group_seen.update((m.partition_id, m.offset) for m in batch)
                    reader.commit(batch)
                    made_progress("group")
                await reader.close(timeout=20)

    async def pipeline() -> None:
        async with driver.topic.reader("input", consumer="pipe") as reader:

            async def one_batch(tx: yta.Transaction) -> int:
                try:
                    batch = await reader.receive_batch_with_tx(tx, max_messages=100, timeout=0.5)
                except yta.OperationTimeoutError:
                    return 0  # idle: nothing read, nothing to write
                await driver.topic.tx_writer(tx, "out-pipe").write([m.data for m in batch])
                return len(batch)

            while not drained.is_set():
                if await driver.query.retry_tx(one_batch):
                    made_progress("retry_tx")

    async def handle(batch: yta.MessageBatch, tx: yta.Transaction) -> None:
        await driver.topic.tx_writer(tx, "out-txc").write([m.data for m in batch])
        tx.after_commit(lambda t, error: made_progress("txc") if error is None else None)

    consumer = TransactionalConsumer(
        "input", "txc", handle, concurrency=2, max_batch_messages=100, transaction_retry=POLICY
    )

    # --- the faults ------------------------------------------------------------------------------

    faults_done: list[str] = []
    last_fault_ended = 0.0

    async def fault(name: str, action: Callable[[], Awaitable[object]]) -> None:
        nonlocal last_fault_ended
        await action()
        faults_done.append(name)
        last_fault_ended = time.monotonic()

    async def stop_for(indexes: list[int], seconds: float) -> None:
        for index in indexes:
            await cluster.stop_node(index)
        await asyncio.sleep(seconds)
        for index in indexes:
            await cluster.start_node(index)

    async def black_hole(index: int, seconds: float) -> None:
        proxies[index].silence()
        await asyncio.sleep(seconds)
        proxies[index].unsilence()
        proxies[index].cut()  # the black-holed connections go, as their peers' keepalives gave up

    async def slow(index: int, seconds: float) -> None:
        proxies[index].slow_down(0.2)
        await asyncio.sleep(seconds)
        proxies[index].speed_up()

    async def commit_in_flight(apply: bool) -> None:
        held = cluster.faults.hold_next_commit()
        node = await cluster.stop_node_during_commit(held, apply=apply, timeout=20)
        await asyncio.sleep(2)
        await cluster.start_node(node.node_id - 1)

    async def add_partition(count: int) -> None:
        await driver.topic.alter_topic("input", set_min_active_partitions=count, timeout=30)

    async def break_streams() -> None:
        cluster.faults.drop_write_streams()
        cluster.faults.drop_read_streams()

    async def kill_sessions() -> None:
        cluster.faults.kill_query_sessions()

    schedule: list[tuple[float, str, Callable[[], Awaitable[object]]]] = [
        (3, "broken streams", break_streams),
        (6, "one node stopped for 3 s", lambda: stop_for([1], 3)),
        (12, "query sessions killed", kill_sessions),
        (14, "partition added", lambda: add_partition(INPUT_PARTITIONS + 1)),
        (17, "node black-holed for 4 s", lambda: black_hole(2, 4)),
        (24, "node slowed down for 4 s", lambda: slow(1, 4)),
        (30, "commit in flight, applied, node stopped for 2 s", lambda: commit_in_flight(True)),
        (35, "commit in flight, not applied, node stopped for 2 s", lambda: commit_in_flight(False)),
        (40, "partition added", lambda: add_partition(INPUT_PARTITIONS + 2)),
        (42, "the seed node stopped for 2 s", lambda: stop_for([0], 2)),
        (46, "broken streams and killed sessions", lambda: _both(break_streams(), kill_sessions())),
        (49, "two nodes stopped for 3 s", lambda: stop_for([1, 2], 3)),
    ]

    async def faults() -> None:
        began = time.monotonic()
        for at, name, action in schedule:
            await asyncio.sleep(max(0.0, began + at - time.monotonic()))
            await fault(name, action)
        await asyncio.sleep(max(0.0, began + WRITING - time.monotonic()))
        stop_writing.set()

    async def drain() -> None:
        await inputs_done.wait()

        def at_the_end(consumer_name: str) -> bool:
            topic = cluster.storage.topic("input")
            committed = cluster.storage.committed_offsets("input", consumer_name)
            return all(committed[p.partition_id] == p.end_offset for p in topic.partitions)

        await eventually(
            lambda: all(at_the_end(name) for name in ("group", "pipe", "txc")),
            "every consumer committed everything",
            timeout=60,
        )
        drained.set()

    consumer_task = asyncio.create_task(consumer.run(driver))
    try:
        async with asyncio.timeout(180):
            async with asyncio.TaskGroup() as service:
                service.create_task(writers())
                service.create_task(group_reader(None))
                service.create_task(group_reader(15.0))
                service.create_task(pipeline())
                service.create_task(faults())
                service.create_task(drain())
    finally:
        await consumer.stop(consumer_task, timeout=20)
    finished = time.monotonic()

    # --- what happened ---------------------------------------------------------------------------

    assert faults_done == [name for _, name, _ in schedule]
    stored = [m.data for m in cluster.storage.iter_all("input")]
    counts = Counter(stored)
    assert [data for data, n in counts.items() if n > 1] == []  # nothing stored twice
    for name, mine in acked.items():
        assert set(mine) <= counts.keys(), f"{name}: acknowledged and not stored"
    assert len(cluster.storage.topic("input").partitions) == INPUT_PARTITIONS + 2
    assert sorted(m.data for m in cluster.storage.iter_all("out-pipe")) == sorted(stored)
    assert sorted(m.data for m in cluster.storage.iter_all("out-txc")) == sorted(stored)
    assert group_seen == {
        (p.partition_id, offset)
        for p in cluster.storage.topic("input").partitions
        for offset in range(p.start_offset, p.end_offset)
    }
    assert consumer.restarts == 0, consumer.last_error
    assert metrics.attempts["failed"] == 0
    recovery = {
        component: min((t for t in times if t > last_fault_ended), default=float("inf")) - last_fault_ended
        for component, times in progress.items()
    }
    assert set(recovery) == {"writers", "group", "retry_tx", "txc"}
    assert max(recovery.values()) < 30  # each made progress again after the last fault
    # The longest time each went without progress while the faults ran: how long traffic took
    # to leave a failing node (bounded by the retry policy, and by keepalive for a black hole).
    stalls = {
        component: max(
            (later - earlier for earlier, later in itertools.pairwise(times) if later <= last_fault_ended),
            default=0.0,
        )
        for component, times in progress.items()
    }
    assert max(stalls.values()) < POLICY.max_elapsed  # type: ignore[operator]
    assert metrics.settled >= 2  # the two commits in flight, at least, were settled
    print(
        f"\n{len(stored)} inputs ({sum(len(m) for m in acked.values())} acknowledged writes),"
        f" {len(schedule)} faults, {finished - started:.1f}s in all;"
        f" transactions: {sum(metrics.attempts.values())} attempts, {metrics.attempts['committed']} committed,"
        f" {metrics.attempts['retried']} retried, {metrics.settled} settled from the offsets;"
        f" TransactionalConsumer: {consumer.attempts} attempts, {consumer.retries} retries,"
        f" {consumer.settled} settled, {consumer.restarts} restarts;"
        " recovery after the last fault: "
        + ", ".join(f"{name} {seconds:.2f}s" for name, seconds in sorted(recovery.items()))
        + "; longest stall during the faults: "
        + ", ".join(f"{name} {seconds:.2f}s" for name, seconds in sorted(stalls.items()))
    )


async def _both(*actions: Awaitable[object]) -> None:
    await asyncio.gather(*actions)
