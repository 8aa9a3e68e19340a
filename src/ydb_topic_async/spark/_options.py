"""Options of the ``ydb_topic`` data source, parsed and checked on the Spark driver.

This module does not import pyspark, so option handling is testable without a JVM. Every
problem raises ``ValueError`` with the option's name, which Spark reports at ``load()``,
``save()`` or when the query starts, instead of failing later inside an executor task.

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
from typing import Any

from .. import WriterSettings, YdbTopicError

EARLIEST = -2
"""Kafka's sentinel for "the partition's first offset" in a JSON offsets spec."""
LATEST = -1
"""Kafka's sentinel for "the partition's end offset" in a JSON offsets spec."""


@dataclass(frozen=True)
class ByTimestamp:
    """Offsets of the first message written at or after a time (milliseconds since the epoch), for
    one topic. ``default`` applies to every partition not in ``partitions`` (None: only those)."""

    default: int | None = None
    partitions: Mapping[int, int] = field(default_factory=dict)

    def for_partition(self, pid: int) -> int | None:
        return self.partitions.get(pid, self.default)


@dataclass(frozen=True)
class OffsetsByTopic:
    """A JSON offsets option: per topic (as the ``topic`` option names it), partition id -> offset
    (which may be ``EARLIEST``/``LATEST``). A topic it does not name keeps the default."""

    topics: Mapping[str, Mapping[int, int]]

    def for_topic(self, topic: str) -> dict[int, int]:
        return dict(self.topics.get(topic, {}))


@dataclass(frozen=True)
class TimesByTopic:
    """``startingTimestamp`` (``default``, every partition of every topic) or
    ``startingOffsetsByTimestamp`` (per topic, partition id -> time)."""

    default: int | None = None
    topics: Mapping[str, Mapping[int, int]] = field(default_factory=dict)

    def for_topic(self, topic: str) -> ByTimestamp:
        return ByTimestamp(self.default, dict(self.topics.get(topic, {})))


OffsetSpec = str | OffsetsByTopic | TimesByTopic
"""``"earliest"``, ``"latest"``, offsets per topic, or times per topic."""

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
_WRITER_SETTINGS = {
    "maxBufferMessages": "max_buffer_messages",
    "maxBufferBytes": "max_buffer_bytes",
    "bufferWaitTimeout": "buffer_wait_timeout",
    "maxRequestSize": "max_request_size",
    "initTimeout": "init_timeout",
    "waitForTopic": "wait_for_topic",
}
"""Writer options (Spark spelling) and the ``WriterSettings`` field each one sets."""
_SECONDS = frozenset({"buffer_wait_timeout", "init_timeout", "wait_for_topic"})
"""The writer settings given in seconds (the others are counts of messages or bytes)."""
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
    **dict.fromkeys(("codec", "producerIdPrefix", "partitioner", *_WRITER_SETTINGS), _WRITE),
    "onReplayMismatch": frozenset({"stream write"}),
}
"""Every option this source understands (documented spelling) and the modes it applies to."""
_KNOWN = {name.lower(): name for name in _MODES}
"""Lowercase name -> the documented spelling."""

_KAFKA_ONLY = {
    "subscribe": "give the topics in 'topic' (comma-separated, or a list)",
    "subscribepattern": "name the topics in 'topic' (comma-separated): this source does not match patterns",
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

    @property
    def database_path(self) -> str | None:
        """The database, from the option or from the endpoint's ``?database=``."""
        if self.database:
            return self.database
        match = re.search(r"[?&]database=([^&]+)", self.endpoint)
        return match.group(1) if match else None


@dataclass(frozen=True)
class SourceOptions:
    """Every option of one read or write (plain values: they are pickled to executors)."""

    connection: ConnectionOptions
    topics: tuple[str, ...] = ()
    """The topics of the ``topic`` option, as given (a write takes at most one; none: a ``topic`` column)."""
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
    writer: Mapping[str, Any] = field(default_factory=dict)
    """Keyword options for ``WriterSettings`` (checked here), without the ones each task sets."""
    producer_id_prefix: str | None = None
    partitioner: str = "ydb"
    """How the ``key`` column places rows: ``"ydb"`` or ``"kafka"`` (``partition_for_key``)."""
    rewrite_on_replay_mismatch: bool = False
    """``onReplayMismatch`` = ``atLeastOnce``: write a mismatching replay again instead of failing."""
    checkpoint_location: str | None = None
    """The ``checkpointLocation`` Spark passes to a streaming sink."""
    given: frozenset[str] = frozenset()
    """The options the user set (documented spelling), for checks that depend on the mode."""

    @property
    def topic(self) -> str:
        """The one topic of the ``topic`` option ("" when it names none)."""
        return self.topics[0] if self.topics else ""

    def full_path(self, topic: str) -> str:
        """``topic`` as an absolute path (relative names are under the database)."""
        return full_path(self.connection.database_path, topic)

    def writer_settings(self, **per_task: Any) -> WriterSettings:
        """The writer options with what a task sets (producer id, partition, retries), checked."""
        return WriterSettings(**{**self.writer, **per_task})

    @property
    def wait_for_topic(self) -> float | None:
        """``waitForTopic``: seconds a write waits for its topic to be created (None: it does not)."""
        value = self.writer.get("wait_for_topic")
        return None if value is None else float(value)

    @property
    def codec(self) -> int | None:
        codec = self.writer.get("codec")
        return int(codec) if codec is not None else None


def full_path(database: str | None, topic: str) -> str:
    """``topic`` as an absolute path: relative names are under ``database``."""
    if topic.startswith("/") or not database:
        return topic
    return f"{database.rstrip('/')}/{topic}"


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check the options given to ``spark.read/readStream/write/writeStream.format("ydb_topic")``."""
    # Spark hands options over case-insensitively (as lowercase keys); accept either spelling.
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    _reject_unknown(opts)
    given = frozenset(_KNOWN[k] for k in opts if k in _KNOWN)
    connection = _connection(opts)
    topics = _topics(opts.get("topic") or opts.get("path") or "")
    database = connection.database_path
    return SourceOptions(
        connection=connection,
        topics=topics,
        starting_offsets=_starting(opts, topics, database),
        ending_offsets=_ending(opts, topics, database),
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
        writer=_writer(opts),
        producer_id_prefix=_producer_id_prefix(opts.get("produceridprefix")),
        partitioner=_partitioner(opts.get("partitioner")),
        rewrite_on_replay_mismatch=_choice(opts, "onReplayMismatch", {"fail": False, "atLeastOnce": True}),
        checkpoint_location=opts.get("checkpointlocation") or None,
        given=given,
    )


def check_mode(options: SourceOptions, mode: str) -> None:
    """Fail when an option does not apply to ``mode`` (``"batch read"``, ``"stream write"``, ...),
    and check what a mode needs: a read needs topics and takes several, a write takes one."""
    for name in sorted(options.given):
        modes = _MODES[name]
        if mode not in modes:
            raise ValueError(f"ydb_topic: option {name!r} is for {' and '.join(m + 's' for m in sorted(modes))}, "
                             f"not a {mode}")
    if mode in _READ and not options.topics:
        raise ValueError("ydb_topic: option 'topic' is required (the topic to read, or several, comma-separated)")
    if mode in _WRITE and len(options.topics) > 1:
        raise ValueError(
            f"ydb_topic: a write takes one 'topic', not {len(options.topics)}; to write rows to several topics, "
            "leave the option out and give each row's topic in a 'topic' column"
        )
    if mode == "batch read":
        _check_batch_offsets(options)


def _check_batch_offsets(options: SourceOptions) -> None:
    """The Kafka connector's rules for batch reads: a batch cannot start at the end or end at the start."""
    start = options.starting_offsets
    if start == "latest":
        raise ValueError(
            "ydb_topic: starting offset can't be latest for batch queries (a batch read would return nothing); "
            "use 'earliest' or JSON offsets"
        )
    if isinstance(start, OffsetsByTopic):
        for topic, offsets in start.topics.items():
            for pid, offset in sorted(offsets.items()):
                if offset == LATEST:
                    raise ValueError(
                        f"ydb_topic: startingOffsets for topic {topic!r} partition {pid} can't be latest (-1) for "
                        "batch queries"
                    )


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
        # Spark lower-cases option names before a Python data source sees them: say so, since
        # the name quoted is not spelt as the user typed it.
        raise ValueError(
            f"ydb_topic: unknown option {key!r} (as Spark passes it, in lower case){hint} "
            "(the options are listed in the Spark guide)"
        )


def _topics(value: str) -> tuple[str, ...]:
    """The ``topic`` option: one topic, several comma-separated, or a JSON list of them."""
    text = value.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"ydb_topic: option 'topic' looks like a JSON list but is not one: {exc.msg}") from None
        if not isinstance(parsed, list) or not all(isinstance(t, str) for t in parsed):
            raise ValueError(f"ydb_topic: option 'topic' must be a topic, topics separated by commas, or a JSON "
                             f"list of topics, got {value!r}")
        names = [t.strip() for t in parsed]
    else:
        names = [t.strip() for t in text.split(",")]
    topics = tuple(name for name in names if name.strip("/"))
    if text and not topics:
        raise ValueError(f"ydb_topic: option 'topic' names no topic: {value!r}")
    if len(set(topics)) != len(topics):
        raise ValueError(f"ydb_topic: option 'topic' names a topic twice: {value!r}")
    return topics


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


def _starting(opts: Mapping[str, str], topics: tuple[str, ...], database: str | None) -> OffsetSpec:
    by_time = _by_timestamp(opts, "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets", topics,
                            database)
    if by_time is not None:
        return by_time
    if "startingoffsets" not in opts:
        return "earliest"
    return parse_offsets(opts["startingoffsets"], "startingOffsets", topics, database, allow_earliest=True)


def _ending(opts: Mapping[str, str], topics: tuple[str, ...], database: str | None) -> OffsetSpec | None:
    by_time = _by_timestamp(opts, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets", topics, database)
    if by_time is not None:
        return by_time
    if "endingoffsets" in opts:
        return parse_offsets(opts["endingoffsets"], "endingOffsets", topics, database, allow_earliest=False)
    return None


def _by_timestamp(
    opts: Mapping[str, str], single: str, per_partition: str, offsets: str, topics: tuple[str, ...],
    database: str | None,
) -> TimesByTopic | None:
    given = [name for name in (single, per_partition, offsets) if name.lower() in opts]
    if len(given) > 1:
        raise ValueError(f"ydb_topic: give one of {', '.join(repr(g) for g in given)}, not several")
    if single.lower() in opts:
        return TimesByTopic(default=_timestamp(opts[single.lower()], single))
    if per_partition.lower() in opts:
        parsed = _topics_json(opts[per_partition.lower()], per_partition, "timestamp in milliseconds", topics,
                              database)
        return TimesByTopic(topics={
            topic: {pid: _timestamp(value, per_partition, pid) for pid, value in partitions.items()}
            for topic, partitions in parsed.items()
        })
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


def _topics_json(
    value: str, name: str, what: str, topics: tuple[str, ...], database: str | None
) -> dict[str, dict[int, object]]:
    """A JSON object of partition id -> value (one topic read), or, as in the Kafka connector, of
    topic -> {partition id -> value}. Keys are matched to the topics of the ``topic`` option (as
    given or as absolute paths); the result is keyed by the topic as the option gives it."""
    example = '{"0": ..., "1": ...}' if len(topics) <= 1 else '{"topic": {"0": ..., "1": ...}}'
    try:
        parsed = json.loads(value.strip())
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"ydb_topic: option {name!r} must be JSON like {example} (partition id -> {what}), got {value!r}: "
            f"{exc.msg}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError(f"ydb_topic: option {name!r} must be a non-empty JSON object like {example}")
    nested = [isinstance(item, dict) for item in parsed.values()]
    if any(nested) and not all(nested):
        raise ValueError(f"ydb_topic: option {name!r} mixes topics and partition ids at its top level")
    if not any(nested):
        if len(topics) > 1:
            raise ValueError(
                f"ydb_topic: option {name!r} must name the topic of each offset when several topics are read, "
                f'e.g. {{"{topics[0]}": {{"0": ...}}}}'
            )
        return {topics[0] if topics else "": _partition_items(parsed, name)}
    by_path = {full_path(database, t): t for t in topics}
    result: dict[str, dict[int, object]] = {}
    for key, partitions in parsed.items():
        topic = key if key in topics else by_path.get(full_path(database, key))
        if topic is None:
            read = ", ".join(repr(t) for t in topics) or "none"
            raise ValueError(
                f"ydb_topic: option {name!r} names topic {key!r}, which this query does not read (it reads {read})"
            )
        if topic in result:
            raise ValueError(f"ydb_topic: option {name!r} names topic {topic!r} twice")
        result[topic] = _partition_items(partitions, name, f" of topic {key!r}")
    return result


def _partition_items(parsed: Mapping[str, object], name: str, where: str = "") -> dict[int, object]:
    result: dict[int, object] = {}
    for key, item in parsed.items():
        try:
            pid = int(key)
        except ValueError:
            pid = -1
        if pid < 0:
            raise ValueError(
                f"ydb_topic: option {name!r}{where}: partition ids must be non-negative integers, got {key!r}"
            )
        result[pid] = item
    return result


def parse_offsets(
    value: str, name: str, topics: tuple[str, ...] = (), database: str | None = None, *, allow_earliest: bool
) -> OffsetSpec:
    """``earliest`` | ``latest`` | JSON: ``{"0": 23, "1": -2}`` (one topic) or, as in the Kafka
    connector, ``{"topic": {"0": 23}}`` (required when several topics are read).

    In JSON, -2 means the partition's first offset and -1 its end; ``endingOffsets`` takes
    ``latest`` (or -1) but not ``earliest``, as in the Kafka connector.
    """
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() == "earliest" and not allow_earliest:
            raise ValueError(f"ydb_topic: option {name!r} cannot be 'earliest' (ending offset can't be earliest)")
        return text.lower()
    if not text.startswith("{"):
        raise ValueError(
            f"ydb_topic: option {name!r} must be 'earliest', 'latest' or JSON like "
            f'{{"0": 42, "1": -2}} (partition id -> offset), got {value!r}'
        )
    lowest = EARLIEST if allow_earliest else LATEST
    result: dict[str, dict[int, int]] = {}
    for topic, partitions in _topics_json(text, name, "offset", topics, database).items():
        offsets: dict[int, int] = {}
        for pid, offset in partitions.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < lowest:
                what = "" if len(topics) <= 1 else f" of topic {topic!r}"
                raise ValueError(
                    f"ydb_topic: option {name!r}: offset of partition {pid}{what} must be an integer >= {lowest}, "
                    f"got {offset!r}"
                )
            offsets[pid] = offset
        result[topic] = offsets
    return OffsetsByTopic(result)


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


def _writer(opts: Mapping[str, str]) -> dict[str, Any]:
    """The writer options, checked by ``WriterSettings`` (the one place writer options are checked)."""
    settings: dict[str, Any] = {}
    if "codec" in opts:
        name = opts["codec"].strip().lower()
        if name not in _CODECS:
            raise ValueError(f"ydb_topic: option 'codec' must be one of {', '.join(_CODECS)}, got {opts['codec']!r}")
        settings["codec"] = _CODECS[name]
    for option, setting in _WRITER_SETTINGS.items():
        value = opts.get(option.lower())
        if value is None:
            continue
        settings[setting] = _number(value, setting in _SECONDS)
    by_setting: dict[str, str] = {setting: option for option, setting in _WRITER_SETTINGS.items()}
    by_setting["codec"] = "codec"
    try:
        WriterSettings(**settings)
    except YdbTopicError as exc:
        # The settings name their field (max_buffer_bytes); the user gave the Spark option.
        text = str(exc)
        named = next((opt for key, opt in by_setting.items() if key in text), None)
        prefix = f"option {named!r}: " if named is not None else ""
        raise ValueError(f"ydb_topic: {prefix}{text}") from None
    return settings


def _number(value: str, seconds: bool) -> int | float | str:
    """``value`` as the number a writer setting takes; as given when it is none (the settings say
    what they need)."""
    try:
        return float(value) if seconds else int(value)
    except ValueError:
        return value


def _producer_id_prefix(value: str | None) -> str | None:
    if value is None:
        return None
    if not value or len(value) > 512 or any(ch in value for ch in "\r\n"):
        raise ValueError(f"ydb_topic: option 'producerIdPrefix' must be a short non-empty string, got {value!r}")
    return value


def _partitioner(value: str | None) -> str:
    if value is None:
        return "ydb"
    name = value.strip().lower()
    if name not in ("ydb", "kafka"):
        raise ValueError(
            f"ydb_topic: option 'partitioner' must be 'ydb' (where YDB's own producers put a key) or 'kafka' "
            f"(Kafka's murmur2 partitioner), got {value!r}"
        )
    return name
