"""Helpers shared by the test modules: what the local server stores, filling a topic, a driver
that reaches the server through a proxy, the official SDK's reader, loading an example.

Fixtures live in ``conftest.py``; waiting for state with no event to await is ``_polling``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import pathlib
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer, StoredMessage
from ydb_topic_async.testing.proxy import FlakyProxy

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
"""The example applications (scripts, not a package)."""

QUICK_RETRY = yta.RetryPolicy(max_attempts=50, max_elapsed=20.0, slow=yta.BackoffSchedule(base=0.01, cap=0.1))
"""Reconnects within a hundredth of a second or so: for tests that break streams on purpose."""


# --- what the local server stores -----------------------------------------------------------------


def stored(server: LocalTopicServer, topic: str, partition: int = 0) -> list[StoredMessage]:
    """The messages the local server holds in one partition of ``topic``, oldest first."""
    return list(server.storage.read(topic, partition))


def stored_data(
    server: LocalTopicServer, topic: str, partition: int = 0, *, decode: Callable[[bytes], bytes] | None = None
) -> list[bytes]:
    """The payloads the local server holds in one partition of ``topic``, oldest first, as stored
    (compressed, if they were sent so) or passed through ``decode``."""
    payloads = [m.data for m in server.storage.read(topic, partition)]
    return payloads if decode is None else [decode(data) for data in payloads]


def stored_fields(server: LocalTopicServer, topic: str, *fields: str, partition: int = 0) -> list[tuple[Any, ...]]:
    """``fields`` (names of ``StoredMessage`` fields) of every message in one partition, oldest first."""
    return [tuple(getattr(m, name) for name in fields) for m in server.storage.read(topic, partition)]


def stored_by_partition(server: LocalTopicServer, topic: str) -> dict[int, list[StoredMessage]]:
    """Partition id -> the messages the local server holds there, oldest first, for every partition."""
    return {p.partition_id: list(p.messages) for p in server.storage.topic(topic).partitions}


# --- writing and reading with the SDKs ------------------------------------------------------------


async def create_topic_with_consumer(driver: yta.Driver, name: str, *, partitions: int | None = None) -> str:
    """Create the topic ``name`` (with ``partitions`` partitions, or the server's default of one)
    and the consumer ``consumer`` that the tests read with; returns ``name``."""
    await driver.topic.create_topic(name, min_active_partitions=partitions, consumers=["consumer"])
    return name


async def fill(
    driver: yta.Driver,
    topic: str,
    payloads: Sequence[bytes],
    *,
    partition_id: int = 0,
    producer_id: str | None = None,
    codec: int | None = None,
    metadata: Mapping[str, bytes] | None = None,
) -> None:
    """Write ``payloads`` to one partition and wait for every acknowledgement."""
    encoders = {yta.LZ4_CODEC: yta.lz4_encode} if codec == yta.LZ4_CODEC else None
    async with driver.topic.writer(
        topic,
        producer_id=producer_id or f"filler-{partition_id}",
        partition_id=partition_id,
        codec=codec,
        encoders=encoders,
    ) as writer:
        for data in payloads:
            await writer.write(yta.Message(data, metadata=dict(metadata)) if metadata else data)


async def read_with_official_sdk(official: Any, topic: str, consumer: str, count: int) -> list[Any]:
    """Read ``count`` messages with the official ``ydb`` SDK's reader (``official`` is its driver),
    committing every batch and waiting for the commit; the official SDK's messages, in order."""
    reader = official.topic_client.reader(topic, consumer=consumer)
    try:
        got: list[Any] = []
        while len(got) < count:
            batch = await asyncio.wait_for(reader.receive_batch(), 10)
            got.extend(batch.messages)
            await asyncio.wait_for(reader.commit_with_ack(batch), 10)
    finally:
        await reader.close()
    return got


# --- the network ------------------------------------------------------------------------------------


def proxied_driver(server: LocalTopicServer, proxy: FlakyProxy, **options: Any) -> yta.Driver:
    """A driver (not opened yet) that reaches ``server`` only through ``proxy``: discovery is off,
    so no connection goes around it."""
    return yta.Driver(proxy.endpoint, server.database, discovery=False, **options)


# --- examples -----------------------------------------------------------------------------------------


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
