"""PySpark data source ``ydb_topic`` for YDB topics (pyspark >= 4.0: the ``spark`` extra, installed
from a clone of the repository with ``pip install -e ".[spark]"``).

    from ydb_topic_async.spark import register
    register(spark)
    df = (spark.readStream.format("ydb_topic")
          .option("endpoint", "grpc://localhost:2136").option("database", "/local")
          .option("topic", "clicks").load())

The options follow Spark's Kafka connector where a counterpart exists (``startingOffsets``,
``endingOffsets``, ``startingTimestamp``, ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``,
``maxTriggerDelay``, ``minPartitions``, ``failOnDataLoss``, ...); ``topic`` takes several topics
for a read; an unknown option fails with the closest known name. The Spark guide
(``docs/spark.md``) lists them all with each mode's guarantee.

Rows read: topic, partition, offset, seq_no, producer_id, message_group_id, created_at,
written_at, metadata (map<string, binary>), data (binary). Rows written take the Kafka sink's
columns: ``value`` (or ``data``), optional ``key`` (placed as the keyed writer places it),
``headers`` (or a ``metadata`` map), ``topic`` and ``partition``. The streaming sink is
exactly-once: a replayed micro-batch is checked against every row any earlier attempt of it
stored, and one whose rows moved or differ fails before it writes a row twice.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ..extras import raise_for_missing_extra

try:
    # pyspark first: an environment with neither is told of the one the extra is named for
    for _package in ("pyspark", "pyarrow"):
        import_module(_package)
    from ._errors import DataLossError, ReplayMismatchError
    from .source import NAME, SCHEMA, YdbTopicCommitMessage, YdbTopicDataSource, lag, offsets_behind_latest
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise_for_missing_extra(exc, __name__, "pyspark>=4.0 and pyarrow", "spark", ("pyspark", "pyarrow", "py4j"))
    raise

__all__ = [
    "NAME",
    "SCHEMA",
    "DataLossError",
    "ReplayMismatchError",
    "YdbTopicCommitMessage",
    "YdbTopicDataSource",
    "lag",
    "offsets_behind_latest",
    "register",
]


def register(spark: Any) -> None:
    """Register the ``ydb_topic`` data source with a SparkSession."""
    spark.dataSource.register(YdbTopicDataSource)
