"""``scripts/spark_cluster.py``: the Spark guide's spark-submit recipe, word for word, on a standalone
cluster that loses a worker mid-run; the output read back by the official ``ydb`` SDK."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import require_spark

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "spark_cluster.py"


@pytest.mark.timeout(420)
def test_the_guides_spark_submit_recipe_on_a_cluster_that_loses_a_worker() -> None:
    require_spark()
    pytest.importorskip("ydb.aio", reason="the output is read back by the official ydb SDK (the dev extra)")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--messages", "8000"], capture_output=True, text=True, timeout=400, env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = re.search(
        r"rows written (\d+), read back (\d+), lost (\d+), duplicated (\d+) \(read by the official ydb SDK\); "
        r"(\d+) task attempts lost",
        done.stdout,
    )
    assert summary is not None, done.stdout[-3000:]
    written, read, lost, duplicated, lost_tasks = map(int, summary.groups())
    assert (written, read, lost, duplicated) == (8000, 8000, 0, 0)
    stored = re.search(r"SIGKILLed worker 1 .* while it ran a task; (\d+) rows stored", done.stdout)
    assert stored is not None and 0 < int(stored.group(1)) < 8000  # killed mid-run
    assert lost_tasks >= 1  # a task of the killed worker ran again on the other
