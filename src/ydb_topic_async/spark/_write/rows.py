"""Rows to write, as Spark hands them over: columns, chunks, and where each row goes.

Rows are Kafka-shaped: a payload (``value`` or ``data``), and optionally a ``key`` (placed by the
keyed writer's partitioner, ``partition_for_key``, and kept in the message's metadata as
``__key``, as YDB's Kafka API stores record keys), metadata (``headers`` as the Kafka sink takes
them, or a ``metadata`` map), a ``topic`` per row and a ``partition``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ... import PARTITION_KEY_METADATA, Message, TopicDescription, partition_for_key, partition_key
from .._bridge import Runtime
from .._options import SourceOptions

DIGEST_KEY = "ydb-spark-digest"
"""Metadata key of the sink's chained row digest (16 bytes) and attempt id (8 bytes) on every message
(reserved: a row's own metadata may not use it)."""
KEY_METADATA = "__key"
"""Metadata key a row's ``key`` is stored under (as YDB's Kafka API stores a record's key)."""

Record = tuple[bytes, list[tuple[str, bytes]] | None, int | None]
"""A row to write: payload, metadata pairs, explicit partition."""
Outgoing = list[bytes | str | Message]
"""Messages for one ``write_with_ack_future`` call."""


@dataclass(frozen=True)
class Columns:
    """Where the writable columns are in the input rows."""

    data: int
    metadata: int | None = None
    """A ``metadata`` map or a ``headers`` array of (key, value) structs."""
    partition: int | None = None
    key: int | None = None
    topic: int | None = None

@dataclass(frozen=True)
class Chunk:
    """Rows to write, column by column: payloads, and when given metadata pairs, partitions, keys
    and topics."""

    data: list[bytes]
    metadata: list[list[tuple[str, bytes]] | None] | None = None
    partitions: list[int | None] | None = None
    keys: list[bytes | None] | None = None
    topics: list[str | None] | None = None

    @classmethod
    def of(cls, records: Sequence[Record]) -> Chunk:
        return cls([r[0] for r in records], [r[1] for r in records], [r[2] for r in records])

    def rows(self) -> Iterator[tuple[bytes, list[tuple[str, bytes]] | None, int | None, bytes | None, str | None]]:
        n = len(self.data)
        return zip(
            self.data, self.metadata or [None] * n, self.partitions or [None] * n, self.keys or [None] * n,
            self.topics or [None] * n, strict=True,
        )

    @property
    def plain(self) -> bool:
        """Payloads only: no metadata, partition, key or topic."""
        return (
            self.partitions is None and self.keys is None and self.topics is None
            and (self.metadata is None or not any(self.metadata))
        )


def chunks_from_arrow(batches: Iterator[Any], cols: Columns) -> Iterator[Chunk]:
    """One chunk per Arrow batch of the input."""
    for batch in batches:
        meta, part, keys, topics = (
            None if index is None else batch.column(index).to_pylist()
            for index in (cols.metadata, cols.partition, cols.key, cols.topic)
        )
        yield Chunk(
            _payloads(batch.column(cols.data).to_pylist()),
            None if meta is None else [_metadata(m) for m in meta],
            None if part is None else [_partition(p) for p in part],
            None if keys is None else [_key(k) for k in keys],
            topics,
        )


def chunks_from_rows(rows: Iterator[Any], cols: Columns, size: int = 4096) -> Iterator[Chunk]:
    """Rows (pyspark < 4.1 hands the streaming sink Rows, not Arrow) in chunks of ``size``."""
    buffered: list[Any] = []
    for row in rows:
        buffered.append(row)
        if len(buffered) >= size:
            yield _chunk_of_rows(buffered, cols)
            buffered = []
    if buffered:
        yield _chunk_of_rows(buffered, cols)


def _chunk_of_rows(rows: list[Any], cols: Columns) -> Chunk:
    def column(index: int | None) -> list[Any] | None:
        return None if index is None else [row[index] for row in rows]

    meta, part, keys = column(cols.metadata), column(cols.partition), column(cols.key)
    return Chunk(
        _payloads([row[cols.data] for row in rows]),
        None if meta is None else [_metadata(m) for m in meta],
        None if part is None else [_partition(p) for p in part],
        None if keys is None else [_key(k) for k in keys],
        column(cols.topic),
    )


def _payloads(values: list[Any]) -> list[bytes]:
    if all(type(v) is bytes for v in values):
        return values  # a binary column: nothing to convert
    if any(v is None for v in values):
        raise ValueError("ydb_topic: the payload column ('data' or 'value') is null in a row to write")
    return [v.encode() if isinstance(v, str) else bytes(v) for v in values]


def _metadata(meta: Any) -> list[tuple[str, bytes]] | None:
    """A ``metadata`` map (a dict, or Arrow's (key, value) pairs) or Kafka-style ``headers`` (a list
    of {key, value} structs) as metadata pairs, in order."""
    if not meta:
        return None
    pairs = meta.items() if isinstance(meta, dict) else meta
    items = []
    for pair in pairs:
        if isinstance(pair, dict):  # a headers struct from Arrow
            name, value = pair.get("key"), pair.get("value")
        else:  # a (key, value) pair, or a headers Row
            name, value = pair[0], pair[1]
        if name is None:
            raise ValueError("ydb_topic: a metadata (header) key is null in a row to write")
        items.append((str(name), value.encode() if isinstance(value, str) else bytes(value or b"")))
    if any(k in (DIGEST_KEY, KEY_METADATA) for k, _ in items):
        raise ValueError(
            f"ydb_topic: metadata keys {DIGEST_KEY!r} and {KEY_METADATA!r} are reserved (the sink's row digest and "
            "the 'key' column)"
        )
    return items


def _partition(partition: Any) -> int | None:
    if partition is not None and partition < 0:
        raise ValueError(f"ydb_topic: column 'partition' must not be negative, got {partition}")
    return partition  # type: ignore[no-any-return]


def _key(key: Any) -> bytes | None:
    if key is None:
        return None
    return key.encode() if isinstance(key, str) else bytes(key)


@dataclass(frozen=True, slots=True)
class Row:
    """A row placed: its topic (full path, and as the writer is given it), partition (None: the
    server picks one per producer) and metadata (the key included)."""

    path: str
    topic: str
    target: int | None
    data: bytes
    metadata: list[tuple[str, bytes]] | None


class Placement:
    """Where each row goes: the option's topic or the row's, the row's partition or its key's."""

    def __init__(self, rt: Runtime, options: SourceOptions) -> None:
        self.rt = rt
        self.options = options
        self.descriptions: dict[str, TopicDescription] = {}
        self.placed: dict[tuple[str, bytes], int] = {}
        self.paths: dict[str, str] = {}

    async def rows(self, chunk: Chunk) -> list[Row]:
        options = self.options
        result = []
        for data, metadata, partition, key, row_topic in chunk.rows():
            topic = options.topic or row_topic
            if not topic:
                raise ValueError(
                    "ydb_topic: null topic present in the data; give every row a topic, or set the option 'topic'"
                )
            path = self.paths.get(topic)
            if path is None:
                path = self.paths[topic] = options.full_path(topic)
            target = partition
            if key is not None:
                metadata = [*(metadata or ()), (KEY_METADATA, key)]
                if options.partitioner != "kafka":
                    # As the keyed writer and YDB's own producers send it.
                    metadata.append((PARTITION_KEY_METADATA, partition_key(key)))
                if target is None:
                    target = await self._partition_for(topic, key)
            result.append(Row(path, topic, target, data, metadata))
        return result

    async def _partition_for(self, topic: str, key: bytes) -> int:
        placed = self.placed.get((topic, key))
        if placed is None:
            description = self.descriptions.get(topic)
            if description is None:
                driver = await self.rt.driver(self.options.connection)
                description = self.descriptions[topic] = await driver.topic.describe_topic(
                    topic, wait_for_topic=self.options.wait_for_topic
                )
            placed = self.placed[(topic, key)] = partition_for_key(
                description, key, "kafka" if self.options.partitioner == "kafka" else "ydb"
            )
        return placed

