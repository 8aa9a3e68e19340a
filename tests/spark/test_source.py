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

from pyspark.sql import functions as F

from ydb_topic_async import PARTITION_KEY_METADATA, Driver, Message, Partitioner, partition_for_key, partition_key
from ydb_topic_async.spark import lag, offsets_behind_latest
from ydb_topic_async.spark._bridge import runtime, shutdown
from ydb_topic_async.spark._offsets import OffsetRange
from ydb_topic_async.spark._options import parse_options
from ydb_topic_async.spark.source import HAS_READ_LIMIT, SCHEMA, _arrow_schema, read_range

from .._helpers import read_with_official_sdk as read_with_official
from .conftest import T0, Server, copy_stream, create, ended, payload_counts, read_all, wait_for, write_messages

# --- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
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
        ({"maxOffsetPerTrigger": "5"}, "did you mean 'maxOffsetsPerTrigger'"),
        ({"kafka.bootstrap.servers": "h:9092"}, "configures a Kafka client"),
        ({"subscribe": "t"}, "Kafka connector's, not this source's: give the topics in 'topic'"),
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


def test_stream_only_errors_fail_the_query_with_the_source_message(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    """A stream read's option problems are found when Spark makes the stream reader; raised there,
    pyspark's own cleanup would bury them under an UnboundLocalError, so the reader raises them from
    its first planning call and the query's error ends with the source's own message."""
    create(ydb_server, topic_name)
    for n, (options, message) in enumerate([
        ({"endingOffsets": "latest"}, "ValueError: ydb_topic: option 'endingOffsets' is for batch reads, not a "
                                      "stream read"),
        ({"consumer": "nobody"}, f"ValueError: ydb_topic: topic '{topic_name}' has no consumer 'nobody'"),
    ]):
        query = (
            spark.readStream.format("ydb_topic")
            .options(**ydb_server.options(topic_name, **options))
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / f"cp{n}"))
            .start()
        )
        error = str(ended(query, timeout=60).exception())
        assert message in error
        assert "UnboundLocalError" not in error


def test_errors_at_the_call(spark: Any, ydb_server: Server, topic_name: str) -> None:
    write_messages(ydb_server, topic_name, partitions=2, per_partition=5)

    def batch(**options: str) -> Any:
        return spark.read.format("ydb_topic").options(**ydb_server.options(topic_name, **options)).load()

    # load() itself: what needs no mode.
    with pytest.raises(Exception, match="option 'topic' is required"):
        spark.read.format("ydb_topic").options(**{k: v for k, v in ydb_server.options("x").items() if k != "topic"})\
            .load()
    with pytest.raises(Exception, match="names topic 'elsewhere', which this query does not read"):
        batch(startingOffsets='{"elsewhere": {"0": 1}}')
    # The first action: what depends on the mode, as in the Kafka connector.
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        batch(startingOffsets="latest").collect()
    with pytest.raises(Exception, match="asks for offset 9 of partition 1, which ends at offset 5") as past_end:
        batch(endingOffsets='{"1": 9}').collect()
    assert "has not been written yet" in str(past_end.value) and "DataLossError" not in str(past_end.value)
    assert batch(endingOffsets='{"1": 9}', failOnDataLoss="false").count() == 10  # clamped to the end
    # Writes: save() runs the source's checks.
    with pytest.raises(Exception, match=r"needs a 'data' \(or 'value'\) column"):
        spark.range(3).write.format("ydb_topic").options(**ydb_server.options(topic_name)).mode("append").save()
    rows = spark.range(3).selectExpr("CAST(id AS STRING) AS data")
    with pytest.raises(Exception, match="append-only"):
        rows.write.format("ydb_topic").options(**ydb_server.options(topic_name)).mode("overwrite").save()
    # Spark refuses a save() without a mode before any Python runs (a Python data source cannot
    # take Spark's default ErrorIfExists mode): the guide says to add mode("append").
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        rows.write.format("ydb_topic").options(**ydb_server.options(topic_name)).save()
    # The continuous trigger is refused when the query starts (the guide quotes this error).
    with pytest.raises(Exception, match="does not support continuous processing"):
        batch_stream = spark.readStream.format("ydb_topic").options(**ydb_server.options(topic_name)).load()
        batch_stream.writeStream.format("noop").trigger(continuous="1 second").start()


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

    assert offsets(startingOffsets='{"0": 15, "1": -2}') == {0: [15, 16, 17, 18, 19], 1: list(range(20))}
    assert offsets(startingOffsets='{"0": 5}', endingOffsets='{"0": 8, "1": 2}') == {0: [5, 6, 7], 1: [0, 1]}
    nested = f'{{"{topic_name}": {{"0": 18, "1": 19}}}}'  # the Kafka connector's per-topic form
    assert offsets(startingOffsets=nested) == {0: [18, 19], 1: [19]}
    assert offsets(endingOffsets='{"1": -1, "0": 1}') == {0: [0], 1: list(range(20))}
    with pytest.raises(Exception, match="partitions the topic does not have"):
        offsets(startingOffsets='{"7": 0}')


def test_several_topics_in_one_read(spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path) -> None:
    """``topic`` takes several topics, as the Kafka connector's ``subscribe``: batch and streaming
    reads cover them all, offsets JSON nests per topic, the checkpoint names every topic, and
    ``lag`` tells them apart."""
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    write_messages(ydb_server, a, partitions=2, per_partition=5)
    write_messages(ydb_server, b, partitions=1, per_partition=3)
    both = f"{a}, {b}"
    rows = read_all(spark, ydb_server, both)
    assert Counter(r.topic for r in rows) == {a: 10, b: 3}
    assert {(r.topic, r.data) for r in rows} == {(a, f"p{p}-{i}".encode()) for p in (0, 1) for i in range(5)} | {
        (b, f"p0-{i}".encode()) for i in range(3)}
    start = json.dumps({a: {"0": 3}, f"{ydb_server.database}/{b}": {"0": 2}})
    picked = read_all(spark, ydb_server, both, startingOffsets=start, endingOffsets=json.dumps({b: {"0": -1}}))
    assert sorted((r.topic, r.partition, r.offset) for r in picked) == [
        (a, 0, 3), (a, 0, 4), *((a, 1, i) for i in range(5)), (b, 0, 2)]

    sink = f"{topic_name}-out"
    create(ydb_server, sink)
    query = copy_stream(spark, ydb_server, both, sink, tmp_path / "cp", maxOffsetsPerTrigger="5")
    assert query.exception() is None
    assert payload_counts(spark, ydb_server, sink) == Counter(r.data for r in rows)
    first = query.recentProgress[0]
    checkpointed = json.loads(first.sources[0].endOffset)
    assert set(checkpointed["topics"]) == {f"{ydb_server.database}/{a}", f"{ydb_server.database}/{b}"}
    assert sum(lag(first, topic=a).values()) + sum(lag(first, topic=b).values()) == 13 - 5
    with pytest.raises(ValueError, match="pass topic= to say which"):
        lag(first)
    # The Kafka source's progress metrics, per topic: what each topic holds past the batch's end.
    assert first.sources[0].metrics == {}  # pyspark gives Python sources no way to fill them
    expected = {}
    for name in (a, b):
        path = f"{ydb_server.database}/{name}"
        behind = [end - checkpointed["topics"][path]["partitions"].get(str(pid), 0)
                  for pid, end in stored_ends(ydb_server, name).items()]
        expected[path] = {"minOffsetsBehindLatest": min(behind), "maxOffsetsBehindLatest": max(behind),
                          "avgOffsetsBehindLatest": sum(behind) / len(behind)}
    assert sum(sum(f.values()) for f in expected.values()) > 0  # the first batch left data unread
    assert offsets_behind_latest(first) == expected
    assert offsets_behind_latest(query.recentProgress[-1]) == {
        path: dict.fromkeys(figures, 0) for path, figures in expected.items()}


def stored_ends(server: Server, topic: str) -> dict[int, int]:
    """Each partition's end offset, as the server describes it."""

    async def ends(driver: Driver) -> dict[int, int]:
        described = await driver.topic.describe_topic(topic, include_stats=True)
        return {p.partition_id: p.stats.end_offset for p in described.partitions if p.stats}

    return server.run(ends)


def test_pyspark_gives_python_streaming_sources_no_progress_metrics(spark: Any) -> None:
    """Why the source reports no ``sources[].metrics`` (Kafka's ``offsetsBehindLatest`` figures):
    Spark fills them only from a source implementing ``ReportsSourceMetrics`` (``ProgressContext``
    in sql/core/.../streaming/runtime/ProgressReporter.scala), and the JVM side of a Python
    streaming source (sql/core/.../datasources/v2/python/PythonMicroBatchStream.scala) implements
    only ``MicroBatchStream``, ``SupportsAdmissionControl``, ``SupportsTriggerAvailableNow`` and
    ``AcceptsLatestSeenOffset``; nor does pyspark's ``DataSourceStreamReader`` have a method to
    ask. When this fails, the installed Spark offers it: report the figures there."""
    jvm = spark._jvm
    reports_metrics = jvm.java.lang.Class.forName("org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics")
    package = "org.apache.spark.sql.execution.datasources.v2.python."
    found = []
    for name in ("PythonMicroBatchStream", "PythonMicroBatchStreamWithAdmissionControl",
                 "PythonMicroBatchStreamWithTriggerAvailableNow"):
        try:
            stream = jvm.java.lang.Class.forName(package + name)
        except Exception:  # not in this Spark version (4.0 and 4.1 have only the first)
            continue
        found.append(name)
        assert not reports_metrics.isAssignableFrom(stream), name
    assert "PythonMicroBatchStream" in found
    from pyspark.sql.datasource import DataSourceStreamReader

    assert not any("metric" in name.lower() for name in dir(DataSourceStreamReader))


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


@pytest.mark.tolerate_asyncio_reports("PollerCompletionQueue._handle_events")
def test_a_batch_write_waits_for_its_topic_with_wait_for_topic(spark: Any, ydb_server: Server, topic_name: str) -> None:
    """``waitForTopic``: a job that starts before its topic exists (a deploy whose migration
    runs alongside) waits for it, placing keyed rows once the topic's partitions are known;
    without the option it fails at once."""
    rows = spark.range(40).selectExpr("CONCAT('user-', id % 7) AS key", "CONCAT('v', id) AS value")
    with pytest.raises(Exception, match="does not exist"):
        rows.write.format("ydb_topic").options(**ydb_server.options(topic_name)).mode("append").save()
    creator = threading.Timer(1.5, lambda: create(ydb_server, topic_name, partitions=3))
    started = time.monotonic()
    creator.start()
    try:
        rows.write.format("ydb_topic").options(**ydb_server.options(topic_name, waitForTopic="60")).mode(
            "append"
        ).save()
    finally:
        creator.join()
    assert time.monotonic() - started >= 1.5
    description = ydb_server.run(lambda d: d.topic.describe_topic(topic_name))
    messages = ydb_server.messages(topic_name)
    assert sorted(m.data.decode() for m in messages) == sorted(f"v{i}" for i in range(40))  # each once
    for message in messages:
        key = message.metadata_items["__key"]
        assert message.partition_id == partition_for_key(description, key, "ydb")



@pytest.mark.tolerate_asyncio_reports("PollerCompletionQueue._handle_events")
def test_a_streaming_sink_waits_for_its_topic_with_wait_for_topic(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    """``waitForTopic`` on a streaming sink: a query started before its output topic exists (the
    migration that creates it runs alongside the deploy) waits in its first micro-batch and then
    stores every row once."""
    source = f"{topic_name}-in"
    write_messages(ydb_server, source, partitions=2, per_partition=20)
    query = (
        spark.readStream.format("ydb_topic").options(**ydb_server.options(source)).load()
        .select("data")
        .writeStream.format("ydb_topic")
        .options(**ydb_server.options(topic_name, waitForTopic="60"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        # The topic appears once the first micro-batch has run for a while: without the option,
        # setting up its writer finds the topic missing and fails the query within these 5 s.
        wait_for(lambda: query.status["isTriggerActive"], 120, "the first micro-batch", query)
        time.sleep(5.0)
        assert query.isActive, query.exception()
        create(ydb_server, topic_name, partitions=2)
    finally:
        ended(query)
    assert query.exception() is None, query.exception()
    expected = Counter(f"p{p}-{i}".encode() for p in range(2) for i in range(20))
    assert Counter(m.data for m in ydb_server.messages(topic_name)) == expected  # each once


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
    first_end = json.loads(batches[0].sources[0].endOffset)["partitions"]
    behind = [end - first_end[str(pid)] for pid, end in stored_ends(ydb_server, topic_name).items()]
    assert sum(behind) == 30
    assert offsets_behind_latest(batches[0]) == {f"{ydb_server.database}/{topic_name}": {
        "minOffsetsBehindLatest": min(behind), "maxOffsetsBehindLatest": max(behind),
        "avgOffsetsBehindLatest": sum(behind) / len(behind)}}
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


# --- Kafka-shaped rows --------------------------------------------------------------------------


def read_with_official_sdk(server: Server, topic: str, count: int) -> list[Any]:
    """``count`` messages of ``topic`` read by the official ``ydb`` SDK's reader (consumer ``spark``):
    what this package wrote, seen by an independent reader. It runs on the server's event loop:
    grpc.aio on yet another short-lived loop can trip over its own poller (a BlockingIOError it
    logs from ``PollerCompletionQueue._handle_events``)."""
    ydb_aio = pytest.importorskip("ydb.aio")

    async def main() -> list[Any]:
        driver = ydb_aio.Driver(endpoint=server.endpoint, database=server.database)
        await driver.wait(timeout=10)
        try:
            return await read_with_official(driver, topic, "spark", count)
        finally:
            await driver.stop()

    return server.thread.call(main(), timeout=120)


# grpc.aio's poller, shared by the event loops of this process (the server's, the SDK's), can log a
# BlockingIOError when two of them watch it at once; nothing is lost by it.
@pytest.mark.tolerate_asyncio_reports("PollerCompletionQueue._handle_events")
def test_kafka_shaped_rows_land_where_keyed_producers_put_them(spark: Any, ydb_server: Server, topic_name: str) -> None:
    """``key`` (placed by the keyed writer's partitioner and kept as ``__key``), ``headers`` (as
    metadata), a ``topic`` per row (the option overrides it), ``partition``, ``value``: written by a
    batch write, read back by the official SDK."""
    even, odd, fixed = f"{topic_name}-even", f"{topic_name}-odd", f"{topic_name}-fixed"
    for topic in (even, odd, fixed):
        create(ydb_server, topic, partitions=4)
    connection = {"endpoint": ydb_server.endpoint, "database": ydb_server.database}
    rows = spark.range(80).selectExpr(
        "CONCAT('user-', id % 13) AS key",
        "CONCAT('v', id) AS value",
        "array(named_struct('key', 'n', 'value', CAST(CAST(id AS STRING) AS BINARY))) AS headers",
        f"IF(id % 2 = 0, '{even}', '{odd}') AS topic",
    )
    rows.write.format("ydb_topic").options(**connection).mode("append").save()
    kafka = rows.where("CAST(SUBSTRING(value, 2) AS INT) < 40").withColumn(
        "partition", F.expr("IF(value = 'v0', 3, NULL)").cast("int"))
    kafka.write.format("ydb_topic").options(**connection, topic=fixed, partitioner="kafka").mode("append").save()

    placements: list[tuple[str, Partitioner, int]] = [(even, "ydb", 40), (odd, "ydb", 40), (fixed, "kafka", 40)]
    for topic, partitioner, count in placements:
        description = ydb_server.run(lambda d, t=topic: d.topic.describe_topic(t))  # type: ignore[misc]
        messages = read_with_official_sdk(ydb_server, topic, count)
        assert len(messages) == count
        for message in messages:
            n = int(message.data.decode()[1:])
            key = message.metadata_items["__key"]
            assert key == f"user-{n % 13}".encode()
            # The partition key goes with the message as the keyed writer sends it (not with Kafka's partitioner).
            assert message.metadata_items.get(PARTITION_KEY_METADATA) == (
                None if partitioner == "kafka" else partition_key(key)
            )
            assert message.metadata_items["n"] == str(n).encode()
            if topic == fixed and n == 0:
                assert message.partition_id == 3  # an explicit partition wins over the key
            else:
                assert message.partition_id == partition_for_key(description, key, partitioner), (topic, n)
        assert {int(m.data.decode()[1:]) % 2 for m in messages} == ({0} if topic == even else {1} if topic == odd
                                                                    else {0, 1})
    with pytest.raises(Exception, match="null topic present in the data"):
        spark.range(2).selectExpr("'x' AS value", "CAST(NULL AS STRING) AS topic").write.format("ydb_topic").options(
            **connection).mode("append").save()
    with pytest.raises(Exception, match="column 'headers' must be array<struct<key: string, value: binary>>"):
        spark.range(2).selectExpr("'x' AS value", "array('a') AS headers").write.format("ydb_topic").options(
            **connection, topic=fixed).mode("append").save()


@pytest.mark.tolerate_asyncio_reports("PollerCompletionQueue._handle_events")
def test_the_sink_takes_kafka_shaped_rows_exactly_once(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    """The streaming sink with ``key`` and ``headers``, run twice over the same micro-batch (its
    commit forgotten): every row once, in its key's partition."""
    sink = f"{topic_name}-out"
    write_messages(ydb_server, topic_name, partitions=2, per_partition=30)
    create(ydb_server, sink, partitions=3)
    columns = ("data AS value", "CAST(offset % 7 AS STRING) AS key",
               "array(named_struct('key', 'from', 'value', CAST(CONCAT(partition, ':', offset) AS BINARY))) AS headers")
    checkpoint = tmp_path / "cp"
    assert copy_stream(spark, ydb_server, topic_name, sink, checkpoint, columns=columns).exception() is None
    for name in ("0", ".0.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    assert copy_stream(spark, ydb_server, topic_name, sink, checkpoint, columns=columns).exception() is None
    description = ydb_server.run(lambda d: d.topic.describe_topic(sink))
    messages = read_with_official_sdk(ydb_server, sink, 60)
    assert Counter(m.metadata_items["from"] for m in messages) == Counter(
        f"{p}:{o}".encode() for p in range(2) for o in range(30))
    for message in messages:
        assert message.partition_id == partition_for_key(description, message.metadata_items["__key"])
