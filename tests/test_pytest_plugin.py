"""The ``ydb_topic_server`` fixture in a user's own test suite, under each async test runner.

Each case runs pytest as a separate process on a small test file in a temporary directory, with
only the plugin that the package installs (its pytest11 entry point): as a user's project would.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # the plugins' set-ups, not Python's

USER_TESTS = '''
import socket

import pytest

from ydb_topic_async import Driver

ports = []

{mark}
async def test_server_serves_this_test(ydb_topic_server):
    async with Driver(ydb_topic_server.endpoint, ydb_topic_server.database) as driver:
        await driver.topic.create_topic("t")
        async with driver.topic.writer("t", producer_id="p") as writer:
            await writer.write_with_ack(b"hello")
    assert [m.data for m in ydb_topic_server.storage.read("t", 0)] == [b"hello"]
    ports.append(int(ydb_topic_server.endpoint.rsplit(":", 1)[1]))


def test_server_is_stopped_after_its_test():
    assert ports
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", ports[0]), timeout=5).close()
'''

CLUSTER_TESTS = '''
import pytest

from ydb_topic_async import Driver

{mark}
async def test_cluster_serves_this_test(ydb_topic_cluster):
    assert [node.node_id for node in ydb_topic_cluster.nodes] == [1, 2, 3]
    async with Driver(ydb_topic_cluster.endpoint, ydb_topic_cluster.database) as driver:
        await driver.wait_ready(timeout=10)
        assert len(driver.endpoints) == 3
        await ydb_topic_cluster.stop_node(2)
        await driver.topic.create_topic("t")


def test_nothing_else():
    pass
'''

ANYIO_BACKEND = '''

@pytest.fixture
def anyio_backend():
    return "asyncio"
'''


def run_user_suite(tmp_path: pathlib.Path, mark: str, ini: str, *options: str, tests: str = USER_TESTS) -> str:
    source = tests.format(mark=mark)
    if "anyio" in mark:
        source += ANYIO_BACKEND
    (tmp_path / "test_user.py").write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\n" + ini)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "2 passed" in output, output
    assert "no plugin" not in output and "skipped" not in output, output
    return output


def test_pytest_asyncio_strict_mode(tmp_path: pathlib.Path) -> None:
    run_user_suite(
        tmp_path, "@pytest.mark.asyncio", "asyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
    )


def test_pytest_asyncio_strict_mode_is_the_default(tmp_path: pathlib.Path) -> None:
    run_user_suite(tmp_path, "@pytest.mark.asyncio", "")


def test_pytest_asyncio_auto_mode(tmp_path: pathlib.Path) -> None:
    run_user_suite(tmp_path, "", "asyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")


def test_anyio_plugin_next_to_pytest_asyncio(tmp_path: pathlib.Path) -> None:
    run_user_suite(tmp_path, "@pytest.mark.anyio", "")


def test_anyio_plugin_alone(tmp_path: pathlib.Path) -> None:
    run_user_suite(tmp_path, "@pytest.mark.anyio", "", "-p", "no:asyncio")


@pytest.mark.parametrize("mark", ["@pytest.mark.asyncio", "@pytest.mark.anyio"])
def test_the_cluster_fixture(tmp_path: pathlib.Path, mark: str) -> None:
    run_user_suite(tmp_path, mark, "", tests=CLUSTER_TESTS)


@pytest.mark.parametrize(
    ("test", "options", "says"),
    [
        ("async def test_no_runner(ydb_topic_server):\n    pass\n", ("-p", "no:asyncio"), "install pytest-asyncio"),
        ("def test_sync(ydb_topic_server):\n    pass\n", (), "test_sync is not async"),
    ],
)
def test_a_misuse_gets_an_error_that_says_what_to_do(
    tmp_path: pathlib.Path, test: str, options: tuple[str, ...], says: str
) -> None:
    (tmp_path / "test_user.py").write_text(test)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options],
        cwd=tmp_path, capture_output=True, text=True, timeout=100,
    )
    assert result.returncode != 0
    assert says in result.stdout + result.stderr, result.stdout + result.stderr
