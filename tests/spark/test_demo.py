"""The README's main job, ``python -m ydb_topic_async.demo``, end to end on its embedded server."""

from __future__ import annotations

import os
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
