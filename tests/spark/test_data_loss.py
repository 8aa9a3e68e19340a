"""Every way the ``ydb_topic`` source and sink could lose data silently ends in an error or in
complete data: reused producer id prefixes, a recreated topic, offsets going backwards, requested
offsets out of range, expired data."""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ydb_topic_async.extras import install_hint

if not os.environ.get("CI"):  # in CI the Spark tests must run (see conftest.require_spark)
    pytest.importorskip("pyspark", reason=f"pyspark is not installed ({install_hint('spark')})")

from ydb_topic_async import Driver, OperationTimeoutError, TopicMessage
from ydb_topic_async.spark import DataLossError
from ydb_topic_async.spark._offsets import OffsetRange
from ydb_topic_async.spark._options import parse_options
from ydb_topic_async.spark._write import Chunk, Record, _read_between, write_batch_task
from ydb_topic_async.spark.source import SCHEMA, _arrow_schema, _StreamReaderBase, read_range

from .._helpers import fill
from .conftest import Server, copy_stream, create, payload_counts, read_all, write_messages


def test_batch_writes_with_the_same_producer_id_prefix_store_every_row(
    spark: Any, ydb_server: Server, topic_name: str
) -> None:
    """A second and a third job with the same producerIdPrefix are not deduplicated against the first."""
    create(ydb_server, topic_name)
    options = ydb_server.options(topic_name, producerIdPrefix="nightly")
    for start, count in ((0, 1000), (1000, 1000), (2000, 1500)):
        spark.range(start, start + count, numPartitions=2).selectExpr("CAST(id AS STRING) AS data").write.format(
            "ydb_topic"
        ).options(**options).mode("append").save()
    rows = read_all(spark, ydb_server, topic_name)
    assert sorted(int(r.data) for r in rows) == list(range(3500))
    assert len({r.producer_id for r in rows}) == 6  # two tasks per job, each its own producer id
    assert all(r.producer_id.startswith("nightly-") for r in rows)


def test_a_batch_write_task_reports_what_the_server_acknowledged(ydb_server: Server, topic_name: str) -> None:
    create(ydb_server, topic_name, partitions=2)
    options = parse_options(ydb_server.options(topic_name))
    records: list[Record] = [(f"m{i}".encode(), [("k", b"v")] if i % 2 else None, i % 2) for i in range(300)]
    report = write_batch_task(options, "job-0-0", iter([Chunk.of(records[:100]), Chunk.of(records[100:])]))
    assert report.written == 300
    again = write_batch_task(options, "job-0-1", iter([Chunk.of(records[:10])]))  # a retried attempt: its own id
    assert again.written == 10
    assert len(ydb_server.messages(topic_name)) == 310


def test_a_recreated_topic_fails_the_query_unless_data_loss_is_allowed(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    sink = topic_name + "-out"
    write_messages(ydb_server, topic_name, partitions=1, per_partition=50)
    create(ydb_server, sink)
    checkpoint = tmp_path / "cp"
    assert copy_stream(spark, ydb_server, topic_name, sink, checkpoint).exception() is None

    async def recreate(driver: Driver) -> None:
        await driver.topic.drop_topic(topic_name)
        await driver.topic.create_topic(topic_name, consumers=["spark"])
        async with driver.topic.writer(topic_name, producer_id="new") as writer:
            await writer.write([f"new-{i}".encode() for i in range(1000)])  # more than before: offsets look fine

    ydb_server.run(recreate)
    failed = copy_stream(spark, ydb_server, topic_name, sink, checkpoint)
    assert failed.exception() is not None
    assert "DataLossError" in str(failed.exception())
    assert "deleted and created again" in str(failed.exception())
    assert len(read_all(spark, ydb_server, sink)) == 50  # nothing read from the new topic

    assert copy_stream(spark, ydb_server, topic_name, sink, checkpoint, failOnDataLoss="false").exception() is None
    out = payload_counts(spark, ydb_server, sink)
    assert out == Counter([f"p0-{i}".encode() for i in range(50)] + [f"new-{i}".encode() for i in range(1000)])


def test_offsets_that_went_backwards_or_partitions_that_are_gone(ydb_server: Server, topic_name: str) -> None:
    """Checkpoints of the older form carry no topic identity: an offset past a partition's end, or a
    partition the topic does not have, is still caught."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    write_messages(ydb_server, topic_name, partitions=1, per_partition=100)
    strict = _StreamReaderBase(parse_options(ydb_server.options(topic_name)), SCHEMA)
    with pytest.raises(DataLossError, match="ends at offset 100, before the checkpoint's offset 500"):
        strict.latestOffset({"0": 500}, ReadAllAvailable())
    with pytest.raises(DataLossError, match="partition 3 is gone"):
        strict.latestOffset({"0": 10, "3": 7}, ReadAllAvailable())

    lenient = _StreamReaderBase(parse_options(ydb_server.options(topic_name, failOnDataLoss="false")), SCHEMA)
    end = lenient.latestOffset({"0": 500}, ReadAllAvailable())
    assert end["partitions"] == {"0": 100}
    ranges = [p.value for p in lenient.partitions({"0": 500}, end)]
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 100)]  # from the first available offset


def test_requested_offsets_out_of_range_fail_unless_data_loss_is_allowed(
    spark: Any, ydb_server: Server, topic_name: str
) -> None:
    write_messages(ydb_server, topic_name, partitions=2, per_partition=20)

    def offsets(**options: str) -> list[tuple[int, int]]:
        return [(r.partition, r.offset) for r in read_all(spark, ydb_server, topic_name, **options)]

    with pytest.raises(Exception, match=r"asks for offset 500 of partition 0, which ends at offset 20"):
        offsets(startingOffsets='{"0": 500}')
    with pytest.raises(Exception, match="asks for offset 25 of partition 1, which ends at offset 20"):
        offsets(endingOffsets='{"1": 25}')
    assert offsets(startingOffsets='{"0": 500, "1": 18}', failOnDataLoss="false") == [(1, 18), (1, 19)]
    assert len(offsets(endingOffsets='{"1": 25}', failOnDataLoss="false")) == 40
    with pytest.raises(Exception, match="the starting offset is after the ending offset"):
        offsets(startingOffsets='{"0": 15}', endingOffsets='{"0": 5}')


def test_starting_at_a_time(spark: Any, ydb_server: Server, topic_name: str) -> None:
    """``startingTimestamp`` starts each partition at its first message written at or after it
    (YDB's read_from); with no such message it is an error unless the strategy is ``latest``."""
    write_messages(ydb_server, topic_name, partitions=2, per_partition=5)
    middle = dt.datetime.now(dt.UTC)
    write_messages(ydb_server, topic_name, partitions=2, per_partition=3, create=False)
    ms = str(int(middle.timestamp() * 1000) + 1)
    rows = read_all(spark, ydb_server, topic_name, startingTimestamp=ms)
    assert [(r.partition, r.offset) for r in rows] == [(p, o) for p in (0, 1) for o in (5, 6, 7)]
    per_partition = f'{{"0": {ms}}}'
    rows = read_all(spark, ydb_server, topic_name, startingOffsetsByTimestamp=per_partition)
    assert [(r.partition, r.offset) for r in rows] == [(0, 5), (0, 6), (0, 7)] + [(1, o) for o in range(8)]
    rows = read_all(spark, ydb_server, topic_name, endingTimestamp=ms)
    assert [(r.partition, r.offset) for r in rows] == [(p, o) for p in (0, 1) for o in range(5)]
    future = str(int(dt.datetime.now(dt.UTC).timestamp() * 1000) + 3_600_000)
    with pytest.raises(Exception, match="has no message written at or after"):
        read_all(spark, ydb_server, topic_name, startingTimestamp=future)
    assert read_all(spark, ydb_server, topic_name, startingTimestamp=future,
                    startingOffsetsByTimestampStrategy="latest") == []


async def _old_topic(driver: Driver, topic: str) -> None:
    await driver.topic.create_topic(topic, retention_period=dt.timedelta(hours=1), consumers=["spark"])


async def _write(driver: Driver, topic: str, prefix: str, count: int) -> None:
    await fill(driver, topic, [f"{prefix}-{i}".encode() for i in range(count)], producer_id=prefix)


def test_expired_data_fails_the_query_unless_data_loss_is_allowed(
    spark: Any, own_server: Server, topic_name: str, tmp_path: Path
) -> None:
    """The query read 50 messages; 50 more arrive and expire (retention) before it runs again."""
    server = own_server
    sink = topic_name + "-out"
    server.run(lambda d: _old_topic(d, topic_name))
    server.run(lambda d: _write(d, topic_name, "a", 50))
    create(server, sink)
    checkpoint = tmp_path / "cp"
    assert copy_stream(spark, server, topic_name, sink, checkpoint).exception() is None
    server.run(lambda d: _write(d, topic_name, "b", 50))
    _advance(server, 2 * 3600)
    server.run(lambda d: _write(d, topic_name, "c", 10))

    failed = copy_stream(spark, server, topic_name, sink, checkpoint)
    assert failed.exception() is not None
    assert "offsets 50..99 of partition 0 expired before they were read" in str(failed.exception())
    assert copy_stream(spark, server, topic_name, sink, checkpoint, failOnDataLoss="false").exception() is None
    assert payload_counts(spark, server, sink) == Counter(
        [f"a-{i}".encode() for i in range(50)] + [f"c-{i}".encode() for i in range(10)]
    )


def test_a_planned_range_that_expires_before_the_task_reads_it(own_server: Server, topic_name: str) -> None:
    server = own_server
    server.run(lambda d: _old_topic(d, topic_name))
    server.run(lambda d: _write(d, topic_name, "a", 40))
    _advance(server, 2 * 3600)
    server.run(lambda d: _write(d, topic_name, "b", 5))
    arrow = _arrow_schema(SCHEMA)
    strict = parse_options(server.options(topic_name))
    with pytest.raises(DataLossError, match=r"offsets 10\.\.39 of partition 0 are missing"):
        list(read_range(strict, OffsetRange(0, 10, 45), arrow))
    lenient = parse_options(server.options(topic_name, failOnDataLoss="false"))
    batches = list(read_range(lenient, OffsetRange(0, 10, 45), arrow))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(40, 45))


def test_reading_back_for_a_replay_fails_when_nothing_comes_unless_the_range_expired(
    own_server: Server, topic_name: str
) -> None:
    """A replayed batch reads back what earlier attempts stored to find what it must not write
    again. A read that gives nothing within pollTimeout while the partition still holds the range
    (a slow server) fails the task: taking it for "nothing stored" would write duplicates. A
    range that expired meanwhile is nothing stored, rightly."""
    server = own_server
    server.run(lambda d: _old_topic(d, topic_name))
    server.run(lambda d: _write(d, topic_name, "a", 5))
    # A poll timeout too short for any read to answer stands for a server slower than the option.
    impatient = parse_options(server.options(topic_name, pollTimeout="0.000001"))

    async def read_back(driver: Driver) -> list[TopicMessage]:
        return [m async for ms in _read_between(driver, impatient, topic_name, 0, 0, 5) for m in ms]

    with pytest.raises(OperationTimeoutError, match=r"offsets \[0, 5\) .* rather than risk a duplicate"):
        server.run(read_back)
    patient = parse_options(server.options(topic_name))

    async def read_back_patiently(driver: Driver) -> list[TopicMessage]:
        return [m async for ms in _read_between(driver, patient, topic_name, 0, 0, 5) for m in ms]

    assert [m.data for m in server.run(read_back_patiently)] == [f"a-{i}".encode() for i in range(5)]
    _advance(server, 2 * 3600)
    server.run(lambda d: _write(d, topic_name, "b", 1))  # retention runs as the partition is written
    assert server.run(read_back) == []


def _advance(server: Server, seconds: float) -> None:
    """Move the server's clock (on its own loop: retention runs there)."""
    server.thread.do(lambda: server.local.advance_time(seconds))
