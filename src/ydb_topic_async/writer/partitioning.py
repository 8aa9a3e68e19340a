"""Where a key goes: the partitioners of the keyed writer.

- ``"ydb"`` (the default): as YDB's own key-partitioned producers place keys (the C++ SDK's
  producer with its default ``Bound`` strategy and the Go SDK's multi-partition writer with its
  bound chooser). The key's MurmurHash64A (seed 0), written as 8 bytes big-endian, is compared
  byte by byte with the ``from_bound`` of the topic's active partitions: the key goes to the
  partition with the greatest ``from_bound`` not above it. The 8 bytes travel with the message
  as its ``__partition_key`` metadata item, as those producers send them. A topic whose
  partitions have no key ranges is laid out as YDB lays out a new topic's ranges
  (``_key_ranges.even_bounds``); one where some partitions have ranges and others (added later
  by ``alter_topic``) none is refused, as those producers refuse it.
- ``"kafka"``: Kafka's default partitioner, ``(murmur2(key) & 0x7fffffff) % n`` over the active
  partitions in id order (murmur2 seeded with ``0x9747b28c``), for topics with a fixed number of
  partitions: Kafka and YDB producers of other languages that use it agree on a key's partition.
- a function ``(key, partitions) -> partition_id`` of the key's bytes and the active partitions.

Sources: ydb-platform/ydb ``ydb/public/sdk/cpp/src/client/topic/impl/producer.cpp``
(``DefaultPartitioningKeyHasher``, ``TBoundPartitionChooser``) and ``util/digest/murmur.cpp``;
ydb-platform/ydb-go-sdk ``internal/topic/topicmultiwriter/partitionchooser/bound.go`` and
``pkg/xhash/murmur2.go``; Apache Kafka ``Utils.murmur2``/``toPositive``. ``tests/data`` holds
vectors those implementations produced, which the tests check this module against.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Literal

from .._errors import InvalidArgumentError
from .._key_ranges import even_bounds
from ..topic.types import AutoPartitioningStrategy, PartitionInfo, TopicDescription

PARTITION_KEY_METADATA = "__partition_key"
"""The metadata item that carries a message's 8-byte partition key, as YDB's producers send it."""

PartitionFunction = Callable[[bytes, Sequence[PartitionInfo]], int]
"""A user's partitioner: the partition id for a key's bytes, given the topic's active partitions."""

Partitioner = Literal["ydb", "kafka"] | PartitionFunction
"""The ``partitioner`` option of the keyed writer."""

_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1
_M64 = 0xC6A4A7935BD1E995
_M32 = 0x5BD1E995
_KAFKA_SEED = 0x9747B28C


def murmur64a(data: bytes, seed: int = 0) -> int:
    """MurmurHash64A of ``data`` (an unsigned 64-bit integer): 8-byte blocks read little-endian."""
    length = len(data)
    h = (seed ^ (length * _M64)) & _MASK64
    whole = length // 8
    for k in struct.unpack_from(f"<{whole}Q", data):
        k = (k * _M64) & _MASK64
        k ^= k >> 47
        k = (k * _M64) & _MASK64
        h ^= k
        h = (h * _M64) & _MASK64
    tail = data[whole * 8 :]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * _M64) & _MASK64
    h ^= h >> 47
    h = (h * _M64) & _MASK64
    h ^= h >> 47
    return h


def kafka_murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` (a signed 32-bit integer, as Java's ``Utils.murmur2`` returns it)."""
    length = len(data)
    h = (_KAFKA_SEED ^ length) & _MASK32
    whole = length // 4
    for k in struct.unpack_from(f"<{whole}I", data):
        k = (k * _M32) & _MASK32
        k ^= k >> 24
        k = (k * _M32) & _MASK32
        h = (h * _M32) & _MASK32
        h ^= k
    tail = data[whole * 4 :]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * _M32) & _MASK32
    h ^= h >> 13
    h = (h * _M32) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def partition_key(key: bytes) -> bytes:
    """The 8-byte partition key YDB's producers compute for ``key``: its MurmurHash64A, big-endian.

    Cached: keyed writes tend to repeat their keys (customer ids, device ids), and the hash is
    computed in Python.
    """
    return murmur64a(key).to_bytes(8, "big")


def key_bytes(key: str | bytes | bytearray | memoryview) -> bytes:
    """A key as bytes (``str`` as UTF-8)."""
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise InvalidArgumentError(f"key must be str or bytes, not {type(key).__name__}")


def check_partitioner(partitioner: object) -> Partitioner:
    """``partitioner`` if it is one (``InvalidArgumentError`` otherwise)."""
    if partitioner == "ydb" or partitioner == "kafka" or callable(partitioner):
        return partitioner
    raise InvalidArgumentError(
        f'partitioner must be "ydb", "kafka" or a function (key, partitions) -> partition id, got {partitioner!r}'
    )


class KeyRouter:
    """The partition of each key, by one partitioner, over a topic's active partitions as a
    description showed them. Made again when the partitions change (a split)."""

    def __init__(self, description: TopicDescription, partitioner: Partitioner = "ydb") -> None:
        active = sorted((p for p in description.partitions if p.active), key=lambda p: p.partition_id)
        if not active:
            raise InvalidArgumentError(f"topic {description.path} has no active partition")
        self.partitioner = partitioner
        self.partitions: tuple[PartitionInfo, ...] = tuple(active)
        self._ids = frozenset(p.partition_id for p in active)
        auto = description.auto_partitioning.strategy not in (
            AutoPartitioningStrategy.UNSPECIFIED,
            AutoPartitioningStrategy.DISABLED,
        )
        if partitioner == "kafka" and auto:
            raise InvalidArgumentError(
                f'partitioner="kafka" needs a fixed number of partitions, and topic {description.path} is'
                ' auto-partitioned: use the default partitioner ("ydb"), which follows its key ranges'
            )
        unbounded = [p.partition_id for p in active if p.from_bound is None and p.to_bound is None]
        if auto or len(unbounded) < len(active):
            if partitioner == "ydb" and len(active) > 1 and unbounded:
                # A partition added by alter_topic to a topic with key ranges gets none; YDB's
                # producers refuse such a topic too (they could not tell which keys it holds).
                raise InvalidArgumentError(
                    f"topic {description.path} has partitions with key ranges and partitions without"
                    f" ({unbounded}, added after it was created): the default partitioner cannot place keys"
                    ' there; use partitioner="kafka" or a function'
                )
            pairs = sorted((p.from_bound or b"", p.partition_id) for p in active)
        else:
            # No ranges from the server: the ranges YDB gives a topic with this many partitions.
            pairs = [(low or b"", p.partition_id) for p, (low, _) in zip(active, even_bounds(len(active)), strict=True)]
        self._lower_bounds = [low for low, _ in pairs]
        self._by_bound = [pid for _, pid in pairs]

    def partition_for(self, key: bytes) -> int:
        """The partition id for ``key``'s bytes."""
        partitioner = self.partitioner
        if partitioner == "ydb":
            return self.by_partition_key(partition_key(key))
        if partitioner == "kafka":
            return self.partitions[(kafka_murmur2(key) & 0x7FFFFFFF) % len(self.partitions)].partition_id
        assert callable(partitioner)
        chosen = partitioner(key, self.partitions)
        if chosen not in self._ids:
            raise InvalidArgumentError(
                f"the partitioner chose {chosen!r}, not one of the active partitions {sorted(self._ids)}"
            )
        return chosen

    def by_partition_key(self, position: bytes) -> int:
        """The partition whose key range holds ``position`` (a partition key)."""
        return self._by_bound[max(bisect.bisect_right(self._lower_bounds, position) - 1, 0)]


def partition_for_key(
    description: TopicDescription, key: str | bytes, partitioner: Partitioner = "ydb"
) -> int:
    """The partition a keyed writer with ``partitioner`` puts ``key`` in, for a topic as
    ``description`` (from ``driver.topic.describe_topic``) shows it."""
    return KeyRouter(description, check_partitioner(partitioner)).partition_for(key_bytes(key))


__all__ = ["PARTITION_KEY_METADATA", "PartitionFunction", "Partitioner", "partition_for_key", "partition_key"]
