"""The ``ydb_topic`` Spark data source against a local topic server (Spark ``local[2]``)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ydb_topic_async.extras import install_hint

if not os.environ.get("CI"):  # in CI the Spark tests must run (see conftest.require_spark)
    pytest.importorskip("pyspark", reason=f"pyspark is not installed ({install_hint('spark')})")

from ydb_topic_async import Driver, Message
from ydb_topic_async.spark import lag
from ydb_topic_async.spark._bridge import runtime, shutdown
from ydb_topic_async.spark._offsets import OffsetRange
from ydb_topic_async.spark._options import parse_options
from ydb_topic_async.spark.source import HAS_READ_LIMIT, SCHEMA, _arrow_schema, read_range

from .conftest import T0, Server, copy_stream, create, payload_counts, read_all, write_messages

# --- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": ""}, "option 'topic' is required"),
        ({"endpoint": ""}, "option 'endpoint' is required"),
        ({"endpoint": "http://x:1"}, "grpc:// or grpcs://"),
        ({"database": "local"}, "absolute path"),
        ({"startingOffsets": "{oops"}, "startingOffsets"),
        ({"startingOffsets": '{"x": 1}'}, "partition ids must be non-negative integers"),
        ({"startingOffsets": '{"0": -3}'}, "must be an integer >= -2"),
        ({"endingOffsets": "earliest"}, "cannot be 'earliest'"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger"),
        ({"token": "t", "user": "u"}, "one way to authenticate, not 'token' and 'user'"),
        ({"maxOffsetPerTrigger": "5"}, "unknown option 'maxoffsetpertrigger'; did you mean 'maxOffsetsPerTrigger'"),
        ({"kafka.bootstrap.servers": "h:9092"}, "configures a Kafka client"),
        ({"subscribe": "t"}, "Kafka connector's, not this source's: this source reads one topic"),
        ({"codec": "snappy"}, "codec"),
    ],
)
def test_bad_options_fail_at_load_time(
    spark: Any, ydb_server: Server, options: dict[str, str], message: str
) -> None:
    all_options = {**ydb_server.options("t"), **options}
    with pytest.raises(ValueError, match=message):
        parse_options(all_options)
    with pytest.raises(Exception, match=message):
        spark.read.format("ydb_topic").options(**all_options).load()


def test_stream_only_errors_fail_at_start(spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path) -> None:
    create(ydb_server, topic_name)
    stream = (
        spark.readStream.format("ydb_topic")
        .options(**ydb_server.options(topic_name, endingOffsets="latest"))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
    )
    with pytest.raises(Exception, match="'endingOffsets' is for batch reads, not a stream read"):
        stream.start().awaitTermination(30)
    with pytest.raises(Exception, match="no consumer 'nobody'"):
        (
            spark.readStream.format("ydb_topic")
            .options(**ydb_server.options(topic_name, consumer="nobody"))
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "cp2"))
            .start()
            .awaitTermination(30)
        )
    with pytest.raises(Exception, match="needs a 'data' column"):
        spark.range(3).write.format("ydb_topic").options(**ydb_server.options(topic_name)).mode("append").save()
    with pytest.raises(Exception, match="append-only"):
        spark.range(3).selectExpr("CAST(id AS STRING) AS data").write.format("ydb_topic").options(
            **ydb_server.options(topic_name)
        ).mode("overwrite").save()


# --- batch read ---------------------------------------------------------------------------------


def test_batch_read_returns_every_message_with_exact_fields(spark: Any, ydb_server: Server, topic_name: str) -> None:
    write_messages(ydb_server, topic_name, partitions=3, per_partition=40)
    df = spark.read.format("ydb_topic").options(**ydb_server.options(topic_name)).load()
    assert df.schema == SCHEMA
    assert df.rdd.getNumPartitions() == 3  # one input partition per topic partition
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert len(rows) == 120
    for row in rows:
        i = row.offset
        assert row.topic == topic_name
        assert row.data == f"p{row.partition}-{i}".encode()
        assert row.seq_no == 10 * (i + 1)
        assert row.producer_id == f"producer-{row.partition}"
        assert row.message_group_id == f"producer-{row.partition}"
        assert row.metadata == {"n": str(i).encode(), "kind": b"test"}
        # the session time zone is UTC: timestamps come back as naive UTC datetimes
        assert row.created_at == (T0 + dt.timedelta(seconds=i)).replace(tzinfo=None)
        assert abs(row.written_at - dt.datetime.now(dt.UTC).replace(tzinfo=None)) < dt.timedelta(minutes=5)
    assert [r.offset for r in rows if r.partition == 1] == list(range(40))


def test_starting_and_ending_offsets(spark: Any, ydb_server: Server, topic_name: str) -> None:
    write_messages(ydb_server, topic_name, partitions=2, per_partition=20)

    def offsets(**options: str) -> dict[int, list[int]]:
        result: dict[int, list[int]] = {0: [], 1: []}
        for row in read_all(spark, ydb_server, topic_name, **options):
            result[row.partition].append(row.offset)
        return result

    assert offsets(startingOffsets="latest") == {0: [], 1: []}
    assert offsets(startingOffsets='{"0": 15, "1": -2}') == {0: [15, 16, 17, 18, 19], 1: list(range(20))}
    assert offsets(startingOffsets='{"0": 5}', endingOffsets='{"0": 8, "1": 2}') == {0: [5, 6, 7], 1: [0, 1]}
    nested = f'{{"{topic_name}": {{"0": 18, "1": -1}}}}'  # the Kafka connector's per-topic form
    assert offsets(startingOffsets=nested) == {0: [18, 19], 1: []}
    assert offsets(endingOffsets='{"1": -1, "0": 1}') == {0: [0], 1: list(range(20))}
    with pytest.raises(Exception, match="partitions the topic does not have"):
        offsets(startingOffsets='{"7": 0}')


def test_a_task_reads_its_range_alike_as_arrow_and_as_rows(ydb_server: Server, topic_name: str) -> None:
    """A range that starts and ends inside the reader's batches, over three producers' messages,
    only the middle ones with metadata: Arrow batches and rows (for a pyspark that cannot take
    Arrow) hold the same fields, each as the SDK's reader sees it."""
    create(ydb_server, topic_name)

    async def fill(driver: Driver) -> None:
        for producer, metadata in (("plain", None), ("tagged", {"tag": b"x"}), ("last", None)):
            async with driver.topic.writer(topic_name, producer_id=producer, partition_id=0) as writer:
                await writer.write([Message(f"{producer}-{i}", metadata=metadata) for i in range(20)])

    ydb_server.run(fill)
    options = parse_options(ydb_server.options(topic_name))
    wanted = [m for m in ydb_server.messages(topic_name) if 5 <= m.offset < 55]
    arrow = _arrow_schema(SCHEMA)
    expected = [
        (topic_name, 0, m.offset, m.seq_no, m.producer_id, m.message_group_id, m.created_at, m.written_at,
         m.metadata_items, m.data)
        for m in wanted
    ]
    assert [r[8] for r in expected] == [{}] * 15 + [{"tag": b"x"}] * 20 + [{}] * 15
    assert list(read_range(options, OffsetRange(0, 5, 55), None)) == expected
    from_arrow = [
        (*row[:8], dict(row[8]), row[9])  # a map comes out of Arrow as (key, value) pairs
        for batch in read_range(options, OffsetRange(0, 5, 55), arrow)
        for row in zip(*batch.to_pydict().values(), strict=True)
    ]
    assert from_arrow == expected


def test_read_tasks_share_one_driver_and_leave_no_threads(ydb_server: Server, topic_name: str) -> None:
    """The executor-side read, run here in-process: every task of a process shares one driver on one
    loop thread; a task stopped early (a LIMIT) still closes its reader; shutting down ends it all."""
    write_messages(ydb_server, topic_name, partitions=1, per_partition=30)
    options = parse_options(ydb_server.options(topic_name))
    arrow = _arrow_schema(SCHEMA)
    shutdown()
    before = set(threading.enumerate())

    list(read_range(options, OffsetRange(0, 0, 30), arrow))
    after_first = set(threading.enumerate())
    batches = list(read_range(options, OffsetRange(0, 3, 30), arrow))
    assert sum(b.num_rows for b in batches) == 27
    assert batches[0].column("offset").to_pylist()[0] == 3
    partial = read_range(options, OffsetRange(0, 0, 30), arrow)
    assert isinstance(partial, Generator)  # a range with offsets is read by a generator, which Spark can close
    next(partial)
    partial.close()  # Spark stops a task early (e.g. a LIMIT): the reader still closes
    assert runtime().drivers == 1
    assert set(threading.enumerate()) == after_first, "a task left a thread behind"
    assert any(t.name == "ydb-topic-async-spark" for t in after_first - before)

    shutdown()
    assert {t for t in threading.enumerate() if t.name == "ydb-topic-async-spark"} == set()


def test_admission_control_without_spark_read_limits(ydb_server: Server, topic_name: str) -> None:
    """pyspark 4.0/4.1 call ``latestOffset()`` with no arguments: the source caps each batch itself,
    exactly as the read-limit path of pyspark >= 4.2 does."""
    from ydb_topic_async.spark.source import _StreamReaderBase

    write_messages(ydb_server, topic_name, partitions=2, per_partition=10)
    options = parse_options({**ydb_server.options(topic_name), "maxOffsetsPerTrigger": "6"})

    legacy = _StreamReaderBase(options, SCHEMA)
    ends = [legacy.initialOffset()]
    while len(ends) < 6:
        ends.append(legacy.latestOffset())  # the 4.0/4.1 signature
    sizes = [sum(b["partitions"].values()) - sum(a["partitions"].values()) for a, b in itertools.pairwise(ends)]
    assert sizes == [6, 6, 6, 2, 0]
    assert ends[-1]["partitions"] == {"0": 10, "1": 10}

    if HAS_READ_LIMIT:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        modern = _StreamReaderBase(options, SCHEMA)
        start = modern.initialOffset()
        limited = [modern.latestOffset(start, ReadMaxRows(6))]
        while len(limited) < 5:
            limited.append(modern.latestOffset(limited[-1], ReadMaxRows(6)))
        assert limited == ends[1:]


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(ydb_server: Server, topic_name: str) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

    from ydb_topic_async.spark.source import _StreamReaderBase

    write_messages(ydb_server, topic_name, partitions=1, per_partition=6)
    options = parse_options({**ydb_server.options(topic_name), "minOffsetsPerTrigger": "10",
                             "maxTriggerDelay": "300ms"})
    reader = _StreamReaderBase(options, SCHEMA)
    assert reader.getDefaultReadLimit() == ReadMinRows(10)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadMinRows(10))["partitions"] == {"0": 0}  # 6 < 10: no batch yet
    time.sleep(0.35)
    end = reader.latestOffset(start, ReadMinRows(10))
    assert end["partitions"] == {"0": 6}  # waited long enough: take what there is
    write_messages(ydb_server, topic_name, partitions=1, per_partition=3, create=False)
    assert reader.latestOffset(end, ReadMinRows(10))["partitions"] == {"0": 6}
    assert reader.latestOffset(end, ReadAllAvailable())["partitions"] == {"0": 9}  # Trigger.AvailableNow


def test_min_partitions_and_max_records_split_large_partitions(
    spark: Any, ydb_server: Server, topic_name: str
) -> None:
    write_messages(ydb_server, topic_name, partitions=2, per_partition=30)
    df = spark.read.format("ydb_topic").options(**ydb_server.options(topic_name, minPartitions="6")).load()
    assert df.rdd.getNumPartitions() == 6
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(p, o) for p in (0, 1) for o in range(30)]
    df = spark.read.format("ydb_topic").options(**ydb_server.options(topic_name, maxRecordsPerPartition="7")).load()
    assert df.rdd.getNumPartitions() == 10  # ceil(30 / 7) = 5 per topic partition
    assert df.count() == 60


def test_include_metadata_false_leaves_the_column_out(spark: Any, ydb_server: Server, topic_name: str) -> None:
    write_messages(ydb_server, topic_name, partitions=1, per_partition=3)
    df = spark.read.format("ydb_topic").options(**ydb_server.options(topic_name, includeMetadata="false")).load()
    assert "metadata" not in df.columns
    assert [r.data for r in df.orderBy("offset").collect()] == [b"p0-0", b"p0-1", b"p0-2"]


# --- batch write --------------------------------------------------------------------------------


def test_batch_write_with_metadata_and_partition(spark: Any, ydb_server: Server, topic_name: str) -> None:
    create(ydb_server, topic_name, partitions=2)
    df = spark.range(100).selectExpr(
        "CAST(id AS STRING) AS data",
        "map('id', CAST(CAST(id AS STRING) AS BINARY)) AS metadata",
        "CAST(id % 2 AS INT) AS partition",
    )
    df.repartition(3).write.format("ydb_topic").options(**ydb_server.options(topic_name, codec="zstd")).mode(
        "append"
    ).save()
    rows = read_all(spark, ydb_server, topic_name)
    assert sorted(int(r.data) for r in rows) == list(range(100))
    for row in rows:
        assert row.partition == int(row.data) % 2
        assert row.metadata == {"id": row.data}


# --- streaming ----------------------------------------------------------------------------------


def run_stream(spark: Any, server: Server, source: str, sink: str, checkpoint: Path, **options: str) -> Any:
    """Copy ``source`` to ``sink`` with Trigger.AvailableNow, each row's metadata naming where it
    came from; returns the finished query."""
    query = copy_stream(
        spark, server, source, sink, checkpoint,
        columns=("data", "map('from', CAST(CONCAT(partition, ':', offset) AS BINARY)) AS metadata"), **options,
    )
    assert query.exception() is None
    return query


def test_stream_round_trip_restart_and_consumer_lag(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    sink = topic_name + "-out"
    write_messages(ydb_server, topic_name, partitions=2, per_partition=25)
    create(ydb_server, sink)
    checkpoint = tmp_path / "checkpoint"

    query = run_stream(spark, ydb_server, topic_name, sink, checkpoint, maxOffsetsPerTrigger="20", consumer="spark")
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    assert [p.numInputRows for p in batches] == [20, 20, 10]  # admission control: 50 rows, 20 per trigger
    # Each trigger's progress reports the latest offsets too: the first batch stopped 30 short.
    assert json.loads(batches[0].sources[0].latestOffset)["partitions"] == {"0": 25, "1": 25}
    assert sum(lag(batches[0]).values()) == 30
    assert lag(batches[-1]) == {0: 0, 1: 0}
    assert payload_counts(spark, ydb_server, sink) == Counter(
        f"p{pid}-{i}".encode() for pid in range(2) for i in range(25)
    )

    # More data, and a restart from the checkpoint: continues where it stopped.
    write_messages(ydb_server, topic_name, partitions=2, per_partition=5, create=False)
    run_stream(spark, ydb_server, topic_name, sink, checkpoint, maxOffsetsPerTrigger="20", consumer="spark")
    out = read_all(spark, ydb_server, sink)
    assert Counter(r.data for r in out) == Counter(f"p{pid}-{i}".encode() for pid in range(2) for i in range(30))
    assert len({r.metadata["from"] for r in out}) == 60

    # Spark never calls commit() for the last batch of a run; the source commits a batch's end
    # once Spark asks for the next offsets, which it does after the last batch too.
    consumer = ydb_server.run(lambda d: d.topic.describe_consumer(topic_name, "spark"))
    assert [p.committed_offset for p in consumer.partitions] == [30, 30]


def test_exactly_once_sink_when_spark_re_executes_a_batch(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    sink = topic_name + "-out"
    write_messages(ydb_server, topic_name, partitions=2, per_partition=30)
    create(ydb_server, sink, partitions=2)
    checkpoint = tmp_path / "checkpoint"
    run_stream(spark, ydb_server, topic_name, sink, checkpoint)
    first = read_all(spark, ydb_server, sink)
    assert len(first) == 60

    # Forget that batch 0 was committed: on restart Spark runs batch 0 again, same offsets.
    for name in ("0", ".0.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    shutil.rmtree(checkpoint / "state", ignore_errors=True)
    again = run_stream(spark, ydb_server, topic_name, sink, checkpoint)
    assert [(p.batchId, p.numInputRows) for p in again.recentProgress if p.numInputRows] == [(0, 60)]

    second = read_all(spark, ydb_server, sink)
    assert [(r.partition, r.offset, r.data) for r in second] == [(r.partition, r.offset, r.data) for r in first]
    assert len({(r.producer_id, r.seq_no) for r in second}) == 60


def test_partitions_added_later_are_read_from_their_start(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    sink = topic_name + "-out"
    write_messages(ydb_server, topic_name, partitions=1, per_partition=10)
    create(ydb_server, sink)
    checkpoint = tmp_path / "checkpoint"
    run_stream(spark, ydb_server, topic_name, sink, checkpoint)

    async def grow(driver: Driver) -> None:
        await driver.topic.alter_topic(topic_name, set_min_active_partitions=3)
        for pid in (1, 2):
            async with driver.topic.writer(topic_name, producer_id=f"late-{pid}", partition_id=pid) as writer:
                await writer.write([f"late-{pid}-{i}".encode() for i in range(4)])

    ydb_server.run(grow)
    run_stream(spark, ydb_server, topic_name, sink, checkpoint)
    data = sorted(r.data for r in read_all(spark, ydb_server, sink))
    expected = [f"p0-{i}".encode() for i in range(10)] + [f"late-{p}-{i}".encode() for p in (1, 2) for i in range(4)]
    assert data == sorted(expected)
