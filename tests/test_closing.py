"""Leaving ``async with`` for writers, keyed writers and readers: one rule for all of them.

Leaving normally closes (waiting for acknowledgements); leaving by cancellation stops at once
(the caller is going away); an error leaving the block is not masked by closing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import proxy_to

from ._polling import eventually

pytestmark = pytest.mark.timeout(60)


async def _write_one(owner: Any) -> None:
    if isinstance(owner, yta.KeyedWriter):
        await owner.write(b"stuck", key="k")
    else:
        await owner.write(b"stuck")


OWNERS: dict[str, Callable[[yta.Driver], Any]] = {
    "writer": lambda driver: driver.topic.writer("t", producer_id="p"),
    "keyed writer": lambda driver: driver.topic.keyed_writer("t", producer_id="p"),
    "reader": lambda driver: driver.topic.reader("t", consumer="c"),
}


@pytest.mark.parametrize("kind", OWNERS)
async def test_a_cancelled_block_stops_at_once_without_waiting_for_the_server(
    server: LocalTopicServer, kind: str
) -> None:
    async with proxy_to(server) as proxy, yta.Driver(proxy.endpoint, server.database, discovery=False) as driver:
        await driver.topic.create_topic("t", consumers=["c"])
        owner = OWNERS[kind](driver)
        entered = asyncio.Event()

        async def use() -> None:
            async with owner:
                if kind == "reader":
                    entered.set()
                    await owner.receive_batch()  # nothing comes
                else:
                    await _write_one(owner)
                    await owner.flush()  # connected (a keyed writer's partition too)
                    proxy.stall()  # what is written now is never acknowledged
                    await _write_one(owner)
                    entered.set()
                    await owner.flush()

        task = asyncio.create_task(use())
        await asyncio.wait_for(entered.wait(), 10)
        await asyncio.sleep(0.1)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=5)
        assert done, f"the {kind}'s exit waited for the server after a cancellation"
        assert task.cancelled()
        assert owner.closed
        proxy.resume()


async def test_an_error_leaving_the_block_is_not_masked_by_the_failure_close_raises(
    server: LocalTopicServer, driver: yta.Driver, caplog: pytest.LogCaptureFixture
) -> None:
    writer = driver.topic.writer("missing", producer_id="p")
    with caplog.at_level(logging.WARNING, logger="ydb_topic_async"), pytest.raises(ValueError, match="mine"):
        async with writer:
            await eventually(lambda: writer.failure is not None, "the writer failed (no such topic)")
            raise ValueError("mine")
    assert isinstance(writer.failure, yta.SchemeError)
    # Its failure was logged once, when it happened; leaving the block adds nothing.
    assert [r.levelname for r in caplog.records] == ["ERROR"], [r.getMessage() for r in caplog.records]


async def test_a_failure_of_close_after_an_error_is_logged_not_raised(
    server: LocalTopicServer, driver: yta.Driver, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    await driver.topic.create_topic("t")
    writer = driver.topic.writer("t", producer_id="p")

    async def broken_close(timeout: float | None = None) -> None:
        raise yta.OperationTimeoutError("close timed out")

    with caplog.at_level(logging.WARNING, logger="ydb_topic_async"), pytest.raises(ValueError, match="mine"):
        async with writer:
            monkeypatch.setattr(writer, "close", broken_close)
            raise ValueError("mine")
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "after an error also failed" in record.getMessage()
    assert "TopicWriter('/local/t'" in record.getMessage()
    monkeypatch.undo()
    await writer.close()
