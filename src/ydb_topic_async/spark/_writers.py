"""The data source's writers, as Spark calls them: on the driver (checking the input's columns,
planning a micro-batch, ``commit``) and in the tasks (``write``, which hands the rows to the
executor side of writes, ``_write``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, MapType, StringType, StructType

from ..observability import sdk_logger
from ._ledger import SinkPlan, forget_before, plan_batch
from ._options import SourceOptions
from ._write import (
    Columns,
    YdbTopicCommitMessage,
    chunks_from_arrow,
    chunks_from_rows,
    write_batch_task,
    write_sink_task,
)

try:  # pyspark >= 4.1: the streaming sink can take Arrow batches instead of Rows
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc,assignment,unused-ignore]

logger = sdk_logger("spark")

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The Spark local property holding the micro-batch id in a streaming task."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The Spark local property holding the streaming query's id (stable across restarts)."""


def input_columns(schema: StructType, options: SourceOptions) -> Columns:
    """Where the columns a write uses are, checked against the Kafka sink's shapes: ``value`` (or
    ``data``), ``key``, ``headers`` (or ``metadata``), ``topic``, ``partition``."""
    names = [f.name.lower() for f in schema.fields]
    types = {f.name.lower(): f.dataType for f in schema.fields}

    def position(name: str, allowed: tuple[type, ...], shape: str) -> int | None:
        if name not in names:
            return None
        if not isinstance(types[name], allowed):
            raise ValueError(f"ydb_topic: column {name!r} must be {shape}, not {types[name].simpleString()}")
        return names.index(name)

    if "data" in names and "value" in names:
        raise ValueError("ydb_topic: give the payload in 'data' or in 'value' (as the Kafka sink), not both")
    payload = "data" if "data" in names else "value"
    data = position(payload, (BinaryType, StringType), "binary or string")
    if data is None:
        raise ValueError(
            f"ydb_topic: writing needs a 'data' (or 'value') column, binary or string; the input has {names}"
        )
    metadata = position("metadata", (MapType,), "map<string, binary|string>")
    if metadata is not None:
        mt = types["metadata"]
        assert isinstance(mt, MapType)
        if not (isinstance(mt.keyType, StringType) and isinstance(mt.valueType, (BinaryType, StringType))):
            raise ValueError(
                f"ydb_topic: column 'metadata' must be map<string, binary|string>, not {mt.simpleString()}"
            )
    headers = position("headers", (ArrayType,), "array<struct<key: string, value: binary>>")
    if headers is not None:
        element = types["headers"].elementType  # type: ignore[attr-defined]
        fields = {f.name.lower(): f.dataType for f in getattr(element, "fields", [])}
        if not (
            isinstance(element, StructType)
            and isinstance(fields.get("key"), StringType)
            and isinstance(fields.get("value"), (BinaryType, StringType))
        ):
            raise ValueError(
                "ydb_topic: column 'headers' must be array<struct<key: string, value: binary>> (as the Kafka sink), "
                f"not {types['headers'].simpleString()}"
            )
        if metadata is not None:
            raise ValueError("ydb_topic: give message metadata in 'headers' or in 'metadata', not both")
    topic = position("topic", (StringType,), "string")
    if topic is None and not options.topics:
        raise ValueError(
            "ydb_topic: a write needs the option 'topic', or a 'topic' column naming each row's topic"
        )
    return Columns(
        data=data,
        metadata=metadata if metadata is not None else headers,
        partition=position("partition", (IntegerType, LongType), "int or bigint"),
        key=position("key", (BinaryType, StringType), "binary or string"),
        # The option overrides the column, as in the Kafka sink.
        topic=topic if not options.topics else None,
    )


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


def _where(options: SourceOptions) -> str:
    return options.topic or "the rows' topics"


class BatchWriter(DataSourceArrowWriter):  # type: ignore[misc,unused-ignore]
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
        logger.info("ydb_topic: the write stored %d messages in %s", written, _where(self.options))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        written, _, _ = _totals(messages)
        logger.warning(
            "ydb_topic: the write failed; %d messages of the tasks that finished are stored in %s and stay there "
            "(topics are append-only): running the job again writes them again",
            written, _where(self.options),
        )


class StreamWriter(_StreamWriterBase):  # type: ignore[misc,unused-ignore]
    """The exactly-once sink (see ``_write.sink``): producer ``<prefix>-<query id>-<Spark partition>``,
    seq_no ``(batch id + 1) << 32 | row position``, a chained row digest in each message's metadata,
    and, per micro-batch, a record in the checkpoint (``_ledger``) that tells a replay from a
    first attempt before any of its tasks writes."""

    def __init__(self, options: SourceOptions, cols: Columns) -> None:
        self.options = options
        self.cols = cols
        self.prefix = options.producer_id_prefix or "spark"
        self.fallback_query_id = uuid.uuid4().hex
        self.plan: SinkPlan | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles this writer on the driver once per micro-batch, into the batch's tasks
        # (the writer its commit() runs on is made apart and never pickled): the moment to look
        # the batch up in the ledger, before any task of it runs. Once per writer object.
        if self.plan is None:
            self.plan = plan_batch(self.options)
        return self.__dict__.copy()

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
        return write_sink_task(
            self.options, f"{self.prefix}-{query_id}-", partition, int(batch_id), chunks, self.plan, query_id
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written, already, rewritten = _totals(messages)
        logger.info("ydb_topic: batch %d stored %d messages in %s (%d already stored by an earlier attempt)",
                    batchId, written + rewritten, _where(self.options), already)
        if rewritten:
            logger.warning("ydb_topic: batch %d wrote %d rows again after a replay mismatch (at-least-once)",
                           batchId, rewritten)
        forget_before(self.options, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        # Whatever was stored stays; the batch's replay is checked against it.
        logger.warning("ydb_topic: batch %d aborted", batchId)
