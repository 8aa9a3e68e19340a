"""Helpers for reader tests: filling topics through the writer, waiting for driven state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ydb_topic_async as yta


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


