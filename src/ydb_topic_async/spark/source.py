"""The ``ydb_topic`` PySpark data source: batch and streaming reads and writes of YDB topics.

The driver-side objects (``YdbTopicDataSource``, the readers' planning methods, the writers'
``commit``) describe topics and plan offset ranges; the executor-side methods (``read``,
``write``) each open a driver on a private event loop (``_bridge.TaskLoop``) and close it before
the task ends.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .._driver import Driver
from .._errors import OperationTimeoutError
from ..observability.logging import sdk_logger
from ..reader import TopicMessage, TopicSelector
from ..writer import Message, TopicWriter
from . import _offsets
from ._bridge import TaskLoop, open_driver, run_with_driver
from ._offsets import Bounds, OffsetRange
from ._options import SourceOptions, parse_options

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

    HAS_READ_LIMIT = True
except ImportError:  # pyspark 4.0 / 4.1: latestOffset() takes no arguments
    HAS_READ_LIMIT = False

try:  # pyspark >= 4.1: the streaming sink can take Arrow batches instead of Rows
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment,unused-ignore]
from pyspark.sql.datasource import DataSourceArrowWriter

logger = sdk_logger("spark")

NAME = "ydb_topic"
SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("seq_no", LongType()),
        StructField("producer_id", StringType()),
        StructField("message_group_id", StringType()),
        StructField("created_at", TimestampType()),
        StructField("written_at", TimestampType()),
        StructField("metadata", MapType(StringType(), BinaryType())),
        StructField("data", BinaryType()),
    ]
)
"""The rows a read produces."""

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The Spark local property holding the micro-batch id in a streaming task."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The Spark local property holding the streaming query's id (stable across restarts)."""

_ARROW_ROWS = 8192
"""Rows per Arrow batch a read yields (Spark's own default maximum is 10 000)."""
_READ_BUFFER = 16 * 1024 * 1024
_SEQ_BATCH_SHIFT = 32
"""Sink seq_no = (batch id + 1) << 32 | (row position + 1): increasing across batches, 4G rows each."""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)


class YdbTopicDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """``spark.read/readStream/write/writeStream.format("ydb_topic")``; see the package docstring for options."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Checked here so that bad options fail at load()/save()/start() on the driver.
        self.parsed = parse_options(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_read_schema(schema)
        return _BatchReader(self.parsed, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_read_schema(schema)
        if self.parsed.ending_offsets is not None:
            raise ValueError("ydb_topic: option 'endingOffsets' is for batch reads only, not readStream")
        return _StreamReader(self.parsed, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("ydb_topic: topics are append-only; use mode('append'), not 'overwrite'")
        return _BatchWriter(self.parsed, _input_columns(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # overwrite means output mode "complete": each batch's rows are appended, as in Kafka's sink.
        return _StreamWriter(self.parsed, _input_columns(schema))


def _check_read_schema(schema: StructType) -> None:
    if [f.name for f in schema.fields] != SCHEMA.fieldNames():
        raise ValueError(f"ydb_topic: the schema is fixed ({SCHEMA.simpleString()}); do not pass another one")


# --- reading ---------------------------------------------------------------------------------


async def _bounds(driver: Driver, topic: str) -> Bounds:
    """Partition id -> (first offset, end offset), for every partition the topic has (active or not)."""
    description = await driver.topic.describe_topic(topic, include_stats=True)
    bounds: dict[int, tuple[int, int]] = {}
    for partition in description.partitions:
        stats = partition.stats
        bounds[partition.partition_id] = (stats.start_offset, stats.end_offset) if stats else (0, 0)
    return bounds


def _describe(options: SourceOptions) -> Bounds:
    return run_with_driver(options, lambda driver: _bounds(driver, options.topic))


class _BatchReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        bounds = _describe(self.options)
        start = _offsets.resolve(self.options.starting_offsets, bounds, "startingOffsets")
        end = _offsets.resolve(self.options.ending_offsets or "latest", bounds, "endingOffsets")
        return [InputPartition(r) for r in _offsets.ranges(start, end)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition.value, self.schema)


class _StreamReaderBase(DataSourceStreamReader):  # type: ignore[misc,unused-ignore]
    """Offsets are ``{"<partition id>": next offset}``; partitions that appear later are read from their start."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._available_now: dict[int, int] | None = None
        self._last_end: dict[int, int] | None = None
        """Where the previous micro-batch ended (pyspark < 4.2 does not pass ``start`` to ``latestOffset``)."""
        if options.consumer:
            consumers = run_with_driver(options, lambda d: d.topic.describe_topic(options.topic)).consumers
            if options.consumer not in {c.name for c in consumers}:
                raise ValueError(f"ydb_topic: topic {options.topic!r} has no consumer {options.consumer!r}")

    def initialOffset(self) -> dict[str, int]:
        bounds = _describe(self.options)
        start = _offsets.resolve(self.options.starting_offsets, bounds, "startingOffsets")
        self._last_end = start
        return _offsets.to_checkpoint(start)

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        latest = {pid: end for pid, (_, end) in _describe(self.options).items()}
        if self._available_now is not None:
            # Trigger.AvailableNow: stop at what existed when the query started.
            latest = {pid: min(end, self._available_now.get(pid, 0)) for pid, end in latest.items()}
        begin = _offsets.from_checkpoint(start) if start is not None else self._last_end
        if limit is None:  # pyspark < 4.2 has no ReadLimit: apply the option ourselves
            max_rows = self.options.max_offsets_per_trigger if begin is not None else None
        else:
            max_rows = getattr(limit, "max_rows", None)
        end = _offsets.limit_offsets(begin or {}, latest, max_rows)
        if begin:
            # Partitions never go backwards, even if the description lags a checkpointed offset.
            end = {pid: max(offset, begin.get(pid, 0)) for pid, offset in end.items()}
        self._last_end = end
        return _offsets.to_checkpoint(end)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {pid: end for pid, (_, end) in _describe(self.options).items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        ranges = _offsets.ranges(_offsets.from_checkpoint(start), _offsets.from_checkpoint(end))
        return [InputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition.value, self.schema)

    def commit(self, end: dict[str, int]) -> None:
        consumer = self.options.consumer
        if not consumer:
            return
        offsets = _offsets.from_checkpoint(end)

        async def commit_all(driver: Driver) -> None:
            for pid, offset in offsets.items():
                await driver.topic.commit_offset(self.options.topic, pid, consumer, offset)

        try:
            run_with_driver(self.options, commit_all)
        except Exception:
            # Spark's checkpoint is authoritative: a failed commit only delays the visible lag.
            logger.warning("ydb_topic: committing %s for consumer %r failed", end, consumer, exc_info=True)

    def stop(self) -> None:
        pass


if HAS_READ_LIMIT:

    class _StreamReader(_StreamReaderBase, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
        pass

else:
    _StreamReader = _StreamReaderBase  # type: ignore[misc,assignment,unused-ignore]


def read_range(options: SourceOptions, rng: OffsetRange | None, schema: StructType) -> Iterator[Any]:
    """Executor side: read ``[rng.start, rng.end)`` of one partition without a consumer."""
    if rng is None or rng.size == 0:  # Spark plans one InputPartition(None) when there are no ranges
        return iter(())
    return _read_range(options, rng, _arrow_schema(schema))


def _arrow_schema(schema: StructType) -> pa.Schema | None:
    """The Arrow schema Spark expects from ``read`` (None: this pyspark cannot say; yield tuples)."""
    try:
        from pyspark.sql.pandas.types import to_arrow_schema
    except ImportError:
        return None
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # pyspark 4.0 has no timezone argument (and uses UTC)
        try:
            return to_arrow_schema(schema)
        except Exception:
            return None


def _read_range(options: SourceOptions, rng: OffsetRange, arrow: pa.Schema | None) -> Iterator[Any]:
    loop = TaskLoop()
    driver: Driver | None = None
    try:
        driver = loop.run(open_driver(options))
        selector = TopicSelector(options.topic, partitions=[rng.partition], start_offsets={rng.partition: rng.start})
        reader = driver.topic.reader(selector, consumer=None, buffer_size_bytes=_READ_BUFFER)
        next_offset = rng.start
        pending: list[TopicMessage] = []
        while next_offset < rng.end:
            try:
                batch = loop.run(reader.receive_batch(timeout=options.poll_timeout))
            except OperationTimeoutError:
                first, _ = (loop.run(_bounds(driver, options.topic))).get(rng.partition, (0, 0))
                if first >= rng.end:
                    logger.warning("ydb_topic: %s partition %d offsets %d..%d expired before they were read",
                                   options.topic, rng.partition, next_offset, rng.end)
                    break
                raise TimeoutError(
                    f"ydb_topic: no message from {options.topic} partition {rng.partition} at offset {next_offset} "
                    f"within pollTimeout={options.poll_timeout}s (reading up to offset {rng.end})"
                ) from None
            for message in batch:
                if message.offset < rng.end:
                    pending.append(message)
            next_offset = batch.end_offset
            if len(pending) >= _ARROW_ROWS:
                yield from _emit(options.topic, rng.partition, pending, arrow)
                pending = []
        if pending:
            yield from _emit(options.topic, rng.partition, pending, arrow)
        loop.run(reader.close())
    finally:
        try:
            if driver is not None:
                loop.run(driver.close())
        finally:
            loop.close()


def _micros(value: dt.datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


def _emit(topic: str, partition: int, messages: list[TopicMessage], arrow: pa.Schema | None) -> Iterator[Any]:
    if arrow is None:
        for m in messages:
            yield (topic, partition, m.offset, m.seq_no, m.producer_id, m.message_group_id,
                   m.created_at, m.written_at, m.metadata_items, m.data)
        return
    n = len(messages)
    columns: dict[str, list[Any]] = {
        "topic": [topic] * n,
        "partition": [partition] * n,
        "offset": [m.offset for m in messages],
        "seq_no": [m.seq_no for m in messages],
        "producer_id": [m.producer_id for m in messages],
        "message_group_id": [m.message_group_id for m in messages],
        "created_at": [_micros(m.created_at) for m in messages],
        "written_at": [_micros(m.written_at) for m in messages],
        "metadata": [list(m.metadata_items.items()) for m in messages],
        "data": [m.data for m in messages],
    }
    arrays = [pa.array(columns[f.name], type=f.type) for f in arrow]
    yield pa.RecordBatch.from_arrays(arrays, schema=arrow)


# --- writing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Columns:
    """Where the writable columns are in the input rows."""

    data: int
    data_is_string: bool
    metadata: int | None
    partition: int | None


def _input_columns(schema: StructType) -> _Columns:
    names = [f.name.lower() for f in schema.fields]
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "data" not in names:
        raise ValueError(f"ydb_topic: writing needs a 'data' column (binary or string); the input has {names}")
    if not isinstance(types["data"], (BinaryType, StringType)):
        raise ValueError(f"ydb_topic: column 'data' must be binary or string, not {types['data'].simpleString()}")
    metadata = names.index("metadata") if "metadata" in names else None
    if metadata is not None:
        mt = types["metadata"]
        if not (
            isinstance(mt, MapType)
            and isinstance(mt.keyType, StringType)
            and isinstance(mt.valueType, (BinaryType, StringType))
        ):
            raise ValueError(
                f"ydb_topic: column 'metadata' must be map<string, binary|string>, not {mt.simpleString()}"
            )
    partition = names.index("partition") if "partition" in names else None
    if partition is not None and not isinstance(types["partition"], (IntegerType, LongType)):
        raise ValueError(
            f"ydb_topic: column 'partition' must be int or bigint, not {types['partition'].simpleString()}"
        )
    return _Columns(names.index("data"), isinstance(types["data"], StringType), metadata, partition)


Record = tuple[bytes, list[tuple[str, bytes]] | None, int | None]


def _records_from_arrow(batches: Iterator[pa.RecordBatch], cols: _Columns) -> Iterator[Record]:
    for batch in batches:
        data = batch.column(cols.data).to_pylist()
        meta = batch.column(cols.metadata).to_pylist() if cols.metadata is not None else None
        part = batch.column(cols.partition).to_pylist() if cols.partition is not None else None
        for i, payload in enumerate(data):
            yield _record(payload, meta[i] if meta is not None else None, part[i] if part is not None else None)


def _records_from_rows(rows: Iterator[Any], cols: _Columns) -> Iterator[Record]:
    for row in rows:
        meta = row[cols.metadata] if cols.metadata is not None else None
        part = row[cols.partition] if cols.partition is not None else None
        yield _record(row[cols.data], meta, part)


def _record(payload: Any, meta: Any, partition: Any) -> Record:
    if payload is None:
        raise ValueError("ydb_topic: column 'data' is null in a row to write")
    data = payload.encode() if isinstance(payload, str) else bytes(payload)
    items = None
    if meta:
        pairs = meta.items() if isinstance(meta, dict) else meta
        items = [(str(k), v.encode() if isinstance(v, str) else bytes(v or b"")) for k, v in pairs]
    if partition is not None and partition < 0:
        raise ValueError(f"ydb_topic: column 'partition' must not be negative, got {partition}")
    return data, items, partition


@dataclass(frozen=True)
class YdbTopicCommitMessage(WriterCommitMessage):  # type: ignore[misc,unused-ignore]
    """What a write task reports: every message it sent was acknowledged."""

    producer_id: str
    messages: int


def write_records(options: SourceOptions, producer_id: str, records: Iterator[Record], first_seq_no: int) -> int:
    """Executor side: write with seq_nos from ``first_seq_no`` on; return once every message is acknowledged."""

    async def main(driver: Driver) -> int:
        writers: dict[int | None, TopicWriter] = {}
        seq_no = first_seq_no
        count = 0
        try:
            for data, metadata, partition in records:
                writer = writers.get(partition)
                if writer is None:
                    # One writer per target partition. YDB binds a producer id to one partition,
                    # so each explicit partition gets its own id (derived, hence stable across
                    # retries); seq_nos only grow within each.
                    writer = driver.topic.writer(
                        options.topic,
                        producer_id=producer_id if partition is None else f"{producer_id}-p{partition}",
                        partition_id=partition, auto_seqno=False, codec=options.codec,
                    )
                    writers[partition] = writer
                await writer.write(Message(data, seq_no=seq_no, metadata=metadata))
                seq_no += 1
                count += 1
        finally:
            for writer in writers.values():
                await writer.close()  # waits for every acknowledgement (raises if one failed)
        return count

    return run_with_driver(options, main)


def _task_partition() -> tuple[int, TaskContext | None]:
    ctx = TaskContext.get()
    return (ctx.partitionId() if ctx is not None else 0), ctx


class _BatchWriter(DataSourceArrowWriter):  # type: ignore[misc,unused-ignore]
    """Each task writes as ``<prefix>-<partition>``; the prefix is fixed per job, so a retried task is deduplicated."""

    def __init__(self, options: SourceOptions, cols: _Columns) -> None:
        self.options = options
        self.cols = cols
        self.prefix = options.producer_id_prefix or f"spark-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        partition, _ = _task_partition()
        producer_id = f"{self.prefix}-{partition}"
        count = write_records(self.options, producer_id, _records_from_arrow(iterator, self.cols), 1)
        return YdbTopicCommitMessage(producer_id, count)


class _StreamWriter(_StreamWriterBase):  # type: ignore[misc,unused-ignore]
    """The exactly-once sink.

    Producer id: ``<prefix>-<query id>-<Spark partition>`` (the query id survives restarts from
    the checkpoint); seq_no: ``(batch id + 1) << 32 | (row position + 1)``. A re-executed batch
    sends the same producer ids and seq_nos, and the server skips what it already stored. This
    needs the same rows in the same Spark partition in the same order on re-execution, which
    holds for deterministic plans over replayable sources such as this one.
    """

    def __init__(self, options: SourceOptions, cols: _Columns) -> None:
        self.options = options
        self.cols = cols
        self.prefix = options.producer_id_prefix or "spark"
        self.fallback_query_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        partition, ctx = _task_partition()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        query_id = (ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None) or self.fallback_query_id
        if batch_id is None:
            raise RuntimeError(f"ydb_topic: the streaming sink runs in a task without {BATCH_ID_PROPERTY!r}")
        producer_id = f"{self.prefix}-{query_id}-{partition}"
        first = ((int(batch_id) + 1) << _SEQ_BATCH_SHIFT) | 1
        records = (
            _records_from_arrow(iterator, self.cols)
            if _StreamWriterBase is not DataSourceStreamWriter
            else _records_from_rows(iterator, self.cols)
        )
        count = write_records(self.options, producer_id, records, first)
        return YdbTopicCommitMessage(producer_id, count)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.messages for m in messages if isinstance(m, YdbTopicCommitMessage))
        logger.info("ydb_topic: batch %d wrote %d messages to %s", batchId, total, self.options.topic)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Whatever was stored stays; re-running the batch is deduplicated by seq_no.
        logger.warning("ydb_topic: batch %d aborted", batchId)
