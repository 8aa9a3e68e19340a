"""The example service under FastStream's command line: ``faststream run`` serves it against the
local server (a real process, stopped with SIGINT), ``faststream docs gen`` writes its AsyncAPI
document with YDB's server, topics, consumer and producer placement."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import EXAMPLES
from .._polling import eventually

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

FASTSTREAM = [sys.executable, "-m", "faststream"]


async def test_faststream_run_serves_the_example(server: LocalTopicServer) -> None:
    env = {**os.environ, "YDB_ENDPOINT": server.endpoint, "YDB_DATABASE": server.database}
    proc = await asyncio.create_subprocess_exec(
        *FASTSTREAM, "run", "faststream_app:app", "--app-dir", str(EXAMPLES),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        async with yta.Driver(server.endpoint, server.database) as driver:
            await eventually(lambda: _has_topic(server, "orders"), "the service created its topic", timeout=30)
            await driver.topic.create_topic("invoices", consumers=["check"], exists_ok=True)
            async with driver.topic.writer("orders", producer_id="test") as writer:
                await writer.write_with_ack(json.dumps({"id": 7, "amount": 5}).encode())
            async with driver.topic.reader("invoices", consumer="check") as reader:
                invoice = await reader.receive_message(timeout=30)
        assert json.loads(invoice.data) == {"order_id": 7, "total": 6.0}
        assert invoice.metadata_items["__key"] == b"7"
        await eventually(lambda: server.storage.committed_offsets("orders", "billing") == {0: 1}, "order committed")
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, out.decode()
    assert "`Bill` waiting for messages" in out.decode()


def _has_topic(server: LocalTopicServer, name: str) -> bool:
    try:
        server.storage.topic(name)
    except Exception:
        return False
    return True


async def test_faststream_docs_gen_describes_the_example(tmp_path: Path) -> None:
    out_file = tmp_path / "asyncapi.json"
    proc = await asyncio.create_subprocess_exec(
        *FASTSTREAM, "docs", "gen", "faststream_app:app", "--app-dir", str(EXAMPLES), "--out", str(out_file),
        env={**os.environ, "YDB_ENDPOINT": "grpcs://ydb.example:2135", "YDB_DATABASE": "/prod/db"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()
    schema = json.loads(out_file.read_text())
    assert schema["servers"] == {
        "development": {"host": "ydb.example:2135", "pathname": "/prod/db", "protocol": "ydb-secure"}
    }
    channels = schema["channels"]
    assert channels["orders:Bill"]["address"] == "orders"
    assert "read by consumer `billing`, all partitions" in channels["orders:Bill"]["description"]
    assert channels["invoices:Publisher"]["address"] == "invoices"
    assert "YDB topic `invoices`" in channels["invoices:Publisher"]["description"]
    assert {op["action"] for op in schema["operations"].values()} == {"receive", "send"}
    payloads = schema["components"]["schemas"]
    assert set(payloads["Order"]["properties"]) == {"id", "amount"}
