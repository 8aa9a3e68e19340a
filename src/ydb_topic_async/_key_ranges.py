"""Partition key ranges: how YDB places a key among the partitions of an auto-partitioned topic.

A key's place is the MD5 digest of its bytes, read as a 128-bit big-endian number (YDB hashes
producer ids the same way to pick their partition). Each partition of an auto-partitioned topic
covers the half-open range ``[from_bound, to_bound)`` of such 16-byte values (``None``: open
end); a split divides a range at its middle. A topic created with ``n`` partitions starts with
``n`` equal ranges, the last one taking the remainder.
(ydb-platform/ydb: ydb/core/persqueue/writer/partition_chooser.cpp, partition_key_range.h,
ydb/services/lib/sharding/sharding.cpp RangeFromShardNumber.)
"""

from __future__ import annotations

import hashlib

BOUND_BYTES = 16
_SPACE = 1 << (8 * BOUND_BYTES)

Bound = bytes | None
"""A 16-byte bound, or None for the open end of the key space."""


def key_hash(key: bytes) -> bytes:
    """Where ``key`` lies in the key space: its MD5 digest (16 bytes, compared as big-endian)."""
    return hashlib.md5(key, usedforsecurity=False).digest()


def even_bounds(count: int) -> list[tuple[Bound, Bound]]:
    """The ranges of a topic created with ``count`` partitions, in partition order."""
    if count < 1:
        raise ValueError("count must be at least 1")
    top = _SPACE - 1
    slice_ = top // count
    cuts = [_as_bound((i + 1) * slice_ - 1) for i in range(count - 1)]
    froms: list[Bound] = [None, *cuts]
    tos: list[Bound] = [*cuts, None]
    return list(zip(froms, tos, strict=True))


def middle(from_bound: Bound, to_bound: Bound) -> bytes:
    """The bound that splits ``[from_bound, to_bound)`` into two halves."""
    low = 0 if from_bound is None else int.from_bytes(from_bound, "big")
    high = _SPACE if to_bound is None else int.from_bytes(to_bound, "big")
    if high - low < 2:
        raise ValueError("the range is too small to split")
    return _as_bound((low + high) // 2)


def _as_bound(value: int) -> bytes:
    return value.to_bytes(BOUND_BYTES, "big")
