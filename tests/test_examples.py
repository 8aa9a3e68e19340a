"""Every file in examples/ runs against the local topic server.

Plain scripts run as processes (with no endpoint they start a local server themselves) and
their output is checked exactly. The web applications are exercised over HTTP by their tests in
tests/integrations/; this module makes sure no example is left without one.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from ._helpers import EXAMPLES

SCRIPTS = {
    "quickstart.py": (
        "stored at partition 0, offset 2\n"
        "read offset 0: hello\n"
        "read offset 1: world\n"
        "read offset 2: confirmed\n"
    ),
    "exactly_once.py": (
        "dropped streams: 1, stored: 100, distinct seq_nos: 100\n"
        "replayed 5, skipped as duplicates: 5, stored: 100\n"
    ),
    "faststream_app.py": (
        "invoice for order 1: 12.0 (key b'1')\n"
        "invoice for order 2: 30.6 (key b'2')\n"
        "invoice for order 3: 119.99 (key b'3')\n"
    ),
    "exactly_once_transform.py": (
        "some transactions failed and were retried: True\n"
        "results: 100, distinct: 100, committed offset: 100\n"
        "in order: True\n"
    ),
}
"""Script -> its exact standard output."""

TESTED_ELSEWHERE = {
    "fastapi_app.py": "tests/integrations/test_fastapi_app.py",
    "aiohttp_app.py": "tests/integrations/test_aiohttp_app.py",
}
"""Web applications -> the test that serves them over HTTP."""


def test_every_example_is_covered() -> None:
    present = {p.name for p in EXAMPLES.glob("*.py")}
    assert present == set(SCRIPTS) | set(TESTED_ELSEWHERE)
    root = EXAMPLES.parent
    for example, test in TESTED_ELSEWHERE.items():
        text = (root / test).read_text()
        assert f'load_example("{example.removesuffix(".py")}")' in text, (example, test)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("script", sorted(SCRIPTS))
async def test_script_runs_on_an_embedded_local_server(script: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / script),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode() == SCRIPTS[script]


async def test_quickstart_against_a_given_endpoint() -> None:
    from ydb_topic_async.testing import LocalTopicServer

    async with LocalTopicServer() as server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(EXAMPLES / "quickstart.py"), "--endpoint", server.endpoint, "--database", "/local",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert out.decode() == SCRIPTS["quickstart.py"]
        assert server.storage.committed_offsets("quickstart", "printer") == {0: 3}
