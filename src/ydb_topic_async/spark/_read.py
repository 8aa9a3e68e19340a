"""Executor side of reads: one offset range of one partition, as Arrow record batches.

A task reads its range with a no-consumer reader on the process's shared driver, from the exact
start offset up to (not including) the end offset, and checks on the way that nothing in the
range is missing: a first message past the expected offset means the offsets in between expired
(or the topic was recreated); that is data loss, reported as ``failOnDataLoss`` says.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from operator import attrgetter
from typing import Any

import pyarrow as pa

from .. import OperationTimeoutError, TopicMessage, TopicReader, TopicSelector
from ..observability.logging import sdk_logger
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
_MICROSECOND = dt.timedelta(microseconds=1)
_OFFSET, _SEQ_NO, _DATA = attrgetter("offset"), attrgetter("seq_no"), attrgetter("data")
_PRODUCER_ID, _MESSAGE_GROUP_ID = attrgetter("producer_id"), attrgetter("message_group_id")
_CREATED_AT_US, _WRITTEN_AT = attrgetter("created_at_us"), attrgetter("written_at")
_METADATA = attrgetter("metadata_items")


def read_range(options: SourceOptions, rng: OffsetRange | None, arrow: pa.Schema | None) -> Iterator[Any]:
    """``[rng.start, rng.end)`` of one partition as Arrow batches (tuples when ``arrow`` is None)."""
    if rng is None or rng.size == 0:  # Spark plans one InputPartition(None) when there are no ranges
        return iter(())
    return _read(options, rng, arrow)


def _read(options: SourceOptions, rng: OffsetRange, arrow: pa.Schema | None) -> Iterator[Any]:
    rt = runtime()
    report = loss_reporter(options.fail_on_data_loss, options.topic)
    reader = rt.run(_open(rt, options, rng))
    try:
        position = rng.start
        while position < rng.end:
            messages, position = rt.run(_collect(rt, reader, options, rng, position, report))
            if messages:
                yield from _emit(options.topic, rng.partition, messages, arrow, options.include_metadata)
    finally:
        rt.run(reader.close())


async def _open(rt: Runtime, options: SourceOptions, rng: OffsetRange) -> TopicReader:
    driver = await rt.driver(options.connection)
    selector = TopicSelector(options.topic, partitions=[rng.partition], start_offsets={rng.partition: rng.start})
    retry = retry_policy(options.connection)
    return driver.topic.reader(selector, consumer=None, buffer_size_bytes=READ_BUFFER, retry=retry)


async def _collect(
    rt: Runtime, reader: TopicReader, options: SourceOptions, rng: OffsetRange, position: int, report: LossReport
) -> tuple[list[TopicMessage], int]:
    """Messages from ``position`` on, up to ``ARROW_ROWS`` or the range's end; and the next position."""
    collected: list[TopicMessage] = []
    waited_since = time.monotonic()
    while position < rng.end and len(collected) < ARROW_ROWS:
        if collected and not reader.buffered_bytes:
            break  # hand over what arrived; the reader keeps receiving meanwhile
        try:
            batch = await reader.receive_batch(timeout=min(_CHECK_INTERVAL, options.poll_timeout))
        except OperationTimeoutError:
            position = await _check_silence(rt, options, rng, position, report, waited_since)
            continue
        waited_since = time.monotonic()
        first = batch[0].offset
        if first > position:
            report(f"offsets {position}..{min(first, rng.end) - 1} of partition {rng.partition} are missing "
                   f"(the first message available is at {first}): they expired or were deleted")
            position = first
        messages = batch.messages
        if first >= position and messages[-1].offset < rng.end:
            collected.extend(messages)  # the whole batch is in the range (the usual case)
        else:
            collected.extend(m for m in messages if position <= m.offset < rng.end)
        position = max(position, batch.end_offset)
    return collected, min(position, rng.end)


async def _check_silence(
    rt: Runtime, options: SourceOptions, rng: OffsetRange, position: int, report: LossReport, since: float
) -> int:
    """Nothing arrived for a while: find out whether the rest of the range still exists."""
    driver = await rt.driver(options.connection)
    state = await describe(driver, options.topic)
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
            f"ydb_topic: no message from {options.topic} partition {rng.partition} at offset {position} "
            f"within pollTimeout={options.poll_timeout}s (the partition has offsets {first}..{end - 1}; "
            f"reading up to {rng.end})"
        )
    return position


def _emit(
    topic: str, partition: int, messages: list[TopicMessage], arrow: pa.Schema | None, with_metadata: bool
) -> Iterator[Any]:
    if arrow is None:
        for m in messages:
            row = (topic, partition, m.offset, m.seq_no, m.producer_id, m.message_group_id,
                   m.created_at, m.written_at)
            yield (*row, m.metadata_items, m.data) if with_metadata else (*row, m.data)
        return
    n = len(messages)
    # The messages of one server batch share one written_at object: convert each object once.
    written: list[int] = []
    last: dt.datetime | None = None
    last_micros = 0
    for value in map(_WRITTEN_AT, messages):
        if value is not last:
            last, last_micros = value, (value - _EPOCH) // _MICROSECOND
        written.append(last_micros)
    # map() over attrgetters runs the per-message loop in C: this is the hot path of a read.
    columns: dict[str, Any] = {
        "topic": pa.array([topic] * n, pa.string()),
        "partition": pa.array([partition] * n, pa.int32()),
        "offset": list(map(_OFFSET, messages)),
        "seq_no": list(map(_SEQ_NO, messages)),
        "producer_id": list(map(_PRODUCER_ID, messages)),
        "message_group_id": list(map(_MESSAGE_GROUP_ID, messages)),
        "created_at": list(map(_CREATED_AT_US, messages)),
        "written_at": written,
        "data": list(map(_DATA, messages)),
    }
    if with_metadata:
        columns["metadata"] = list(map(_METADATA, messages))
    arrays = [
        column if isinstance(column := columns[f.name], pa.Array) else pa.array(column, type=f.type) for f in arrow
    ]
    yield pa.RecordBatch.from_arrays(arrays, schema=arrow)
