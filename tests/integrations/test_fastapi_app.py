"""examples/fastapi_app.py end to end over HTTP (httpx + ASGI transport) with the lifespan running."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import load_example, stored_data
from .._polling import eventually

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
asgi_lifespan = pytest.importorskip("asgi_lifespan")

from fastapi import Body, Depends, FastAPI  # noqa: E402 - after the optional-dependency checks

from ydb_topic_async.integrations.fastapi import (  # noqa: E402
    TopicDriver,
    TopicRuntime,
    TopicRuntimeDep,
    WriterSpec,
    topic_lifespan,
    writer_dependency,
)

# Module-level aliases: FastAPI resolves route annotations in the module's globals.
DepsWriter = Annotated[yta.TopicWriter, Depends(writer_dependency("deps"))]
MissingWriter = Annotated[yta.TopicWriter, Depends(writer_dependency("missing"))]
RecoveringWriter = Annotated[yta.TopicWriter, Depends(writer_dependency("recovering"))]


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[Any]:
    async with (
        asgi_lifespan.LifespanManager(app) as manager,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=manager.app), base_url="http://test") as client,
    ):
        yield client


async def test_publish_confirm_and_consume(server: LocalTopicServer, driver: yta.Driver) -> None:
    example = load_example("fastapi_app")
    await driver.topic.create_topic(example.TOPIC, consumers=[example.CONSUMER])
    app = example.create_app(server.endpoint, server.database)
    stats: dict[str, Any] = {}
    async with serving(app) as client:
        response = await client.post("/events", content=b"click")
        assert (response.status_code, response.json()) == (202, {"status": "accepted"})
        response = await client.post("/events/confirmed", content=b"buy")
        assert (response.status_code, response.json()) == (201, {"status": "stored", "partition": 0, "offset": 1})

        async def consumed() -> bool:
            nonlocal stats
            stats = (await client.get("/stats")).json()
            return bool(stats["handled"] == 2)

        await eventually(consumed)
        assert stats == {"seen": {"click": 1, "buy": 1}, "handled": 2, "restarts": 0}
    # Shutdown flushed the writer and waited for the consumer's commits.
    assert stored_data(server, example.TOPIC) == [b"click", b"buy"]
    assert server.storage.committed_offsets(example.TOPIC, example.CONSUMER) == {0: 2}


async def test_fire_and_forget_messages_are_flushed_at_shutdown(server: LocalTopicServer, driver: yta.Driver) -> None:
    example = load_example("fastapi_app")
    await driver.topic.create_topic(example.TOPIC, consumers=[example.CONSUMER])
    async with serving(example.create_app(server.endpoint, server.database)) as client:
        for i in range(50):
            assert (await client.post("/events", content=f"e{i}".encode())).status_code == 202
    assert stored_data(server, example.TOPIC) == [f"e{i}".encode() for i in range(50)]


async def test_topic_errors_become_http_errors(server: LocalTopicServer) -> None:
    # The topic does not exist: the writer fails with SchemeError, which is not retriable.
    example = load_example("fastapi_app")
    app = example.create_app(server.endpoint, server.database)
    # The writer's failure is raised again by the shutdown: accepted messages were lost, and an
    # application's exit must not look clean then.
    with pytest.raises(yta.SchemeError, match="does not exist"):
        async with serving(app) as client:
            response = await client.post("/events/confirmed", content=b"lost")
            assert response.status_code == 500
            assert response.json()["error"] == "SchemeError"
            consumer = app.state.ydb_topic_async.consumers[0]
            # The consumer cannot read a missing topic: it keeps restarting, and says why.
            await eventually(lambda: consumer.restarts >= 1, "a consumer restart")
            assert isinstance(consumer.last_error, yta.SchemeError)
    assert example.TOPIC not in server.storage.topics


async def test_dependencies_and_inner_lifespan(server: LocalTopicServer, driver: yta.Driver) -> None:
    await driver.topic.create_topic("deps")
    runtime = TopicRuntime(server.endpoint, server.database, writers={"deps": WriterSpec("deps", producer_id="p")})
    order: list[str] = []

    @asynccontextmanager
    async def inner(app: Any) -> AsyncIterator[None]:
        # Runs inside the runtime: the driver is already open.
        order.append(f"inner start, driver open: {not runtime.driver.closed}")
        yield
        order.append(f"inner end, writer open: {not runtime.writer('deps').closed}")

    app = FastAPI(lifespan=topic_lifespan(runtime, inner))

    @app.post("/write")
    async def write(writer: DepsWriter, drv: TopicDriver, rt: TopicRuntimeDep) -> Any:
        result = await writer.write_with_ack(b"via dependency")
        assert isinstance(result, yta.Written)
        return {"offset": result.offset, "same_driver": drv is rt.driver is runtime.driver}

    @app.post("/missing")
    async def missing(writer: MissingWriter) -> Any:
        return {}

    async with serving(app) as client:
        assert (await client.post("/write")).json() == {"offset": 0, "same_driver": True}
        with pytest.raises(KeyError, match="no writer named 'missing'"):
            await client.post("/missing")
    assert order == ["inner start, driver open: True", "inner end, writer open: True"]
    assert stored_data(server, "deps") == [b"via dependency"]


async def test_requests_get_a_new_writer_after_the_old_one_failed(
    server: LocalTopicServer, driver: yta.Driver, caplog: pytest.LogCaptureFixture
) -> None:
    await driver.topic.create_topic("recovering")
    runtime = TopicRuntime(
        server.endpoint, server.database, writers={"recovering": WriterSpec("recovering", producer_id="api")}
    )
    app = FastAPI(lifespan=topic_lifespan(runtime))
    served_by: list[yta.TopicWriter] = []

    @app.post("/write")
    async def write(writer: RecoveringWriter, body: Annotated[bytes, Body()]) -> Any:
        served_by.append(writer)
        result = await writer.write_with_ack(body)
        assert isinstance(result, yta.Written)
        return {"offset": result.offset}

    async with serving(app) as client:
        assert (await client.post("/write", content=b"one")).json() == {"offset": 0}
        failed = served_by[0]
        # A non-retriable failure ends the writer for good.
        server.faults.fail_next("StreamWrite", "SCHEME_ERROR")
        server.faults.drop_write_streams()
        await eventually(lambda: failed.failure is not None, "the writer failed")
        with caplog.at_level(logging.WARNING, logger="ydb_topic_async.integrations"):
            responses = await asyncio.gather(*(client.post("/write", content=f"r{i}".encode()) for i in range(4)))
        assert sorted(r.json()["offset"] for r in responses) == [1, 2, 3, 4]
        assert len({id(w) for w in served_by[1:]}) == 1 and served_by[1] is not failed
        assert [r.levelno for r in caplog.records if "replaced it with a new writer" in r.getMessage()] == [
            logging.WARNING
        ]
    assert failed.closed
    assert len(server.storage.read("recovering", 0)) == 5


async def test_dependency_without_lifespan_is_a_clear_error() -> None:
    app = FastAPI()

    @app.get("/")
    async def route(writer: MissingWriter) -> Any:
        return {}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        with pytest.raises(RuntimeError, match="topic_lifespan"):
            await client.get("/")

