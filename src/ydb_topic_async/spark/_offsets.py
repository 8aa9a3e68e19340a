"""Offsets for planning reads: the checkpoint format, data-loss checks, ranges and limits.

Offsets in Spark's checkpoint are JSON objects that name each topic (its full path and the time
it was created, which tells a recreated topic from the original), per partition id the next
offset to read, and the split the micro-batch was planned with (so that a replayed batch gets
the same Spark partitions whatever the options are now)::

    {"topic": "/local/clicks", "createdAt": 1714563200123, "partitions": {"0": 1200, "1": 1187},
     "split": {"minPartitions": 8}}

    {"topics": {"/local/clicks": {"createdAt": 1714563200123, "partitions": {"0": 1200}},
                "/local/views": {"createdAt": 1714563200456, "partitions": {"0": 17}}},
     "split": {}}

The older forms (one topic without ``split``, or ``{"0": 1200, "1": 1187}``) are still read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..observability import sdk_logger
from ._errors import DataLossError
from ._options import EARLIEST, LATEST

logger = sdk_logger("spark")

K = TypeVar("K", int, tuple[str, int])
"""Offsets are keyed by partition id, or by (topic, partition id) across topics."""


@dataclass(frozen=True)
class TopicState:
    """What a topic description says: identity and, per partition, ``(first offset, end offset)``."""

    path: str
    created_at_ms: int | None
    bounds: Mapping[int, tuple[int, int]]
    last_write_ms: Mapping[int, int] = field(default_factory=dict)
    """Partition id -> when its last message was written (ms since the epoch), where known."""

    @property
    def ends(self) -> dict[int, int]:
        return {pid: end for pid, (_, end) in self.bounds.items()}

    @property
    def firsts(self) -> dict[int, int]:
        return {pid: first for pid, (first, _) in self.bounds.items()}


@dataclass(frozen=True)
class TopicOffsets:
    """A checkpointed offset: the topic's identity and the next offset to read per partition."""

    partitions: Mapping[int, int]
    path: str | None = None
    created_at_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        if self.path is not None:
            result["topic"] = self.path
        if self.created_at_ms is not None:
            result["createdAt"] = self.created_at_ms
        result["partitions"] = {str(pid): self.partitions[pid] for pid in sorted(self.partitions)}
        return result

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> TopicOffsets:
        value = value or {}
        if "partitions" in value:
            raw, path, created = value["partitions"], value.get("topic"), value.get("createdAt")
        else:
            raw, path, created = value, None, None  # the older form: partitions only
        partitions: dict[int, int] = {}
        for key, offset in (raw or {}).items():
            if not isinstance(offset, int) or isinstance(offset, bool) or not str(key).isdigit():
                raise ValueError(f"ydb_topic: bad checkpoint offset {key!r}: {offset!r}")
            partitions[int(key)] = offset
        if path is not None and not isinstance(path, str):
            raise ValueError(f"ydb_topic: bad topic in a checkpoint offset: {path!r}")
        if created is not None and (not isinstance(created, int) or isinstance(created, bool)):
            raise ValueError(f"ydb_topic: bad createdAt in a checkpoint offset: {created!r}")
        return cls(partitions, path, created)

    @classmethod
    def of(cls, state: TopicState, partitions: Mapping[int, int]) -> TopicOffsets:
        return cls(dict(partitions), state.path, state.created_at_ms)


@dataclass(frozen=True)
class Split:
    """How a micro-batch's offset ranges were split into Spark partitions (``minPartitions``,
    ``maxRecordsPerPartition``), recorded with its end offset so a replay splits them alike."""

    min_partitions: int | None = None
    max_records: int | None = None

    def to_json(self) -> dict[str, int]:
        result = {}
        if self.min_partitions is not None:
            result["minPartitions"] = self.min_partitions
        if self.max_records is not None:
            result["maxRecordsPerPartition"] = self.max_records
        return result

    @classmethod
    def from_json(cls, value: object) -> Split:
        if not isinstance(value, dict):
            raise ValueError(f"ydb_topic: bad split in a checkpoint offset: {value!r}")
        numbers = {key: value.get(key) for key in ("minPartitions", "maxRecordsPerPartition")}
        for key, number in numbers.items():
            if number is not None and (not isinstance(number, int) or isinstance(number, bool) or number <= 0):
                raise ValueError(f"ydb_topic: bad {key} in a checkpoint offset: {number!r}")
        return cls(numbers["minPartitions"], numbers["maxRecordsPerPartition"])


@dataclass(frozen=True)
class SourceOffsets:
    """A checkpointed offset of the whole source: every topic's offsets (by full path; ``None`` for
    the oldest form, which names no topic) and the split its micro-batch was planned with (``None``:
    not recorded, an offset written before splits were)."""

    topics: Mapping[str | None, TopicOffsets]
    split: Split | None = None

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any]
        if len(self.topics) == 1:
            result = next(iter(self.topics.values())).to_json()
        else:
            result = {"topics": {}}
            for path in sorted(p for p in self.topics if p is not None):
                one = self.topics[path].to_json()
                one.pop("topic", None)
                result["topics"][path] = one
        if self.split is not None:
            result["split"] = self.split.to_json()
        return result

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> SourceOffsets:
        value = dict(value or {})
        split = Split.from_json(value.pop("split")) if "split" in value else None
        if "topics" in value:
            topics = value["topics"]
            if not isinstance(topics, dict):
                raise ValueError(f"ydb_topic: bad topics in a checkpoint offset: {topics!r}")
            parsed = {}
            for path, one in topics.items():
                if not isinstance(one, dict):
                    raise ValueError(f"ydb_topic: bad offsets of topic {path!r} in a checkpoint offset: {one!r}")
                parsed[path] = TopicOffsets.from_json({**one, "topic": path})
            return cls(parsed, split)
        one = TopicOffsets.from_json(value)
        return cls({one.path: one}, split)

    def for_topic(self, path: str, single: bool) -> TopicOffsets | None:
        """This topic's offsets; the oldest form (no topic named) counts for the only topic read."""
        found = self.topics.get(path)
        if found is None and single and None in self.topics:
            return self.topics[None]
        return found


LossReport = Callable[[str], None]
"""Called with a description of lost data: raises ``DataLossError`` or logs a warning."""


def loss_reporter(fail_on_data_loss: bool, topic: str) -> LossReport:
    def report(what: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(
                f"ydb_topic: {what} (topic {topic}). Some data may have been lost. If that is acceptable, "
                "set the option failOnDataLoss to false: the query then logs a warning and continues "
                "from the first offset available."
            )
        logger.warning("ydb_topic: %s (topic %s); failOnDataLoss is false: continuing from the first offset available",
                       what, topic)

    return report


def range_reporter(fail_on_data_loss: bool, topic: str) -> LossReport:
    """For requested offsets past a partition's end: not lost data, data not written yet. As in the
    Kafka connector it fails the read unless ``failOnDataLoss`` is false, which clamps them."""

    def report(what: str) -> None:
        if fail_on_data_loss:
            raise ValueError(
                f"ydb_topic: {what} (topic {topic}): that offset has not been written yet. Ask for -1 (the end), "
                "or set the option failOnDataLoss to false to read up to the partition's end instead."
            )
        logger.warning("ydb_topic: %s (topic %s); failOnDataLoss is false: reading up to the partition's end",
                       what, topic)

    return report


def check_start(state: TopicState, checkpoint: TopicOffsets, report: LossReport) -> dict[int, int]:
    """Where to continue, given checkpointed offsets and the topic as it is now.

    Every way the checkpoint no longer matches the topic is reported (and, when ``report`` does not
    raise, reading continues from each partition's first available offset): another topic or a
    recreated one, a partition that is gone, an offset past the partition's end (offsets went
    backwards), offsets that expired. A partition the checkpoint does not know is new: it is
    read from offset 0, and offsets it no longer has are reported too.
    """
    if checkpoint.path is not None and checkpoint.path != state.path:
        report(f"the checkpoint's offsets are for topic {checkpoint.path}, not {state.path}")
        return state.firsts
    created, now = checkpoint.created_at_ms, state.created_at_ms
    if created is not None and now is not None and created != now:
        report(
            f"the topic was deleted and created again since the checkpoint (created at {now} ms, "
            f"the checkpoint's topic at {created} ms)"
        )
        return state.firsts
    start: dict[int, int] = {}
    for pid in sorted(set(checkpoint.partitions) - set(state.bounds)):
        report(f"partition {pid} is gone (the checkpoint reads it from offset {checkpoint.partitions[pid]})")
    for pid, (first, end) in sorted(state.bounds.items()):
        offset = checkpoint.partitions.get(pid, 0)
        if offset > end:
            report(f"partition {pid} ends at offset {end}, before the checkpoint's offset {offset}: "
                   "offsets went backwards")
            offset = first
        elif offset < first:
            if pid in checkpoint.partitions:
                report(f"offsets {offset}..{first - 1} of partition {pid} expired before they were read")
            else:
                report(f"partition {pid} appeared with offsets from {first}: {offset}..{first - 1} expired unread")
            offset = first
        start[pid] = offset
    return start


def resolve(
    spec: str | Mapping[int, int], state: TopicState, name: str, report: LossReport, past_end: LossReport
) -> dict[int, int]:
    """Concrete offsets for every partition of ``state`` from ``earliest``/``latest``/JSON.

    Partitions the spec does not name start at the earliest (``startingOffsets``) or end at the
    latest (``endingOffsets``). An offset before the partition's first is lost data (``report``);
    one past its end was never written (``past_end``); either is then clamped into the range.
    """
    bounds = state.bounds
    if spec == "earliest":
        return state.firsts
    if spec == "latest":
        return state.ends
    if isinstance(spec, str):
        raise TypeError(f"resolve takes earliest, latest or offsets per partition, not {spec!r}")
    missing = sorted(set(spec) - set(bounds))
    if missing:
        raise ValueError(f"ydb_topic: option {name!r} names partitions the topic does not have: {missing}")
    result: dict[int, int] = {}
    for pid, (first, end) in bounds.items():
        offset = spec.get(pid, EARLIEST if name.startswith("starting") else LATEST)
        if offset == EARLIEST:
            offset = first
        elif offset == LATEST:
            offset = end
        elif offset < first:
            report(f"option {name!r} asks for offset {offset} of partition {pid}, which has offsets {first}..{end}")
            offset = first
        elif offset > end:
            past_end(f"option {name!r} asks for offset {offset} of partition {pid}, which ends at offset {end}")
            offset = end
        result[pid] = offset
    return result


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic partition: one Spark input partition."""

    partition: int
    start: int
    end: int
    created_at_ms: int | None = None
    """The topic's creation time when the range was planned (None: unknown)."""
    topic: str = ""
    """The topic's full path ("": the only topic of the options)."""

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def ranges(
    start: Mapping[int, int], end: Mapping[int, int], created_at_ms: int | None = None, topic: str = ""
) -> list[OffsetRange]:
    """Non-empty ranges per partition; a partition absent from ``start`` is new and read from 0."""
    result = []
    for pid in sorted(end):
        begin = start.get(pid, 0)
        if end[pid] > begin:
            result.append(OffsetRange(pid, begin, end[pid], created_at_ms, topic))
    return result


def split(parts: list[OffsetRange], min_partitions: int | None, max_records: int | None) -> list[OffsetRange]:
    """Split ranges into more Spark partitions: at least ``min_partitions`` in total (large ranges
    get more pieces, as in the Kafka connector) and at most ``max_records`` offsets each."""
    total = sum(r.size for r in parts)
    if total == 0:
        return parts
    grow = min_partitions is not None and len(parts) < min_partitions
    result: list[OffsetRange] = []
    for rng in parts:
        pieces = 1
        if grow:
            assert min_partitions is not None
            pieces = max(pieces, math.ceil(rng.size * min_partitions / total))
        if max_records is not None:
            pieces = max(pieces, math.ceil(rng.size / max_records))
        pieces = min(pieces, rng.size)
        for i in range(pieces):
            lo = rng.start + rng.size * i // pieces
            hi = rng.start + rng.size * (i + 1) // pieces
            result.append(OffsetRange(rng.partition, lo, hi, rng.created_at_ms, rng.topic))
    return result


def limit_offsets(start: Mapping[K, int], latest: Mapping[K, int], max_rows: int | None) -> dict[K, int]:
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


def backlog(start: Mapping[K, int], latest: Mapping[K, int]) -> int:
    """Offsets between ``start`` and ``latest`` in total (new partitions count from 0)."""
    return sum(max(0, end - start.get(pid, 0)) for pid, end in latest.items())
