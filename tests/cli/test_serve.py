"""The local server's command lines (``ydb-topic-async serve``, ``python -m ydb_topic_async.testing``
and the ``ydb-topic-local-server`` script) take the same options, and each one works from each:
every entry point runs as a real process, a driver connects to it and checks what the options
asked for. Importing the CLI leaves the process's environment as it was."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

import ydb_topic_async as yta

pytestmark = pytest.mark.timeout(120)

ENTRY_POINTS = {
    "ydb-topic-async serve": [sys.executable, "-m", "ydb_topic_async.cli", "serve"],
    "python -m ydb_topic_async.testing": [sys.executable, "-m", "ydb_topic_async.testing"],
    "ydb-topic-local-server": [str(Path(sys.executable).with_name("ydb-topic-local-server"))],
}
TOKEN_TTL = 2.0


@asynccontextmanager
async def serving(command: list[str], *options: str) -> AsyncIterator[list[str]]:
    """The server process of ``command`` with ``options``, and the lines of its banner (the
    connection string, then one line per node for a cluster); stopped with SIGTERM."""
    nodes = int(options[options.index("--nodes") + 1]) if "--nodes" in options else 1
    proc = await asyncio.create_subprocess_exec(
        *command, *options, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 30)).decode() for _ in range(1 + (nodes > 1) * nodes)]
        yield lines
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert b"Traceback" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("entry_point", list(ENTRY_POINTS))
async def test_every_serve_option_works_from_every_entry_point(entry_point: str, tmp_path: Path) -> None:
    options = (
        "--host", "127.0.0.1", "--port", "0", "--database", "/served", "--nodes", "2",
        "--user", "alice:secret", "--token", "ci-token:robot", "--token-ttl", str(TOKEN_TTL),
        "--data-dir", str(tmp_path), "--write-quotas",
    )
    async with serving(ENTRY_POINTS[entry_point], *options) as banner:
        # --host, --port 0, --database, --nodes 2: the connection string and each node.
        match = re.fullmatch(r"local YDB topic server: (grpc://127\.0\.0\.1:\d+)/\?database=/served\n", banner[0])
        assert match is not None, banner
        endpoint = match.group(1)
        nodes = [re.fullmatch(r"  node \d \(dc-\d\): (grpc://127\.0\.0\.1:\d+)\n", line) for line in banner[1:]]
        assert len(nodes) == 2 and all(nodes), banner
        # --user and --token: authentication is required, and both are accepted.
        with pytest.raises(yta.UnauthenticatedError, match="Access denied without user token"):
            async with yta.Driver(endpoint, "/served") as anonymous:
                await anonymous.topic.describe_topic("anything")
        async with yta.Driver(endpoint, "/served", credentials=yta.AccessTokenCredentials("ci-token")) as driver:
            await driver.wait_ready(timeout=10)
            assert sorted(map(str, driver.endpoints)) == sorted(n.group(1) for n in nodes if n)
            await driver.topic.create_topic("throttled", partition_write_speed_bytes_per_second=65536)
            # --write-quotas: a partition takes its write speed; the second 60 KiB waits for quota.
            async with driver.topic.writer("throttled", producer_id="p") as writer:
                await writer.write_with_ack(b"a" * 61440)
                await writer.write_with_ack(b"b" * 61440)
                stats = writer.last_write_statistics
                assert stats is not None and stats.partition_quota_wait_time.total_seconds() > 0.2, stats
        # --token-ttl: a login token is refused once it expired.
        static = yta.StaticCredentials("alice", "secret")
        async with yta.Driver(endpoint, "/served", credentials=static) as driver:
            assert (await driver.topic.describe_topic("throttled")).path == "/served/throttled"
            login_token = driver.transport.current_token
        assert login_token
        await asyncio.sleep(TOKEN_TTL + 0.5)
        expired = yta.AccessTokenCredentials(login_token)
        with pytest.raises(yta.UnauthenticatedError, match="Token has expired"):
            async with yta.Driver(endpoint, "/served", credentials=expired) as driver:
                await driver.topic.describe_topic("throttled")
    # --data-dir: a new process on the same directory has what the first one acknowledged.
    restarted = ("--port", "0", "--database", "/served", "--data-dir", str(tmp_path))
    async with serving(ENTRY_POINTS[entry_point], *restarted) as banner:
        match = re.fullmatch(r"local YDB topic server: (grpc://127\.0\.0\.1:\d+)/\?database=/served\n", banner[0])
        assert match is not None, banner
        async with yta.Driver(match.group(1), "/served") as driver:
            described = await driver.topic.describe_topic("throttled", include_stats=True)
            assert [p.stats.end_offset for p in described.partitions if p.stats] == [2]


@pytest.mark.slow
@pytest.mark.parametrize("entry_point", list(ENTRY_POINTS))
async def test_mistakes_in_serve_options_exit_2_naming_the_option(entry_point: str) -> None:
    for option, value, message in (
        ("--port", "70000", "must be between 0 and 65535"),
        ("--nodes", "0", "expected a positive number of nodes"),
        ("--token-ttl", "-1", "expected a positive number of seconds"),
        ("--user", "alice", "expected NAME:PASSWORD"),
        ("--token", "tok", "expected TOKEN:USER"),
        ("--database", "local", "expected an absolute path"),
    ):
        proc = await asyncio.create_subprocess_exec(
            *ENTRY_POINTS[entry_point], option, value,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert (proc.returncode, out) == (2, b""), (option, err)
        assert f"argument {option}: {message}" in err.decode(), (option, err)


async def test_importing_the_cli_leaves_the_environment_unchanged() -> None:
    """Importing ``ydb_topic_async.cli`` (as a program embedding it would) sets no environment
    variable: a command changes what it must while it runs, never at import."""
    script = (
        "import json, os, sys; before = dict(os.environ); import ydb_topic_async.cli; after = dict(os.environ);"
        "json.dump({k: [before.get(k), after.get(k)] for k in before.keys() | after.keys()"
        " if before.get(k) != after.get(k)}, sys.stdout); print('', 'cli' in dir(sys.modules['ydb_topic_async']))"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, env=environment, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err
    changed, imported = out.decode().rsplit(" ", 1)
    assert json.loads(changed) == {}
    assert imported.strip() == "True"
