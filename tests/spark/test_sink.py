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
from ydb_topic_async.spark._ledger import LEDGER, ReplayBounds, SinkPlan, forget_before, plan_batch
from ydb_topic_async.spark._options import parse_options
from ydb_topic_async.spark._write import DIGEST_KEY, Chunk, Record, write_sink_task

from .._helpers import fill
from .conftest import Server, create, ended, payload_counts, wait_for, write_messages


class Killed(Exception):
    """Stands in for a task attempt that dies after handing over some rows."""


def rows(prefix: str, count: int, partition: int | None = None) -> list[Record]:
    return [(f"{prefix}-{i}".encode(), [("i", str(i).encode())], partition) for i in range(count)]


def attempt(
    server: Server, topic: str, records: list[Record], *, batch: int = 0, dies_after: int | None = None,
    partition: int = 0, plan: SinkPlan | None = None, **options: str,
) -> Any:
    """One sink task attempt of Spark ``partition`` of query ``q`` (chunks of 10 rows)."""
    parsed = parse_options(server.options(topic, **options))

    def chunks() -> Iterator[Chunk]:
        for i in range(0, len(records), 10):
            if dies_after is not None and i >= dies_after:
                raise Killed
            yield Chunk.of(records[i : i + 10])

    return write_sink_task(parsed, "spark-q-", partition, batch, chunks(), plan, "q")


def ledger(server: Server, topic: str, batch: int = 0) -> tuple[SinkPlan, SinkPlan]:
    """What the driver's ledger makes of micro-batch ``batch``: the plan of its first attempt (the
    record is written now, with the topic's end offsets) and the plan of a later run's replay."""
    ends = server.run(lambda d: d.topic.describe_topic(topic, include_stats=True))
    bounds = ReplayBounds(int(time.time() * 1000), {ends.path: {p.partition_id: p.stats.end_offset if p.stats else 0
                                                                for p in ends.partitions}})
    return SinkPlan(batch, "q"), SinkPlan(batch, "q", replay=bounds)


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
    assert all(len(m.metadata_items[DIGEST_KEY]) == 16 + 8 for m in ours)  # the digest and the attempt's id

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


# --- replays of a micro-batch an earlier run started, checked against everything it stored -----


def first_attempt(server: Server, topic: str, tasks: list[tuple[list[Record], int | None]], plan: SinkPlan) -> None:
    """The first attempt of micro-batch 0: task k writes ``tasks[k]`` and dies after the given rows."""
    for k, (records, dies_after) in enumerate(tasks):
        if dies_after is None:
            attempt(server, topic, records, partition=k, plan=plan)
        else:
            with pytest.raises(Killed):
                attempt(server, topic, records, partition=k, plan=plan, dies_after=dies_after)


@pytest.mark.parametrize(
    ("before", "after", "why"),
    [
        # minPartitions=2 then none: one task now holds both halves (the reported duplication).
        ([(rows("a", 100)[:50], 30), (rows("a", 100)[50:], 20)], [rows("a", 100)], "by producer 'spark-q-1'"),
        # the reverse: the first task stored more rows than its replay has.
        ([(rows("a", 100), 60)], [rows("a", 100)[:50], rows("a", 100)[50:]], "stored 60 rows of micro-batch 0"),
        # coalesce(3) then coalesce(2): a task that stored nothing in the first attempt gets rows another stored.
        ([(rows("a", 90)[:30], 20), (rows("a", 90)[30:60], 0), (rows("a", 90)[60:], 10)],
         [rows("a", 90)[:30], rows("a", 90)[30:]], "by producer 'spark-q-2'"),
        # the same rows in another order (a shuffle): the task's own stored rows differ.
        ([(rows("a", 40), 20)], [list(reversed(rows("a", 40)))], "differ, from position 1 on"),
    ],
    ids=["fewer-tasks", "more-tasks", "gap", "reordered"],
)
def test_a_replay_with_another_layout_fails_before_writing_a_row(
    ydb_server: Server, topic_name: str, before: list[tuple[list[Record], int | None]], after: list[list[Record]],
    why: str,
) -> None:
    """Every task of the replay reads back what all earlier attempts of the batch stored and checks
    all its rows before it writes one: whatever moved, nothing is written twice, nothing at all."""
    create(ydb_server, topic_name)
    first, replay = ledger(ydb_server, topic_name)
    first_attempt(ydb_server, topic_name, before, first)
    stored = Counter(ydb_server.stored_data(topic_name))
    failures = []
    for k, records in enumerate(after):
        try:
            attempt(ydb_server, topic_name, records, partition=k, plan=replay)
        except ReplayMismatchError as exc:
            failures.append(str(exc))
    assert any(why in failure for failure in failures), failures
    # Each error says what changed and how to go on.
    assert all("Spark partitions changed between the attempts" in f and "undo the change" in f
               and "onReplayMismatch to atLeastOnce" in f for f in failures)
    got = Counter(ydb_server.stored_data(topic_name))
    assert not [data for data, n in got.items() if n > 1], "a row was stored twice"
    if len(failures) == len(after):
        assert got == stored  # every task failed before writing a row


def test_a_replay_with_the_same_layout_is_exactly_once(ydb_server: Server, topic_name: str) -> None:
    """Tasks that stored part of their rows, none or all: the replay writes exactly the rest."""
    create(ydb_server, topic_name, partitions=2)
    first, replay = ledger(ydb_server, topic_name)
    tasks = [rows("a", 50, partition=0), rows("b", 50, partition=1), rows("c", 30), rows("d", 30)]
    first_attempt(ydb_server, topic_name, [(tasks[0], 20), (tasks[1], None), (tasks[2], 0), (tasks[3], 10)], first)
    reports = [attempt(ydb_server, topic_name, records, partition=k, plan=replay) for k, records in enumerate(tasks)]
    assert [(r.already_stored, r.written) for r in reports] == [(20, 30), (50, 0), (0, 30), (10, 20)]
    assert Counter(ydb_server.stored_data(topic_name)) == Counter(r[0] for task in tasks for r in task)


def test_a_replayed_task_that_spark_runs_again_finds_what_it_stored(ydb_server: Server, topic_name: str) -> None:
    """Spark runs a task of the replay again in the same run (its executor was lost after it wrote):
    what the task's producers stored in this attempt counts as stored; another task's rows of this
    attempt are that task's."""
    create(ydb_server, topic_name)
    first, replay = ledger(ydb_server, topic_name)
    first_attempt(ydb_server, topic_name, [(rows("a", 50), 20), (rows("b", 50), 10)], first)
    attempt(ydb_server, topic_name, rows("b", 50), partition=1, plan=replay)
    assert attempt(ydb_server, topic_name, rows("a", 50), partition=0, plan=replay).written == 30
    again = attempt(ydb_server, topic_name, rows("a", 50), partition=0, plan=replay)
    assert (again.already_stored, again.written) == (50, 0)
    assert Counter(ydb_server.stored_data(topic_name)) == Counter(r[0] for r in rows("a", 50) + rows("b", 50))


def test_a_replay_cannot_tell_a_repeated_row_from_a_moved_one(ydb_server: Server, topic_name: str) -> None:
    """A row that repeats exactly (payload and metadata) in another Spark partition: in a replay the
    sink cannot tell it from a row that moved there, and fails rather than guess."""
    create(ydb_server, topic_name)
    first, replay = ledger(ydb_server, topic_name)
    same: list[Record] = [(b"heartbeat", None, None)] * 20
    first_attempt(ydb_server, topic_name, [(same, 10), (same, 0)], first)
    attempt(ydb_server, topic_name, same, partition=0, plan=replay)
    with pytest.raises(ReplayMismatchError, match="by producer 'spark-q-0', another Spark partition's"):
        attempt(ydb_server, topic_name, same, partition=1, plan=replay)
    report = attempt(ydb_server, topic_name, same, partition=1, plan=replay, onReplayMismatch="atLeastOnce")
    assert report.rewritten == 20
    assert Counter(ydb_server.stored_data(topic_name)) == {b"heartbeat": 40}


def test_a_replay_that_moved_rows_is_written_again_when_at_least_once_is_allowed(
    ydb_server: Server, topic_name: str
) -> None:
    create(ydb_server, topic_name)
    first, replay = ledger(ydb_server, topic_name)
    everything = rows("a", 100)
    first_attempt(ydb_server, topic_name, [(everything[:50], 30), (everything[50:], 20)], first)
    report = attempt(ydb_server, topic_name, everything, plan=replay, onReplayMismatch="atLeastOnce")
    assert report.rewritten == 100
    got = Counter(ydb_server.stored_data(topic_name))
    assert set(got) == {r[0] for r in everything}  # nothing lost
    assert sum(got.values()) == 150  # the earlier attempt's 50 rows stay: at-least-once


def test_a_plan_for_another_micro_batch_writes_nothing(ydb_server: Server, topic_name: str) -> None:
    create(ydb_server, topic_name)
    with pytest.raises(RuntimeError, match="planned for micro-batch 3 of query q but runs in micro-batch 0"):
        attempt(ydb_server, topic_name, rows("a", 5), plan=SinkPlan(3, "q"))
    assert ydb_server.stored_count(topic_name) == 0


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
    assert "the query is not deterministic" in str(mismatch.exception())

    rewrite = ended(
        sink_query(spark, ydb_server, topic_name, sink, tmp_path / "cp", shuffle=True, onReplayMismatch="atLeastOnce")
    )
    assert rewrite.exception() is None
    out = payload_counts(spark, ydb_server, sink)
    expected = {f"p{pid}-{i}".encode() for pid in range(2) for i in range(500)}
    assert set(out) == expected  # nothing lost
    assert sum(out.values()) <= 3000  # duplicates come only from the earlier attempts' rows


def test_the_ledger_tells_a_first_attempt_from_a_replay(ydb_server: Server, topic_name: str, tmp_path: Path) -> None:
    """The driver's look at the checkpoint before a micro-batch's tasks run: the batch is the last one
    with offsets and no commit; its first planning records the output topic's end offsets, a later
    one finds them; old records go once their batch is long committed."""
    create(ydb_server, topic_name, partitions=2)
    ydb_server.run(lambda d: fill(d, topic_name, [b"x"] * 3, producer_id="p", partition_id=1))
    checkpoint = tmp_path / "cp"
    options = parse_options(ydb_server.options(topic_name, checkpointLocation=f"file:{checkpoint}"))
    assert plan_batch(parse_options(ydb_server.options(topic_name))).unavailable is not None  # no checkpointLocation
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "metadata").write_text('{"id":"query-1"}\n')
    idle = plan_batch(options)  # nothing to run
    assert (idle.batch, idle.query_id, idle.replay, idle.unavailable) == (None, "query-1", None, None)

    (checkpoint / "offsets" / "0").write_text("v1\n{}\n")
    first = plan_batch(options)
    assert (first.batch, first.query_id, first.replay, first.unavailable) == (0, "query-1", None, None)
    replay = plan_batch(options)  # the same batch planned again: a run that restarted
    assert replay.batch == 0 and replay.replay is not None
    assert replay.replay.ends == {f"{ydb_server.database}/{topic_name}": {0: 0, 1: 3}}
    assert replay.attempt != first.attempt

    for batch in range(1, 103):
        (checkpoint / "commits" / str(batch - 1)).write_text("v1\n{}\n")
        (checkpoint / "offsets" / str(batch)).write_text("v1\n{}\n")
        assert plan_batch(options).batch == batch
        forget_before(options, batch - 1)
    assert sorted(int(p.name) for p in (checkpoint / LEDGER).iterdir()) == list(range(1, 103))

    # A record that cannot be written (here a file stands where its directory goes): the plan says
    # so, and the tasks check a replay per Spark partition only.
    broken = tmp_path / "broken"
    (broken / "offsets").mkdir(parents=True)
    (broken / "offsets" / "0").write_text("v1\n{}\n")
    (broken / LEDGER).write_text("not a directory")
    plan = plan_batch(parse_options(ydb_server.options(topic_name, checkpointLocation=str(broken))))
    assert "cannot be written" in (plan.unavailable or "")
