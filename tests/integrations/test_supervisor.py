"""The shared runtime and consumer supervision, without any web framework."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.integrations import Consumer, TopicRuntime, WriterSpec
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored_data
from .._polling import eventually


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
    # With secrets registered, the SDK's masking filter turns exc_info into (masked) exc_text.
    formatted = [logging.Formatter().format(r) for r in failures_logged]
    assert all("RuntimeError: handler bug" in text for text in formatted)
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
    assert stored_data(server, "out") == [b"1", b"2", b"3"]
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

    def rejected(match: str) -> Any:
        # The project's error for bad input, still a ValueError for code written before it.
        return pytest.raises(yta.InvalidArgumentError, match=match)

    assert issubclass(yta.InvalidArgumentError, ValueError)
    with rejected("initial_backoff"):
        Consumer("t", "c", handler, initial_backoff=0)
    with rejected("initial_backoff <= max_backoff"):
        Consumer("t", "c", handler, initial_backoff=5, max_backoff=1)
    with rejected("max_backoff must be a number"):
        Consumer("t", "c", handler, max_backoff="30")  # type: ignore[arg-type]
    with rejected("WriterSpec"):
        TopicRuntime("grpc://localhost:1", writers={"w": {"path": "t"}})  # type: ignore[dict-item]
    with rejected("unique"):
        TopicRuntime("grpc://localhost:1", consumers=[Consumer("t", "c", handler), Consumer("t", "c", handler)])
    with rejected("Consumer objects"):
        TopicRuntime("grpc://localhost:1", consumers=[handler])  # type: ignore[list-item]
    with rejected("wait_ready"):
        TopicRuntime("grpc://localhost:1", wait_ready=-1)
    with rejected("shutdown_timeout"):
        TopicRuntime("grpc://localhost:1", shutdown_timeout=0)


async def test_a_failed_writer_is_replaced_once_on_the_next_access(
    server: LocalTopicServer, driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = TopicRuntime(server.endpoint, server.database, writers={"w": WriterSpec(topic, producer_id="api")})
    async with runtime:
        first = runtime.writer("w")
        assert await first.write_with_ack(b"before") == yta.Written(0, 0, 1)
        # The stream breaks and the reconnect is refused with a status no retry can fix.
        server.faults.fail_next("StreamWrite", "BAD_REQUEST")
        server.faults.drop_write_streams()

        async def failed() -> bool:
            return first.failure is not None

        await eventually(failed)
        with pytest.raises(yta.BadRequestError):
            await first.write_with_ack(b"lost")

        async def publish(i: int) -> tuple[yta.TopicWriter, yta.WriteResult]:
            writer = runtime.writers["w"]  # the aiohttp integration's live view goes through writer()
            return writer, await writer.write_with_ack(f"after-{i}".encode())

        with caplog.at_level(logging.WARNING, logger="ydb_topic_async.integrations"):
            outcomes = await asyncio.gather(*(publish(i) for i in range(5)))
        writers = {id(writer) for writer, _ in outcomes}
        assert len(writers) == 1 and runtime.writer("w") is outcomes[0][0] is not first
        # The new writer continues the producer's numbering after what the server stored.
        assert sorted(r.seq_no for _, r in outcomes if isinstance(r, yta.Written)) == [2, 3, 4, 5, 6]
        replaced = [r for r in caplog.records if "replaced it with a new writer" in r.getMessage()]
        assert len(replaced) == 1 and replaced[0].levelno == logging.WARNING
        assert "BadRequestError" in replaced[0].getMessage()

        async def retired() -> bool:
            return first.closed

        await eventually(retired)
        assert "w" in runtime.writers and len(runtime.writers) == 1
    # The replaced failure was reported when it was replaced: a healthy shutdown does not raise it.
    assert stored_data(server, topic) == [b"before"] + [f"after-{i}".encode() for i in range(5)]


def _replacements(caplog: pytest.LogCaptureFixture) -> int:
    return sum("replaced it with a new writer" in r.getMessage() for r in caplog.records)


async def test_a_writer_whose_replacement_fails_too_is_not_replaced_again_until_a_backoff(
    server: LocalTopicServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A spec that can never work: the topic does not exist.
    runtime = TopicRuntime(
        server.endpoint,
        server.database,
        writers={"w": WriterSpec("no-such-topic", retry=yta.RetryPolicy.no_retries())},
        writer_backoff=yta.BackoffSchedule(base=60.0, cap=120.0),
    )
    await runtime.start()
    try:
        original = runtime.writer("w")

        async def failed(writer: yta.TopicWriter) -> bool:
            return writer.failure is not None

        await eventually(lambda: failed(original))

        async def request() -> BaseException | None:
            try:
                await runtime.writers["w"].write_with_ack(b"event")
            except yta.SchemeError as exc:
                return exc
            return None

        with caplog.at_level(logging.WARNING, logger="ydb_topic_async.integrations"):
            for _ in range(5):  # rounds of concurrent requests, each after the previous failed
                outcomes = await asyncio.gather(*(request() for _ in range(10)))
                assert all(isinstance(outcome, yta.SchemeError) for outcome in outcomes)
        # One replacement was tried; once it failed too, callers got its failure without a new writer.
        assert _replacements(caplog) == 1
        current = runtime.current_writer("w")
        assert current is not original and current.failure is not None
        assert sum("failed too" in r.getMessage() for r in caplog.records) == 1
    finally:
        with pytest.raises(yta.SchemeError):
            await runtime.close()


async def test_writer_replacements_back_off_and_start_over_once_one_connects(
    server: LocalTopicServer, driver: yta.Driver, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = TopicRuntime(
        server.endpoint,
        server.database,
        writers={"w": WriterSpec("created-later", producer_id="api", retry=yta.RetryPolicy.no_retries())},
        writer_backoff=yta.BackoffSchedule(base=0.2, cap=0.4),
    )
    caplog.set_level(logging.WARNING, logger="ydb_topic_async.integrations")
    async with runtime:

        async def current_failed() -> bool:
            return runtime.current_writer("w").failure is not None

        await eventually(current_failed)
        first_replacement = runtime.writer("w")
        await first_replacement.open()
        await eventually(current_failed)
        with pytest.raises(yta.SchemeError):
            runtime.writer("w")  # backing off
        await driver.topic.create_topic("created-later")
        started = time.monotonic()

        async def replaced_and_working() -> bool:
            try:
                writer = runtime.writer("w")
            except yta.SchemeError:
                return False
            return writer is not first_replacement

        await eventually(replaced_and_working)
        assert time.monotonic() - started < 1.0
        working = runtime.writer("w")
        assert await working.write_with_ack(b"after") == yta.Written(0, 0, 1)
        # It connected: a later failure (a broken stream it may not retry) is replaced at once
        # again, with no backoff left over.
        server.faults.drop_write_streams()

        async def working_failed() -> bool:
            return working.failure is not None

        await eventually(working_failed)
        again = runtime.writer("w")
        assert again is not working
        assert await again.write_with_ack(b"again") == yta.Written(0, 1, 2)
    assert _replacements(caplog) == 3
