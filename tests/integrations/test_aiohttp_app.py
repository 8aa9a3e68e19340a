"""examples/aiohttp_app.py end to end over HTTP with the cleanup context running."""

from __future__ import annotations

from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import load_example, stored_data
from .._polling import eventually

test_utils = pytest.importorskip("aiohttp.test_utils")


async def test_publish_confirm_and_consume(server: LocalTopicServer, driver: yta.Driver) -> None:
    example = load_example("aiohttp_app")
    await driver.topic.create_topic(example.TOPIC, consumers=[example.CONSUMER])
    app = example.create_app(server.endpoint, server.database)
    stats: dict[str, Any] = {}
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        response = await client.post("/events", data=b"click")
        assert response.status == 202
        assert await response.json() == {"status": "accepted"}
        response = await client.post("/events/confirmed", data=b"buy")
        assert response.status == 201
        assert await response.json() == {"status": "stored", "partition": 0, "offset": 1}

        async def consumed() -> bool:
            nonlocal stats
            stats = await (await client.get("/stats")).json()
            return bool(stats["handled"] == 2)

        await eventually(consumed)
        assert stats == {"seen": {"click": 1, "buy": 1}, "handled": 2, "restarts": 0}
    # Cleanup flushed the writer and waited for the consumer's commits.
    assert stored_data(server, example.TOPIC) == [b"click", b"buy"]
    assert server.storage.committed_offsets(example.TOPIC, example.CONSUMER) == {0: 2}


async def test_fire_and_forget_messages_are_flushed_at_cleanup(server: LocalTopicServer, driver: yta.Driver) -> None:
    example = load_example("aiohttp_app")
    await driver.topic.create_topic(example.TOPIC, consumers=[example.CONSUMER])
    app = example.create_app(server.endpoint, server.database)
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        for i in range(50):
            assert (await client.post("/events", data=f"e{i}".encode())).status == 202
    # Every accepted message is stored once the application has shut down.
    assert stored_data(server, example.TOPIC) == [f"e{i}".encode() for i in range(50)]


async def test_app_keys_are_typed_and_set_during_the_context(server: LocalTopicServer, driver: yta.Driver) -> None:
    from aiohttp import web

    from ydb_topic_async.integrations.aiohttp import DRIVER, RUNTIME, WRITERS, TopicRuntime, WriterSpec, topic_context

    await driver.topic.create_topic("keys")
    runtime = TopicRuntime(server.endpoint, server.database, writers={"w": WriterSpec("keys", producer_id="p")})
    app = web.Application()
    app.cleanup_ctx.append(topic_context(runtime))
    async with test_utils.TestClient(test_utils.TestServer(app)):
        assert app[RUNTIME] is runtime
        assert app[DRIVER] is runtime.driver and not app[DRIVER].closed
        writer = app[WRITERS]["w"]
        assert writer.path == "/local/keys"
        await writer.write_with_ack(b"x")
    assert writer.closed and runtime.writers == {}
    with pytest.raises(RuntimeError, match="not running"):
        runtime.driver  # noqa: B018
