"""The ``ydb-topic-async`` command line, run as a real process against the local server."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import signal
import sys

import pytest

import ydb_topic_async as yta
from ydb_topic_async.cli import main
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


async def test_lines_are_written_as_bytes_in_any_encoding(server: LocalTopicServer, tmp_path: pathlib.Path) -> None:
    assert (await cli(server, "topic", "create", "raw"))[0] == 0
    lines = [b"\xff\xfe not utf-8", "caf\u00e9".encode("latin-1"), b"plain"]
    source = tmp_path / "binary.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    assert await cli(server, "write", "raw", "--file", str(source)) == (0, "wrote 3 messages to raw\n", "")
    assert await cli(server, "write", "raw", stdin=b"\x80\x81\n") == (0, "wrote 1 messages to raw\n", "")
    assert [m.data for m in server.storage.read("raw", 0)] == [*lines, b"\x80\x81"]


async def test_partition_counts_below_one_are_refused(server: LocalTopicServer) -> None:
    code, _, err = await cli(server, "topic", "create", "none", "--partitions", "0")
    assert code == 2 and "--partitions: must be at least 1" in err and "Traceback" not in err
    assert "/local/none" not in server.storage.topics


async def test_write_a_file_with_progress_bar_and_rate_limit(server: LocalTopicServer, tmp_path: pathlib.Path) -> None:
    assert (await cli(server, "topic", "create", "paced"))[0] == 0
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"line {i}\n" for i in range(10)))
    code, out, err = await cli(server, "write", "paced", "--file", str(source), "--rate", "20", "--progress")
    assert (code, out) == (0, "wrote 10 messages to paced\n")
    # The final redraw shows a full bar and the message count.
    assert err.rsplit("\r", 1)[-1].startswith("[" + "#" * 30 + "] 100% 10 messages, ")
    stored = server.storage.read("paced", 0)
    assert [m.data for m in stored] == [f"line {i}".encode() for i in range(10)]
    # 20 messages a second: the tenth is created about 0.45 s after the first.
    assert (stored[-1].created_at_ns - stored[0].created_at_ns) / 1e9 >= 0.4


async def test_read_follow_waits_for_new_messages(server: LocalTopicServer) -> None:
    assert (await cli(server, "topic", "create", "live", "--consumer", "c"))[0] == 0
    follower = asyncio.create_task(cli(server, "read", "live", "--consumer", "c", "--follow", "--count", "2"))
    await asyncio.sleep(1.5)  # the follower is connected and waiting; an idle timeout would have ended it
    assert not follower.done()
    assert (await cli(server, "write", "live", stdin=b"late 1\nlate 2\n"))[0] == 0
    assert await follower == (0, "late 1\nlate 2\n", "")
    assert server.storage.committed_offsets("live", "c") == {0: 2}
    # --no-commit leaves the consumer where it was.
    assert (await cli(server, "write", "live", stdin=b"again\n"))[0] == 0
    assert await cli(server, "read", "live", "--consumer", "c", "--no-commit", "--idle-timeout", "0.5") == (
        0, "again\n", ""
    )
    assert server.storage.committed_offsets("live", "c") == {0: 2}


async def test_usage_mistakes_exit_2_without_traceback(server: LocalTopicServer) -> None:
    for args, message in [
        (("read", "t", "--consumer", "c", "--count", "0"), "--count must be positive"),
        (("read", "t", "--consumer", "c", "--offset", "3"), "--offset is for reading without a consumer"),
        (("write", "t", "--rate", "-1"), "must be positive"),
        (("topic", "bogus"), "invalid choice: 'bogus'"),
        (("topic", "create", "t", "--partitions", "-2"), "--partitions: must be at least 1"),
        (("topic", "create", "t", "--retention-hours", "-1"), "retention"),
    ]:
        code, out, err = await cli(server, *args)
        assert (code, out) == (2, ""), args
        assert message in err and "Traceback" not in err, (args, err)


async def test_unreachable_server_fails_fast_with_exit_1() -> None:
    async with LocalTopicServer() as gone:
        pass  # its port is closed now
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.cli", "--endpoint", gone.endpoint, "--timeout", "1",
        "read", "t", "--consumer", "c",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1 and out == b""
    assert b"no YDB endpoint answered" in err and b"Traceback" not in err


async def test_serve_runs_a_local_server_until_interrupted() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.cli", "serve", "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        banner = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        match = re.fullmatch(r"local YDB topic server: (grpc://127\.0\.0\.1:(\d+))/\?database=/local\n", banner)
        assert match is not None and match.group(2) != "0", banner
        async with yta.Driver(match.group(1), "/local") as driver:
            await driver.topic.create_topic("served")
            assert (await driver.topic.describe_topic("served")).path == "/local/served"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 130 and b"Traceback" not in err


def test_in_process_main_returns_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "topic" in capsys.readouterr().out
    assert main(["read"]) == 2
    assert "the following arguments are required: path" in capsys.readouterr().err
