"""The demo: a clickstream through YDB topics and a Spark Structured Streaming job, end to end.

``python -m ydb_topic_async.demo`` starts the local topic server on loopback (or uses
``--endpoint`` / ``YDB_ENDPOINT`` for a real database), creates an input and an output topic,
publishes clickstream events with the async writer, runs a Spark streaming job that sums
revenue per country and minute and writes the results through the exactly-once ``ydb_topic``
sink, then reads the results back with the async reader and checks them against what was sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from .. import Codec, Driver, MissingDependencyError, TopicSelector, YdbTopicError

CLICKS = "demo/clicks"
REVENUE = "demo/revenue"
CONSUMER = "spark-revenue"
COUNTRIES = ("DE", "FR", "IN", "JP", "NL", "US")
PAGES = ("/", "/search", "/product", "/cart", "/checkout")
EVENT_SPAN_SECONDS = 600
"""Event times are spread over ten minutes, so the job's one-minute windows have data."""
BASE_TIME = 1_700_000_000
JAVA_NEEDED = 17
INSTALL_JAVA = "apt install openjdk-17-jre-headless (Debian, Ubuntu) / brew install openjdk@17 (macOS)"
SPARK_LOG = os.path.join(tempfile.gettempdir(), "ydb-topic-async-demo-spark.log")
"""Where Spark's own output goes: the terminal shows the demo's."""


def java_problem() -> str | None:
    """Why Spark cannot start here (no Java, or one older than 17), or None."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return "no java found" + (f" in JAVA_HOME={home}" if home else " on PATH")
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{java} does not run: {exc}"
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match is None:
        return f"{java} -version says no version"
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0": Java 8
        major = int(match.group(2))
    if major < JAVA_NEEDED:
        return f"{java} is Java {major}"
    return None


@contextlib.contextmanager
def output_to(path: str) -> Iterator[None]:
    """Point this process's standard error at ``path`` meanwhile.

    Spark's JVM, started by the session, and its Python workers inherit the descriptor: their
    log lines go to the file for the rest of their life, not to the terminal.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "wb") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def make_event(rng: random.Random, n: int, events: int) -> dict[str, object]:
    page = rng.choice(PAGES)
    return {
        "event_id": n,
        "user_id": f"u{rng.randrange(500):04d}",
        "country": rng.choice(COUNTRIES),
        "page": page,
        "amount": round(rng.uniform(5, 250), 2) if page == "/checkout" else 0.0,
        "ts": BASE_TIME + n * EVENT_SPAN_SECONDS / events,
    }


def progress(label: str, done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    sys.stdout.write(f"\r{label:<10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stdout.write("\n")
    sys.stdout.flush()


@contextlib.contextmanager
def database(endpoint: str | None, database: str) -> Iterator[tuple[str, str]]:
    """The given endpoint, or a local topic server in a child process for the duration.

    Spark's Python workers are separate processes, so the server must be reachable over
    loopback from them, as a real cluster would be: it cannot live in this process's loop.
    """
    if endpoint:
        yield endpoint, database
        return
    proc = subprocess.Popen(
        [sys.executable, "-m", "ydb_topic_async.testing", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(grpcs?://[^/\s]+)/\?database=(\S+)", line)
        if match is None:
            raise SystemExit(f"the local topic server did not start: {line!r}")
        print(f"local topic server listening on {match.group(1)} (database {match.group(2)})")
        yield match.group(1), match.group(2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


async def setup_and_produce(url: str, db: str, events: int, producers: int) -> dict[str, tuple[int, float]]:
    """Create both topics and publish the events; returns the expected (events, revenue) per country."""
    expected: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    rng = random.Random(42)
    async with Driver(url, db) as driver:
        await driver.wait_ready(timeout=10)
        for path in (CLICKS, REVENUE):
            with contextlib.suppress(YdbTopicError):
                await driver.topic.drop_topic(path)
        await driver.topic.create_topic(CLICKS, min_active_partitions=4, consumers=[CONSUMER])
        await driver.topic.create_topic(REVENUE, min_active_partitions=2)
        writers = [driver.topic.writer(CLICKS, producer_id=f"web-{i}", codec=Codec.ZSTD) for i in range(producers)]
        try:
            for n in range(events):
                event = make_event(rng, n, events)
                totals = expected[str(event["country"])]
                totals[0] += 1
                totals[1] += float(event["amount"])  # type: ignore[arg-type]
                await writers[n % producers].write(json.dumps(event).encode())
                if (n + 1) % 500 == 0 or n + 1 == events:
                    progress("produce", n + 1, events)
        finally:
            for writer in writers:
                await writer.close()  # waits for every acknowledgement
    return {country: (int(t[0]), t[1]) for country, t in expected.items()}


def run_spark_job(url: str, db: str, max_per_trigger: int, checkpoint: str) -> int:
    """The Structured Streaming job; returns the number of micro-batches it ran."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this interpreter
    # Keep Spark on loopback: otherwise it advertises the first network interface it finds.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ..spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("ydb-topic-async-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        register(spark)
        connection = {"endpoint": url, "database": db}
        event = "event_id LONG, user_id STRING, country STRING, page STRING, amount DOUBLE, ts DOUBLE"
        clicks = (
            spark.readStream.format("ydb_topic")
            .options(**connection, topic=CLICKS, consumer=CONSUMER)
            .option("maxOffsetsPerTrigger", str(max_per_trigger))
            .load()
            .select(F.from_json(F.col("data").cast("string"), event).alias("e"))
            .select("e.*", F.col("e.ts").cast("timestamp").alias("event_time"))
        )
        per_minute = clicks.groupBy(F.window("event_time", "1 minute"), "country").agg(
            F.count("*").alias("events"),
            F.round(F.sum("amount"), 2).alias("revenue"),
            F.approx_count_distinct("user_id").alias("users"),
        )
        out = per_minute.select(
            F.to_json(
                F.struct(
                    F.date_format("window.start", "HH:mm").alias("minute"), "country", "events", "revenue", "users"
                )
            ).alias("data"),
            F.create_map(F.lit("country"), F.col("country").cast("binary")).alias("metadata"),
        )
        query = (
            out.writeStream.format("ydb_topic")
            .options(**connection, topic=REVENUE)
            # Each batch sends every aggregate so far (Python sinks take append or complete mode);
            # the reader keeps the latest per key.
            .outputMode("complete")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"the Spark job failed: {query.exception()}")
        return sum(1 for p in query.recentProgress if p["numInputRows"])
    finally:
        spark.stop()


async def read_results(url: str, db: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The latest aggregate per (minute, country): in complete mode later batches supersede earlier ones."""
    latest: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    async with Driver(url, db) as driver:
        description = await driver.topic.describe_topic(REVENUE, include_stats=True)
        ends = {p.partition_id: p.stats.end_offset if p.stats else 0 for p in description.partitions}
        total = sum(ends.values())
        selector = TopicSelector(REVENUE, start_offsets=dict.fromkeys(ends, 0))
        seen = 0
        async with driver.topic.reader(selector, consumer=None) as reader:
            while seen < total:
                batch = await reader.receive_batch(timeout=30)
                for message in batch:
                    row = json.loads(message.data)
                    key = (row["minute"], row["country"])
                    # The sink's seq_nos grow with the batch id, per Spark partition (= per key).
                    if key not in latest or latest[key][0] < message.seq_no:
                        latest[key] = (message.seq_no, row)
                seen += len(batch)
                progress("results", seen, total)
    return {key: row for key, (_, row) in latest.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ydb_topic_async.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default=os.environ.get("YDB_ENDPOINT"), help="a YDB endpoint (default: local)")
    parser.add_argument("--database", default=os.environ.get("YDB_DATABASE", "/local"), help="database path")
    parser.add_argument("--events", type=int, default=20_000, help="how many events to publish")
    parser.add_argument("--producers", type=int, default=4, help="how many producer ids write in parallel")
    parser.add_argument("--max-per-trigger", type=int, default=5_000, help="Spark's maxOffsetsPerTrigger")
    args = parser.parse_args(argv)

    # Before anything else: without the spark extra or Java, Spark would fail only after the
    # events were sent.
    try:
        from .. import spark  # noqa: F401
    except MissingDependencyError as exc:
        raise SystemExit(str(exc)) from None
    problem = java_problem()
    if problem is not None:
        raise SystemExit(f"Java {JAVA_NEEDED} is required to run Spark ({problem}): {INSTALL_JAVA}")

    started = time.perf_counter()
    with database(args.endpoint, args.database) as (url, db), tempfile.TemporaryDirectory() as tmp:
        expected = asyncio.run(setup_and_produce(url, db, args.events, args.producers))
        print(f"spark     starting the streaming job (local[2]); Spark's log: {SPARK_LOG}", flush=True)
        spark_started = time.perf_counter()
        try:
            with output_to(SPARK_LOG):
                batches = run_spark_job(url, db, args.max_per_trigger, os.path.join(tmp, "checkpoint"))
        except SystemExit as exc:
            raise SystemExit(f"{exc.code} (Spark's log: {SPARK_LOG})") from None
        except Exception as exc:
            first_line = (str(exc).strip().splitlines() or [""])[0]
            raise SystemExit(
                f"the Spark job failed: {type(exc).__name__}: {first_line} (Spark's log: {SPARK_LOG})"
            ) from None
        print(f"spark     {batches} micro-batches in {time.perf_counter() - spark_started:.1f}s")
        results = asyncio.run(read_results(url, db))

    print(f"\n{'country':<8}{'events':>8}{'revenue':>12}{'busiest minute':>16}")
    mismatched = []
    for country in sorted(expected, key=lambda c: -expected[c][1]):
        rows = [r for (_, c), r in results.items() if c == country]
        events = sum(r["events"] for r in rows)
        revenue = sum(r["revenue"] for r in rows)
        busiest = max(rows, key=lambda r: r["revenue"])["minute"] if rows else "-"
        print(f"{country:<8}{events:>8}{revenue:>12.2f}{busiest:>16}")
        want_events, want_revenue = expected[country]
        if events != want_events or abs(revenue - want_revenue) > 0.05:
            mismatched.append(
                f"{country}: {events} events / {revenue:.2f} read, {want_events} / {want_revenue:.2f} sent"
            )
    print(
        f"\n{args.events} events -> {len(results)} (minute, country) aggregates in {REVENUE}; "
        f"total {time.perf_counter() - started:.1f}s"
    )
    if mismatched:
        raise SystemExit("demo failed: the aggregates do not match the events sent: " + "; ".join(mismatched))
    print(
        f"checked {len(results)} results against what was sent: events and revenue of all"
        f" {len(expected)} countries match the {args.events} events"
    )


if __name__ == "__main__":
    main()
