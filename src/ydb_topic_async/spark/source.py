"""The ``ydb_topic`` PySpark data source: batch and streaming reads and writes of YDB topics.

The driver-side objects (``YdbTopicDataSource``, the readers' planning methods, the writers'
``commit``) describe topics and plan offset ranges; the executor-side methods (``read``,
``write``) run in Spark's Python workers. Both share one driver per process and connection
options (``_bridge``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
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

from .. import Driver
from ..observability import sdk_logger
from . import _offsets
from ._bridge import runtime
from ._offsets import TopicOffsets, TopicState, loss_reporter
from ._options import ByTimestamp, OffsetSpec, SourceOptions, check_mode, parse_options
from ._planning import describe, offsets_by_time
from ._read import read_range
from ._write import (
    Columns,
    YdbTopicCommitMessage,
    chunks_from_arrow,
    chunks_from_rows,
    write_batch_task,
    write_sink_task,
)

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    HAS_READ_LIMIT = True
except ImportError:  # pyspark 4.0 / 4.1: latestOffset() takes no arguments
    HAS_READ_LIMIT = False

try:  # pyspark >= 4.1: the streaming sink can take Arrow batches instead of Rows
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment,unused-ignore]

__all__ = ["HAS_READ_LIMIT", "NAME", "SCHEMA", "YdbTopicCommitMessage", "YdbTopicDataSource", "read_range"]

T = TypeVar("T")
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
"""The rows a read produces (without ``metadata`` when the option ``includeMetadata`` is false)."""
SCHEMA_WITHOUT_METADATA = StructType([f for f in SCHEMA.fields if f.name != "metadata"])

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The Spark local property holding the micro-batch id in a streaming task."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The Spark local property holding the streaming query's id (stable across restarts)."""


class YdbTopicDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """``spark.read/readStream/write/writeStream.format("ydb_topic")``; the options are in the Spark guide."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Checked here so that bad options fail at load()/save()/start() on the driver.
        self.parsed = parse_options(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA if self.parsed.include_metadata else SCHEMA_WITHOUT_METADATA

    def reader(self, schema: StructType) -> DataSourceReader:
        check_mode(self.parsed, "batch read")
        self._check_read_schema(schema)
        return _BatchReader(self.parsed, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        check_mode(self.parsed, "stream read")
        self._check_read_schema(schema)
        return _StreamReader(self.parsed, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        check_mode(self.parsed, "batch write")
        if overwrite:
            raise ValueError("ydb_topic: topics are append-only; use mode('append'), not 'overwrite'")
        return _BatchWriter(self.parsed, _input_columns(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_mode(self.parsed, "stream write")
        # overwrite means output mode "complete": each batch's rows are appended, as in Kafka's sink.
        return _StreamWriter(self.parsed, _input_columns(schema))

    def _check_read_schema(self, schema: StructType) -> None:
        if [f.name for f in schema.fields] != self.schema().fieldNames():
            raise ValueError(
                f"ydb_topic: the schema is fixed ({self.schema().simpleString()}); do not pass another one"
            )


def _call(options: SourceOptions, fn: Callable[[Driver], Awaitable[T]]) -> T:
    """Run ``fn(driver)`` on this process's shared driver for the options' connection."""
    rt = runtime()

    async def main() -> T:
        return await fn(await rt.driver(options.connection))

    return rt.run(main())


def _describe(options: SourceOptions) -> TopicState:
    return _call(options, lambda driver: describe(driver, options.topic))


def _resolve(options: SourceOptions, state: TopicState, spec: OffsetSpec, name: str) -> dict[int, int]:
    """Concrete offsets for ``spec`` (offsets, earliest/latest, or times)."""
    report = loss_reporter(options.fail_on_data_loss, options.topic)
    if not isinstance(spec, ByTimestamp):
        return _offsets.resolve(spec, state, name, report)
    ending = name.startswith("ending")
    return _call(
        options,
        lambda driver: offsets_by_time(
            driver, state, spec, name=name, missing_is_end=ending or options.timestamp_strategy_latest,
            timeout=options.poll_timeout,
        ),
    )


def _starting_name(options: SourceOptions) -> str:
    """The option that set the starting offsets (for error messages)."""
    spec = options.starting_offsets
    if isinstance(spec, ByTimestamp):
        return "startingTimestamp" if spec.default is not None else "startingOffsetsByTimestamp"
    return "startingOffsets"


def _ending_name(options: SourceOptions) -> str:
    """The option that set the ending offsets (for error messages)."""
    spec = options.ending_offsets
    if isinstance(spec, ByTimestamp):
        return "endingTimestamp" if spec.default is not None else "endingOffsetsByTimestamp"
    return "endingOffsets"


def _input_partitions(options: SourceOptions, parts: list[_offsets.OffsetRange]) -> list[InputPartition]:
    return [InputPartition(r) for r in _offsets.split(parts, options.min_partitions, options.max_records_per_partition)]


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


# --- reading ---------------------------------------------------------------------------------


class _BatchReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        state = _describe(options)
        start = _resolve(options, state, options.starting_offsets, _starting_name(options))
        ending = options.ending_offsets or "latest"
        end = _resolve(options, state, ending, _ending_name(options))
        for pid in sorted(start):
            if start[pid] > end[pid]:
                raise ValueError(
                    f"ydb_topic: partition {pid} would be read from offset {start[pid]} to {end[pid]}: "
                    "the starting offset is after the ending offset"
                )
        return _input_partitions(options, _offsets.ranges(start, end, state.created_at_ms))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition.value, _arrow_schema(self.schema))


class _StreamReaderBase(DataSourceStreamReader):  # type: ignore[misc,unused-ignore]
    """Offsets are ``TopicOffsets`` JSON; partitions that appear later are read from their start.

    Every field is plain data: Spark pickles this object to the executors for ``read``.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._available_now: dict[int, int] | None = None
        self._last_end: TopicOffsets | None = None
        """Where the previous micro-batch ended (pyspark < 4.2 does not pass ``start`` to ``latestOffset``)."""
        self._initial: TopicOffsets | None = None
        self._latest: TopicOffsets | None = None
        """The end of every partition at the last ``latestOffset``: what ``reportLatestOffset`` says."""
        self._planned: tuple[dict[str, Any], TopicState] | None = None
        """The last offset ``latestOffset`` returned and the topic state it came from."""
        self._committed: dict[int, int] = {}
        self._last_trigger = time.monotonic()
        if options.consumer:
            consumers = _call(options, lambda d: d.topic.describe_topic(options.topic)).consumers
            if options.consumer not in {c.name for c in consumers}:
                raise ValueError(f"ydb_topic: topic {options.topic!r} has no consumer {options.consumer!r}")

    def initialOffset(self) -> dict[str, Any]:
        options = self.options
        state = _describe(options)
        start = TopicOffsets.of(state, _resolve(options, state, options.starting_offsets, _starting_name(options)))
        self._initial = self._last_end = start
        return start.to_json()

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        options = self.options
        report = loss_reporter(options.fail_on_data_loss, options.topic)
        state = _describe(options)
        latest = state.ends
        self._latest = TopicOffsets.of(state, latest)
        checkpoint = TopicOffsets.from_json(start) if start is not None else self._last_end
        if checkpoint is not None and checkpoint != self._initial:
            # Spark asks for the next offset only once the batch that ended at ``start`` is done
            # (it never calls commit() for the last batch of a run): commit it for the consumer.
            self._commit_consumer(checkpoint, state)
        if self._available_now is not None:
            # Trigger.AvailableNow: stop at what existed when the query started.
            latest = {pid: min(end, self._available_now.get(pid, 0)) for pid, end in latest.items()}
        if checkpoint is None:  # pyspark < 4.2 after a restart: nothing to limit against yet
            end = latest
        else:
            begin = _offsets.check_start(state, checkpoint, report)
            end = self._limit(begin, latest, limit)
        result = TopicOffsets.of(state, end).to_json()
        self._last_end = TopicOffsets.of(state, end)
        self._planned = (result, state)
        return result

    def _limit(self, begin: dict[int, int], latest: dict[int, int], limit: Any) -> dict[int, int]:
        options = self.options
        everything = HAS_READ_LIMIT and isinstance(limit, ReadAllAvailable)
        if limit is None:  # pyspark < 4.2 has no ReadLimit: apply the options here
            max_rows = options.max_offsets_per_trigger
        else:
            max_rows = None if everything else getattr(limit, "max_rows", None)
        now = time.monotonic()
        waiting = (
            options.min_offsets_per_trigger is not None
            and not everything
            and self._available_now is None
            and _offsets.backlog(begin, latest) < options.min_offsets_per_trigger
            and now - self._last_trigger < options.max_trigger_delay
        )
        if waiting:
            return {pid: begin.get(pid, 0) for pid in latest}  # not enough yet: no batch this trigger
        end = _offsets.limit_offsets(begin, latest, max_rows)
        if _offsets.backlog(begin, end):
            self._last_trigger = now
        return end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest.to_json() if self._latest is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = _describe(self.options).ends

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        options = self.options
        report = loss_reporter(options.fail_on_data_loss, options.topic)
        planned = self._planned
        # The state latestOffset saw for this end; a batch replayed after a restart describes anew.
        state = planned[1] if planned is not None and planned[0] == end else _describe(options)
        begin = _offsets.check_start(state, TopicOffsets.from_json(start), report)
        target = TopicOffsets.from_json(end)
        if target.created_at_ms is not None and state.created_at_ms not in (None, target.created_at_ms):
            report("the topic was deleted and created again after this micro-batch was planned")
            return []
        ends: dict[int, int] = {}
        for pid, offset in target.partitions.items():
            if pid not in state.bounds:
                report(f"partition {pid} is gone (this micro-batch reads it up to offset {offset})")
                continue
            last = state.bounds[pid][1]
            if offset > last:
                report(f"partition {pid} ends at offset {last}, before this micro-batch's end {offset}: "
                       "offsets went backwards")
                offset = last
            ends[pid] = offset
        return _input_partitions(options, _offsets.ranges(begin, ends, state.created_at_ms))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition.value, _arrow_schema(self.schema))

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_consumer(TopicOffsets.from_json(end), None)

    def _commit_consumer(self, offsets: TopicOffsets, state: TopicState | None) -> None:
        consumer = self.options.consumer
        if not consumer:
            return
        if state is not None and offsets.created_at_ms not in (None, state.created_at_ms):
            return  # offsets of a topic that no longer exists
        todo = {pid: o for pid, o in offsets.partitions.items() if self._committed.get(pid) != o}
        if not todo:
            return
        topic = self.options.topic

        async def commit_all(driver: Driver) -> None:
            for pid, offset in sorted(todo.items()):
                await driver.topic.commit_offset(topic, pid, consumer, offset)
                self._committed[pid] = offset

        try:
            _call(self.options, commit_all)
        except Exception:
            # Spark's checkpoint is authoritative: a failed commit only delays the visible lag.
            logger.warning("ydb_topic: committing %s for consumer %r failed", todo, consumer, exc_info=True)

    def stop(self) -> None:
        pass


if HAS_READ_LIMIT:

    class _StreamReader(_StreamReaderBase, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
        pass

else:
    _StreamReader = _StreamReaderBase  # type: ignore[misc,assignment,unused-ignore]


def lag(progress: Any) -> dict[int, int]:
    """Per partition, how many offsets the last micro-batch of ``progress`` stopped short of the latest.

    ``progress`` is a ``StreamingQueryProgress`` (``query.lastProgress``) or its JSON/dict form;
    its first ``ydb_topic`` source counts. Empty when the progress has no such source.
    """
    data = json.loads(progress.json) if hasattr(progress, "json") else progress
    if isinstance(data, str):
        data = json.loads(data)
    for source in data.get("sources", []):
        end, latest = source.get("endOffset"), source.get("latestOffset")
        end = json.loads(end) if isinstance(end, str) else end
        latest = json.loads(latest) if isinstance(latest, str) else latest
        if isinstance(end, dict) and isinstance(latest, dict) and "partitions" in latest:
            done = TopicOffsets.from_json(end).partitions
            return {pid: max(0, o - done.get(pid, 0)) for pid, o in TopicOffsets.from_json(latest).partitions.items()}
    return {}


# --- writing ---------------------------------------------------------------------------------


def _input_columns(schema: StructType) -> Columns:
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
    return Columns(names.index("data"), metadata, partition)


def _task_context() -> tuple[int, TaskContext | None]:
    ctx = TaskContext.get()
    return (ctx.partitionId() if ctx is not None else 0), ctx


def _totals(messages: list[WriterCommitMessage | None]) -> tuple[int, int, int]:
    reports = [m for m in messages if isinstance(m, YdbTopicCommitMessage)]
    return (
        sum(m.written for m in reports),
        sum(m.already_stored for m in reports),
        sum(m.rewritten for m in reports),
    )


class _BatchWriter(DataSourceArrowWriter):  # type: ignore[misc,unused-ignore]
    """Each task attempt writes as ``<prefix>-<job id>-<partition>-<attempt>``: never deduplicated
    against another job or attempt (at-least-once: a retried task writes its rows again)."""

    def __init__(self, options: SourceOptions, cols: Columns) -> None:
        self.options = options
        self.cols = cols
        self.prefix = f"{options.producer_id_prefix or 'spark'}-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        partition, ctx = _task_context()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        producer_id = f"{self.prefix}-{partition}-{attempt}"
        return write_batch_task(self.options, producer_id, chunks_from_arrow(iterator, self.cols))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        written, _, _ = _totals(messages)
        logger.info("ydb_topic: the write stored %d messages in %s", written, self.options.topic)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        written, _, _ = _totals(messages)
        logger.warning(
            "ydb_topic: the write failed; %d messages of the tasks that finished are stored in %s and stay there "
            "(topics are append-only): running the job again writes them again",
            written, self.options.topic,
        )


class _StreamWriter(_StreamWriterBase):  # type: ignore[misc,unused-ignore]
    """The exactly-once sink (see ``_write``): producer ``<prefix>-<query id>-<Spark partition>``,
    seq_no ``(batch id + 1) << 32 | row position``, a chained row digest in each message's metadata."""

    def __init__(self, options: SourceOptions, cols: Columns) -> None:
        self.options = options
        self.cols = cols
        self.prefix = options.producer_id_prefix or "spark"
        self.fallback_query_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        partition, ctx = _task_context()
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        query_id = (ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None) or self.fallback_query_id
        if batch_id is None:
            raise RuntimeError(f"ydb_topic: the streaming sink runs in a task without {BATCH_ID_PROPERTY!r}")
        chunks = (
            chunks_from_arrow(iterator, self.cols)
            if _StreamWriterBase is not DataSourceStreamWriter
            else chunks_from_rows(iterator, self.cols)
        )
        return write_sink_task(self.options, f"{self.prefix}-{query_id}-{partition}", int(batch_id), chunks)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written, already, rewritten = _totals(messages)
        logger.info("ydb_topic: batch %d stored %d messages in %s (%d already stored by an earlier attempt)",
                    batchId, written + rewritten, self.options.topic, already)
        if rewritten:
            logger.warning("ydb_topic: batch %d wrote %d rows again after a replay mismatch (at-least-once)",
                           batchId, rewritten)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Whatever was stored stays; the batch's replay is checked against it.
        logger.warning("ydb_topic: batch %d aborted", batchId)
