"""Options of the ``ydb_topic`` data source, parsed and checked on the Spark driver.

This module does not import pyspark, so option handling is testable without a JVM. Every
problem raises ``ValueError`` with the option's name, which Spark reports at ``load()``,
``save()`` or ``start()`` time instead of failing later inside an executor task.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2
"""Kafka's sentinel for "the partition's first offset" in a JSON offsets spec."""
LATEST = -1
"""Kafka's sentinel for "the partition's end offset" in a JSON offsets spec."""

OffsetSpec = str | dict[int, int]
"""``"earliest"``, ``"latest"``, or partition id -> offset (which may be ``EARLIEST``/``LATEST``)."""

logger = logging.getLogger("ydb_topic_async.spark")

_KNOWN = {
    "endpoint",
    "database",
    "topic",
    "startingoffsets",
    "endingoffsets",
    "maxoffsetspertrigger",
    "consumer",
    "token",
    "user",
    "password",
    "produceridprefix",
    "polltimeout",
    "codec",
}


@dataclass(frozen=True)
class SourceOptions:
    """Connection and topic options shared by reads and writes (plain values: they are pickled to executors)."""

    endpoint: str
    database: str | None
    topic: str
    token: str | None = None
    user: str | None = None
    password: str | None = None
    starting_offsets: OffsetSpec = "earliest"
    ending_offsets: OffsetSpec | None = None
    max_offsets_per_trigger: int | None = None
    consumer: str | None = None
    producer_id_prefix: str | None = None
    poll_timeout: float = 30.0
    codec: int | None = None


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check the options given to ``spark.read/readStream/write/writeStream.format("ydb_topic")``."""
    # Spark hands options over case-insensitively (as lowercase keys); accept either spelling.
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(k for k in opts if k not in _KNOWN and k != "path")
    endpoint = opts.get("endpoint", "").strip()
    if not endpoint:
        raise ValueError("ydb_topic: option 'endpoint' is required, e.g. grpc://localhost:2136")
    if "://" in endpoint and not endpoint.startswith(("grpc://", "grpcs://")):
        raise ValueError(f"ydb_topic: option 'endpoint' must start with grpc:// or grpcs://, got {endpoint!r}")
    database = opts.get("database") or None
    if database is not None and not database.startswith("/"):
        raise ValueError(f"ydb_topic: option 'database' must be an absolute path like /local, got {database!r}")
    if database is None and "database=" not in endpoint:
        raise ValueError("ydb_topic: option 'database' is required (or put ?database=/path in the endpoint)")
    topic = (opts.get("topic") or opts.get("path") or "").strip()
    if not topic.strip("/"):
        raise ValueError("ydb_topic: option 'topic' is required")
    token = opts.get("token") or None
    user = opts.get("user") or None
    password = opts.get("password")
    if token and user:
        raise ValueError("ydb_topic: give either 'token' or 'user'/'password', not both")
    if password is not None and not user:
        raise ValueError("ydb_topic: option 'password' needs 'user'")
    starting = parse_offsets(opts.get("startingoffsets", "earliest"), "startingOffsets", allow_earliest=True)
    ending = None
    if "endingoffsets" in opts:
        ending = parse_offsets(opts["endingoffsets"], "endingOffsets", allow_earliest=False)
    max_per_trigger = None
    if "maxoffsetspertrigger" in opts:
        max_per_trigger = _positive_int(opts["maxoffsetspertrigger"], "maxOffsetsPerTrigger")
    consumer = opts.get("consumer") or None
    poll_timeout = 30.0
    if "polltimeout" in opts:
        try:
            poll_timeout = float(opts["polltimeout"])
        except ValueError:
            poll_timeout = -1.0
        if not poll_timeout > 0:
            raise ValueError(
                f"ydb_topic: option 'pollTimeout' must be a positive number of seconds, got {opts['polltimeout']!r}"
            )
    codec = None
    if "codec" in opts:
        codec = _codec(opts["codec"])
    if unknown:
        # Not an error: Spark adds options of its own (checkpointLocation, queryName, ...).
        logger.info("ydb_topic: ignoring options %s", ", ".join(unknown))
    return SourceOptions(
        endpoint=endpoint,
        database=database,
        topic=topic,
        token=token,
        user=user,
        password=password,
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=max_per_trigger,
        consumer=consumer,
        producer_id_prefix=opts.get("produceridprefix") or None,
        poll_timeout=poll_timeout,
        codec=codec,
    )


def _positive_int(value: str, name: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"ydb_topic: option {name!r} must be a positive integer, got {value!r}")
    return number


_CODECS = {"raw": 1, "gzip": 2, "lzop": 3, "zstd": 4}


def _codec(value: str) -> int:
    name = value.strip().lower()
    if name in _CODECS:
        return _CODECS[name]
    raise ValueError(f"ydb_topic: option 'codec' must be one of {', '.join(_CODECS)}, got {value!r}")


def parse_offsets(value: str, name: str, *, allow_earliest: bool) -> OffsetSpec:
    """``earliest`` | ``latest`` | JSON: ``{"0": 23, "1": -2}`` or Kafka's ``{"topic": {"0": 23}}``.

    In JSON, -2 means the partition's first offset and -1 its end; ``endingOffsets`` takes
    ``latest`` (or -1) but not ``earliest``, as in the Kafka connector.
    """
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() == "earliest" and not allow_earliest:
            raise ValueError(f"ydb_topic: option {name!r} cannot be 'earliest'")
        return text.lower()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"ydb_topic: option {name!r} must be 'earliest', 'latest' or JSON like "
            f'{{"0": 42, "1": -2}} (partition id -> offset), got {value!r}: {exc.msg}'
        ) from None
    if isinstance(parsed, dict) and len(parsed) == 1 and isinstance(next(iter(parsed.values())), dict):
        parsed = next(iter(parsed.values()))  # Kafka's per-topic nesting: one topic per source here
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError(f"ydb_topic: option {name!r} must be a non-empty JSON object of partition id -> offset")
    result: dict[int, int] = {}
    for key, offset in parsed.items():
        try:
            pid = int(key)
        except ValueError:
            pid = -1
        if pid < 0:
            raise ValueError(f"ydb_topic: option {name!r}: partition ids must be non-negative integers, got {key!r}")
        lowest = EARLIEST if allow_earliest else LATEST
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < lowest:
            raise ValueError(
                f"ydb_topic: option {name!r}: offset of partition {pid} must be an integer >= {lowest}, got {offset!r}"
            )
        result[pid] = offset
    return result
