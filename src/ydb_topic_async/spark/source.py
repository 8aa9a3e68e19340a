"""The ``ydb_topic`` PySpark data source: batch and streaming reads and writes of YDB topics.

The driver-side objects (``YdbTopicDataSource``, the readers' planning methods, the writers'
``commit``) describe topics and plan offset ranges; the executor-side methods (``read``,
``write``) run in Spark's Python workers. Both share one driver per process and connection
options (``_bridge``). The readers are here; the writers are ``_writers``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .. import Driver
from ..observability import sdk_logger
from . import _offsets
from ._bridge import runtime
from ._offsets import SourceOffsets, Split, TopicOffsets, TopicState, loss_reporter, range_reporter
from ._options import OffsetsByTopic, OffsetSpec, SourceOptions, TimesByTopic, check_mode, parse_options
from ._planning import describe, offsets_by_time
from ._read import read_range
from ._write import YdbTopicCommitMessage
from ._writers import BatchWriter, StreamWriter, input_columns

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    HAS_READ_LIMIT = True
except ImportError:  # pyspark 4.0 / 4.1: latestOffset() takes no arguments
    HAS_READ_LIMIT = False

__all__ = [
    "HAS_READ_LIMIT",
    "NAME",
    "SCHEMA",
    "YdbTopicCommitMessage",
    "YdbTopicDataSource",
    "lag",
    "offsets_behind_latest",
    "read_range",
]

T = TypeVar("T")
logger = sdk_logger("spark")

NAME = "ydb_topic"
SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("seq_no", LongType()),
        StructField("producer_id", StringType()),
        StructField("message_group_id", StringType()),
        StructField("created_at", TimestampType()),
        StructField("written_at", TimestampType()),
        StructField("metadata", MapType(StringType(), BinaryType())),
        StructField("data", BinaryType()),
    ]
)
"""The rows a read produces (without ``metadata`` when the option ``includeMetadata`` is false)."""
SCHEMA_WITHOUT_METADATA = StructType([f for f in SCHEMA.fields if f.name != "metadata"])

class YdbTopicDataSource(DataSource):  # type: ignore[misc,unused-ignore]
    """``spark.read/readStream/write/writeStream.format("ydb_topic")``; the options are in the Spark guide."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Checked here so that bad options fail at load()/save() on the driver.
        self.parsed = parse_options(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # Spark asks for the schema only when reading (at load()): a read needs its topics.
        if not self.parsed.topics:
            raise ValueError("ydb_topic: option 'topic' is required (the topic to read, or several, comma-separated)")
        return SCHEMA if self.parsed.include_metadata else SCHEMA_WITHOUT_METADATA

    def reader(self, schema: StructType) -> DataSourceReader:
        check_mode(self.parsed, "batch read")
        self._check_read_schema(schema)
        return _BatchReader(self.parsed, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # An error raised here reaches the user behind pyspark's own UnboundLocalError (its source
        # runner's cleanup touches the reader that was never made): hand it to the reader, which
        # raises it from its first planning call, where Spark reports it as it is.
        error: ValueError | None = None
        try:
            check_mode(self.parsed, "stream read")
            self._check_read_schema(schema)
        except ValueError as exc:
            error = exc
        return _StreamReader(self.parsed, schema, error)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        check_mode(self.parsed, "batch write")
        if overwrite:
            raise ValueError("ydb_topic: topics are append-only; use mode('append'), not 'overwrite'")
        return BatchWriter(self.parsed, input_columns(schema, self.parsed))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_mode(self.parsed, "stream write")
        # overwrite means output mode "complete": each batch's rows are appended, as in Kafka's sink.
        return StreamWriter(self.parsed, input_columns(schema, self.parsed))

    def _check_read_schema(self, schema: StructType) -> None:
        expected = SCHEMA if self.parsed.include_metadata else SCHEMA_WITHOUT_METADATA
        if [f.name for f in schema.fields] != expected.fieldNames():
            raise ValueError(
                f"ydb_topic: the schema is fixed ({expected.simpleString()}); do not pass another one"
            )


def _call(options: SourceOptions, fn: Callable[[Driver], Awaitable[T]]) -> T:
    """Run ``fn(driver)`` on this process's shared driver for the options' connection."""
    rt = runtime()

    async def main() -> T:
        return await fn(await rt.driver(options.connection))

    return rt.run(main())


def _describe(options: SourceOptions) -> dict[str, TopicState]:
    """Every topic read (keyed as the ``topic`` option names it), described at once."""

    async def all_topics(driver: Driver) -> dict[str, TopicState]:
        states = await asyncio.gather(*(describe(driver, topic) for topic in options.topics))
        return dict(zip(options.topics, states, strict=True))

    return _call(options, all_topics)


def _for_topic(spec: OffsetSpec, topic: str) -> str | dict[int, int] | TimesByTopic:
    if isinstance(spec, OffsetsByTopic):
        return spec.for_topic(topic)
    return spec


def _resolve(options: SourceOptions, topic: str, state: TopicState, spec: OffsetSpec, name: str) -> dict[int, int]:
    """Concrete offsets of one topic for ``spec`` (offsets, earliest/latest, or times)."""
    one = _for_topic(spec, topic)
    if not isinstance(one, TimesByTopic):
        report = loss_reporter(options.fail_on_data_loss, topic)
        return _offsets.resolve(one, state, name, report, range_reporter(options.fail_on_data_loss, topic))
    ending = name.startswith("ending")
    return _call(
        options,
        lambda driver: offsets_by_time(
            driver, state, one.for_topic(topic), name=name, missing_is_end=ending or options.timestamp_strategy_latest,
            timeout=options.poll_timeout,
        ),
    )


def _starting_name(options: SourceOptions) -> str:
    """The option that set the starting offsets (for error messages)."""
    spec = options.starting_offsets
    if isinstance(spec, TimesByTopic):
        return "startingTimestamp" if spec.default is not None else "startingOffsetsByTimestamp"
    return "startingOffsets"


def _ending_name(options: SourceOptions) -> str:
    """The option that set the ending offsets (for error messages)."""
    spec = options.ending_offsets
    if isinstance(spec, TimesByTopic):
        return "endingTimestamp" if spec.default is not None else "endingOffsetsByTimestamp"
    return "endingOffsets"


def _split(options: SourceOptions) -> Split:
    return Split(options.min_partitions, options.max_records_per_partition)


def _arrow_schema(schema: StructType) -> pa.Schema | None:
    """The Arrow schema Spark expects from ``read`` (None: this pyspark cannot say; yield tuples)."""
    try:
        from pyspark.sql.pandas.types import to_arrow_schema
    except ImportError:
        return None
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # pyspark 4.0 has no timezone argument (and uses UTC)
        try:
            return to_arrow_schema(schema)
        except Exception:
            return None


# --- reading ---------------------------------------------------------------------------------


class _BatchReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        parts: list[_offsets.OffsetRange] = []
        for topic, state in _describe(options).items():
            start = _resolve(options, topic, state, options.starting_offsets, _starting_name(options))
            end = _resolve(options, topic, state, options.ending_offsets or "latest", _ending_name(options))
            for pid in sorted(start):
                if start[pid] > end[pid]:
                    raise ValueError(
                        f"ydb_topic: partition {pid} of topic {topic!r} would be read from offset {start[pid]} to "
                        f"{end[pid]}: the starting offset is after the ending offset"
                    )
            parts.extend(_offsets.ranges(start, end, state.created_at_ms, state.path))
        pieces = _offsets.split(parts, options.min_partitions, options.max_records_per_partition)
        return [InputPartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition.value, _arrow_schema(self.schema))


class _StreamReaderBase(DataSourceStreamReader):  # type: ignore[misc,unused-ignore]
    """Offsets are ``SourceOffsets`` JSON; partitions that appear later are read from their start.

    Every field is plain data: Spark pickles this object to the executors for ``read``.
    """

    def __init__(self, options: SourceOptions, schema: StructType, error: Exception | None = None) -> None:
        self.options = options
        self.schema = schema
        self._error = error
        """An option problem found when Spark made this reader: raised by the first planning call."""
        self._consumer_checked = not options.consumer
        self._available_now: dict[tuple[str, int], int] | None = None
        self._last_end: SourceOffsets | None = None
        """Where the previous micro-batch ended (pyspark < 4.2 does not pass ``start`` to ``latestOffset``)."""
        self._initial: SourceOffsets | None = None
        self._latest: SourceOffsets | None = None
        """The end of every partition at the last ``latestOffset``: what ``reportLatestOffset`` says."""
        self._planned: tuple[dict[str, Any], dict[str, TopicState]] | None = None
        """The last offset ``latestOffset`` returned and the topic states it came from."""
        self._committed: dict[tuple[str, int], int] = {}
        self._last_trigger = time.monotonic()

    def _ready(self) -> None:
        """Raise the option problem found at creation; check the consumer once (not in the
        constructor: Spark makes this reader twice per query start, in two processes)."""
        if self._error is not None:
            raise self._error
        if self._consumer_checked:
            return
        options = self.options
        consumer = options.consumer

        async def consumers(driver: Driver) -> dict[str, set[str]]:
            described = await asyncio.gather(*(driver.topic.describe_topic(topic) for topic in options.topics))
            return {topic: {c.name for c in d.consumers} for topic, d in zip(options.topics, described, strict=True)}

        for topic, names in _call(options, consumers).items():
            if consumer not in names:
                self._error = ValueError(f"ydb_topic: topic {topic!r} has no consumer {consumer!r}")
                raise self._error
        self._consumer_checked = True

    @property
    def _single(self) -> bool:
        return len(self.options.topics) == 1

    def _offsets_of(self, states: Mapping[str, TopicState], offsets: Mapping[tuple[str, int], int]) -> SourceOffsets:
        topics: dict[str | None, TopicOffsets] = {}
        for state in states.values():
            partitions = {pid: offset for (path, pid), offset in offsets.items() if path == state.path}
            topics[state.path] = TopicOffsets.of(state, partitions)
        return SourceOffsets(topics, _split(self.options))

    def _starting(self, topic: str, state: TopicState) -> dict[int, int]:
        return _resolve(self.options, topic, state, self.options.starting_offsets, _starting_name(self.options))

    def initialOffset(self) -> dict[str, Any]:
        self._ready()
        states = _describe(self.options)
        start = {
            (state.path, pid): offset for topic, state in states.items()
            for pid, offset in self._starting(topic, state).items()
        }
        self._initial = self._last_end = self._offsets_of(states, start)
        return self._initial.to_json()

    def getDefaultReadLimit(self) -> Any:
        self._ready()
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        self._ready()
        options = self.options
        states = _describe(options)
        latest = {(state.path, pid): end for state in states.values() for pid, end in state.ends.items()}
        self._latest = self._offsets_of(states, latest)
        checkpoint = SourceOffsets.from_json(start) if start is not None else self._last_end
        if checkpoint is not None and checkpoint != self._initial:
            # Spark asks for the next offset only once the batch that ended at ``start`` is done
            # (it never calls commit() for the last batch of a run): commit it for the consumer.
            self._commit_consumer(checkpoint, states)
        if self._available_now is not None:
            # Trigger.AvailableNow: stop at what existed when the query started.
            latest = {key: min(end, self._available_now.get(key, 0)) for key, end in latest.items()}
        if checkpoint is None:  # pyspark < 4.2 after a restart: nothing to limit against yet
            end = latest
        else:
            begin: dict[tuple[str, int], int] = {}
            fixed: set[tuple[str, int]] = set()
            for topic, state in states.items():
                known = checkpoint.for_topic(state.path, self._single)
                if known is None:
                    # A topic added to the option since the checkpoint: this micro-batch only records
                    # where it starts (as startingOffsets says); the next one reads from there.
                    logger.info("ydb_topic: topic %s is new to the checkpoint; it starts as startingOffsets says",
                                topic)
                    for pid, offset in self._starting(topic, state).items():
                        begin[(state.path, pid)] = offset
                        fixed.add((state.path, pid))
                    continue
                report = loss_reporter(options.fail_on_data_loss, topic)
                for pid, offset in _offsets.check_start(state, known, report).items():
                    begin[(state.path, pid)] = offset
            growing = {key: o for key, o in latest.items() if key not in fixed}
            end = {**self._limit({k: v for k, v in begin.items() if k not in fixed}, growing, limit),
                   **{key: begin[key] for key in fixed}}
        result = self._offsets_of(states, end)
        self._last_end = result
        self._planned = (result.to_json(), states)
        return self._planned[0]

    def _limit(
        self, begin: dict[tuple[str, int], int], latest: dict[tuple[str, int], int], limit: Any
    ) -> dict[tuple[str, int], int]:
        options = self.options
        everything = HAS_READ_LIMIT and isinstance(limit, ReadAllAvailable)
        if limit is None:  # pyspark < 4.2 has no ReadLimit: apply the options here
            max_rows = options.max_offsets_per_trigger
        else:
            max_rows = None if everything else getattr(limit, "max_rows", None)
        now = time.monotonic()
        waiting = (
            options.min_offsets_per_trigger is not None
            and not everything
            and self._available_now is None
            and _offsets.backlog(begin, latest) < options.min_offsets_per_trigger
            and now - self._last_trigger < options.max_trigger_delay
        )
        if waiting:
            return {key: begin.get(key, 0) for key in latest}  # not enough yet: no batch this trigger
        end = _offsets.limit_offsets(begin, latest, max_rows)
        if _offsets.backlog(begin, end):
            self._last_trigger = now
        return end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest.to_json() if self._latest is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._ready()
        self._available_now = {
            (state.path, pid): end for state in _describe(self.options).values() for pid, end in state.ends.items()
        }

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The micro-batch's input partitions, a function of ``start``, ``end`` and the split ``end``
        recorded alone: a replayed micro-batch gets the Spark partitions its first attempt had,
        row for row, whatever the options are now (the exactly-once sink relies on it). What no
        longer matches the topic is reported here; the read tasks skip what is missing."""
        self._ready()
        options = self.options
        first, target = SourceOffsets.from_json(start), SourceOffsets.from_json(end)
        split = target.split if target.split is not None else _split(options)
        if split != _split(options):
            logger.info(
                "ydb_topic: this micro-batch was planned with %s; it is read that way again (the options now say %s, "
                "which apply from the next micro-batch)", split.to_json() or "no split", _split(options).to_json(),
            )
        planned = self._planned
        # The states latestOffset saw for this end; a batch replayed after a restart describes anew.
        states = planned[1] if planned is not None and planned[0] == end else _describe(options)
        parts: list[_offsets.OffsetRange] = []
        gone: set[tuple[str, int]] = set()
        for topic, state in states.items():
            report = loss_reporter(options.fail_on_data_loss, topic)
            until = target.for_topic(state.path, self._single)
            if until is None:
                continue
            since = first.for_topic(state.path, self._single)
            if until.created_at_ms is not None and state.created_at_ms not in (None, until.created_at_ms):
                report("the topic was deleted and created again after this micro-batch was planned")
                continue
            if since is None or (since.created_at_ms not in (None, until.created_at_ms)):
                # New to the checkpoint, or recreated before this micro-batch: its end is its start.
                begin = dict(until.partitions) if since is None else {}
            else:
                begin = dict(since.partitions)
            for pid, offset in sorted(until.partitions.items()):
                if pid not in state.bounds:
                    report(f"partition {pid} is gone (this micro-batch reads it up to offset {offset})")
                    gone.add((state.path, pid))
                    continue
                low, high = state.bounds[pid]
                since_offset = begin.get(pid, 0)
                if since_offset > offset:
                    # The checkpoint was past the partition's end (offsets went backwards, reported
                    # when the batch was planned): latestOffset continued from its first offset.
                    begin[pid] = since_offset = low
                if offset > high:
                    report(f"partition {pid} ends at offset {high}, before this micro-batch's end {offset}: "
                           "offsets went backwards")
                elif since_offset < low and since_offset < offset:
                    report(f"offsets {since_offset}..{min(low, offset) - 1} of partition {pid} expired before they "
                           "were read")
            parts.extend(_offsets.ranges(begin, until.partitions, state.created_at_ms, state.path))
        pieces = _offsets.split(parts, split.min_partitions, split.max_records)
        # A partition that is gone keeps its place (an empty one): the layout stays the planned one.
        return [InputPartition(None if (r.topic, r.partition) in gone else r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_range(self.options, partition.value, _arrow_schema(self.schema))

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_consumer(SourceOffsets.from_json(end), None)

    def _commit_consumer(self, offsets: SourceOffsets, states: Mapping[str, TopicState] | None) -> None:
        consumer = self.options.consumer
        if not consumer:
            return
        todo: dict[tuple[str, int], int] = {}
        for path, topic_offsets in offsets.topics.items():
            if path is None:
                path = self.options.full_path(self.options.topic)
            state = next((s for s in (states or {}).values() if s.path == path), None)
            if state is not None and topic_offsets.created_at_ms not in (None, state.created_at_ms):
                continue  # offsets of a topic that no longer exists
            for pid, offset in topic_offsets.partitions.items():
                if self._committed.get((path, pid)) != offset:
                    todo[(path, pid)] = offset
        if not todo:
            return

        async def commit_all(driver: Driver) -> None:
            for (path, pid), offset in sorted(todo.items()):
                await driver.topic.commit_offset(path, pid, consumer, offset)
                self._committed[(path, pid)] = offset

        try:
            _call(self.options, commit_all)
        except Exception:
            # Spark's checkpoint is authoritative: a failed commit only delays the visible lag.
            logger.warning("ydb_topic: committing %s for consumer %r failed", todo, consumer, exc_info=True)

    def stop(self) -> None:
        pass


if HAS_READ_LIMIT:

    class _StreamReader(_StreamReaderBase, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
        pass

else:
    _StreamReader = _StreamReaderBase  # type: ignore[misc,assignment,unused-ignore]


def _behind_latest(progress: Any) -> dict[str | None, dict[int, int]] | None:
    """Per topic read by the first ``ydb_topic`` source of ``progress``, per partition: how many
    offsets the micro-batch's end stopped short of the latest offsets of that trigger. None when
    the progress has no such source."""
    data = json.loads(progress.json) if hasattr(progress, "json") else progress
    if isinstance(data, str):
        data = json.loads(data)
    for source in data.get("sources", []):
        end, latest = source.get("endOffset"), source.get("latestOffset")
        end = json.loads(end) if isinstance(end, str) else end
        latest = json.loads(latest) if isinstance(latest, str) else latest
        if not (isinstance(end, dict) and isinstance(latest, dict) and ("partitions" in latest or "topics" in latest)):
            continue
        done, now = SourceOffsets.from_json(end), SourceOffsets.from_json(latest)
        behind: dict[str | None, dict[int, int]] = {}
        for path, offsets in now.topics.items():
            finished = done.topics.get(path) or done.topics.get(None) or TopicOffsets({})
            behind[path] = {pid: max(0, o - finished.partitions.get(pid, 0)) for pid, o in offsets.partitions.items()}
        return behind
    return None


def lag(progress: Any, topic: str | None = None) -> dict[int, int]:
    """Per partition, how many offsets the last micro-batch of ``progress`` stopped short of the latest.

    ``progress`` is a ``StreamingQueryProgress`` (``query.lastProgress``) or its JSON/dict form;
    its first ``ydb_topic`` source counts. When the source reads several topics, ``topic`` (its
    full path, or the end of it) says which. Empty when the progress has no such source.
    """
    behind = _behind_latest(progress)
    if behind is None:
        return {}
    paths = list(behind)
    if topic is not None:
        paths = [p for p in paths if p is not None and (p == topic or p.endswith("/" + topic.lstrip("/")))]
    if len(paths) != 1:
        named = ", ".join(sorted(str(p) for p in behind))
        raise ValueError(f"lag: the source reads {named}; pass topic= to say which" if topic is None
                         else f"lag: the source reads no topic {topic!r} (it reads {named})")
    return behind[paths[0]]


def offsets_behind_latest(progress: Any) -> dict[str, dict[str, float]]:
    """Per topic, the figures Spark's Kafka source reports in its progress metrics:
    ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and ``avgOffsetsBehindLatest`` over the
    topic's partitions (how many offsets the micro-batch's end stopped short of the latest).

    pyspark gives Python data sources no way to put them in ``sources[].metrics`` (Spark asks only
    sources that implement ``ReportsSourceMetrics``, which the JVM side of a Python source does
    not), so this computes them from the progress's ``endOffset`` and ``latestOffset``, which
    the source does report. ``progress`` is a ``StreamingQueryProgress`` (``query.lastProgress``,
    an item of ``query.recentProgress``, a listener's ``event.progress``) or its JSON/dict form;
    its first ``ydb_topic`` source counts. Keyed by the topic's full path; empty when the
    progress has no such source.
    """
    figures: dict[str, dict[str, float]] = {}
    for path, behind in (_behind_latest(progress) or {}).items():
        if behind:
            counts = list(behind.values())
            figures[str(path)] = {
                "minOffsetsBehindLatest": min(counts),
                "maxOffsetsBehindLatest": max(counts),
                "avgOffsetsBehindLatest": sum(counts) / len(counts),
            }
    return figures
