"""Run the ``ydb_topic`` pipeline on a real Spark standalone cluster and lose a worker mid-run.

    python scripts/spark_cluster.py --messages 20000

Starts, on loopback and on free ports, a local topic server and a Spark standalone master with
two workers (one core each) from the pyspark package; runs a Structured Streaming query on that
cluster that reads a topic, transforms every message and writes the result through the
exactly-once sink; SIGKILLs one worker with its executor and Python workers while micro-batches
run; lets the query finish on the remaining worker; then reads the output topic with the async
SDK (not Spark) and prints how many messages were written, read back, lost and duplicated. Exits
1 when any message is lost or duplicated. Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

SOURCE = "cluster/in"
SINK = "cluster/out"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Cluster:
    """A Spark standalone master and workers, each in a process group of its own."""

    def __init__(self, workdir: Path, workers: int) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.workdir = workdir
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(workdir / "logs"),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes] | None] = []
        self.worker_count = workers

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        out = (self.workdir / f"{name}.log").open("wb")
        return subprocess.Popen(
            [str(self.home / "bin" / "spark-class"), *args],
            env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def start(self, timeout: float = 120) -> None:
        self.master = self._spawn(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(free_port()),
        )
        self._wait_for("master", r"Starting Spark master at", timeout)
        for i in range(self.worker_count):
            work = self.workdir / f"work-{i}"
            work.mkdir()
            self.workers.append(
                self._spawn(
                    f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                    "--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g",
                    "--work-dir", str(work),
                )
            )
        for i in range(self.worker_count):
            self._wait_for(f"worker-{i}", r"Successfully registered with master", timeout)

    def _wait_for(self, name: str, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        path = self.workdir / f"{name}.log"
        while time.monotonic() < deadline:
            if re.search(pattern, path.read_text(errors="replace")):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not start within {timeout}s; see {path}")

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker with everything it started (executor JVM, Python workers): a lost node."""
        proc = self.workers[index]
        assert proc is not None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        self.workers[index] = None

    def stop(self) -> None:
        procs = [p for p in (*self.workers, self.master) if p is not None]
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(15)
            # Executors and Python workers the JVM started stay in its group: make sure they go too.
            _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


@contextmanager
def topic_server() -> Iterator[tuple[str, str]]:
    server = subprocess.Popen(
        [sys.executable, "-m", "ydb_topic_async.testing", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        match = re.search(r"(grpcs?://[^/\s]+)/\?database=(\S+)", server.stdout.readline())
        if match is None:
            raise RuntimeError("the local topic server did not start")
        yield match.group(1), match.group(2)
    finally:
        server.terminate()
        server.wait(15)
        if server.stdout is not None:
            server.stdout.close()


async def produce(endpoint: str, database: str, messages: int, partitions: int) -> None:
    from ydb_topic_async import Driver

    async with Driver(endpoint, database) as driver:
        await driver.topic.create_topic(SOURCE, min_active_partitions=partitions)
        await driver.topic.create_topic(SINK, min_active_partitions=partitions)
        for pid in range(partitions):
            async with driver.topic.writer(SOURCE, producer_id=f"source-{pid}", partition_id=pid) as writer:
                await writer.write([f"m-{i}".encode() for i in range(pid, messages, partitions)])


async def read_back(endpoint: str, database: str) -> Counter[bytes]:
    """Every message of the output topic, read with the async SDK's reader (no Spark involved)."""
    from ydb_topic_async import Driver, TopicSelector

    async with Driver(endpoint, database) as driver:
        description = await driver.topic.describe_topic(SINK, include_stats=True)
        ends = {p.partition_id: p.stats.end_offset for p in description.partitions if p.stats}
        seen: Counter[bytes] = Counter()
        selector = TopicSelector(SINK, start_offsets=dict.fromkeys(ends, 0))
        async with driver.topic.reader(selector, consumer=None) as reader:
            while sum(seen.values()) < sum(ends.values()):
                for message in await reader.receive_batch(timeout=30):
                    seen[message.data] += 1
        return seen


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from ydb_topic_async.spark import register

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="ydb-spark-cluster-") as tmp, topic_server() as (endpoint, database):
        workdir = Path(tmp)
        asyncio.run(produce(endpoint, database, args.messages, args.partitions))
        log(f"local topic server at {endpoint}; {args.messages} messages in {SOURCE} ({args.partitions} partitions)")
        cluster = Cluster(workdir, workers=2)
        try:
            cluster.start()
            log(f"Spark standalone master {cluster.url} with 2 workers (1 core each)")
            spark = (
                SparkSession.builder.master(cluster.url)
                .appName("ydb-topic-cluster-check")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.executor.cores", "1")
                .config("spark.executor.memory", "1g")
                .config("spark.cores.max", "2")
                .config("spark.pyspark.python", sys.executable)
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            try:
                register(spark)
                connection = {"endpoint": endpoint, "database": database}
                query = (
                    spark.readStream.format("ydb_topic")
                    .options(**connection, topic=SOURCE, maxOffsetsPerTrigger=str(args.per_trigger))
                    .load()
                    .select(
                        F.concat(F.lit(b"seen:"), F.col("data")).alias("data"),
                        F.create_map(F.lit("from"), F.concat_ws(":", "partition", "offset").cast("binary"))
                        .alias("metadata"),
                    )
                    .writeStream.format("ydb_topic")
                    .options(**connection, topic=SINK)
                    .option("checkpointLocation", str(workdir / "checkpoint"))
                    .trigger(availableNow=True)
                    .start()
                )
                killed_at = _kill_mid_run(spark, query, cluster, args.kill_after)
                query.awaitTermination(args.timeout)
                if query.isActive:
                    query.stop()
                    raise RuntimeError(f"the query did not finish within {args.timeout}s")
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                batches = sum(1 for p in query.recentProgress if p["numInputRows"])
                failed = _failed_tasks(spark)
                log(f"query finished: {batches} micro-batches, {failed} task attempts failed with the lost worker "
                    "and ran again on the other")
            finally:
                spark.stop()
        finally:
            cluster.stop()
        seen = asyncio.run(read_back(endpoint, database))
    expected = {f"seen:m-{i}".encode() for i in range(args.messages)}
    result = {
        "written": args.messages,
        "read": sum(seen.values()),
        "lost": len(expected - set(seen)),
        "duplicated": sum(count - 1 for count in seen.values() if count > 1),
        "unexpected": len(set(seen) - expected),
        "batches": batches,
        "killed_after_batch": killed_at,
        "failed_tasks": failed,
    }
    return result


def _kill_mid_run(spark: Any, query: Any, cluster: Cluster, after_batches: int) -> int:
    """Wait for ``after_batches`` finished micro-batches, then kill worker 1 while tasks of the next run."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 300
    while True:
        done = sum(1 for p in query.recentProgress if p["numInputRows"])
        running = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        if done >= after_batches and any(s is not None and s.numActiveTasks >= 2 for s in running):
            break
        if not query.isActive or time.monotonic() > deadline:
            raise RuntimeError(f"the query stopped before {after_batches} micro-batches: {query.exception()}")
        time.sleep(0.01)
    cluster.kill_worker(1)
    log(f"SIGKILLed worker 1 (its worker JVM, executor and Python workers) after {done} micro-batches")
    return done


def _failed_tasks(spark: Any) -> int:
    """Failed task attempts over every stage Spark still remembers (stage ids count up from 0)."""
    tracker = spark.sparkContext.statusTracker()
    total = 0
    for stage in range(10_000):
        info = tracker.getStageInfo(stage)
        if info is None:
            break
        total += info.numFailedTasks
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (source and sink)")
    parser.add_argument("--per-trigger", type=int, default=2_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--kill-after", type=int, default=2, help="micro-batches before the worker is killed")
    parser.add_argument("--timeout", type=float, default=600, help="seconds the query may take")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = run(args)
    print(
        f"\nrows written {result['written']}, read back {result['read']}, lost {result['lost']}, "
        f"duplicated {result['duplicated']} ({result['batches']} micro-batches; a worker killed during batch "
        f"{result['killed_after_batch'] + 1}, {result['failed_tasks']} task attempts lost with it; "
        f"{time.monotonic() - started:.0f}s)"
    )
    ok = result["lost"] == 0 and result["duplicated"] == 0 and result["unexpected"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
