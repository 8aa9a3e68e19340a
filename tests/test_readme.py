"""The README's Python blocks, run as a reader of the README would run them.

Every ```python block of README.md and docs/from-kafka.md (and the complete program of
docs/getting-started.md) must be claimed by one test here, so a block cannot rot unnoticed: a new block fails
``test_every_block_is_run`` until a test runs it. Blocks run against the local topic server; the
only change made to them is the endpoint, ``grpc://localhost:2136``, which becomes the test
server's.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from ydb_topic_async import Driver
from ydb_topic_async.testing import LocalTopicServer

from ._helpers import stored_data

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
FROM_KAFKA = ROOT / "docs" / "from-kafka.md"
ENDPOINT = "grpc://localhost:2136"

pytestmark = pytest.mark.timeout(120)


def python_blocks(path: pathlib.Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(), re.MULTILINE | re.DOTALL)


def block(path: pathlib.Path, marker: str) -> str:
    """The one Python block of ``path`` that contains ``marker``."""
    found = [b for b in python_blocks(path) if marker in b]
    assert len(found) == 1, f"{path.name}: {len(found)} Python blocks contain {marker!r}"
    return found[0]


QUICKSTART = "asyncio.run(main())"
TRANSACTIONS = "driver.query.retry_tx(one_batch)"
LOCAL_SERVER = "async def test_something()"
KEYED = "driver.topic.keyed_writer("
CLAIMED = {README: (QUICKSTART, TRANSACTIONS, LOCAL_SERVER, KEYED), FROM_KAFKA: (KEYED,)}


def test_every_block_is_run() -> None:
    for path, markers in CLAIMED.items():
        for code in python_blocks(path):
            claims = [m for m in markers if m in code]
            assert len(claims) == 1, f"no test here runs this block of {path.name}:\n{code}"


def with_endpoint(code: str, server: LocalTopicServer) -> str:
    assert ENDPOINT in code
    return code.replace(ENDPOINT, server.endpoint)


async def run_script(code: str, tmp_path: pathlib.Path) -> str:
    script = tmp_path / "script.py"
    script.write_text(code)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.parametrize("path", [README, GETTING_STARTED], ids=["README", "getting-started"])
async def test_quickstart_runs_and_runs_again(
    server: LocalTopicServer, tmp_path: pathlib.Path, path: pathlib.Path
) -> None:
    code = with_endpoint(block(path, QUICKSTART), server)
    first = await run_script(code, tmp_path)
    assert re.search(r"^Written\(partition_id=\d+, offset=1, seq_no=2\)$", first, re.MULTILINE), first
    assert re.search(r"^[01] b'(fire and forget|confirmed)'$", first, re.MULTILINE), first
    # A second run finds the topic there, appends, and reads on from the committed offset.
    second = await run_script(code, tmp_path)
    assert re.search(r"^Written\(partition_id=\d+, offset=3, seq_no=4\)$", second, re.MULTILINE), second
    offsets = [int(line.split()[0]) for line in second.splitlines() if line[:1].isdigit()]
    assert offsets and min(offsets) >= 2, second


USER_BATCHES = """\
import asyncio

from ydb_topic_async import KeyedWriter, Message, TopicWriter, TxWriter, WriteResult


async def send(writer: TopicWriter, keyed: KeyedWriter, tx_writer: TxWriter) -> None:
    payloads: list[bytes] = [b"a", b"b"]
    texts: list[str] = ["a", "b"]
    messages: list[Message] = [Message(b"a"), Message("b", metadata={"k": "v"})]
    mixed: tuple[bytes | Message, ...] = (b"a", Message("b"))
    await writer.write(payloads)
    await writer.write(texts)
    await writer.write(messages)
    results: list[WriteResult] = await writer.write_with_ack(payloads)
    results = await writer.write_with_ack(texts)
    results = await writer.write_with_ack(messages)
    results = await writer.write_with_ack(mixed)
    one: WriteResult = await writer.write_with_ack("one message")
    futures: list[asyncio.Future[WriteResult]] = await writer.write_with_ack_future(payloads)
    futures = await writer.write_with_ack_future(texts)
    futures = await writer.write_with_ack_future(messages)
    single: asyncio.Future[WriteResult] = await writer.write_with_ack_future(b"one message")
    await keyed.write(payloads, key="k")
    results = await keyed.write_with_ack(texts, key="k")
    results = await keyed.write_with_ack(messages, key=b"k")
    one = await keyed.write_with_ack(b"one message", key="k")
    await tx_writer.write(payloads)
    results = await tx_writer.write_with_ack(messages)
    print(results, one, futures, single)
"""
"""A user's code that writes lists of messages of one type: ``list`` is invariant, so a
``list[bytes]`` is accepted only where the SDK takes a sequence of messages."""


def test_user_code_type_checks_strictly_outside_the_repository(tmp_path: pathlib.Path) -> None:
    """A user's typed scripts in a directory of their own: ``mypy --strict`` finds the installed
    package, and the README's Quickstart and writes of ``list[bytes]``, ``list[str]`` and
    ``list[Message]`` type-check."""
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    (tmp_path / "user_script.py").write_text(block(README, QUICKSTART))
    (tmp_path / "user_batches.py").write_text(USER_BATCHES)
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # the user's settings, not this repository's
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "user_script.py", "user_batches.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=110,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 2 source files" in done.stdout


async def run_fragment(code: str, names: dict[str, Any]) -> dict[str, Any]:
    """Run a block that uses ``await`` at the top level, with ``names`` defined; returns its names."""
    source = "async def __fragment():\n" + textwrap.indent(code, "    ") + "\n    return locals()\n"
    namespace = dict(names)
    exec(compile(source, "<README block>", "exec"), namespace)
    result: dict[str, Any] = await namespace["__fragment"]()
    return result


async def test_transactions_block(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("orders", consumers=["transformer"])
    await driver.topic.create_topic("orders-enriched")
    async with driver.topic.writer("orders", producer_id="shop") as writer:
        await writer.write([b"order 1", b"order 2"])

    def enrich(data: bytes) -> bytes:
        return data + b" (enriched)"

    await run_fragment(block(README, TRANSACTIONS), {"driver": driver, "enrich": enrich})
    assert stored_data(server, "orders-enriched") == [b"order 1 (enriched)", b"order 2 (enriched)"]
    assert server.storage.committed_offsets("orders", "transformer") == {0: 2}


async def test_local_server_block() -> None:
    names = await run_fragment(block(README, LOCAL_SERVER), {})
    await names["test_something"]()


async def test_keyed_writer_block(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("events", min_active_partitions=4)
    await run_fragment(block(README, KEYED), {"driver": driver})
    stored = [m for p in range(4) for m in server.storage.read("events", p)]
    assert [m.data for m in stored] == [b"order 1 created", b"order 1 paid"]


async def test_from_kafka_keyed_writer_block(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("orders", min_active_partitions=3)
    names = await run_fragment(block(FROM_KAFKA, KEYED), {"driver": driver})
    stored = [m for p in range(3) for m in server.storage.read("orders", p)]
    assert sorted(m.data for m in stored) == sorted(
        [b'{"order": 1, "state": "created"}', b'{"order": 1, "state": "paid"}', b'{"order": 2}']
    )
    assert names["result"].partition_id in range(3)
