"""``TransactionalConsumer``: ``handle(batch, tx)`` whose writes and the batch's offsets commit
together; partitions concurrently, each in order; faults ridden through without surfacing; the
FastAPI and aiohttp lifespans run it like the plain ``Consumer``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator

import pytest

import ydb_topic_async as yta
from ydb_topic_async.integrations import TopicRuntime, TransactionalConsumer
from ydb_topic_async.testing import HeldCommit, LocalTopicCluster, LocalTopicServer, ServerNode

from .._polling import eventually

pytestmark = pytest.mark.timeout(90)


class Attempts(yta.NoopMetrics):
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def transaction_attempt(self, outcome: str, settled: bool) -> None:
        self.seen.append((outcome, settled))


async def _source(driver: yta.Driver, partitions: int, per_partition: int) -> list[bytes]:
    """``src`` (consumer ``c``) holding ``per_partition`` messages in each partition, and ``dst``."""
    await driver.topic.create_topic("src", min_active_partitions=partitions, consumers=["c"])
    await driver.topic.create_topic("dst")
    sent = []
    for pid in range(partitions):
        data = [b"p%d-%03d" % (pid, i) for i in range(per_partition)]
        async with driver.topic.writer("src", producer_id=f"in-{pid}", partition_id=pid) as writer:
            await writer.write(data)
        sent += data
    return sent


def _outputs(server: LocalTopicServer) -> list[bytes]:
    return sorted(m.data for m in server.storage.iter_all("dst"))


@contextlib.asynccontextmanager
async def _running(consumer: TransactionalConsumer, driver: yta.Driver) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(consumer.run(driver))
    try:
        yield task
    finally:
        await consumer.stop(task, timeout=20)


async def test_batches_commit_with_their_writes_partitions_concurrently_each_in_order(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    sent = await _source(driver, partitions=3, per_partition=40)
    committed: dict[int, list[int]] = defaultdict(list)
    in_flight = peak = 0

    async def handle(batch: yta.MessageBatch, tx: yta.Transaction) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(0.02)  # long enough for the other lanes' calls to overlap
            await driver.topic.tx_writer(tx, "dst").write([m.data.upper() for m in batch])
        finally:
            in_flight -= 1
        offsets = [m.offset for m in batch]
        tx.after_commit(lambda t, error: committed[batch.partition_id].extend(offsets) if error is None else None)

    consumer = TransactionalConsumer("src", "c", handle, concurrency=3, max_batch_messages=7)
    async with _running(consumer, driver):
        await eventually(lambda: consumer.handled == len(sent), "every message handled", timeout=60)
    assert _outputs(server) == sorted(data.upper() for data in sent)
    assert server.storage.committed_offsets("src", "c") == {0: 40, 1: 40, 2: 40}
    assert all(offsets == list(range(40)) for offsets in committed.values())  # each partition in order
    assert peak >= 2  # partitions concurrently
    assert (consumer.restarts, consumer.retries, consumer.committed) == (0, 0, consumer.attempts)


async def test_a_handler_error_rolls_back_its_batch_and_restarts_the_reader(
    server: LocalTopicServer, driver: yta.Driver, caplog: pytest.LogCaptureFixture
) -> None:
    """The handler's own error is not the SDK's to repeat: the transaction is rolled back (what
    the handler wrote in it is dropped), the failure is logged and the consumer restarts from the
    committed offsets, so the output still holds every input once."""
    sent = await _source(driver, partitions=1, per_partition=20)
    failures = 1

    async def handle(batch: yta.MessageBatch, tx: yta.Transaction) -> None:
        nonlocal failures
        await driver.topic.tx_writer(tx, "dst").write([m.data.upper() for m in batch])
        if failures and batch.messages[0].offset > 0:
            failures -= 1
            raise RuntimeError("the handler's own bug")

    consumer = TransactionalConsumer("src", "c", handle, max_batch_messages=5, initial_backoff=0.05)
    with caplog.at_level(logging.ERROR, "ydb_topic_async.integrations"):
        async with _running(consumer, driver):
            await eventually(lambda: consumer.handled == len(sent), "every message handled", timeout=60)
    assert consumer.restarts == 1 and isinstance(consumer.last_error, RuntimeError)
    assert any("restarting" in record.getMessage() for record in caplog.records)
    assert _outputs(server) == sorted(data.upper() for data in sent)
    assert server.storage.committed_offsets("src", "c") == {0: 20}


@pytest.mark.slow
async def test_faults_are_ridden_through_without_surfacing(ydb_topic_cluster: LocalTopicCluster) -> None:
    """On a three-node cluster the handler's transactions meet a killed query session, broken
    write streams, and commits in flight when the node holding their session stops, applied
    first or not. Every such attempt is settled or repeated by the consumer itself: no restart,
    every input in the output once, the offsets at the end, and the attempts, retries and
    settled commits counted and reported to the metrics."""
    cluster = ydb_topic_cluster
    metrics = Attempts()
    quick = yta.RetryPolicy(fast=yta.BackoffSchedule(0.01, 0.2), slow=yta.BackoffSchedule(0.05, 0.5))
    async with yta.Driver(cluster.endpoint, cluster.database, retry=quick, metrics=metrics) as driver:
        await driver.wait_ready(timeout=10)
        sent = await _source(driver, partitions=3, per_partition=60)
        faults = ["session", "write stream", "commit applied", "commit lost", "session"]
        recovered_at = [0]
        stops: list[asyncio.Task[ServerNode]] = []

        async def stop_under(held: HeldCommit, apply: bool) -> ServerNode:
            node = await cluster.stop_node_during_commit(held, apply=apply)
            await asyncio.sleep(0.5)
            await cluster.start_node(node.node_id - 1)
            return node

        async def handle(batch: yta.MessageBatch, tx: yta.Transaction) -> None:
            writer = driver.topic.tx_writer(tx, "dst")
            await writer.write([m.data.upper() for m in batch])
            if stops and not stops[-1].done():
                await asyncio.wait([stops[-1]], timeout=30)  # one fault at a time
            # ... each after the consumer committed again since the previous one (recovered).
            # (A held commit needs a commit after it: not near the end.)
            ready = consumer.committed >= recovered_at[0] and consumer.handled < len(sent) - 60
            fault = faults.pop(0) if faults and ready else None
            if fault is not None:
                recovered_at[0] = consumer.committed + 2
            if fault == "session":
                assert tx.session_id is not None
                cluster.faults.kill_query_session(tx.session_id)
            elif fault == "write stream":
                cluster.faults.drop_write_stream_after(0)  # the next transactional write breaks its stream
            elif fault is not None:
                held = cluster.faults.hold_next_commit()
                stops.append(asyncio.create_task(stop_under(held, apply=fault == "commit applied")))

        consumer = TransactionalConsumer(
            "src", "c", handle, concurrency=2, max_batch_messages=4, transaction_retry=quick
        )
        async with _running(consumer, driver):
            await eventually(lambda: consumer.handled == len(sent), "every message handled", timeout=75)
        await asyncio.gather(*stops)
    assert faults == [] and len(stops) == 2
    assert consumer.restarts == 0, consumer.last_error
    assert _outputs(cluster) == sorted(data.upper() for data in sent)
    assert cluster.storage.committed_offsets("src", "c") == {0: 60, 1: 60, 2: 60}
    assert consumer.retries >= 3 and consumer.settled >= 2
    assert consumer.attempts == consumer.committed + consumer.retries
    outcomes = [outcome for outcome, _ in metrics.seen]
    assert outcomes.count("committed") == consumer.committed and outcomes.count("retried") == consumer.retries
    assert sum(settled for _, settled in metrics.seen) == consumer.settled
    assert "failed" not in outcomes


async def test_runs_in_the_fastapi_lifespan(server: LocalTopicServer, driver: yta.Driver) -> None:
    pytest.importorskip("fastapi")
    asgi_lifespan = pytest.importorskip("asgi_lifespan")
    from fastapi import FastAPI

    from ydb_topic_async.integrations.fastapi import TransactionalConsumer as FastApiTxConsumer
    from ydb_topic_async.integrations.fastapi import topic_lifespan

    sent = await _source(driver, partitions=2, per_partition=10)
    runtime: TopicRuntime

    async def handle(batch: yta.MessageBatch, tx: yta.Transaction) -> None:
        await runtime.driver.topic.tx_writer(tx, "dst").write([m.data.upper() for m in batch])

    consumer = FastApiTxConsumer("src", "c", handle)
    runtime = TopicRuntime(server.endpoint, server.database, consumers=[consumer])
    async with asgi_lifespan.LifespanManager(FastAPI(lifespan=topic_lifespan(runtime))):
        await eventually(lambda: consumer.handled == len(sent), "every message handled")
    assert _outputs(server) == sorted(data.upper() for data in sent)
    assert server.storage.committed_offsets("src", "c") == {0: 10, 1: 10}


async def test_runs_in_the_aiohttp_cleanup_context(server: LocalTopicServer, driver: yta.Driver) -> None:
    test_utils = pytest.importorskip("aiohttp.test_utils")
    from aiohttp import web

    from ydb_topic_async.integrations.aiohttp import DRIVER, topic_context
    from ydb_topic_async.integrations.aiohttp import TransactionalConsumer as AiohttpTxConsumer

    sent = await _source(driver, partitions=2, per_partition=10)
    app = web.Application()

    async def handle(batch: yta.MessageBatch, tx: yta.Transaction) -> None:
        await app[DRIVER].topic.tx_writer(tx, "dst").write([m.data.upper() for m in batch])

    consumer = AiohttpTxConsumer("src", "c", handle)
    app.cleanup_ctx.append(topic_context(TopicRuntime(server.endpoint, server.database, consumers=[consumer])))
    async with test_utils.TestClient(test_utils.TestServer(app)):
        await eventually(lambda: consumer.handled == len(sent), "every message handled")
    assert _outputs(server) == sorted(data.upper() for data in sent)
    assert server.storage.committed_offsets("src", "c") == {0: 10, 1: 10}


def test_options_are_checked_at_the_call() -> None:
    async def handle(batch: yta.MessageBatch, tx: yta.Transaction) -> None:
        pass

    with pytest.raises(yta.InvalidArgumentError, match="max_open_transactions"):
        TransactionalConsumer("src", "c", handle, max_open_transactions=0)
    with pytest.raises(yta.InvalidArgumentError, match="transaction_retry"):
        TransactionalConsumer("src", "c", handle, transaction_retry=3)  # type: ignore[arg-type]
    with pytest.raises(yta.InvalidArgumentError, match="async function"):
        TransactionalConsumer("src", "c", None)  # type: ignore[arg-type]
    with pytest.raises(yta.InvalidArgumentError, match="Consumer or TransactionalConsumer"):
        TopicRuntime("grpc://localhost:2136", "/local", consumers=[object()])  # type: ignore[list-item]
