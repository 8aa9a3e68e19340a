"""The exactly-once sink proves that a replayed micro-batch matches what an earlier attempt stored,
and fails loudly (or, if asked, writes again at-least-once) when it does not. It never drops rows."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ydb_topic_async.extras import install_hint

if not os.environ.get("CI"):  # in CI the Spark tests must run (see conftest.require_spark)
    pytest.importorskip("pyspark", reason=f"pyspark is not installed ({install_hint('spark')})")

from ydb_topic_async.spark import ReplayMismatchError
from ydb_topic_async.spark._options import parse_options
from ydb_topic_async.spark._write import DIGEST_KEY, Chunk, Record, write_sink_task

from .._helpers import fill
from .conftest import Server, create, ended, payload_counts, wait_for, write_messages


class Killed(Exception):
    """Stands in for a task attempt that dies after handing over some rows."""


def rows(prefix: str, count: int, partition: int | None = None) -> list[Record]:
    return [(f"{prefix}-{i}".encode(), [("i", str(i).encode())], partition) for i in range(count)]


def attempt(
    server: Server, topic: str, records: list[Record], *, batch: int = 0, dies_after: int | None = None, **options: str
) -> Any:
    """One sink task attempt of Spark partition 0 of query ``q`` (chunks of 10 rows)."""
    parsed = parse_options(server.options(topic, **options))

    def chunks() -> Iterator[Chunk]:
        for i in range(0, len(records), 10):
            if dies_after is not None and i >= dies_after:
                raise Killed
            yield Chunk.of(records[i : i + 10])

    return write_sink_task(parsed, "spark-q-0", batch, chunks())


def test_a_replay_of_the_same_rows_skips_what_the_earlier_attempt_stored(ydb_server: Server, topic_name: str) -> None:
    create(ydb_server, topic_name)
    with pytest.raises(Killed):
        attempt(ydb_server, topic_name, rows("a", 100), dies_after=40)
    assert len(ydb_server.stored_data(topic_name)) == 40

    # Other writers add to the partition meanwhile: the replay has to look back past them.
    ydb_server.run(lambda d: fill(d, topic_name, [b"other"] * 3000, producer_id="someone-else"))
    report = attempt(ydb_server, topic_name, rows("a", 100))
    assert (report.already_stored, report.written, report.rewritten) == (40, 60, 0)
    ours = [m for m in ydb_server.messages(topic_name) if m.producer_id == "spark-q-0"]
    assert [m.data for m in ours] == [f"a-{i}".encode() for i in range(100)]
    assert all(len(m.metadata_items[DIGEST_KEY]) == 16 for m in ours)

    # The same batch once more (Spark lost the commit): everything is already there.
    report = attempt(ydb_server, topic_name, rows("a", 100))
    assert (report.already_stored, report.written) == (100, 0)
    # The next batch is new data.
    assert attempt(ydb_server, topic_name, rows("b", 5), batch=1).written == 5


@pytest.mark.parametrize(
    ("replay", "why"),
    [
        (rows("b", 100), "the rows differ"),
        (rows("a", 40)[:20] + rows("x", 1) + rows("a", 100)[21:], "the rows differ"),
        (rows("a", 30), "this attempt has fewer rows"),
    ],
)
def test_a_replay_with_other_rows_fails_and_writes_nothing(
    ydb_server: Server, topic_name: str, replay: list[Record], why: str
) -> None:
    create(ydb_server, topic_name)
    with pytest.raises(Killed):
        attempt(ydb_server, topic_name, rows("a", 100), dies_after=40)
    with pytest.raises(ReplayMismatchError, match=f"micro-batch 0 is being written again, and {why}"):
        attempt(ydb_server, topic_name, replay)
    assert ydb_server.stored_data(topic_name) == [f"a-{i}".encode() for i in range(40)]


def test_a_replay_with_other_rows_is_written_again_when_at_least_once_is_allowed(
    ydb_server: Server, topic_name: str
) -> None:
    create(ydb_server, topic_name, partitions=2)
    first = rows("a", 60, partition=0) + rows("z", 60, partition=1)
    with pytest.raises(Killed):
        attempt(ydb_server, topic_name, first, dies_after=80)
    replay = rows("a", 60, partition=1) + rows("z", 60, partition=0)  # the rows moved between partitions
    report = attempt(ydb_server, topic_name, replay, onReplayMismatch="atLeastOnce")
    assert report.rewritten == 120
    got = Counter(ydb_server.stored_data(topic_name))
    assert set(got) == {r[0] for r in replay}  # every row of the replay is there
    assert sum(got.values()) == 80 + 120  # and the earlier attempt's rows stay (at-least-once)


def test_a_checkpoint_behind_the_topic_is_a_mismatch(ydb_server: Server, topic_name: str) -> None:
    create(ydb_server, topic_name)
    attempt(ydb_server, topic_name, rows("a", 10), batch=0)
    attempt(ydb_server, topic_name, rows("b", 10), batch=1)
    with pytest.raises(ReplayMismatchError, match="a later micro-batch was stored already"):
        attempt(ydb_server, topic_name, rows("a", 10), batch=0)


# --- whole queries whose Python workers are killed mid-batch ----------------------------------


def _children(pid: int) -> list[int]:
    result = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                result.append(int(entry.name))
    return result


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def kill_python_workers() -> int:
    """SIGKILL the Python workers of this test session's Spark (the processes forked by the
    ``pyspark.daemon`` of its JVM), as when an executor's workers die; returns how many."""
    killed = 0
    for jvm in _children(os.getpid()):
        for daemon in (p for p in _children(jvm) if "pyspark.daemon" in _cmdline(p)):
            for worker in _children(daemon):
                os.kill(worker, signal.SIGKILL)
                killed += 1
    return killed


def sink_query(spark: Any, server: Server, source: str, sink: str, checkpoint: Path, *, shuffle: bool,
               **sink_options: str) -> Any:
    """``source`` -> 8 Spark partitions (ranges of 125 offsets, or a shuffle by ``rand()``) -> 2 ms per
    row in the JVM -> the sink, AvailableNow. Two tasks run at a time, so the batch's 8 sink tasks
    store their rows in four waves, about a quarter of a second apart."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format("ydb_topic").options(**server.options(source))
    if shuffle:
        df = reader.load().select("data").repartition(8, F.rand())
    else:
        df = reader.option("maxRecordsPerPartition", "125").load().select("data")
    # Always true, but Spark's optimizer cannot know it, so the JVM sleeps 2 ms for every row.
    slow = F.expr("length(coalesce(reflect('java.lang.Thread', 'sleep', CAST(2 AS BIGINT)), '')) >= 0")
    return (
        df.filter(slow)
        .writeStream.format("ydb_topic")
        .options(**server.options(sink, **sink_options))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def killed_mid_batch(spark: Any, server: Server, source: str, sink: str, checkpoint: Path, *, shuffle: bool) -> int:
    """Run the query and kill its Python workers once the sink stored part of the batch; the rows stored."""
    query = sink_query(spark, server, source, sink, checkpoint, shuffle=shuffle)
    wait_for(lambda: server.stored_count(sink) > 0, 120, "the sink storing part of the batch", query)
    deadline = time.monotonic() + 120
    # A worker killed between two of its tasks fails nothing (Spark starts another): kill them
    # again until one dies mid-task and fails the query.
    killed = 0
    while query.isActive and time.monotonic() < deadline:
        killed += kill_python_workers()
        time.sleep(0.05)
    assert killed > 0
    assert ended(query).exception() is not None
    return server.stored_count(sink)


def test_a_killed_deterministic_batch_is_replayed_exactly_once(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    sink = topic_name + "-out"
    write_messages(ydb_server, topic_name, partitions=2, per_partition=500)
    create(ydb_server, sink, partitions=2)
    partial = killed_mid_batch(spark, ydb_server, topic_name, sink, tmp_path / "cp", shuffle=False)
    assert 0 < partial < 1000

    replay = ended(sink_query(spark, ydb_server, topic_name, sink, tmp_path / "cp", shuffle=False))
    assert replay.exception() is None
    out = payload_counts(spark, ydb_server, sink)
    assert out == Counter(f"p{pid}-{i}".encode() for pid in range(2) for i in range(500))


def test_a_killed_non_deterministic_batch_fails_loudly_then_is_written_at_least_once(
    spark: Any, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    """``repartition(8, rand())`` sends different rows to each Spark partition when the batch runs
    again: the replay cannot be deduplicated, so it fails; allowed at-least-once, it loses nothing."""
    sink = topic_name + "-out"
    write_messages(ydb_server, topic_name, partitions=2, per_partition=500)
    create(ydb_server, sink, partitions=2)
    partial = killed_mid_batch(spark, ydb_server, topic_name, sink, tmp_path / "cp", shuffle=True)
    assert 0 < partial < 1000

    mismatch = ended(sink_query(spark, ydb_server, topic_name, sink, tmp_path / "cp", shuffle=True))
    assert mismatch.exception() is not None
    assert "ReplayMismatchError" in str(mismatch.exception())
    assert "The query is not deterministic" in str(mismatch.exception())

    rewrite = ended(
        sink_query(spark, ydb_server, topic_name, sink, tmp_path / "cp", shuffle=True, onReplayMismatch="atLeastOnce")
    )
    assert rewrite.exception() is None
    out = payload_counts(spark, ydb_server, sink)
    expected = {f"p{pid}-{i}".encode() for pid in range(2) for i in range(500)}
    assert set(out) == expected  # nothing lost
    assert sum(out.values()) <= 3000  # duplicates come only from the earlier attempts' rows
