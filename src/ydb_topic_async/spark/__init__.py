"""PySpark data source ``ydb_topic`` for YDB topics (pyspark >= 4.0; ``pip install 'ydb-topic-async[spark]'``).

    from ydb_topic_async.spark import register
    register(spark)
    df = (spark.readStream.format("ydb_topic")
          .option("endpoint", "grpc://localhost:2136").option("database", "/local")
          .option("topic", "clicks").load())

Options (camelCase, as in the Kafka connector): ``endpoint``, ``database``, ``topic``;
``startingOffsets`` (``earliest`` | ``latest`` | JSON ``{"0": 42, "1": -2}``, -2 earliest,
-1 latest), ``endingOffsets`` (batch only: ``latest`` | JSON), ``maxOffsetsPerTrigger``
(streaming), ``consumer`` (streaming: commit processed offsets so YDB shows the lag),
``token`` or ``user``/``password``, ``pollTimeout`` (seconds a task waits for data it expects),
and for writes ``codec`` (raw | gzip | zstd) and ``producerIdPrefix``.

Rows read: topic, partition, offset, seq_no, producer_id, message_group_id, created_at,
written_at, metadata (map<string, binary>), data (binary). Rows written: ``data`` (binary or
string), optional ``metadata`` (map<string, binary|string>) and ``partition``. The streaming
sink is exactly-once (deterministic producer ids and seq_nos, deduplicated by the server).
"""

from __future__ import annotations

from typing import Any

from .._errors import raise_for_missing_extra

try:
    from .source import NAME, SCHEMA, YdbTopicCommitMessage, YdbTopicDataSource
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise_for_missing_extra(exc, __name__, "pyspark>=4.0 and pyarrow", "spark", ("pyspark", "pyarrow", "py4j"))
    raise

__all__ = ["NAME", "SCHEMA", "YdbTopicCommitMessage", "YdbTopicDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``ydb_topic`` data source with a SparkSession."""
    spark.dataSource.register(YdbTopicDataSource)
