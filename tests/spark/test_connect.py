"""The ``ydb_topic`` data source through Spark Connect: batch read and write and a streaming query
from a Connect client, against a Connect server started from the pyspark package."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ydb_topic_async.extras import install_hint

if not os.environ.get("CI"):  # in CI the Spark tests must run (see conftest.require_spark)
    pytest.importorskip("pyspark", reason=f"pyspark is not installed ({install_hint('spark')})")

from .conftest import Server, create, require_spark, write_messages

ROOT = Path(__file__).resolve().parents[2]
CLIENT_PACKAGES = ("grpc_status", "google.rpc", "pandas", "numpy")
"""What a Spark Connect client needs beyond pyspark (``pyspark[connect]``; in the dev extra)."""


def require_connect_client() -> None:
    missing = [name for name in CLIENT_PACKAGES if importlib.util.find_spec(name.split(".")[0]) is None]
    if missing:
        problem = (f"a Spark Connect client needs {', '.join(missing)} (pip install 'pyspark[connect]', "
                   f"or {install_hint('dev')})")
        if os.environ.get("CI"):
            pytest.fail(f"the Spark Connect test must run in CI: {problem}")
        pytest.skip(problem)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server started with the pyspark package's own script, on a free port (not
    ``remote("local")``'s fixed 15002, which two runs on one machine would fight over)."""
    require_spark()
    require_connect_client()
    import pyspark

    home = Path(pyspark.__file__).parent
    work = tmp_path_factory.mktemp("connect")
    port = free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(work / "logs"),
        "SPARK_PID_DIR": str(work),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # the server's Python workers unpickle the data source
    }
    server = subprocess.Popen(
        [str(home / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]",
         "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"],
        env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                logs = "".join(p.read_text(errors="replace")[-3000:] for p in (work / "logs").glob("*"))
                raise RuntimeError(f"the Spark Connect server did not start: {logs}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)


@pytest.mark.timeout(400)
def test_batch_and_streaming_through_spark_connect(
    connect_server: str, ydb_server: Server, topic_name: str, tmp_path: Path
) -> None:
    sink = f"{topic_name}-out"
    write_messages(ydb_server, topic_name, partitions=2, per_partition=5)
    create(ydb_server, sink, partitions=2)
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark._connect_client", connect_server, ydb_server.endpoint,
         ydb_server.database, topic_name, sink, str(tmp_path / "cp")],
        cwd=ROOT, capture_output=True, text=True, timeout=360,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["session"] == "pyspark.sql.connect.session"
    assert result["batch_read"] == sorted(f"p{p}-{i}" for p in range(2) for i in range(5))
    assert result["batch_write"] == "ok"
    assert result["stream"] == {"active": False, "error": None, "batches": 3}  # 10 messages, 4 per trigger
    assert "AnalysisException" in result["bad_option"]
    assert "did you mean 'maxOffsetsPerTrigger'?" in result["bad_option"]
    stored = Counter(ydb_server.stored_data(sink))
    assert stored == Counter([f"connect-{i}".encode() for i in range(5)]
                             + [f"streamed:p{p}-{i}".encode() for p in range(2) for i in range(5)])
