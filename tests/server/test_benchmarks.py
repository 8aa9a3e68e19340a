"""The benchmarks in ``benchmarks/`` run end to end, with tiny workloads, and report what they claim.

They are what the published figures come from: a benchmark that broke (an API change in either
SDK, a server change) must fail here, not when someone measures on a quiet machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run(script: str, *args: str, tmp_path: Path) -> dict[str, Any]:
    """Run ``benchmarks/<script>`` with ``--json``; the JSON it wrote."""
    out = tmp_path / f"{script}.json"
    env = {**os.environ, "GRPC_VERBOSITY": "ERROR"}
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--json", str(out)],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def by(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(f["client"], f["mode"]): f for f in data["figures"]}


def test_write_benchmark_measures_ours_official_and_the_floor_with_the_same_batching(tmp_path: Path) -> None:
    figures = by(run("write.py", "--messages", "300", "--rounds", "1", "--sizes", "100", tmp_path=tmp_path))
    assert set(figures) == {("ours", "write"), ("official", "write"), ("floor", "write")}
    for figure in figures.values():
        assert figure["messages"] == 300 and figure["client_cpu_seconds"] > 0
        assert figure["server_cpu_seconds"] > 0 and figure["server_utilisation"] > 0
        assert figure["extra"]["server"]["messages_received"] == 300  # the server saw this client's messages
    ours, floor = figures[("ours", "write")], figures[("floor", "write")]
    ours_batch = 300 / ours["extra"]["server"]["write_requests"]
    assert floor["extra"]["batch"] == max(1, round(ours_batch))


def test_read_benchmark_measures_both_modes_and_the_floor(tmp_path: Path) -> None:
    figures = by(run("read.py", "--messages", "300", "--rounds", "1", "--sizes", "100", tmp_path=tmp_path))
    assert set(figures) == {("ours", "batch"), ("ours", "message"), ("official", "batch"),
                            ("official", "message"), ("floor", "batch")}
    for figure in figures.values():
        assert figure["extra"]["server"]["messages_sent"] >= 300
        assert figure["server_cpu_seconds"] > 0


def test_metrics_benchmark_measures_each_setting_both_ways_and_checks_the_counts(tmp_path: Path) -> None:
    """Without a recorder, with one that records nothing, with OpenTelemetry; the run itself fails
    when OpenTelemetry's counts differ from the messages written and read."""
    figures = by(run("metrics.py", "--messages", "300", "--rounds", "1", "--sizes", "100", tmp_path=tmp_path))
    assert set(figures) == {(setting, mode) for setting in ("off", "hooks", "otel") for mode in ("write", "read")}
    assert all(f["messages"] == 300 and f["client_cpu_seconds"] > 0 for f in figures.values())


def test_server_benchmark_reports_the_servers_cpu_per_message(tmp_path: Path) -> None:
    figures = by(run("server.py", "--messages", "2000", "--rounds", "1", tmp_path=tmp_path))
    assert set(figures) == {("floor", "write"), ("floor", "read")}
    assert all(0 < f["server_us_per_message"] < 1000 for f in figures.values())


def test_large_and_scale_benchmarks_report_lag_memory_and_first_ack(tmp_path: Path) -> None:
    large = by(run("large.py", "--messages", "2", "--size-mib", "1", "--buffer-mib", "4", tmp_path=tmp_path))
    assert set(large) == {("ours", "write zstd"), ("floor", "read zstd"), ("ours", "read zstd"),
                          ("builtin", "read zstd"), ("official", "read zstd")}
    for figure in large.values():
        assert figure["extra"]["ticks"] > 0 and figure["extra"]["max_lag_ms"] >= 0
        assert figure["extra"]["bytes"] == 2 * 1024 * 1024
    assert "rss_growth" in large[("ours", "read zstd")]["extra"]
    scale = by(run("scale.py", "--repeat", "1", "--writers", "5", "--partitions", "5", tmp_path=tmp_path))
    assert set(scale) == {("ours", "time to first ack"), ("official", "time to first ack"),
                          ("ours", "memory per idle writer"), ("official", "memory per idle writer"),
                          ("ours", "memory per reader partition session")}
    assert 0 < scale[("ours", "time to first ack")]["extra"]["value"] < 30_000


def test_charts_are_drawn_from_the_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    data = {
        "benchmark": "write",
        "machine": {"cpu": "test", "cpus": 2, "python": "3"},
        "figures": [
            {"client": client, "mode": "write", "label": client, "size": size, "rate": rate,
             "client_us_per_message": cpu}
            for client, rate, cpu in (("ours", 1000.0, 2.0), ("floor", 2000.0, 1.0))
            for size in (100, 1024)
        ],
    }
    source = tmp_path / "write.json"
    source.write_text(json.dumps(data))
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "charts.py"), str(source), "--out", str(tmp_path / "img")],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in ("write-rate.svg", "write-cpu.svg"):
        svg = (tmp_path / "img" / name).read_text()
        assert svg.startswith("<?xml") and "ours" in svg and "floor" in svg


def test_direct_read_benchmark_counts_the_bytes_crossing_nodes(tmp_path: Path) -> None:
    figures = by(run("direct_read.py", "--messages", "600", "--rounds", "1", "--sizes", "100", tmp_path=tmp_path))
    assert set(figures) == {("ours", "ordinary"), ("ours", "direct")}
    ordinary, direct = figures[("ours", "ordinary")]["extra"]["server"], figures[("ours", "direct")]["extra"]["server"]
    assert ordinary["messages_sent"] == direct["messages_sent"] == 600
    assert ordinary["read_responses"] > 0 and direct["read_responses"] == 0 and direct["direct_read_responses"] > 0
    assert 0 < ordinary["read_bytes_from_other_nodes"] < ordinary["read_bytes_sent"]
    assert direct["read_bytes_from_other_nodes"] == 0 < direct["read_bytes_sent"]
