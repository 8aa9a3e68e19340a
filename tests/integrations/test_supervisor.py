"""The shared runtime and consumer supervision, without any web framework."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

import ydb_topic_async as yta
from ydb_topic_async.integrations._supervisor import Consumer, TopicRuntime, WriterSpec
from ydb_topic_async.testing import LocalTopicServer

from ._helpers import eventually


async def _write(driver: yta.Driver, topic: str, *messages: bytes) -> None:
    async with driver.topic.writer(topic, producer_id="seed") as writer:
        await writer.write(list(messages))


async def test_failing_handler_is_logged_and_restarted_with_backoff(
    server: LocalTopicServer, driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _write(driver, topic, b"a", b"boom", b"b")
    handled: list[bytes] = []
    failures = 0

    async def handler(message: yta.TopicMessage) -> None:
        nonlocal failures
        if message.data == b"boom" and failures < 3:
            failures += 1
            raise RuntimeError(f"handler bug {failures}")
        handled.append(message.data)

    consumer = Consumer(topic, "consumer", handler, initial_backoff=0.05, max_backoff=0.2)
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="ydb_topic_async.integrations"):
        async with TopicRuntime(server.endpoint, server.database, consumers=[consumer]):

            async def done() -> bool:
                return b"b" in handled

            await eventually(done)
    # Backoffs are jittered in [b/2, b] and double: at least 0.025 + 0.05 + 0.1 in total.
    assert time.monotonic() - started >= 0.175
    # "a" may come twice (at-least-once: its commit may not have landed before a restart);
    # "boom" is handled once it stops failing, and nothing is skipped.
    assert handled.count(b"boom") == 1 and handled[-2:] == [b"boom", b"b"] and set(handled) == {b"a", b"boom", b"b"}
    assert consumer.restarts == 3
    assert isinstance(consumer.last_error, RuntimeError) and str(consumer.last_error) == "handler bug 3"
    failures_logged = [r for r in caplog.records if "failed; restarting" in r.getMessage()]
    assert len(failures_logged) == 3
    assert all(r.exc_info is not None and r.exc_info[0] is RuntimeError for r in failures_logged)
    assert server.storage.committed_offsets(topic, "consumer") == {0: 3}


async def test_shutdown_finishes_the_message_in_hand_and_waits_for_its_commit(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    await _write(driver, topic, b"slow", b"never")
    entered = asyncio.Event()
    finished: list[bytes] = []

    async def handler(message: yta.TopicMessage) -> None:
        entered.set()
        await asyncio.sleep(0.3)
        finished.append(message.data)

    consumer = Consumer(topic, "consumer", handler)
    async with TopicRuntime(server.endpoint, server.database, consumers=[consumer]):
        await entered.wait()
    # The handler was not cancelled half-way, its commit landed, and nothing more was taken.
    assert finished == [b"slow"]
    assert consumer.handled == 1
    assert server.storage.committed_offsets(topic, "consumer") == {0: 1}


async def test_shutdown_is_prompt_while_a_consumer_backs_off(server: LocalTopicServer) -> None:
    async def handler(message: yta.TopicMessage) -> None:
        raise AssertionError("no messages exist")

    # The topic is missing: the reader fails and the consumer sleeps in a long backoff.
    consumer = Consumer("missing", "c", handler, initial_backoff=30, max_backoff=30)
    runtime = TopicRuntime(server.endpoint, server.database, consumers=[consumer])
    async with runtime:

        async def failed() -> bool:
            return consumer.restarts == 1

        await eventually(failed)
        started = time.monotonic()
    assert time.monotonic() - started < 2
    assert isinstance(consumer.last_error, yta.SchemeError)


async def test_writers_are_flushed_at_shutdown_and_failures_reported(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await driver.topic.create_topic("out")
    runtime = TopicRuntime(
        server.endpoint,
        server.database,
        writers={"ok": WriterSpec("out", producer_id="ok"), "bad": WriterSpec("missing", producer_id="bad")},
    )
    with pytest.raises(yta.SchemeError):
        async with runtime:
            await runtime.writer("ok").write([b"1", b"2", b"3"])
            with pytest.raises(yta.SchemeError):
                await runtime.writer("bad").write_with_ack(b"x")
    # The good writer was flushed even though another one failed, and the driver was closed.
    assert [m.data for m in server.storage.read("out", 0)] == [b"1", b"2", b"3"]
    with pytest.raises(RuntimeError, match="not running"):
        runtime.driver  # noqa: B018


async def test_start_fails_fast_when_nothing_answers_and_closes_what_it_opened() -> None:
    async with LocalTopicServer() as srv:
        endpoint = srv.endpoint  # a port that will be closed
    runtime = TopicRuntime(endpoint, "/local", writers={"w": WriterSpec("t")}, wait_ready=0.5)
    with pytest.raises(yta.OperationTimeoutError, match="no YDB endpoint answered"):
        await runtime.start()
    with pytest.raises(RuntimeError, match="not running"):
        runtime.writer("w")


def test_configuration_mistakes_are_rejected_early() -> None:
    async def handler(message: yta.TopicMessage) -> None:
        pass

    with pytest.raises(ValueError, match="initial_backoff"):
        Consumer("t", "c", handler, initial_backoff=0)
    with pytest.raises(TypeError, match="WriterSpec"):
        TopicRuntime("grpc://localhost:1", writers={"w": {"path": "t"}})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="unique"):
        TopicRuntime("grpc://localhost:1", consumers=[Consumer("t", "c", handler), Consumer("t", "c", handler)])
