"""The README's main job, ``python -m ydb_topic_async.demo``, end to end on its embedded server."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from .conftest import require_spark


@pytest.mark.timeout(300)
def test_demo_pipeline_runs_and_its_aggregates_match_the_events() -> None:
    require_spark()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("YDB_ENDPOINT", None)  # the embedded local server, as in the README
    done = subprocess.run(
        [sys.executable, "-m", "ydb_topic_async.demo", "--events", "3000", "--max-per-trigger", "1000"],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The demo compares the aggregates it reads back with the events it sent and exits non-zero
    # on a mismatch; here the table and the summary must be there too.
    rows = re.findall(r"^(DE|FR|IN|JP|NL|US)\s+(\d+)\s+[\d.]+\s+\d\d:\d\d$", done.stdout, re.MULTILINE)
    assert {country for country, _ in rows} == {"DE", "FR", "IN", "JP", "NL", "US"}
    assert sum(int(events) for _, events in rows) == 3000
    assert re.search(r"^3000 events -> \d+ \(minute, country\) aggregates in demo/revenue", done.stdout, re.MULTILINE)
    assert re.search(r"spark\s+\d+ micro-batches", done.stdout)
    # It says that it checked, not only when something is wrong.
    assert re.search(
        r"^checked \d+ results against what was sent: events and revenue of all 6 countries match the 3000 events$",
        done.stdout, re.MULTILINE,
    ), done.stdout[-2000:]
    # Spark's own log lines go to its log file, not to the terminal.
    assert "WARN" not in done.stderr and "log4j" not in done.stderr, done.stderr[-2000:]
    assert "Spark's log: " in done.stdout


def run_demo_without_spark_starting(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ydb_topic_async.demo", "--events", "10"],
        capture_output=True, text=True, timeout=60, env=env,
    )


@pytest.mark.timeout(90)
def test_demo_without_java_says_what_to_install(tmp_path: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here
    done = run_demo_without_spark_starting(env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "Java 17 is required to run Spark (no java found on PATH): apt install openjdk-17-jre-headless"
        " (Debian, Ubuntu) / brew install openjdk@17 (macOS)\n"
    )


@pytest.mark.timeout(90)
def test_demo_with_an_old_java_says_what_to_install(tmp_path: pathlib.Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\n')
    java.chmod(0o755)
    done = run_demo_without_spark_starting({**os.environ, "JAVA_HOME": str(tmp_path)})
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"Java 17 is required to run Spark ({java} is Java 11): apt install")
    assert done.stderr.count("\n") == 1
