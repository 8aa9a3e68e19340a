"""Run the Spark guide's spark-submit recipe on a real standalone cluster and lose a worker mid-run.

    python scripts/spark_cluster.py --messages 20000

On loopback and free ports: starts a local topic server and a Spark standalone master with two
workers (one core each) from the pyspark package; makes a Python for the nodes that has the
package's dependencies but not the package; copies the repository's files to a scratch directory
with the guide's ``app.py``; runs the guide's spark-submit lines there, word for word (both are
read from ``docs/spark.md``); SIGKILLs one worker with its executor and Python workers while a
task runs on it; lets the job finish on the other worker; then reads the output topic with the
official ``ydb`` SDK (this package's reader where only the ``spark`` extra is installed) and prints
how many messages were written, read back, lost and duplicated.
Exits 1 when any message is lost or duplicated. Every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "spark.md"
SOURCE = "clicks"
SINK = "clicks-enriched"
CONSUMER = "check"
PER_TRIGGER = 2000
"""The guide's app reads at most this many messages per micro-batch."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def recipe(name: str) -> str:
    """The fenced block after ``<!-- recipe: <name> ... -->`` in the Spark guide."""
    match = re.search(rf"<!-- recipe: {re.escape(name)}\b[^>]*-->\s*```\w*\n(.*?)```", GUIDE.read_text(), re.S)
    if match is None:
        raise RuntimeError(f"docs/spark.md has no recipe {name!r}")
    return match.group(1)


class Cluster:
    """A Spark standalone master and workers, each in a process group of its own."""

    def __init__(self, workdir: Path, workers: int) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.workdir = workdir
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.env = {
            **clean_environment(),
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(workdir / "logs"),
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes] | None] = []
        self.worker_count = workers

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.workdir / f"{name}.log").open("wb") as out:
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

    def executors(self, index: int) -> set[str]:
        """The ids of the executors worker ``index`` launched (from its log)."""
        text = (self.workdir / f"worker-{index}.log").read_text(errors="replace")
        return set(re.findall(r"Asked to launch executor \S+/(\d+)", text))

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


def _signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def clean_environment() -> dict[str, str]:
    """This environment without what would let Spark's Python processes import the package from
    elsewhere than the shipped zip (a PYTHONPATH to a source tree, an interpreter setting)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}


def node_python(directory: Path) -> Path:
    """A Python for the cluster's nodes: this interpreter with what it imports from on its path
    (the dependencies), but not the package itself (plain path entries skip the ``.pth`` file of
    an editable install)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    # Every directory this interpreter imports from, but those that hold the package (its source
    # tree, or where an install put it).
    paths = dict.fromkeys(
        entry for entry in sys.path if entry and Path(entry).is_dir() and not (Path(entry) / "ydb_topic_async").exists()
    )
    site = Path(sysconfig.get_paths(vars={"base": str(directory), "platbase": str(directory)})["purelib"])
    (site / "zz_dependencies.pth").write_text("\n".join(paths) + "\n")
    python = directory / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import grpc, pyarrow; import ydb_topic_async"],
                           env=clean_environment(), capture_output=True, text=True)
    if "No module named 'ydb_topic_async'" not in probe.stderr:
        raise RuntimeError(f"the nodes' Python must have the dependencies and not the package: {probe.stderr!r}")
    return python


def project_copy(directory: Path) -> Path:
    """The repository's files a wheel is built from (no build artefacts land in the checkout)."""
    directory.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, directory / name)
    shutil.copytree(ROOT / "src", directory / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (directory / "app.py").write_text(recipe("app.py"))
    return directory


def spark_conf(directory: Path) -> Path:
    """Spark configuration for a loopback cluster (kept out of the recipe, which is a real one's),
    with the scheduler's task lines, which tell where each task runs, in the log."""
    directory.mkdir()
    (directory / "spark-defaults.conf").write_text(
        "spark.driver.host 127.0.0.1\nspark.driver.bindAddress 127.0.0.1\nspark.ui.enabled false\n"
        "spark.ui.showConsoleProgress false\n"
    )
    (directory / "log4j2.properties").write_text(
        "rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex\n"
        "logger.tasks.name = org.apache.spark.scheduler.TaskSetManager\nlogger.tasks.level = info\n"
    )
    return directory


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
        await driver.topic.create_topic(SINK, min_active_partitions=partitions, consumers=[CONSUMER])
        for pid in range(partitions):
            async with driver.topic.writer(SOURCE, producer_id=f"source-{pid}", partition_id=pid) as writer:
                await writer.write([f"m-{i}".encode() for i in range(pid, messages, partitions)])


async def stored(endpoint: str, database: str) -> int:
    from ydb_topic_async import Driver

    async with Driver(endpoint, database) as driver:
        description = await driver.topic.describe_topic(SINK, include_stats=True)
        return sum(p.stats.end_offset for p in description.partitions if p.stats)


async def read_back(endpoint: str, database: str, count: int) -> tuple[Counter[bytes], str]:
    """The ``count`` messages of the output topic, read by the official ``ydb`` SDK (a reader that
    shares nothing with this package); this package's reader when that SDK is not installed."""
    seen: Counter[bytes] = Counter()
    try:
        import ydb.aio
    except ImportError:  # the spark extra alone does not install it (the dev extra does)
        from ydb_topic_async import Driver

        async with Driver(endpoint, database) as ours, ours.topic.reader(SINK, consumer=CONSUMER) as reader:
            # As the consumer, from its committed offsets: every partition, however many there are.
            while sum(seen.values()) < count:
                batch = await reader.receive_batch(timeout=30)
                seen.update(m.data for m in batch)
                await reader.commit_with_ack(batch, timeout=30)
        return seen, "this package's reader: the official ydb SDK is not installed"
    driver = ydb.aio.Driver(endpoint=endpoint, database=database)
    await driver.wait(timeout=30)
    try:
        reader = driver.topic_client.reader(SINK, consumer=CONSUMER)
        try:
            while sum(seen.values()) < count:
                batch = await asyncio.wait_for(reader.receive_batch(), 30)
                seen.update(message.data for message in batch.messages)
                await asyncio.wait_for(reader.commit_with_ack(batch), 30)
        finally:
            await reader.close()
    finally:
        await driver.stop()
    return seen, "the official ydb SDK"


class TaskWatch:
    """Follows the scheduler's task lines in spark-submit's log: which tasks run on which executor,
    and how many attempts were lost."""

    _START = re.compile(r"Starting task (\S+) in stage (\S+) .*executor (\d+)")
    _END = re.compile(r"(?:Finished|Lost) task (\S+) in stage (\S+) |task (\S+) in stage (\S+) \(TID \d+\) failed")

    def __init__(self, stream: Any, copy_to: Path) -> None:
        self.running: dict[tuple[str, str], str] = {}
        self.lost = 0
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self._follow, args=(stream, copy_to), daemon=True)
        self._thread.start()

    def _follow(self, stream: Any, copy_to: Path) -> None:
        with copy_to.open("w") as out:
            for line in stream:
                out.write(line)
                with self.lock:
                    if match := self._START.search(line):
                        self.running[(match.group(1), match.group(2))] = match.group(3)
                    elif match := self._END.search(line):
                        task = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
                        self.running.pop(task, None)
                        self.lost += "Finished task" not in line

    def on(self, executors: set[str]) -> bool:
        with self.lock:
            return any(executor in executors for executor in self.running.values())

    def join(self) -> None:
        self._thread.join(30)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ydb-spark-cluster-") as tmp, topic_server() as (endpoint, database):
        workdir = Path(tmp)
        asyncio.run(produce(endpoint, database, args.messages, args.partitions))
        log(f"local topic server at {endpoint}; {args.messages} messages in {SOURCE} ({args.partitions} partitions)")
        cluster = Cluster(workdir, workers=2)
        try:
            cluster.start()
            log(f"Spark standalone master {cluster.url} with 2 workers (1 core each)")
            project = project_copy(workdir / "project")
            env = {
                **clean_environment(),
                # pip of this Python, spark-submit of its pyspark (what a pip-installed pyspark puts on PATH)
                "PATH": os.pathsep.join((str(Path(sys.executable).parent), str(cluster.home / "bin"),
                                         os.environ.get("PATH", ""))),
                "SPARK_CONF_DIR": str(spark_conf(workdir / "conf")),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_MASTER": cluster.url,
                "NODE_PYTHON": str(node_python(workdir / "node")),
                "YDB_ENDPOINT": endpoint,
                "YDB_DATABASE": database,
                "CHECKPOINT": str(workdir / "checkpoint"),
            }
            submit = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", recipe("submit")], cwd=project, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            watch = TaskWatch(submit.stdout, workdir / "spark-submit.log")
            try:
                log_file = workdir / "spark-submit.log"
                killed_at = _kill_mid_run(submit, watch, cluster, endpoint, database, args, log_file)
                submit.wait(args.timeout)
            except BaseException:
                _signal_group(submit, signal.SIGKILL)
                submit.kill()
                raise
            finally:
                watch.join()
                if submit.stdout is not None:
                    submit.stdout.close()
            if submit.returncode != 0:
                tail = (workdir / "spark-submit.log").read_text()[-4000:]
                raise RuntimeError(f"spark-submit failed ({submit.returncode}):\n{tail}")
            log("spark-submit finished")
        finally:
            cluster.stop()
        seen, reader = asyncio.run(read_back(endpoint, database, asyncio.run(stored(endpoint, database))))
    expected = {f"seen:m-{i}".encode() for i in range(args.messages)}
    return {
        "written": args.messages,
        "read": sum(seen.values()),
        "lost": len(expected - set(seen)),
        "duplicated": sum(count - 1 for count in seen.values() if count > 1),
        "unexpected": len(set(seen) - expected),
        "stored_at_kill": killed_at,
        "lost_tasks": watch.lost,
        "reader": reader,
    }


def _kill_mid_run(
    submit: subprocess.Popen[str], watch: TaskWatch, cluster: Cluster, endpoint: str, database: str,
    args: argparse.Namespace, submit_log: Path,
) -> int:
    """Once the sink stored the first micro-batch, kill worker 1 while a task runs on its executor."""
    deadline = time.monotonic() + args.timeout
    while True:
        if submit.poll() is not None:
            time.sleep(1)  # the log's last lines
            raise RuntimeError(f"spark-submit ended before a worker could be killed mid-run:\n"
                               f"{submit_log.read_text(errors='replace')[-4000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("no task ran on worker 1 after the first micro-batch")
        count = asyncio.run(stored(endpoint, database))
        if count >= PER_TRIGGER and count < args.messages and watch.on(cluster.executors(1)):
            break
        time.sleep(0.02)
    cluster.kill_worker(1)
    log(f"SIGKILLed worker 1 (its worker JVM, executor and Python workers) while it ran a task; {count} rows stored")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (source and sink)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds the job may take")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = run(args)
    print(
        f"\nrows written {result['written']}, read back {result['read']}, lost {result['lost']}, "
        f"duplicated {result['duplicated']} (read by {result['reader']}); {result['lost_tasks']} task attempts "
        f"lost with the killed worker and run again; {time.monotonic() - started:.0f}s"
    )
    ok = result["lost"] == 0 and result["duplicated"] == 0 and result["unexpected"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
