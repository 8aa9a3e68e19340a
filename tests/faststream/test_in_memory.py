"""``TestYdbBroker``: the broker in memory through FastStream's public testing API (no server)."""

from __future__ import annotations

from typing import Any

import pytest
from faststream import FastStream, TestApp
from faststream.specification import AsyncAPI

from ydb_topic_async.faststream import (
    InMemoryMessage,
    TestYdbBroker,
    YdbBroker,
    YdbMessage,
    YdbPublishMessage,
    YdbRouter,
)


def _broker() -> YdbBroker:
    return YdbBroker("grpc://nowhere:2136", database="/local", logger=None)


async def test_publishes_reach_handlers_and_replies_reach_publishers_in_memory() -> None:
    broker = _broker()
    replies = broker.publisher("invoices")

    @broker.subscriber("orders", consumer="billing")
    @replies
    async def bill(order: dict[str, int], msg: YdbMessage) -> dict[str, Any]:
        assert isinstance(msg.raw_message, InMemoryMessage)
        return {"order": order["id"], "key": msg.key, "trace": msg.headers["trace"]}

    async with TestYdbBroker(broker) as br:
        await br.publish({"id": 1}, "orders", key="k1", headers={"trace": "t"})
        bill.mock.assert_called_once_with({"id": 1})
        replies.mock.assert_called_once_with({"order": 1, "key": "k1", "trace": "t"})
        reply = await br.request({"id": 2}, "orders", headers={"trace": "r"})  # request/reply works in memory
        assert await reply.decode() == {"order": 2, "key": None, "trace": "r"}


async def test_one_consumer_shares_its_messages_and_batches_get_lists() -> None:
    broker = _broker()
    calls: list[str] = []

    @broker.subscriber("t", consumer="c")
    async def first(body: str) -> None:
        calls.append(f"first {body}")

    @broker.subscriber("t", consumer="c")
    async def second(body: str) -> None:
        calls.append(f"second {body}")

    @broker.subscriber("t", consumer="other", batch=True)
    async def batched(bodies: list[str]) -> None:
        calls.append(f"batch {bodies}")

    async with TestYdbBroker(broker) as br:
        await br.publish_batch("a", YdbPublishMessage("b", key="k"), topic="t")
    # One of the consumer's two subscribers gets both messages (as a server deals a partition to
    # one reader of a consumer); the other consumer's batch subscriber gets them as one batch.
    assert sorted(calls) in (
        ["batch ['a', 'b']", "first a", "first b"],
        ["batch ['a', 'b']", "second a", "second b"],
    )


async def test_routers_and_the_application_under_test_app() -> None:
    router = YdbRouter(prefix="svc-")
    handled: list[str] = []

    @router.subscriber("in", consumer="c")
    async def handle(body: str) -> None:
        handled.append(body)

    broker = _broker()
    broker.include_router(router)
    app = FastStream(broker)
    async with TestYdbBroker(broker) as br, TestApp(app):
        await br.publish("hello", "svc-in")
    assert handled == ["hello"]


def test_the_asyncapi_document_shows_server_topics_consumer_and_partitions() -> None:
    broker = YdbBroker("grpc://db.example:2136", database="/prod")

    @broker.subscriber("orders", consumer="billing")
    @broker.publisher("invoices", partition=2, producer_id="svc")
    async def bill(order: dict[str, int]) -> dict[str, int]:
        """Bills an order."""
        return order

    schema = AsyncAPI(broker, title="svc").to_specification().to_jsonable()
    assert schema["servers"]["development"] == {"host": "db.example:2136", "pathname": "/prod", "protocol": "ydb"}
    subscriber = schema["channels"]["orders:Bill"]
    assert subscriber["address"] == "orders"
    assert subscriber["description"] == (
        "Bills an order.\n\nYDB topic `orders`, read by consumer `billing`, all partitions."
    )
    publisher = schema["channels"]["invoices:Publisher"]
    assert publisher["description"] == "YDB topic `invoices`, written with producer id `svc` to partition 2."


def test_bad_subscriber_options_are_refused_where_given() -> None:
    broker = _broker()
    with pytest.raises(ValueError, match="max_workers"):
        broker.subscriber("t", consumer="c", max_workers=0)
    with pytest.raises(Exception, match="batch=True"):
        broker.subscriber("t", consumer="c", max_messages=10)
    with pytest.raises(Exception, match="at least one topic"):
        broker.subscriber(consumer="c")


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"batch": True, "max_messages": 0}, "InvalidArgumentError", "max_messages"),
        ({"batch": True, "max_bytes": 1.5}, "InvalidArgumentError", "max_bytes"),
        ({"batch": True, "max_wait": -1}, "InvalidArgumentError", "max_wait"),
        ({"max_in_flight_bytes": 0}, "InvalidArgumentError", "max_in_flight_bytes"),
        ({"initial_backoff": 5, "max_backoff": 1}, "InvalidArgumentError", "initial_backoff"),
        ({"reader_options": {"buffer_size_bytes": 5}}, "InvalidArgumentError", "buffer_size_bytes"),
        ({"reader_options": {"bufer_size_bytes": 2**20}}, "TypeError", "bufer_size_bytes"),
    ],
)
def test_options_the_subscriber_passes_on_are_checked_where_given(
    options: dict[str, Any], error: str, named: str
) -> None:
    """What the subscriber hands to the consumer and the reader it makes when it starts is checked
    at ``subscriber(...)``: not at ``start``, and under ``TestYdbBroker`` (which starts no reader)
    too."""
    broker = _broker()
    with pytest.raises(Exception, match=named) as refused:
        broker.subscriber("t", consumer="c", **options)
    assert type(refused.value).__name__ == error


async def test_each_message_of_a_batch_is_decoded_by_its_own_content_type() -> None:
    broker = _broker()
    got: list[list[Any]] = []

    @broker.subscriber("t", consumer="c", batch=True)
    async def handle(bodies: list[Any], msg: YdbMessage) -> None:
        got.append(bodies)
        assert [h.get("content-type") for h in msg.batch_headers] == [
            "application/json", "text/plain", None, "application/json"
        ]

    async with TestYdbBroker(broker) as br:
        await br.publish_batch({"a": 1}, "text", b"\xff raw", 5, topic="t")
    assert got == [[{"a": 1}, "text", b"\xff raw", 5]]
