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

from ._helpers import proxied_driver
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
    async with proxy_to(server) as proxy, proxied_driver(server, proxy) as driver:
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


# --- the driver: its close is bounded, and fails what is left with a specific error ----------------


async def _down_with_pending(server: LocalTopicServer, proxy: Any, driver: yta.Driver, fault: str) -> list[Any]:
    """A writer and a keyed writer that were connected, then the server is gone (``fault``) while
    they hold unacknowledged messages; returns the futures of those written with acks."""
    await driver.topic.create_topic("t", min_active_partitions=2)
    writer = driver.topic.writer("t", producer_id="p", partition_id=0)
    keyed = driver.topic.keyed_writer("t", producer_id="k")
    await writer.write_with_ack(b"delivered")
    await keyed.write_with_ack(b"delivered", key="a")
    if fault == "refused":
        await proxy.refuse()
    else:
        proxy.blackhole()  # the connections open now carry nothing, and nothing tells them so
    await writer.write(b"plain")  # no future: only the close can tell it was not delivered
    futures = [
        *await writer.write_with_ack_future([b"acked 1", b"acked 2"]),
        asyncio.ensure_future(keyed.write_with_ack(b"keyed", key="b")),  # a partition not used yet
    ]
    await asyncio.sleep(0.1)
    assert not any(f.done() for f in futures)
    return futures


@pytest.mark.parametrize("fault", ["refused", "blackhole"])
async def test_closing_a_driver_whose_server_is_gone_fails_what_is_left_within_the_timeout(
    server: LocalTopicServer, fault: str
) -> None:
    """``close(timeout)`` bounds the whole close: writers get until then to deliver what they
    accepted; then their unacknowledged messages fail with ``OperationTimeoutError``, and so does
    the close (a message given to ``write`` has no future: the close's error is what tells)."""
    async with proxy_to(server) as proxy:
        driver = proxied_driver(server, proxy)
        futures = await _down_with_pending(server, proxy, driver, fault)
        async with asyncio.timeout(5):
            with pytest.raises(yta.OperationTimeoutError, match="unacknowledged"):
                await driver.close(timeout=0.5)
            results = await asyncio.gather(*futures, return_exceptions=True)
        assert [type(r) for r in results] == [yta.OperationTimeoutError] * 3
        assert driver.closed


async def test_leaving_async_with_driver_waits_at_most_its_close_timeout(server: LocalTopicServer) -> None:
    async with proxy_to(server) as proxy:
        driver = proxied_driver(server, proxy, close_timeout=0.5)
        assert driver.close_timeout == 0.5
        async with asyncio.timeout(5):
            with pytest.raises(yta.OperationTimeoutError):
                async with driver:
                    futures = await _down_with_pending(server, proxy, driver, "refused")
        assert all(isinstance(f.exception(), yta.OperationTimeoutError) for f in futures)


async def test_an_error_leaving_a_driver_block_is_not_masked_by_its_close(
    server: LocalTopicServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with proxy_to(server) as proxy:
        driver = proxied_driver(server, proxy, close_timeout=0.5)
        with caplog.at_level(logging.WARNING, logger="ydb_topic_async"), pytest.raises(ValueError, match="mine"):
            async with asyncio.timeout(5), driver:
                futures = await _down_with_pending(server, proxy, driver, "refused")
                raise ValueError("mine")
        assert all(isinstance(f.exception(), yta.OperationTimeoutError) for f in futures)
        assert any("after an error also failed" in r.getMessage() for r in caplog.records)


async def test_a_cancelled_driver_block_closes_at_once(server: LocalTopicServer) -> None:
    """The caller is going away: the driver does not wait for the server (its default close
    timeout would be 10 seconds), and what is left fails."""
    async with proxy_to(server) as proxy:
        driver = proxied_driver(server, proxy)
        pending: list[Any] = []

        async def use() -> None:
            async with driver:
                pending.extend(await _down_with_pending(server, proxy, driver, "blackhole"))
                await asyncio.Event().wait()

        task = asyncio.ensure_future(use())
        await eventually(lambda: bool(pending), "messages pending")
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=3)
        assert done and task.cancelled()
        assert driver.closed
        assert all(isinstance(f.exception(), yta.OperationTimeoutError) for f in pending)


@pytest.mark.parametrize("timeout", [-1, "5", float("nan")])
async def test_a_bad_close_timeout_is_refused_at_the_call(server: LocalTopicServer, timeout: Any) -> None:
    with pytest.raises(yta.InvalidArgumentError, match="close_timeout"):
        yta.Driver(server.endpoint, server.database, close_timeout=timeout)
    async with yta.Driver(server.endpoint, server.database) as driver:
        with pytest.raises(yta.InvalidArgumentError, match="timeout"):
            await driver.close(timeout=timeout)


async def test_closing_a_driver_rolls_back_open_transactions_within_the_timeout(server: LocalTopicServer) -> None:
    """Transactions still open are rolled back (each within 5 s at most) and their sessions
    deleted all at once, within the close's bound, even when no answer comes back."""
    async with proxy_to(server) as proxy:
        driver = proxied_driver(server, proxy)
        transactions = [await driver.query.transaction().begin(timeout=10) for _ in range(3)]
        assert driver.query.pool.open_sessions == 3
        proxy.blackhole()
        async with asyncio.timeout(4):  # 3 rollbacks of 5 s and 3 deletes of 2 s one after another: 21 s
            await driver.close(timeout=1)
        assert driver.closed
        assert {tx.ended for tx in transactions} == {True}
