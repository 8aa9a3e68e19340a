"""Offset arithmetic for planning reads: resolving specs, ranges, and the per-trigger limit.

Offsets in Spark's checkpoint are JSON objects with string keys (partition ids) and the next
offset to read as values: ``{"0": 1200, "1": 1187}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._options import EARLIEST, LATEST, OffsetSpec

Bounds = Mapping[int, tuple[int, int]]
"""Partition id -> (first offset, end offset) as the topic description reports them."""


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic partition: one Spark input partition."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def to_checkpoint(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(pid): offsets[pid] for pid in sorted(offsets)}


def from_checkpoint(offsets: Mapping[str, object] | None) -> dict[int, int]:
    result: dict[int, int] = {}
    for key, value in (offsets or {}).items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"ydb_topic: bad checkpoint offset {key!r}: {value!r}")
        result[int(key)] = value
    return result


def resolve(spec: OffsetSpec, bounds: Bounds, name: str) -> dict[int, int]:
    """Concrete offsets for every partition in ``bounds``; unnamed partitions start at the earliest."""
    if spec == "earliest":
        return {pid: first for pid, (first, _) in bounds.items()}
    if spec == "latest":
        return {pid: end for pid, (_, end) in bounds.items()}
    assert isinstance(spec, dict)
    missing = sorted(set(spec) - set(bounds))
    if missing:
        raise ValueError(f"ydb_topic: option {name!r} names partitions the topic does not have: {missing}")
    result: dict[int, int] = {}
    for pid, (first, end) in bounds.items():
        offset = spec.get(pid, EARLIEST if name == "startingOffsets" else LATEST)
        if offset == EARLIEST:
            offset = first
        elif offset == LATEST:
            offset = end
        result[pid] = min(max(offset, first), end)
    return result


def ranges(start: Mapping[int, int], end: Mapping[int, int]) -> list[OffsetRange]:
    """Non-empty ranges per partition; a partition absent from ``start`` is new and read from 0."""
    result = []
    for pid in sorted(end):
        begin = start.get(pid, 0)
        if end[pid] > begin:
            result.append(OffsetRange(pid, begin, end[pid]))
    return result


def limit_offsets(start: Mapping[int, int], latest: Mapping[int, int], max_rows: int | None) -> dict[int, int]:
    """Cap ``latest`` so at most ``max_rows`` offsets are read in total, shared by backlog size.

    As in the Kafka connector, each partition gets a share proportional to its backlog; the
    rounding remainder goes to the largest backlogs so that every trigger makes progress.
    """
    end = {pid: max(offset, start.get(pid, 0)) for pid, offset in latest.items()}
    backlog = {pid: end[pid] - start.get(pid, 0) for pid in end}
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        return end
    share = {pid: backlog[pid] * max_rows // total for pid in backlog}
    remainder = max_rows - sum(share.values())
    for pid in sorted(backlog, key=lambda p: (-(backlog[p] - share[p]), p)):
        if remainder <= 0:
            break
        if share[pid] < backlog[pid]:
            share[pid] += 1
            remainder -= 1
    return {pid: start.get(pid, 0) + share[pid] for pid in end}
