"""Driver-side questions to the server while planning reads: the topic's state, offsets by time
(both through ``driver.topic``'s public calls)."""

from __future__ import annotations

import datetime as dt

from .. import Driver
from ._offsets import TopicState
from ._options import ByTimestamp

_MS = dt.timedelta(milliseconds=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def to_ms(value: dt.datetime) -> int:
    return round((value - _EPOCH) / _MS)


async def describe(driver: Driver, topic: str) -> TopicState:
    """The topic's identity and each partition's ``(first, end)`` offsets (active or not)."""
    description = await driver.topic.describe_topic(topic, include_stats=True)
    bounds: dict[int, tuple[int, int]] = {}
    last_write: dict[int, int] = {}
    for partition in description.partitions:
        stats = partition.stats
        bounds[partition.partition_id] = (stats.start_offset, stats.end_offset) if stats else (0, 0)
        if stats is not None and stats.last_write_time is not None:
            last_write[partition.partition_id] = to_ms(stats.last_write_time)
    created = to_ms(description.created_at) if description.created_at is not None else None
    return TopicState(description.path, created, bounds, last_write)


async def offsets_by_time(
    driver: Driver,
    state: TopicState,
    spec: ByTimestamp,
    *,
    name: str,
    missing_is_end: bool,
    timeout: float,
) -> dict[int, int]:
    """Per partition, the offset of the first message written at or after the spec's time
    (``driver.topic.offsets_for_time``).

    A partition the spec gives no time for starts at the earliest (or, for ending offsets, ends at
    the latest). When no message is that recent, the result is the partition's end if
    ``missing_is_end`` (``endingTimestamp``, or ``startingOffsetsByTimestampStrategy=latest``);
    otherwise that is an error, as in the Kafka connector.
    """
    missing = sorted(set(spec.partitions) - set(state.bounds))
    if missing:
        raise ValueError(f"ydb_topic: option {name!r} names partitions the topic does not have: {missing}")
    ending = name.startswith("ending")
    wanted = {pid: spec.for_partition(pid) for pid in state.bounds}
    times = {pid: _EPOCH + ms * _MS for pid, ms in wanted.items() if ms is not None}
    found = await driver.topic.offsets_for_time(state.path, times, timeout=timeout) if times else {}
    result: dict[int, int] = {}
    for pid, (first, end) in sorted(state.bounds.items()):
        at_ms = wanted[pid]
        if at_ms is None:
            result[pid] = end if ending else first
            continue
        offset = found.get(pid)
        if offset is None:
            if not missing_is_end:
                raise ValueError(
                    f"ydb_topic: option {name!r}: partition {pid} has no message written at or after {at_ms} ms "
                    f"(its last was written at {state.last_write_ms.get(pid)} ms); set "
                    "startingOffsetsByTimestampStrategy to 'latest' to start at its end instead"
                )
            offset = end
        # A message written after the description was taken may be the first match: that is the end.
        result[pid] = min(offset, end)
    return result
