"""``scripts/spark_cluster.py``: the pipeline on a Spark standalone cluster that loses a worker mid-run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import require_spark

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "spark_cluster.py"


@pytest.mark.timeout(300)
def test_a_standalone_cluster_that_loses_a_worker_loses_and_duplicates_nothing() -> None:
    require_spark()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--messages", "8000", "--per-trigger", "1000", "--kill-after", "2"],
        capture_output=True, text=True, timeout=280, env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = re.search(
        r"rows written (\d+), read back (\d+), lost (\d+), duplicated (\d+) \((\d+) micro-batches; "
        r"a worker killed during batch (\d+), (\d+) task attempts lost with it",
        done.stdout,
    )
    assert summary is not None, done.stdout[-3000:]
    written, read, lost, duplicated, batches, killed_in, failed = map(int, summary.groups())
    assert (written, read, lost, duplicated) == (8000, 8000, 0, 0)
    assert batches == 8 and 1 < killed_in <= batches
    assert failed >= 1  # the worker died with a task of that batch running on it
