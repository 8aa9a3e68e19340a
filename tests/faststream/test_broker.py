"""``YdbBroker`` against the local topic server over real gRPC: consuming, publishing, replies,
keys, headers, batches, routers, concurrency per partition, bad input."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from faststream import FastStream, TestApp
from faststream.exceptions import FeatureNotSupportedException

import ydb_topic_async as yta
from ydb_topic_async.faststream import YdbBroker, YdbMessage, YdbPublishMessage, YdbRoute, YdbRouter
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored_by_partition
from .._polling import eventually
from ._brokers import Seen, broker_for, running

pytestmark = pytest.mark.timeout(60)


async def test_a_handler_consumes_and_its_return_value_is_published_and_committed(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    replies = Seen()

    @broker.subscriber("orders", consumer="billing")
    @broker.publisher("invoices")
    async def bill(order: dict[str, int], msg: YdbMessage) -> dict[str, Any]:
        return {"order": order["id"], "offset": msg.offset, "partition": msg.partition_id, "topic": msg.topic}

    @broker.subscriber("invoices", consumer="audit")
    async def audit(invoice: dict[str, Any]) -> None:
        replies.add(invoice)

    async with running(broker) as br:
        for i in range(3):
            ack = await br.publish({"id": i}, "orders")
            assert isinstance(ack, yta.Written) and ack.offset == i
        got = await replies.wait_for(3)
        await eventually(lambda: server.storage.committed_offsets("orders", "billing") == {0: 3}, "orders committed")
        await eventually(lambda: server.storage.committed_offsets("invoices", "audit") == {0: 3}, "replies committed")
    assert got == [{"order": i, "offset": i, "partition": 0, "topic": "/local/orders"} for i in range(3)]


async def test_keys_go_where_the_sdk_partitioner_puts_them_through_pooled_writers(server: LocalTopicServer) -> None:
    broker = broker_for(server)
    seen = Seen()

    @broker.subscriber("keyed", consumer="c")
    async def handle(body: str, msg: YdbMessage) -> None:
        seen.add((msg.key, msg.partition_id, body, msg.headers))

    async with yta.Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("keyed", min_active_partitions=3, consumers=["c"])
        description = await driver.topic.describe_topic("keyed")
    keys = [f"user-{i}" for i in range(12)]
    async with running(broker) as br:
        for round_ in range(2):
            for key in keys:
                await br.publish(f"{key}/{round_}", "keyed", key=key, headers={"trace": key})
        producer: Any = br.config.producer
        assert producer.writers == 1  # one keyed writer, however many publishes
        got = await seen.wait_for(24)
    expected = {key.encode(): yta.partition_for_key(description, key) for key in keys}
    assert {key: partition for key, partition, _, _ in got} == expected
    assert len(set(expected.values())) > 1  # the keys really spread
    for key in keys:  # in order per key
        bodies = [body for k, _, body, _ in got if k == key.encode()]
        assert bodies == [f"{key}/0", f"{key}/1"]
    assert all(headers["trace"] == key.decode() and "__key" not in headers for key, _, _, headers in got)


async def test_a_batch_subscriber_gets_lists_of_one_partition_committed_as_a_whole(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    batches = Seen()

    @broker.subscriber("batched", consumer="c", batch=True, max_messages=4, max_wait=0.2)
    async def handle(bodies: list[int], msg: YdbMessage) -> None:
        batches.add((bodies, msg.partition_id))

    async with running(broker) as br:
        await br.publish_batch(*range(10), topic="batched")
        await eventually(lambda: sum(len(b) for b, _ in batches.items) == 10, "every message handled")
        await eventually(lambda: server.storage.committed_offsets("batched", "c") == {0: 10}, "committed")
    assert [n for bodies, _ in batches.items for n in bodies] == list(range(10))
    assert all(1 <= len(bodies) <= 4 for bodies, _ in batches.items)


async def test_partitions_are_handled_concurrently_each_in_order(server: LocalTopicServer) -> None:
    broker = broker_for(server)
    running_now, most, seen = 0, 0, Seen()

    @broker.subscriber("wide", consumer="c", max_workers=3)
    async def handle(body: int, msg: YdbMessage) -> None:
        nonlocal running_now, most
        running_now += 1
        most = max(most, running_now)
        await asyncio.sleep(0.02)
        running_now -= 1
        seen.add((msg.partition_id, body))

    async with yta.Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("wide", min_active_partitions=3, consumers=["c"])
    async with running(broker) as br:
        for i in range(10):
            for partition in range(3):
                await br.publish(i, "wide", partition=partition, no_confirm=True)
        await seen.wait_for(30)
    assert most == 3
    for partition in range(3):
        assert [body for p, body in seen.items if p == partition] == list(range(10))


async def test_exactly_once_with_a_producer_id_and_sequence_numbers(server: LocalTopicServer) -> None:
    """A service that restarts and publishes again what it is not sure was stored (the same
    producer id and sequence numbers) stores each message once: the server skips duplicates."""
    async with running(broker_for(server, auto_create_topics=True)) as br:
        first = [await br.publish(f"m{n}", "once", producer_id="svc", seq_no=n) for n in (1, 2, 3)]
        with pytest.raises(yta.InvalidArgumentError, match="seq_no"):
            await br.publish("no seq_no", "once", producer_id="svc")
    async with running(broker_for(server)) as br:  # after a restart
        again = [await br.publish(f"m{n}", "once", producer_id="svc", seq_no=n, no_confirm=True) for n in (2, 3, 4)]
        futures = [f for f in again if isinstance(f, asyncio.Future)]
        assert len(futures) == 3
        results = await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert [type(r).__name__ for r in first] == ["Written"] * 3
    assert [type(r).__name__ for r in results] == ["Skipped", "Skipped", "Written"]
    assert [m.data for m in stored_by_partition(server, "once")[0]] == [b"m1", b"m2", b"m3", b"m4"]


async def test_routers_prefix_their_topics_and_routes_declare_publishers(server: LocalTopicServer) -> None:
    seen = Seen()

    async def echo(body: str) -> str:
        return body.upper()

    router = YdbRouter(prefix="app-", handlers=[YdbRoute(echo, "in", consumer="c", publishers=[])])
    router.subscriber("in", consumer="d")(router.publisher("out")(echo))

    @router.subscriber("out", consumer="c")
    async def out(body: str) -> None:
        seen.add(body)

    broker = broker_for(server, auto_create_topics=True)
    broker.include_router(router)
    async with running(broker) as br:
        await br.publish("hi", "app-in")
        assert await seen.wait_for(1) == ["HI"]
    assert set(server.storage.committed_offsets("app-in", "c")) == {0}


async def test_reading_without_a_consumer_and_get_one(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    seen = Seen()

    @broker.subscriber("plain")
    async def handle(body: str) -> None:
        seen.add(body)

    polled = broker.subscriber("polled", consumer="c")
    async with running(broker) as br:
        await br.publish("after start", "plain")
        assert await seen.wait_for(1) == ["after start"]
        await br.publish("one", "polled")
        message = await polled.get_one(timeout=10)
        assert message is not None and await message.decode() == "one"
        await message.ack()
        assert await polled.get_one(timeout=0.1) is None
        await eventually(lambda: server.storage.committed_offsets("polled", "c") == {0: 1}, "get_one's ack committed")


async def test_a_missing_topic_or_consumer_fails_start_naming_both(server: LocalTopicServer) -> None:
    broker = broker_for(server)
    broker.subscriber("absent", consumer="billing")(_noop)
    # The SDK's own error for a missing topic, as describe_topic and the writers raise it.
    with pytest.raises(yta.TopicNotFoundError, match=r"topic 'absent' \(read with consumer 'billing'\) does not exist"):
        await broker.start()
    assert broker.config.broker_config.driver is None  # the failed start closed what it opened

    async with yta.Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("present", consumers=["other"])
    broker = broker_for(server)
    broker.subscriber("present", consumer="billing")(_noop)
    with pytest.raises(yta.SchemeError, match="topic 'present' has no consumer 'billing'"):
        await broker.start()


async def test_auto_create_adds_a_missing_consumer_to_an_existing_topic(server: LocalTopicServer) -> None:
    async with yta.Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("present", consumers=["other"])
        broker = broker_for(server, auto_create_topics=True)
        broker.subscriber("present", consumer="billing")(_noop)
        async with running(broker):
            description = await driver.topic.describe_topic("present")
    assert sorted(c.name for c in description.consumers) == ["billing", "other"]


async def test_an_unreachable_endpoint_fails_start_within_the_connect_timeout() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    broker = YdbBroker(f"grpc://127.0.0.1:{port}", database="/local", connect_timeout=1.0, logger=None)
    started = time.monotonic()
    with pytest.raises(yta.OperationTimeoutError):
        await broker.start()
    assert time.monotonic() - started < 5
    assert not await broker.ping(0.1)


async def test_request_is_refused_outside_the_test_broker(server: LocalTopicServer) -> None:
    async with broker_for(server, auto_create_topics=True) as br:
        assert await br.ping(5)
        with pytest.raises(FeatureNotSupportedException, match="reply_to"):
            await br.request("ping", "anything")


async def test_the_application_runs_the_broker_under_test_app(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    seen = Seen()

    @broker.subscriber("app-topic", consumer="c")
    async def handle(body: str) -> None:
        seen.add(body)

    app = FastStream(broker)

    @app.after_startup
    async def hello() -> None:
        await broker.publish(YdbPublishMessage("from startup", headers={"h": "1"}), "app-topic")

    async with TestApp(app):
        assert await seen.wait_for(1) == ["from startup"]
    assert broker.config.broker_config.driver is None  # stopped with the application


async def _noop(body: Any) -> None:
    pass
