"""Options of the ``ydb_topic`` data source, parsed and checked on the Spark driver.

This module does not import pyspark, so option handling is testable without a JVM. Every
problem raises ``ValueError`` with the option's name, which Spark reports at ``load()``,
``save()`` or ``start()`` time instead of failing later inside an executor task.

Option names follow Spark's Kafka connector where a counterpart exists. An option this source
does not know fails (naming the closest known one), and a Kafka option it does not support fails
with what to use instead: a misspelt ``maxOffsetPerTrigger`` must not be ignored silently.
"""

from __future__ import annotations

import difflib
import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

EARLIEST = -2
"""Kafka's sentinel for "the partition's first offset" in a JSON offsets spec."""
LATEST = -1
"""Kafka's sentinel for "the partition's end offset" in a JSON offsets spec."""


@dataclass(frozen=True)
class ByTimestamp:
    """Offsets of the first message written at or after a time (milliseconds since the epoch).

    ``default`` applies to every partition not in ``partitions`` (None: only ``partitions``).
    """

    default: int | None = None
    partitions: Mapping[int, int] = field(default_factory=dict)

    def for_partition(self, pid: int) -> int | None:
        return self.partitions.get(pid, self.default)


OffsetSpec = str | dict[int, int] | ByTimestamp
"""``"earliest"``, ``"latest"``, partition id -> offset (which may be ``EARLIEST``/``LATEST``),
or a ``ByTimestamp``."""

DEFAULT_POLL_TIMEOUT = 120.0
"""Seconds a read task waits for messages its range says exist (the Kafka connector's default)."""
DEFAULT_RETRY_TIMEOUT = 120.0
"""Seconds a failing call or a broken stream keeps retrying before the task fails."""
DEFAULT_MAX_TRIGGER_DELAY = 15 * 60.0
"""Seconds a micro-batch may wait for ``minOffsetsPerTrigger`` (the Kafka connector's 15 minutes)."""

_SPARK_OWN = {"path", "paths", "checkpointlocation", "queryname"}
"""Options Spark itself passes to data sources."""

_READ = frozenset({"batch read", "stream read"})
_WRITE = frozenset({"batch write", "stream write"})
_ANY = _READ | _WRITE
_MODES: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        ("endpoint", "database", "topic", "discovery", "token", "tokenFile", "user", "password",
         "credentialsProvider", "rootCertificates", "rootCertificatesFile", "retryTimeout"),
        _ANY,
    ),
    **dict.fromkeys(
        ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
         "minPartitions", "maxRecordsPerPartition", "failOnDataLoss", "pollTimeout", "includeMetadata"),
        _READ,
    ),
    **dict.fromkeys(("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"), frozenset({"batch read"})),
    **dict.fromkeys(
        ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "consumer"), frozenset({"stream read"})
    ),
    **dict.fromkeys(("codec", "producerIdPrefix"), _WRITE),
    "onReplayMismatch": frozenset({"stream write"}),
}
"""Every option this source understands (documented spelling) and the modes it applies to."""
_KNOWN = {name.lower(): name for name in _MODES}
"""Lowercase name -> the documented spelling."""

_KAFKA_ONLY = {
    "subscribe": "this source reads one topic: use 'topic'",
    "subscribepattern": "this source reads one topic: use 'topic'",
    "assign": "name partitions in 'startingOffsets' JSON instead (unnamed ones start at the earliest)",
    "groupidprefix": "offsets live in Spark's checkpoint; use 'consumer' to commit them for a YDB consumer",
    "includeheaders": "message metadata (YDB's headers) is always in the 'metadata' column; "
    "'includeMetadata' = false leaves it out",
    "kafkaconsumer.polltimeoutms": "use 'pollTimeout' (seconds)",
    "fetchoffset.numretries": "use 'retryTimeout' (seconds of retrying)",
    "fetchoffset.retryintervalms": "use 'retryTimeout' (seconds of retrying)",
    "maxoffsetspertrigger.bytes": "limits count messages: use 'maxOffsetsPerTrigger'",
}


@dataclass(frozen=True)
class ConnectionOptions:
    """What a driver is made of. Equal options share one driver per process (see ``_bridge``)."""

    endpoint: str
    database: str | None
    token: str | None = None
    token_file: str | None = None
    user: str | None = None
    password: str | None = None
    credentials_provider: str | None = None
    root_certificates: bytes | None = None
    discovery: bool = True
    retry_timeout: float = DEFAULT_RETRY_TIMEOUT

    def __repr__(self) -> str:  # never print secrets
        auth = "token" if self.token else "token file" if self.token_file else "user" if self.user else None
        auth = auth or ("provider" if self.credentials_provider else "anonymous")
        return f"ConnectionOptions({self.endpoint!r}, {self.database!r}, auth={auth})"


@dataclass(frozen=True)
class SourceOptions:
    """Every option of one read or write (plain values: they are pickled to executors)."""

    connection: ConnectionOptions
    topic: str
    starting_offsets: OffsetSpec = "earliest"
    ending_offsets: OffsetSpec | None = None
    timestamp_strategy_latest: bool = False
    """``startingOffsetsByTimestampStrategy`` = ``latest``: no message after the time means the end."""
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    consumer: str | None = None
    poll_timeout: float = DEFAULT_POLL_TIMEOUT
    include_metadata: bool = True
    codec: int | None = None
    producer_id_prefix: str | None = None
    rewrite_on_replay_mismatch: bool = False
    """``onReplayMismatch`` = ``atLeastOnce``: write a mismatching replay again instead of failing."""
    given: frozenset[str] = frozenset()
    """The options the user set (documented spelling), for checks that depend on the mode."""


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check the options given to ``spark.read/readStream/write/writeStream.format("ydb_topic")``."""
    # Spark hands options over case-insensitively (as lowercase keys); accept either spelling.
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    _reject_unknown(opts)
    given = frozenset(_KNOWN[k] for k in opts if k in _KNOWN)
    topic = (opts.get("topic") or opts.get("path") or "").strip()
    if not topic.strip("/"):
        raise ValueError("ydb_topic: option 'topic' is required")
    return SourceOptions(
        connection=_connection(opts),
        topic=topic,
        starting_offsets=_starting(opts),
        ending_offsets=_ending(opts),
        timestamp_strategy_latest=_choice(opts, "startingOffsetsByTimestampStrategy", {"error": False, "latest": True}),
        max_offsets_per_trigger=_optional_int(opts, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_optional_int(opts, "minOffsetsPerTrigger"),
        max_trigger_delay=_duration(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY),
        min_partitions=_optional_int(opts, "minPartitions"),
        max_records_per_partition=_optional_int(opts, "maxRecordsPerPartition"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        consumer=opts.get("consumer") or None,
        poll_timeout=_seconds(opts, "pollTimeout", DEFAULT_POLL_TIMEOUT),
        include_metadata=_bool(opts, "includeMetadata", True),
        codec=_codec(opts["codec"]) if "codec" in opts else None,
        producer_id_prefix=_producer_id_prefix(opts.get("produceridprefix")),
        rewrite_on_replay_mismatch=_choice(opts, "onReplayMismatch", {"fail": False, "atLeastOnce": True}),
        given=given,
    )


def check_mode(options: SourceOptions, mode: str) -> None:
    """Fail when an option was given that does not apply to ``mode`` (``"batch read"``, ``"stream write"``, ...)."""
    for name in sorted(options.given):
        modes = _MODES[name]
        if mode not in modes:
            raise ValueError(f"ydb_topic: option {name!r} is for {' and '.join(m + 's' for m in sorted(modes))}, "
                             f"not a {mode}")


def _reject_unknown(opts: Mapping[str, str]) -> None:
    for key in sorted(opts):
        if key in _KNOWN or key in _SPARK_OWN:
            continue
        if key in _KAFKA_ONLY:
            raise ValueError(
                f"ydb_topic: option {key!r} is the Kafka connector's, not this source's: {_KAFKA_ONLY[key]}"
            )
        if key.startswith(("kafka.", "kafkaconsumer.")):
            raise ValueError(
                f"ydb_topic: option {key!r} configures a Kafka client; this source connects with "
                "'endpoint', 'database' and the credential options (see the Spark guide)"
            )
        close = difflib.get_close_matches(key, list(_KNOWN), n=1, cutoff=0.6)
        hint = f"; did you mean {_KNOWN[close[0]]!r}?" if close else ""
        raise ValueError(f"ydb_topic: unknown option {key!r}{hint} (the options are listed in the Spark guide)")


def _connection(opts: Mapping[str, str]) -> ConnectionOptions:
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
    token = opts.get("token") or None
    token_file = opts.get("tokenfile") or None
    user = opts.get("user") or None
    password = opts.get("password")
    provider = opts.get("credentialsprovider") or None
    chosen = [name for name, value in (("token", token), ("tokenFile", token_file), ("user", user),
                                       ("credentialsProvider", provider)) if value]
    if len(chosen) > 1:
        raise ValueError(f"ydb_topic: give one way to authenticate, not {' and '.join(repr(c) for c in chosen)}")
    if password is not None and not user:
        raise ValueError("ydb_topic: option 'password' needs 'user'")
    if provider is not None:
        _check_provider(provider)
    return ConnectionOptions(
        endpoint=endpoint,
        database=database,
        token=token,
        token_file=token_file,
        user=user,
        password=password,
        credentials_provider=provider,
        root_certificates=_root_certificates(opts),
        discovery=_bool(opts, "discovery", True),
        retry_timeout=_seconds(opts, "retryTimeout", DEFAULT_RETRY_TIMEOUT),
    )


def _check_provider(spec: str) -> None:
    """``credentialsProvider`` is ``module:callable``; check here that it imports and is callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"ydb_topic: option 'credentialsProvider' must look like 'package.module:function', got {spec!r}"
        )
    try:
        target: object = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"ydb_topic: option 'credentialsProvider' {spec!r} cannot be imported: {exc}") from None
    if not callable(target):
        raise ValueError(f"ydb_topic: option 'credentialsProvider' {spec!r} is not callable")


def _root_certificates(opts: Mapping[str, str]) -> bytes | None:
    pem = opts.get("rootcertificates")
    path = opts.get("rootcertificatesfile")
    if pem and path:
        raise ValueError("ydb_topic: give 'rootCertificates' (PEM text) or 'rootCertificatesFile', not both")
    if path:
        # Read here, on the Spark driver: the PEM then travels with the options to every executor.
        try:
            pem = Path(path).read_text()
        except OSError as exc:
            raise ValueError(f"ydb_topic: option 'rootCertificatesFile' cannot be read: {exc}") from None
    if not pem:
        return None
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError("ydb_topic: root certificates must be PEM text with -----BEGIN CERTIFICATE----- blocks")
    return pem.encode()


def _starting(opts: Mapping[str, str]) -> OffsetSpec:
    by_time = _by_timestamp(opts, "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets")
    if by_time is not None:
        return by_time
    return parse_offsets(opts.get("startingoffsets", "earliest"), "startingOffsets", allow_earliest=True)


def _ending(opts: Mapping[str, str]) -> OffsetSpec | None:
    by_time = _by_timestamp(opts, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")
    if by_time is not None:
        return by_time
    if "endingoffsets" in opts:
        return parse_offsets(opts["endingoffsets"], "endingOffsets", allow_earliest=False)
    return None


def _by_timestamp(opts: Mapping[str, str], single: str, per_partition: str, offsets: str) -> ByTimestamp | None:
    given = [name for name in (single, per_partition, offsets) if name.lower() in opts]
    if len(given) > 1:
        raise ValueError(f"ydb_topic: give one of {', '.join(repr(g) for g in given)}, not several")
    if single.lower() in opts:
        return ByTimestamp(default=_timestamp(opts[single.lower()], single))
    if per_partition.lower() in opts:
        parsed = _partition_json(opts[per_partition.lower()], per_partition, "timestamp in milliseconds")
        return ByTimestamp(partitions={pid: _timestamp(value, per_partition, pid) for pid, value in parsed.items()})
    return None


def _timestamp(value: object, name: str, pid: int | None = None) -> int:
    where = f" for partition {pid}" if pid is not None else ""
    number: object = value
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise ValueError(
            f"ydb_topic: option {name!r}{where} must be milliseconds since the epoch (a non-negative integer), "
            f"got {value!r}"
        )
    return number


def _partition_json(value: str, name: str, what: str) -> dict[int, object]:
    """A JSON object of partition id -> value, or Kafka's ``{"topic": {...}}`` nesting of one."""
    try:
        parsed = json.loads(value.strip())
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"ydb_topic: option {name!r} must be JSON like {{\"0\": ..., \"1\": ...}} (partition id -> {what}), "
            f"got {value!r}: {exc.msg}"
        ) from None
    if isinstance(parsed, dict) and len(parsed) == 1 and isinstance(next(iter(parsed.values())), dict):
        parsed = next(iter(parsed.values()))  # Kafka's per-topic nesting: one topic per source here
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError(f"ydb_topic: option {name!r} must be a non-empty JSON object of partition id -> {what}")
    result: dict[int, object] = {}
    for key, item in parsed.items():
        try:
            pid = int(key)
        except ValueError:
            pid = -1
        if pid < 0:
            raise ValueError(f"ydb_topic: option {name!r}: partition ids must be non-negative integers, got {key!r}")
        result[pid] = item
    return result


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
    if not text.startswith("{"):
        raise ValueError(
            f"ydb_topic: option {name!r} must be 'earliest', 'latest' or JSON like "
            f'{{"0": 42, "1": -2}} (partition id -> offset), got {value!r}'
        )
    result: dict[int, int] = {}
    lowest = EARLIEST if allow_earliest else LATEST
    for pid, offset in _partition_json(text, name, "offset").items():
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < lowest:
            raise ValueError(
                f"ydb_topic: option {name!r}: offset of partition {pid} must be an integer >= {lowest}, got {offset!r}"
            )
        result[pid] = offset
    return result


def _optional_int(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name.lower())
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"ydb_topic: option {name!r} must be a positive integer, got {value!r}")
    return number


def _seconds(opts: Mapping[str, str], name: str, default: float) -> float:
    value = opts.get(name.lower())
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number < float("inf"):
        raise ValueError(f"ydb_topic: option {name!r} must be a positive number of seconds, got {value!r}")
    return number


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(opts: Mapping[str, str], name: str, default: float) -> float:
    """A Spark time string (``15m``, ``30s``, ``500ms``; a bare number is milliseconds), in seconds."""
    value = opts.get(name.lower())
    if value is None:
        return default
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(f"ydb_topic: option {name!r} must be a duration like '15m', '30s' or '500ms', got {value!r}")
    return float(match.group(1)) * _UNIT_SECONDS[(match.group(2) or "ms").lower()]


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    return _choice(opts, name, {"true": True, "false": False}, default)


def _choice(opts: Mapping[str, str], name: str, values: Mapping[str, bool], default: bool = False) -> bool:
    """One of ``values`` (documented spelling); case, dashes and underscores do not matter."""
    value = opts.get(name.lower())
    if value is None:
        return default

    def norm(text: str) -> str:
        return text.strip().lower().replace("-", "").replace("_", "")

    for spelling, result in values.items():
        if norm(spelling) == norm(value):
            return result
    raise ValueError(f"ydb_topic: option {name!r} must be one of {', '.join(values)}, got {value!r}")


_CODECS = {"raw": 1, "gzip": 2, "lzop": 3, "zstd": 4}


def _codec(value: str) -> int:
    name = value.strip().lower()
    if name in _CODECS:
        return _CODECS[name]
    raise ValueError(f"ydb_topic: option 'codec' must be one of {', '.join(_CODECS)}, got {value!r}")


def _producer_id_prefix(value: str | None) -> str | None:
    if value is None:
        return None
    if not value or len(value) > 512 or any(ch in value for ch in "\r\n"):
        raise ValueError(f"ydb_topic: option 'producerIdPrefix' must be a short non-empty string, got {value!r}")
    return value
