"""Run as a script by ``test_reader_memory``: read a topic with a small buffer, one message at a
time like a slow consumer, and print the process's peak resident set growth as JSON.

Arguments: endpoint, database, topic, messages, buffer_size_bytes. The packages are imported and
the resident high-water mark reset before the reader starts, so the growth is the reader's (and
its driver's) alone; the server runs in the test's process.
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import sys
import time

import grpc  # noqa: F401  # imported before the baseline: its memory is not the reader's
import zstandard  # noqa: F401

import ydb_topic_async as yta


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (0 when absent)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> bool:
    """Start the high-water mark (VmHWM) again from the current RSS; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return False
    return True


async def _read(endpoint: str, database: str, topic: str, messages: int, buffer_size: int) -> dict[str, int]:
    held = previous = got = payload = 0
    async with (
        yta.Driver(endpoint, database, discovery=False) as driver,
        driver.topic.reader(topic, consumer="consumer", buffer_size_bytes=buffer_size) as reader,
    ):
        # ``async for`` keeps the previous message while it waits for the next: both are held.
        async for message in reader:
            size = len(message.data)
            held = max(held, previous + size)
            previous = size
            payload += size
            got += 1
            if got == messages:
                break
            await asyncio.sleep(0.002)  # a slow consumer: the server could send far more meanwhile
    return {"messages": got, "payload_bytes": payload, "held": held}


def main() -> None:
    endpoint, database, topic, messages, buffer_size = sys.argv[1:6]
    gc.collect()
    reset = _reset_peak()
    start_rss = _status("VmRSS")
    started = time.monotonic()
    result = asyncio.run(_read(endpoint, database, topic, int(messages), int(buffer_size)))
    # VmHWM is what ru_maxrss reports, counted from the reset; without one, ru_maxrss since the start.
    lifetime_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = _status("VmHWM") if reset else max(start_rss, lifetime_peak)
    result["peak_growth"] = peak - start_rss
    result["milliseconds"] = int((time.monotonic() - started) * 1000)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
