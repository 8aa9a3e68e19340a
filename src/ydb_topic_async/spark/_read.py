"""Executor side of reads: one offset range of one partition, as Arrow record batches.

A task reads its range with a no-consumer reader on the process's shared driver, from the exact
start offset up to (not including) the end offset, and checks on the way that nothing in the
range is missing: a first message past the expected offset means the offsets in between expired
(or the topic was recreated); that is data loss, reported as ``failOnDataLoss`` says.
"""

from __future__ import annotations

import datetime as dt
import time
from bisect import bisect_left
from collections.abc import Iterator
from itertools import repeat
from typing import Any

import pyarrow as pa

from .. import MessageBatch, MessageColumns, OperationTimeoutError, TopicReader, TopicSelector
from ..observability import sdk_logger
from ._bridge import Runtime, retry_policy, runtime
from ._offsets import LossReport, OffsetRange, loss_reporter
from ._options import SourceOptions
from ._planning import describe

logger = sdk_logger("spark")

ARROW_ROWS = 8192
"""Rows per Arrow batch a read yields (Spark's own default maximum is 10 000)."""
READ_BUFFER = 16 * 1024 * 1024
"""Bytes a task's reader may hold unread: the server keeps sending while Spark converts."""
_CHECK_INTERVAL = 5.0
"""Seconds of silence after which a task asks the server whether its range still exists."""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def read_range(options: SourceOptions, rng: OffsetRange | None, arrow: pa.Schema | None) -> Iterator[Any]:
    """``[rng.start, rng.end)`` of one partition as Arrow batches (tuples when ``arrow`` is None)."""
    if rng is None or rng.size == 0:  # Spark plans one InputPartition(None) when there are no ranges
        return iter(())
    return _read(options, rng, arrow)


def _read(options: SourceOptions, rng: OffsetRange, arrow: pa.Schema | None) -> Iterator[Any]:
    rt = runtime()
    report = loss_reporter(options.fail_on_data_loss, _topic(options, rng))
    reader = rt.run(_open(rt, options, rng))
    try:
        position = rng.start
        while position < rng.end:
            batches, start, position = rt.run(_collect(rt, reader, options, rng, position, report))
            columns = _columns(batches, rng, start, report)
            if len(columns):
                yield from _emit(_shown(options, rng), rng.partition, columns, arrow, options.include_metadata)
    finally:
        rt.run(reader.close())


def _topic(options: SourceOptions, rng: OffsetRange) -> str:
    """The range's topic (its full path; ranges planned before several topics were read carry none)."""
    return rng.topic or options.topic


def _shown(options: SourceOptions, rng: OffsetRange) -> str:
    """The ``topic`` column of the range's rows: the topic as the ``topic`` option names it."""
    if not rng.topic:
        return options.topic
    return next((t for t in options.topics if t == rng.topic or options.full_path(t) == rng.topic), rng.topic)


async def _open(rt: Runtime, options: SourceOptions, rng: OffsetRange) -> TopicReader:
    driver = await rt.driver(options.connection)
    selector = TopicSelector(_topic(options, rng), partitions=[rng.partition], start_offsets={rng.partition: rng.start})
    retry = retry_policy(options.connection)
    return driver.topic.reader(selector, consumer=None, buffer_size_bytes=READ_BUFFER, retry=retry)


async def _collect(
    rt: Runtime, reader: TopicReader, options: SourceOptions, rng: OffsetRange, position: int, report: LossReport
) -> tuple[list[MessageBatch], int, int]:
    """Batches from ``position`` on, up to ``ARROW_ROWS`` messages or the range's end; the
    position they start from (past offsets found missing meanwhile) and the next position.
    Their messages are taken apart later, by ``_columns`` on Spark's thread."""
    collected: list[MessageBatch] = []
    count = 0
    start = position
    waited_since = time.monotonic()
    while position < rng.end and count < ARROW_ROWS:
        if collected and not reader.buffered_bytes:
            break  # hand over what arrived; the reader keeps receiving meanwhile
        try:
            batch = await reader.receive_batch(timeout=min(_CHECK_INTERVAL, options.poll_timeout))
        except OperationTimeoutError:
            position = await _check_silence(rt, options, rng, position, report, waited_since)
            continue
        waited_since = time.monotonic()
        if not collected:
            start = position
        collected.append(batch)
        count += len(batch)
        position = max(position, batch.end_offset)
    return collected, start, min(position, rng.end)


async def _check_silence(
    rt: Runtime, options: SourceOptions, rng: OffsetRange, position: int, report: LossReport, since: float
) -> int:
    """Nothing arrived for a while: find out whether the rest of the range still exists."""
    driver = await rt.driver(options.connection)
    state = await describe(driver, _topic(options, rng))
    first, end = state.bounds.get(rng.partition, (0, 0))
    if rng.created_at_ms is not None and state.created_at_ms not in (None, rng.created_at_ms):
        report(f"the topic was deleted and created again while partition {rng.partition} "
               f"offsets {position}..{rng.end - 1} were being read")
        return rng.end
    if end < rng.end and end <= position:
        report(f"partition {rng.partition} ends at offset {end}, before the planned {rng.end}: offsets went backwards")
        return rng.end
    if first > position:
        report(f"offsets {position}..{min(first, rng.end) - 1} of partition {rng.partition} expired before "
               "they were read")
        return min(first, rng.end)
    if time.monotonic() - since >= options.poll_timeout:
        raise TimeoutError(
            f"ydb_topic: no message from {_topic(options, rng)} partition {rng.partition} at offset {position} "
            f"within pollTimeout={options.poll_timeout}s (the partition has offsets {first}..{end - 1}; "
            f"reading up to {rng.end})"
        )
    return position


def _columns(batches: list[MessageBatch], rng: OffsetRange, position: int, report: LossReport) -> MessageColumns:
    """The messages of ``batches`` in ``[position, rng.end)`` as columns; a batch that starts past
    where the one before it ended is reported as missing data."""
    joined = MessageColumns([], [], [], [], [], [], None, [])
    metadata: list[dict[str, bytes]] = []
    with_metadata = False
    for batch in batches:
        part = batch.columns()
        offsets = part.offset
        if offsets[0] > position:
            report(f"offsets {position}..{min(offsets[0], rng.end) - 1} of partition {rng.partition} are missing "
                   f"(the first message available is at {offsets[0]}): they expired or were deleted")
        low, high = bisect_left(offsets, position), bisect_left(offsets, rng.end)
        for name in _LIST_FIELDS:
            getattr(joined, name).extend(getattr(part, name)[low:high])
        if part.metadata is None:
            metadata.extend(repeat(_NO_METADATA, high - low))
        else:
            metadata.extend(part.metadata[low:high])
            with_metadata = True
        position = max(position, batch.end_offset)
    if with_metadata:
        joined.metadata = metadata
    return joined


_LIST_FIELDS = ("offset", "seq_no", "producer_id", "message_group_id", "created_at_us", "written_at_us", "data")
_NO_METADATA: dict[str, bytes] = {}
"""Shared by the rows without metadata: read-only."""


def _emit(topic: str, partition: int, c: MessageColumns, arrow: pa.Schema | None, with_metadata: bool) -> Iterator[Any]:
    n = len(c)
    if arrow is None:
        metadata = c.metadata or [_NO_METADATA] * n
        for i in range(n):
            row = (topic, partition, c.offset[i], c.seq_no[i], c.producer_id[i], c.message_group_id[i],
                   _datetime(c.created_at_us[i]), _datetime(c.written_at_us[i]))
            yield (*row, metadata[i], c.data[i]) if with_metadata else (*row, c.data[i])
        return
    columns: dict[str, Any] = {
        "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), n),
        "offset": c.offset,
        "seq_no": c.seq_no,
        "producer_id": c.producer_id,
        "message_group_id": c.message_group_id,
        "created_at": c.created_at_us,
        "written_at": c.written_at_us,
        "data": c.data,
    }
    if with_metadata:
        columns["metadata"] = c.metadata if c.metadata is not None else [_NO_METADATA] * n
    arrays = [
        column if isinstance(column := columns[f.name], pa.Array) else pa.array(column, type=f.type) for f in arrow
    ]
    yield pa.RecordBatch.from_arrays(arrays, schema=arrow)


def _datetime(micros: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=micros)
