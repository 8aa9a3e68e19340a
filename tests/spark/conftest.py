"""Spark test fixtures: one local topic server process and one SparkSession per test session.

Python data source tasks run in Spark's Python worker processes, so the server runs as a
separate process on loopback (as a real cluster would), not inside the test's event loop.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from ydb_topic_async import Driver

T = TypeVar("T")
_names = itertools.count()


@dataclass(frozen=True)
class Server:
    endpoint: str
    database: str

    def options(self, topic: str, **extra: str) -> dict[str, str]:
        return {"endpoint": self.endpoint, "database": self.database, "topic": topic, **extra}

    def run(self, fn: Callable[[Driver], Awaitable[T]]) -> T:
        """Run ``fn(driver)`` on a private event loop (these tests are synchronous, as Spark is)."""
        from ydb_topic_async.spark._bridge import run_with_driver
        from ydb_topic_async.spark._options import parse_options

        return run_with_driver(parse_options(self.options("unused")), fn)


@pytest.fixture(scope="session")
def ydb_server() -> Iterator[Server]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ydb_topic_async.testing", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(grpcs?://[^/\s]+)/\?database=(\S+)", line)
        if match is None:
            raise RuntimeError(f"unexpected output from the local topic server: {line!r}")
        yield Server(match.group(1), match.group(2))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def require_spark() -> None:
    """Skip without pyspark or Java on a developer's machine; in CI (``CI`` set) a missing one fails."""
    problem = None
    try:
        import pyspark  # noqa: F401
    except ImportError:
        problem = "pyspark is not installed (pip install 'ydb-topic-async[spark]')"
    if problem is None and shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        problem = "Spark needs Java 17+ (java on PATH or JAVA_HOME)"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the Spark tests must run in CI: {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require_spark()
    from pyspark.sql import SparkSession

    from ydb_topic_async.spark import register

    # Python workers must use this interpreter (the one with the package installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Keep Spark on loopback: otherwise it advertises the first network interface it finds.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ydb-topic-async-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def topic_name() -> str:
    return f"spark/topic-{next(_names)}"
