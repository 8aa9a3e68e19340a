"""Partition key ranges: the 16-byte key space an auto-partitioned topic's partitions divide.

Each partition covers the half-open range ``[from_bound, to_bound)`` of 16-byte values compared
as big-endian numbers (``None``: open end). A topic created with ``n`` partitions starts with
``n`` ranges cut at ``(i + 1) * ((2**128 - 1) // n) - 1`` for ``i < n - 1``, the last one taking
the remainder. (ydb-platform/ydb: ydb/core/tx/schemeshard/schemeshard__operation_create_pq.cpp
takes each partition's ``to_bound`` from ``RangeFromShardNumber(i, n).End`` in
ydb/services/lib/sharding/sharding.cpp.)

The server places a producer id (a message group) in that space by the MD5 digest of its bytes
(``key_hash``; ydb/core/persqueue/writer/partition_chooser.cpp). The keyed writer places keys
differently, by their MurmurHash64A partition key (``writer.partitioning``), and takes only the
ranges from here. The SDK and the local topic server both use this module, so they agree with
each other and with YDB."""

from __future__ import annotations

import hashlib

BOUND_BYTES = 16
KEY_SPACE = 1 << (8 * BOUND_BYTES)
"""Keys are the integers in ``[0, KEY_SPACE)``."""

Bound = bytes | None
"""A 16-byte bound, or None for the open end of the key space."""


def key_hash(key: bytes) -> bytes:
    """Where the server places producer id ``key``: its MD5 digest (16 bytes, compared as big-endian)."""
    return hashlib.md5(key, usedforsecurity=False).digest()


def key_number(key: bytes) -> int:
    """``key_hash(key)`` as an integer in ``[0, KEY_SPACE)``."""
    return int.from_bytes(key_hash(key), "big")


def even_ranges(count: int) -> list[tuple[int, int]]:
    """The ``[from, to)`` ranges of a topic created with ``count`` partitions, in partition order,
    as integers (the last one ends at ``KEY_SPACE``)."""
    if count < 1:
        raise ValueError("count must be at least 1")
    slice_ = (KEY_SPACE - 1) // count
    cuts = [(i + 1) * slice_ - 1 for i in range(count - 1)]
    return list(zip([0, *cuts], [*cuts, KEY_SPACE], strict=True))


def even_bounds(count: int) -> list[tuple[Bound, Bound]]:
    """``even_ranges(count)`` as bounds: 16 bytes each, ``None`` at the open ends."""
    return [
        (None if low == 0 else as_bound(low), None if high == KEY_SPACE else as_bound(high))
        for low, high in even_ranges(count)
    ]


def split_point(low: int, high: int) -> int:
    """Where a split cuts the range ``[low, high)`` in two halves."""
    if high - low < 2:
        raise ValueError("the range is too small to split")
    return (low + high) // 2


def as_bound(value: int) -> bytes:
    """A key as a 16-byte bound."""
    return value.to_bytes(BOUND_BYTES, "big")
