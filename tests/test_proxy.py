"""``ydb_topic_async.testing.proxy``: the fault-injecting TCP proxy users' tests can use too."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import PROXY_FAULTS, FlakyProxy, RandomFaults, proxy_to

from ._helpers import proxied_driver, stored_data
from ._polling import eventually

pytestmark = pytest.mark.timeout(60)


async def test_lost_replies_store_the_message_and_the_resend_is_deduplicated(server: LocalTopicServer) -> None:
    topic = "replies"
    async with (
        proxy_to(server) as proxy,
        proxied_driver(server, proxy) as driver,
    ):
        await driver.topic.create_topic(topic)
        async with driver.topic.writer(topic, producer_id="p") as writer:
            await writer.write_with_ack(b"first")
            proxy.lose_replies()
            future = await writer.write_with_ack_future(b"second")
            await eventually(lambda: len(server.storage.read(topic, 0)) == 2, "stored while its ack is lost")
            await asyncio.sleep(0.2)
            assert not future.done()
            proxy.cut()  # the writer reconnects and resends it; the server already has it
            assert isinstance(await asyncio.wait_for(future, 20), yta.Skipped)
    assert stored_data(server, topic) == [b"first", b"second"]
    assert proxy.dropped_bytes > 0


async def test_random_faults_inject_every_kind_first_and_undo_the_last_on_exit(server: LocalTopicServer) -> None:
    async with proxy_to(server) as proxy:
        faults = RandomFaults(proxy, {kind: (0.05, 0.1) for kind in PROXY_FAULTS}, gap=(0.0, 0.02), seed=3)
        async with faults.running():
            await eventually(lambda: len(faults.injected) >= len(PROXY_FAULTS) and faults.current == "outage",
                             "every kind once, then an outage in progress")
        assert faults.current is None
        assert sorted(f.kind for f in faults.injected[: len(PROXY_FAULTS)]) == sorted(PROXY_FAULTS)
        # The outage in progress was undone: the proxy forwards again.
        async with proxied_driver(server, proxy) as driver:
            await driver.topic.create_topic("after", timeout=10)


async def test_random_faults_run_until_a_deadline_and_repeat_with_a_seed(server: LocalTopicServer) -> None:
    async def run(seed: int) -> list[str]:
        async with proxy_to(server) as proxy:
            faults = RandomFaults(proxy, {"reset": (0, 0), "stall": (0.01, 0.02)}, gap=(0.01, 0.02), seed=seed)
            await asyncio.wait_for(faults.run(until=time.monotonic() + 0.5), 10)
            assert faults.current is None and faults.counts["stall"] >= 1
            return [f.kind for f in faults.injected]

    first, again = await run(7), await run(7)
    assert first[:5] == again[:5]


async def test_custom_faults_and_mistakes() -> None:
    done: list[float] = []

    async def crash(seconds: float) -> None:
        done.append(seconds)

    proxy = FlakyProxy("127.0.0.1", 1)
    faults = RandomFaults(proxy, {"crash": (1.0, 1.0)}, gap=(0, 0), custom={"crash": crash})
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(faults.run(), 0.2)
    assert done and set(done) == {1.0} and faults.counts["crash"] == len(done)
    bad: list[dict[str, Any]] = [
        {"durations": {"meteor": (0, 1)}},
        {"durations": {"stall": (2, 1)}},
        {"durations": {}},
        {"durations": {"reset": (0, 0)}, "gap": (3, 1)},
    ]
    for arguments in bad:
        with pytest.raises(ValueError):
            RandomFaults(proxy, **arguments)
    with pytest.raises(ValueError, match="unknown fault"):
        await proxy.inject("meteor", 1)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="not started"):
        proxy.endpoint  # noqa: B018


async def test_a_connection_still_connecting_upstream_does_not_survive_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client connection accepted while the proxy is still connecting upstream is reset by
    ``refuse()`` like the others, and ``refuse()`` returns (from Python 3.12 on, the listener's
    ``wait_closed`` waits for every accepted connection). The upstream connect is held back by a
    gate so that the cut lands in the middle of it."""
    gate = asyncio.Event()
    connecting = asyncio.Event()
    real_open = asyncio.open_connection

    async def held_open(*args: Any, **kwargs: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        connecting.set()
        await gate.wait()
        return await real_open(*args, **kwargs)

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the proxy lets go
        writer.close()

    target = await asyncio.start_server(upstream, "127.0.0.1", 0)
    proxy = FlakyProxy("127.0.0.1", target.sockets[0].getsockname()[1])
    await proxy.start()
    monkeypatch.setattr("ydb_topic_async.testing.proxy.asyncio.open_connection", held_open)
    try:
        client_reader, client_writer = await real_open("127.0.0.1", proxy.port)
        await asyncio.wait_for(connecting.wait(), 5)
        refusing = asyncio.ensure_future(proxy.refuse())
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.wait_for(refusing, 5)
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(client_reader.readexactly(1), 5)
        client_writer.close()
    finally:
        gate.set()
        await proxy.close()
        target.close()
        await target.wait_closed()


async def test_a_slowed_down_proxy_delays_every_exchange_and_loses_nothing(server: LocalTopicServer) -> None:
    """``slow_down`` is a node that answers slowly: every chunk waits in each direction, so a
    call takes at least a round trip of delays; nothing is dropped, and ``speed_up`` ends it."""
    async with proxy_to(server) as proxy, proxied_driver(server, proxy) as driver:
        await driver.topic.create_topic("slow")
        proxy.slow_down(0.3)
        began = time.monotonic()
        await driver.topic.describe_topic("slow", timeout=20)
        assert time.monotonic() - began >= 0.6  # the request and its answer waited 0.3 s each
        proxy.speed_up()
        async with driver.topic.writer("slow", producer_id="p") as writer:
            await writer.write_with_ack([b"a", b"b"])
    assert stored_data(server, "slow") == [b"a", b"b"]
    assert proxy.dropped_bytes == 0
    with pytest.raises(ValueError):
        proxy.slow_down(-1)
