"""A short run of the soak test (``scripts/soak.py``): every fault kind at least once, nothing lost,
nothing stored twice, no call past its bound, nobody giving up.

The long run (ten minutes and more) is for before a release; its figures are in
``docs/reliability.md``. This one keeps the script working and catches a regression within CI's
budget: about 20 seconds of faults (resets, stalls longer than ``init_timeout``, black holes,
lost acknowledgements, refused connections, SIGKILLed server restarts), then the drain and the
check of what the server stored. The lost acknowledgements make the check bite: the same run
with writers without producer ids (no deduplication) stores over a hundred messages twice.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SOAK = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


@pytest.mark.timeout(300)
async def test_a_short_soak_loses_nothing_and_stores_nothing_twice(tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SOAK), "--duration", "20", "--writers", "2", "--partitions", "2", "--rate", "40",
        "--init-timeout", "2", "--keepalive", "1", "--call-timeout", "3", "--max-outage", "3", "--gap", "0.5", "1.5",
        "--drain-timeout", "60", "--seed", "11", "--data-dir", str(tmp_path / "data"), "--json", str(report_file),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(proc.communicate(), 280)
    text = output.decode()
    assert report_file.exists(), text
    report = json.loads(report_file.read_text())
    assert set(report["faults"]) == {"reset", "stall", "blackhole", "lost_replies", "outage", "restart"}, text
    assert report["server_restarts"] >= 1
    stall = report["fault_seconds"]["stall"] / report["faults"]["stall"]
    assert stall > report["settings"]["init_timeout"]  # handshakes through a stall time out
    assert report["written"] > 300, text  # the writers kept going through the faults
    assert report["stored"] == report["written"] == report["read"]
    for name in ("lost", "stored_twice", "seq_nos_stored_twice", "read_again_after_commit", "unread",
                 "hangs", "give_ups", "errors_logged"):
        assert report[name] == 0, (name, text)
    assert report["reconnects"] > 0
    assert proc.returncode == 0, text
