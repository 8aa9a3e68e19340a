"""The ``ydb-topic-async`` command line, run as a real process against the local server."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import signal
import socket
import sys
import time

import pytest

import ydb_topic_async as yta
from ydb_topic_async.cli import main
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored_data

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


@pytest.mark.slow
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


@pytest.mark.slow
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
    described = json.loads(out)
    assert described["total_lag"] == 0
    partition = described["partitions"][0]
    assert (partition["lag"], partition["time_lag_seconds"], partition["read_time_lag_seconds"]) == (0, 0.0, 0.0)
    assert partition["last_read_time"] is not None
    code, out, _ = await cli(server, "write", "lines", "--producer-id", "cli", stdin=b"fourth\n")
    server.advance_time(90)
    code, out, _ = await cli(server, "consumer", "describe", "lines", "c")
    assert code == 0 and "total lag 1 messages" in out
    time_lag = re.search(r"partition 0: committed 3, end 4, lag 1 messages, time lag ([0-9.]+)s", out)
    assert time_lag is not None and float(time_lag.group(1)) >= 90, out

    code, out, _ = await cli(server, "read", "lines", "--partition", "0", "--offset", "1", "--idle-timeout", "0.5")
    assert (code, out) == (0, "second\nthird\nfourth\n")


async def test_mistakes_get_clear_errors_and_exit_codes(server: LocalTopicServer) -> None:
    code, out, err = await cli(server, "topic", "describe", "missing")
    assert code == 1 and out == ""
    # A missing topic is the SchemeError that says so: TopicNotFoundError.
    assert "TopicNotFoundError" in err and "/local/missing" in err and "Traceback" not in err
    code, _, err = await cli(server, "read", "anything")
    assert code == 2 and "--consumer" in err and "Traceback" not in err
    code, _, err = await cli(server, "topic", "create", "x", "--codecs", "snappy")
    assert code == 2 and "unknown codec 'snappy'" in err
    code, _, err = await cli(server, "write", "x", "--file", "/nonexistent/file")
    assert code == 1 and "No such file" in err and "Traceback" not in err


@pytest.mark.slow
async def test_lines_are_written_as_bytes_in_any_encoding(server: LocalTopicServer, tmp_path: pathlib.Path) -> None:
    assert (await cli(server, "topic", "create", "raw"))[0] == 0
    lines = [b"\xff\xfe not utf-8", "caf\u00e9".encode("latin-1"), b"plain"]
    source = tmp_path / "binary.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    assert await cli(server, "write", "raw", "--file", str(source)) == (0, "wrote 3 messages to raw\n", "")
    assert await cli(server, "write", "raw", stdin=b"\x80\x81\n") == (0, "wrote 1 messages to raw\n", "")
    assert stored_data(server, "raw") == [*lines, b"\x80\x81"]


async def test_partition_counts_below_one_are_refused(server: LocalTopicServer) -> None:
    code, _, err = await cli(server, "topic", "create", "none", "--partitions", "0")
    assert code == 2 and "--partitions: must be at least 1" in err and "Traceback" not in err
    assert "/local/none" not in server.storage.topics


@pytest.mark.slow
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


@pytest.mark.slow
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


async def run_cli(*args: str, limit: float = 45) -> tuple[int, str, str, float]:
    """The CLI as a process without a server of the test's: exit code, stdout, stderr, seconds taken."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.cli", *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), limit)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - started


def one_line(err: str) -> str:
    """The whole of stderr, which must be exactly one line."""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


async def test_refused_connection_fails_at_once_with_exit_1() -> None:
    async with LocalTopicServer() as gone:
        pass  # its port is closed now
    code, out, err, took = await run_cli("--endpoint", gone.endpoint, "--timeout", "30", "read", "t", "--consumer", "c")
    assert (code, out) == (1, "")
    assert "Connection refused" in one_line(err) and gone.endpoint in err
    assert took < 15, f"waited {took:.1f}s of the 30s timeout for a refused connection"


@pytest.mark.slow
async def test_endpoint_that_never_answers_fails_after_the_timeout_with_exit_1() -> None:
    """A server that accepts connections and never speaks: one line after --timeout, whatever the
    driver's wait raised underneath (a timeout, or a bare CancelledError from gRPC)."""
    connections: list[asyncio.StreamWriter] = []

    async def accept_and_stay_silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)

    silent = await asyncio.start_server(accept_and_stay_silent, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    try:
        code, out, err, took = await run_cli(
            "--endpoint", f"grpc://127.0.0.1:{port}", "--timeout", "1", "topic", "describe", "t"
        )
    finally:
        for writer in connections:
            writer.close()
        silent.close()
        await silent.wait_closed()
    assert (code, out) == (1, "")
    assert "no YDB endpoint answered" in one_line(err) and "within 1s" in err
    assert connections, "the command never connected"
    assert took < 20


async def test_unknown_host_fails_with_one_line() -> None:
    code, _, err, _ = await run_cli("--endpoint", "grpc://no-such-host.invalid:2136", "topic", "describe", "t")
    assert code == 1 and "no-such-host.invalid" in one_line(err)


async def test_serve_on_a_busy_port_fails_with_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err, _ = await run_cli("serve", "--port", str(port))
    assert (code, out) == (1, "")
    assert f"cannot serve on 127.0.0.1:{port}: the port is in use" in one_line(err)


async def test_version() -> None:
    code, out, err, _ = await run_cli("--version")
    assert (code, out, err) == (0, f"ydb-topic-async {yta.__version__}\n", "")


async def test_usage_mistakes_print_the_subcommands_usage() -> None:
    code, _, err, _ = await run_cli("read", "t", "--consumer", "c", "--offset", "3")
    assert code == 2
    assert err.startswith("usage: ydb-topic-async read ")
    assert "ydb-topic-async read: error: --offset is for reading without a consumer" in err
    code, _, err, _ = await run_cli("topic", "create", "t", "--codecs", "snappy")
    assert code == 2 and err.startswith("usage: ydb-topic-async topic create ")


async def test_help_has_no_markup() -> None:
    for args in (("--help",), ("read", "--help"), ("topic", "create", "--help"), ("serve", "--help")):
        code, out, _, _ = await run_cli(*args)
        assert code == 0 and "usage: ydb-topic-async" in out
        assert "``" not in out, (args, out)


@pytest.mark.slow
async def test_read_progress_counts_messages_on_stderr(server: LocalTopicServer) -> None:
    assert (await cli(server, "topic", "create", "counted", "--consumer", "c"))[0] == 0
    assert (await cli(server, "write", "counted", stdin=b"".join(b"m%d\n" % i for i in range(5))))[0] == 0
    code, out, err = await cli(server, "read", "counted", "--consumer", "c", "--count", "5", "--progress")
    assert (code, out) == (0, "".join(f"m{i}\n" for i in range(5)))
    assert err.rsplit("\r", 1)[-1].startswith("[" + "#" * 30 + "] 100% 5 messages, ")
    # Without a count there is no total: a counter.
    assert (await cli(server, "write", "counted", stdin=b"x\ny\n"))[0] == 0
    code, out, err = await cli(server, "read", "counted", "--consumer", "c", "--idle-timeout", "0.5", "--progress")
    assert (code, out) == (0, "x\ny\n")
    assert err.rsplit("\r", 1)[-1].startswith("2 messages, ")
    # Not asked for and not a terminal: nothing on stderr.
    assert await cli(server, "read", "counted", "--consumer", "c", "--idle-timeout", "0.5") == (0, "", "")


@pytest.mark.parametrize(
    ("stop_signal", "sigint_ignored", "exit_code"),
    [(signal.SIGINT, False, 130), (signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
    ids=["ctrl-c", "ctrl-c-with-sigint-inherited-ignored", "sigterm"],
)
async def test_serve_runs_a_local_server_until_interrupted(
    stop_signal: signal.Signals, sigint_ignored: bool, exit_code: int
) -> None:
    """``serve`` stops cleanly on SIGINT and SIGTERM (exit 128 + the signal's number, no
    traceback), also when started with SIGINT ignored, as a non-interactive shell starts a
    background command (``serve &`` in a script or a CI job)."""

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.cli", "serve", "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=ignore_sigint if sigint_ignored else None,
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
        proc.send_signal(stop_signal)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == exit_code and b"Traceback" not in err, err


async def test_serve_nodes_runs_a_local_cluster() -> None:
    """``serve --nodes 3`` prints the connection string and one line per node; a driver given the
    connection string discovers all three."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.cli", "serve", "--port", "0", "--nodes", "3",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 30)).decode() for _ in range(4)]
        match = re.fullmatch(r"local YDB topic server: (grpc://127\.0\.0\.1:\d+)/\?database=/local\n", lines[0])
        assert match is not None, lines
        nodes = [re.fullmatch(r"  node (\d) \((dc-\d)\): (grpc://127\.0\.0\.1:\d+)\n", line) for line in lines[1:]]
        assert all(nodes), lines
        assert [(n.group(1), n.group(2)) for n in nodes if n] == [("1", "dc-1"), ("2", "dc-2"), ("3", "dc-3")]
        async with yta.Driver(match.group(1), "/local") as driver:
            await driver.wait_ready(timeout=10)
            assert sorted(map(str, driver.endpoints)) == sorted(n.group(3) for n in nodes if n)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 143 and b"Traceback" not in err, err


def test_in_process_main_returns_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "topic" in capsys.readouterr().out
    assert main(["read"]) == 2
    assert "the following arguments are required: path" in capsys.readouterr().err


# --- credentials and TLS from options and the environment -------------------------------------------


async def cli_env(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """The CLI as a process with ``env`` over a copy of the test's environment without YDB_ variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("YDB_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ydb_topic_async.cli", *args, env={**clean, **env},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 45)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_credentials_from_the_environment_and_options_over_them() -> None:
    async with LocalTopicServer(tokens={"env-token": "env-user", "flag-token": "flag-user"}) as server:
        env = {"YDB_CONNECTION_STRING": server.connection_string, "YDB_ACCESS_TOKEN_CREDENTIALS": "env-token"}
        assert await cli_env(env, "topic", "create", "from-env") == (0, "created /local/from-env\n", "")
        wrong = {**env, "YDB_ACCESS_TOKEN_CREDENTIALS": "wrong"}
        assert (await cli_env(wrong, "topic", "describe", "from-env"))[0] == 1
        assert (await cli_env(wrong, "--token", "flag-token", "topic", "describe", "from-env"))[0] == 0
        # YDB CLI's YDB_TOKEN when the SDKs' variables say nothing; none at all is refused.
        del env["YDB_ACCESS_TOKEN_CREDENTIALS"]
        assert (await cli_env({**env, "YDB_TOKEN": "flag-token"}, "topic", "describe", "from-env"))[0] == 0
        code, _, err = await cli_env(env, "topic", "describe", "from-env")
        assert code == 1 and "Access denied without user token" in err


@pytest.mark.slow
async def test_a_service_account_key_file_option(tmp_path: pathlib.Path) -> None:
    from ydb_topic_async.testing import IamTokenService

    async with IamTokenService() as iam, LocalTopicServer(token_services=[iam]) as server:
        key_file = tmp_path / "key.json"
        key_file.write_text(json.dumps(iam.create_key("sa-cli")))
        code, out, err = await cli_env(
            {"YDB_ENDPOINT": server.endpoint, "YDB_DATABASE": server.database, "YDB_ANONYMOUS_CREDENTIALS": "1"},
            "--sa-key-file", str(key_file), "--iam-endpoint", iam.endpoint, "topic", "create", "by-key",
        )
        assert (code, out, err) == (0, "created /local/by-key\n", "")
        assert iam.tokens_issued == 1
        code, _, err = await cli_env({}, "--sa-key-file", str(key_file), "--token", "t", "topic", "describe", "x")
        assert code == 2 and "not allowed with argument" in err


@pytest.mark.slow
async def test_mutual_tls_options(tmp_path: pathlib.Path) -> None:
    from ..credentials._pki import CertificateAuthority

    ca = CertificateAuthority()
    issued, client = ca.issue("localhost", server=True), ca.issue("cli", server=False)
    for name, data in (("ca.pem", ca.cert), ("client.pem", client.cert), ("client.key", client.key)):
        (tmp_path / name).write_bytes(data)
    async with LocalTopicServer(tls=(issued.key, issued.cert), client_ca=ca.cert, require_client_cert=True) as server:
        args = ("--endpoint", server.endpoint, "--database", server.database, "--ca-file", str(tmp_path / "ca.pem"))
        code, out, err = await cli_env(
            {}, *args, "--client-cert-file", str(tmp_path / "client.pem"),
            "--client-cert-key-file", str(tmp_path / "client.key"), "topic", "create", "mutual",
        )
        assert (code, out, err) == (0, "created /local/mutual\n", "")
        code, _, err = await cli_env({}, *args, "--timeout", "3", "topic", "describe", "mutual")
        assert code == 1 and "if it requires a client certificate" in err, err
