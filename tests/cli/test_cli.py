"""The ``ydb-topic-async`` command line, run as a real process against the local server."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from ydb_topic_async.testing import LocalTopicServer

pytestmark = pytest.mark.timeout(60)


async def cli(server: LocalTopicServer, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.cli", "--endpoint", server.endpoint, "--database", server.database,
        *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 45)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_topic_lifecycle(server: LocalTopicServer) -> None:
    assert await cli(server, "topic", "create", "events", "--partitions", "3", "--consumer", "a",
                     "--codecs", "raw,zstd") == (0, "created /local/events\n", "")
    code, out, _ = await cli(server, "topic", "describe", "events", "--json")
    described = json.loads(out)
    assert code == 0
    assert [p["id"] for p in described["partitions"]] == [0, 1, 2]
    assert described["consumers"] == ["a"] and described["supported_codecs"] == [1, 4]
    assert (await cli(server, "topic", "alter", "events", "--partitions", "4", "--add-consumer", "b"))[0] == 0
    described = json.loads((await cli(server, "topic", "describe", "events", "--json"))[1])
    assert len(described["partitions"]) == 4 and described["consumers"] == ["a", "b"]
    assert await cli(server, "topic", "drop", "events") == (0, "dropped /local/events\n", "")
    assert "/local/events" not in server.storage.topics


async def test_write_then_read_with_and_without_consumer(server: LocalTopicServer) -> None:
    assert (await cli(server, "topic", "create", "lines", "--consumer", "c"))[0] == 0
    code, out, _ = await cli(server, "write", "lines", "--producer-id", "cli", "--codec", "zstd",
                             stdin=b"first\nsecond\nthird\n")
    assert (code, out) == (0, "wrote 3 messages to lines\n")
    assert [m.seq_no for m in server.storage.read("lines", 0)] == [1, 2, 3]

    code, out, _ = await cli(server, "read", "lines", "--consumer", "c", "--count", "3", "--format", "json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [(r["offset"], r["data"], r["producer_id"]) for r in rows] == [
        (0, "first", "cli"), (1, "second", "cli"), (2, "third", "cli")
    ]
    code, out, _ = await cli(server, "consumer", "describe", "lines", "c", "--json")
    assert json.loads(out)["total_lag"] == 0

    code, out, _ = await cli(server, "read", "lines", "--partition", "0", "--offset", "1", "--idle-timeout", "0.5")
    assert (code, out) == (0, "second\nthird\n")


async def test_mistakes_get_clear_errors_and_exit_codes(server: LocalTopicServer) -> None:
    code, out, err = await cli(server, "topic", "describe", "missing")
    assert code == 1 and out == ""
    assert "SchemeError" in err and "/local/missing" in err and "Traceback" not in err
    code, _, err = await cli(server, "read", "anything")
    assert code == 2 and "--consumer" in err and "Traceback" not in err
    code, _, err = await cli(server, "topic", "create", "x", "--codecs", "snappy")
    assert code == 2 and "unknown codec 'snappy'" in err
    code, _, err = await cli(server, "write", "x", "--file", "/nonexistent/file")
    assert code == 1 and "No such file" in err and "Traceback" not in err
