"""What the commands print: topic and consumer descriptions (text or JSON), messages as JSON
lines, progress on standard error, and failures in one line."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
import time
from typing import Any, TextIO

from .. import ConsumerDescription, TopicDescription

PROG = "ydb-topic-async"


def print_topic(d: TopicDescription, out: TextIO, *, as_json: bool) -> None:
    """A topic's path, partitions (state and offsets), retention, codecs and consumers."""
    info: dict[str, Any] = {
        "path": d.path,
        "partitions": [
            {
                "id": p.partition_id,
                "active": p.active,
                "start_offset": p.stats.start_offset if p.stats else None,
                "end_offset": p.stats.end_offset if p.stats else None,
                "children": list(p.child_partition_ids),
            }
            for p in d.partitions
        ],
        "retention_seconds": d.retention_period.total_seconds() if d.retention_period else None,
        "supported_codecs": list(d.supported_codecs),
        "consumers": [c.name for c in d.consumers],
    }
    if as_json:
        print(json.dumps(info), file=out)
        return
    print(f"{d.path}: {len(d.partitions)} partitions, consumers: {', '.join(info['consumers']) or '-'}", file=out)
    for p in info["partitions"]:
        state = "active" if p["active"] else "inactive"
        print(f"  partition {p['id']}: {state}, offsets [{p['start_offset']}, {p['end_offset']})", file=out)


def print_consumer(name: str, c: ConsumerDescription, out: TextIO, *, as_json: bool) -> None:
    """A consumer's committed offsets, lag and time lag per partition, and in total."""
    rows = [
        {"partition": p.partition_id, "committed_offset": p.committed_offset, "end_offset": p.end_offset,
         "lag": p.lag, "time_lag_seconds": _seconds(p.time_lag),
         "read_time_lag_seconds": _seconds(p.max_read_time_lag),
         "last_read_time": p.last_read_time.isoformat() if p.last_read_time else None,
         "reader": p.reader_name or None}
        for p in c.partitions
    ]
    stats = c.stats
    time_lag = _seconds(stats.max_committed_time_lag) if stats is not None else None
    if as_json:
        print(json.dumps({"consumer": name, "partitions": rows, "total_lag": c.total_lag,
                          "max_time_lag_seconds": time_lag}), file=out)
        return
    print(f"consumer {name} of {c.path}: total lag {c.total_lag} messages"
          + (f", max time lag {time_lag:.3f}s" if time_lag is not None else ""), file=out)
    for row in rows:
        print(f"  partition {row['partition']}: committed {row['committed_offset']},"
              f" end {row['end_offset']}, lag {row['lag']} messages"
              + (f", time lag {row['time_lag_seconds']:.3f}s" if row["time_lag_seconds"] is not None else "")
              + (f", read by {row['reader']}" if row["reader"] else ""), file=out)


def _seconds(value: dt.timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


class Progress:
    """A one-line progress bar on a stream: a bar with a percentage when the total is known,
    else a counter; both with the rate. Redrawn at most every ``interval`` seconds.

    The total is in bytes (``total_bytes``, writing a file) or in messages (``total_messages``,
    reading a given count).
    """

    WIDTH = 30

    def __init__(
        self,
        stream: TextIO,
        total_bytes: int | None = None,
        interval: float = 0.2,
        *,
        total_messages: int | None = None,
    ) -> None:
        self.stream = stream
        self.total_bytes = total_bytes
        self.total_messages = total_messages
        self.interval = interval
        self.messages = 0
        self.bytes = 0
        self.started = time.monotonic()
        self._drawn = 0.0

    def advance(self, size: int, messages: int = 1) -> None:
        self.messages += messages
        self.bytes += size
        now = time.monotonic()
        if now - self._drawn >= self.interval:
            self._drawn = now
            self.draw()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = f"{self.messages / elapsed:,.0f} msg/s"
        done: float | None = None
        if self.total_bytes:
            done = min(self.bytes / self.total_bytes, 1.0)
        elif self.total_messages:
            done = min(self.messages / self.total_messages, 1.0)
        if done is not None:
            filled = round(done * self.WIDTH)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            return f"[{bar}] {done:4.0%} {self.messages:,} messages, {rate}"
        return f"{self.messages:,} messages, {rate}"

    def draw(self, final: bool = False) -> None:
        print("\r" + self.line(), end="\n" if final else "", file=self.stream, flush=True)



def message_json(message: Any) -> str:
    """One message as a JSON object: where it is, its ids and times, metadata and data (base64 when not UTF-8)."""
    data = message.data
    try:
        payload: dict[str, Any] = {"data": data.decode("utf-8")}
    except UnicodeDecodeError:
        payload = {"data_base64": base64.b64encode(data).decode()}
    return json.dumps({
        "topic": message.topic_path,
        "partition": message.partition_id,
        "offset": message.offset,
        "seq_no": message.seq_no,
        "producer_id": message.producer_id,
        "created_at": message.created_at.isoformat() if message.created_at else None,
        "written_at": message.written_at.isoformat(),
        "metadata": {k: base64.b64encode(v).decode() for k, v in message.metadata_items.items()},
        **payload,
    })



def fail(message: str) -> None:
    """Report a failure: one line on standard error."""
    print(f"{PROG}: {message}", file=sys.stderr)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
