"""The broker rides through a server killed with SIGKILL and restarted on the same port and data
directory: publishes buffered meanwhile are stored once, and every message is handled once
(everything handled before the kill had its commit acknowledged)."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from ydb_topic_async.faststream import YdbBroker

from .._polling import eventually
from ._brokers import Seen, running

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@asynccontextmanager
async def standalone(port: int, data_dir: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """The local topic server in a child process of its own, on ``port`` over ``data_dir``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.testing", "--port", str(port), "--data-dir", str(data_dir),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)  # it prints its endpoint once it serves
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await asyncio.wait_for(proc.wait(), 30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_the_broker_rides_through_a_server_kill(tmp_path: Path) -> None:
    port = _free_port()
    broker = YdbBroker(f"grpc://127.0.0.1:{port}", database="/local", auto_create_topics=True, logger=None)
    seen = Seen()

    @broker.subscriber("survivor", consumer="c")
    async def handle(body: int) -> None:
        seen.add(body)

    async with standalone(port, tmp_path) as server, running(broker) as br:
        for n in range(5):
            await br.publish(n, "survivor", producer_id="p")
        await seen.wait_for(5)

        async def committed() -> bool:
            described = await br.driver.topic.describe_consumer("survivor", "c")
            return described.partitions[0].committed_offset == 5

        await eventually(committed, "what was handled is committed")
        server.send_signal(signal.SIGKILL)
        await asyncio.wait_for(server.wait(), 30)
        pending = [await br.publish(n, "survivor", producer_id="p", no_confirm=True) for n in range(5, 10)]
        futures = [f for f in pending if isinstance(f, asyncio.Future)]
        async with standalone(port, tmp_path):
            acks = await asyncio.wait_for(asyncio.gather(*futures), 60)
            got = await seen.wait_for(10, timeout=60)
    assert [type(ack).__name__ for ack in acks] == ["Written"] * 5
    assert got == list(range(10))  # nothing lost, nothing handled twice
