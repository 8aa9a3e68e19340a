"""The reader's memory against its settings, measured from outside the process: a regression guard.

A fresh interpreter (``_peak_reader.py``) reads compressible messages one at a time, slowly, with
a small buffer, while the local server runs in this process, so that the server's memory is not
counted. The child's peak resident set growth (the high-water mark VmHWM after resetting it,
what ``ru_maxrss`` reports) must stay under twice what the settings promise:
``buffer_size_bytes`` plus what the caller holds. The reader measures about 0.8 of that bound
here (6-7 MiB, the driver's fixed few MiB included); when its credit was counted in bytes on the
wire, the same run measured 2.9-3.6 times it. ``benchmarks/memory.py`` is the full measurement,
with the official SDK and a bare gRPC client beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from pathlib import Path

import pytest
import zstandard

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.storage import NewMessage

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the peak is read from /proc (Linux)"),
]

CHILD = Path(__file__).with_name("_peak_reader.py")
SOURCE = str(Path(yta.__file__).resolve().parent.parent)
"""Where this package is imported from: the child imports the same one."""
MIB = 1024 * 1024
MESSAGES = 600
SIZE = 256 * 1024
BUFFER = 8 * MIB


def _text(size: int, seed: int) -> bytes:
    """Words of a small vocabulary: zstd shrinks it about seven times."""
    rng = random.Random(seed)
    words = [b"%x" % rng.getrandbits(20) for _ in range(8)]
    return b" ".join(rng.choice(words) for _ in range(size // 4))[:size]


async def test_a_readers_peak_stays_within_twice_its_buffer_and_what_its_caller_holds(
    server: LocalTopicServer, topic: str
) -> None:
    bodies = [_text(SIZE, seed) for seed in range(4)]
    packed = [zstandard.ZstdCompressor().compress(body) for body in bodies]
    # Compressed well: granting the buffer in bytes on the wire would let several buffers in.
    assert all(len(data) * 5 < SIZE for data in packed)
    log = server.storage.topic(topic).partition(0)
    for index in range(MESSAGES):
        log.append(NewMessage(
            seq_no=index + 1, created_at_ns=1, codec=yta.Codec.ZSTD, data=packed[index % 4],
            uncompressed_size=SIZE, producer_id="producer",
        ))
    server.storage.notify()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SOURCE, env.get("PYTHONPATH")]))
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), server.endpoint, server.database, topic, str(MESSAGES), str(BUFFER),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(), 90)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode == 0, err.decode(errors="replace")
    result = json.loads(out)
    assert (result["messages"], result["payload_bytes"]) == (MESSAGES, MESSAGES * SIZE)
    bound = BUFFER + result["held"]
    assert result["held"] == 2 * SIZE  # the message in hand and the one before it
    assert result["peak_growth"] <= 2 * bound, (
        f"the reader grew by {result['peak_growth'] / MIB:.1f} MiB at its peak: more than twice"
        f" buffer_size_bytes ({BUFFER / MIB:.0f} MiB) and what its caller held ({result['held'] / MIB:.1f} MiB)"
    )
